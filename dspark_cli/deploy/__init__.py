"""Where a plan's nodes run: this host (`local.py`), a Slurm batch job (`slurm/`) or Kubernetes
objects (`k8s/`), the cluster targets running the node layout's commands (one per node rank)
with the rank and head address the engine gives at run time. `start.py` is the one start step
and the registry of targets; the targets' settings are config's (`config/deploy.py`)."""
