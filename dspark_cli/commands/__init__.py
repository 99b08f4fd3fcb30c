"""One thin module per command: compose -> plan -> check -> act."""
