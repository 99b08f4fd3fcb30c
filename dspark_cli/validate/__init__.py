"""`dspark validate`: the stages (checkpoint, focused tests, smoke, bench, report) of one run."""
