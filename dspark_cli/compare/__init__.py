"""`dspark compare`: what changed between two runs and whether any cell got slower."""
