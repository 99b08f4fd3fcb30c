"""The settings of the Slurm and Kubernetes deploy targets (`deploy.slurm.*`, `deploy.k8s.*`),
fields of the `deploy` group's schema beside `deploy.target`: `deploy=slurm` picks the target,
and a site keeps its partition or image in one override file."""

# No `from __future__ import annotations`: OmegaConf reads every field's type with
# get_type_hints, which compiles each annotation kept as a string.
from dataclasses import field

from dspark_cli.config.domain import between, checked, schema_class
from dspark_cli.deploy.sbatch_options import entry_problem, time_problem, value_problem

_WORD = checked(value_problem, "one word of printable characters")
INT32 = between(1, 2**31 - 1)  # Kubernetes' counts and probe settings are int32


@schema_class
class SlurmConf:
    """The sbatch header and how `dspark serve` follows the job. Every header value is checked
    when the config is composed (`sbatch_options.py`): a newline would end the header."""

    job_name: str = field(default="dspark", metadata=_WORD)
    # sbatch --time: the job's wall-clock limit
    time: str = field(default="04:00:00", metadata=checked(time_problem, "a Slurm time limit"))
    partition: str | None = field(default=None, metadata=_WORD)
    account: str | None = field(default=None, metadata=_WORD)
    qos: str | None = field(default=None, metadata=_WORD)
    # Extra `#SBATCH` options, verbatim: ["--constraint=h200", "--reservation=mine"]. dspark's
    # own (--nodes, --exclusive, --mem, --export, ...) are refused: the last one would win.
    sbatch: list[str] = field(default_factory=list, metadata=checked(
        entry_problem, "sbatch options that dspark does not set itself"))
    # Shell lines run in the batch script before `srun` (module load, a venv's activate).
    setup: list[str] = field(default_factory=list)
    # how often squeue and /health are asked while waiting
    poll_s: float = field(default=2.0, metadata=between(0, low_open=True))
    # how long to wait for a cancelled job to leave the queue
    cancel_timeout_s: float = field(default=60.0, metadata=between(0))


@schema_class
class K8sConf:
    """What the manifests need beyond the plan: the image, the model volume, probe budgets."""

    name: str = "dspark"
    namespace: str | None = None
    # Pinned by digest (`repo@sha256:<64 hex>`): a tag alone is refused.
    image: str | None = None
    # LWS groups, or Deployment replicas for one node
    replicas: int = field(default=1, metadata=INT32)
    # The model volume, mounted at `model.path`: a PVC by name, or a host path (default:
    # `model.path` on the node itself).
    model_pvc: str | None = None
    model_host_path: str | None = None
    shm_size: str = "64Gi"  # /dev/shm, an in-memory emptyDir
    # Environment variables whose names look like secrets come from this Secret, key = name.
    secret_name: str = "dspark-secrets"
    probe_period_s: int = field(default=10, metadata=INT32)
    # Startup budget = period x threshold: 360 x 10 s = 1 h, for a large checkpoint's load.
    startup_failure_threshold: int = field(default=360, metadata=INT32)
    readiness_failure_threshold: int = field(default=3, metadata=INT32)
    # Tolerant: one liveness failure on an LWS leader recreates the whole group.
    liveness_period_s: int = field(default=30, metadata=INT32)
    liveness_failure_threshold: int = field(default=5, metadata=INT32)
    probe_timeout_s: int = field(default=10, metadata=INT32)
    node_selector: dict[str, str] = field(default_factory=dict)
    # The pod's CPU and memory requests beside its GPUs (quantities: "96", "500m", "1000Gi");
    # null: the profile's hw.node_cpus and hw.node_memory.
    cpu: str | None = None
    memory: str | None = None
    # The interface of cross-node traffic (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME in every
    # pod), set only when given: e.g. eth0, or ^lo,docker to exclude.
    nccl_socket_ifname: str | None = None
    gloo_socket_ifname: str | None = None
