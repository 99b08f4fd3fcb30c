"""`dspark validate`'s accuracy stage: the same lm-evaluation-harness eval against every bench
arm's server (plan.py, pure), run one arm at a time (run.py), each arm's difference to the
baseline judged by a test of equivalence, recorded (records.py: the verdict recomputed from
the record, pure)."""
