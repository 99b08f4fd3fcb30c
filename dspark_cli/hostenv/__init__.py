"""`dspark env`: this host as dspark sees it (GPUs and profile, Python, vLLM, torch, AITER,
the option table, the pins), and what a run here would refuse."""
