"""The Kubernetes deploy target: its entry (`target.py`), the objects it applies
(`manifests.py`), their offline validation (`validation.py`, with the LeaderWorkerSet's CRD
shipped beside it) and the managed run through kubectl (`run.py`)."""
