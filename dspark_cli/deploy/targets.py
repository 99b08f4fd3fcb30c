"""The deploy targets a cluster engine runs (`deploy=slurm`, `deploy=k8s`): `serve` hands the
plan's node layout to the engine (`deploy/command.py`); `smoke` and `bench` start it through
the same engine as a managed deployment (`deploy/cluster_run.py`) or attach with `server.url`."""

from __future__ import annotations

CLUSTER_TARGETS = ("slurm", "k8s")
