"""The `watch` section: what smoke, bench and (when asked) serve watch while a server runs,
beyond its health and its log (docs/bench.md and docs/smoke.md, "Watches")."""

# No `from __future__ import annotations`: OmegaConf reads every field's type with
# get_type_hints (see schema.py).
from dataclasses import field

from dspark_cli.config.domain import between, schema_class


@schema_class
class WatchConf:
    """The stall watch, the acceptance floor and the GPU sampler; 0 or null turns one off."""

    # Seconds without a generated token while requests are running or waiting (read from
    # /metrics) before the smoke or the bench cell ends as `stalled`; 0 or null: off.
    stall_s: float | None = field(default=90.0, metadata=between(0))
    # How often the stall watch reads /metrics.
    poll_s: float = field(default=2.0, metadata=between(0, low_open=True))
    # `dspark serve` runs the stall watch too (one line when it trips); with `serve_exit`, it
    # then stops the server and exits 3.
    serve: bool = False
    serve_exit: bool = False
    # A speculating arm whose acceptance rate is at or below this is flagged (0.0: only an arm
    # that accepted nothing); null: not flagged.
    min_acceptance: float | None = field(default=0.0, metadata=between(0, 1))
    # Each bench cell samples every GPU this often through the vendor's tool (nvidia-smi,
    # amd-smi, rocm-smi); 0 or null: off.
    gpu_interval_s: float | None = field(default=1.0, metadata=between(0))
    # A GPU whose mean utilisation in the measured phase is below this (percent) sat idle.
    gpu_idle_below: float = field(default=10.0, metadata=between(0, 100))
