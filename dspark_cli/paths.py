"""Where things live: dspark's config files, installed or in a source checkout (`conf_dir`), and
the names of what dspark writes into a run directory, in one place: every writer and every
reader (the report, a resumed bench, `dspark report`) names a file from here."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def conf_dir() -> Path:
    """`dspark_cli/conf` in a wheel; the repository's top-level `conf/` in a source checkout."""
    packaged = _PACKAGE / "conf"
    return packaged if packaged.is_dir() else _PACKAGE.parent / "conf"


# Every launch's record (launch/record.py), and what the server leaves beside it.
CONFIG_YAML = "config.yaml"  # the resolved config, secrets redacted
LAUNCH_SH = "launch.sh"  # the exact environment and command, runnable
PROVENANCE_JSON = "provenance.json"
SERVER_LOG = "server.log"  # the server's output (a Slurm job's --output too)
NODES_SH = "nodes.sh"  # several nodes: every node's command
MANIFESTS_YAML = "manifests.yaml"  # deploy=k8s: the objects applied
DEPLOYMENT_JSON = "deployment.json"  # a cluster's job or objects and how to end them by hand

# smoke
SMOKE_JSON = "smoke.json"

# bench: arms/<arm>/ holds each arm's record, cells/<id>/ each cell's (bench/records.py)
ARMS_DIR = "arms"
CELLS_DIR = "cells"
CELL_JSON = "cell.json"
SUMMARY_JSON = "summary.json"
SUMMARY_CSV = "summary.csv"
SUMMARY_PNG = "summary.png"
DECISIONS_PNG = "decisions.png"  # throughput/goodput vs concurrency, interval bands, winners
PARETO_PNG = "pareto.png"  # per-user against total output tokens/s
PROPOSAL_JSON = "proposal.json"  # the configuration the winners per load propose
PROPOSAL_DIR = "proposal"  # proposal/speculative/proposed.yaml: the proposal as an arm
COMPARE_JSON = "compare.json"  # dspark compare's outcome (in RUN_B, or --out)
COMPARE_PNG = "compare.png"

# validate: one directory per stage, the stages' outcomes in validate.json
VALIDATE_JSON = "validate.json"
CHECKPOINT_JSON = "checkpoint.json"
TESTS_JSON = "tests.json"
JUNIT_XML = "junit.xml"
PYTEST_LOG = "pytest.log"
SOURCE_JSON = "source.json"  # the source tree's revision as git sees it (validate/source.py)
LINT_JSON = "lint.json"  # the focused stage's lint/format commands and their results
ACCURACY_JSON = "accuracy.json"  # accuracy/: every arm's lm_eval score (accuracy/records.py)
LM_EVAL_LOG = "lm_eval.log"  # accuracy/arms/<arm>/: lm_eval's output

# report
REPORT_MD = "report.md"
REPORT_JSON = "report.json"
