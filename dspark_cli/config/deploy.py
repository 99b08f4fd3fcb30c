"""The settings of the Slurm and Kubernetes deploy targets (`deploy.slurm.*`, `deploy.k8s.*`),
fields of the `deploy` group's schema beside `deploy.target`: `deploy=slurm` picks the target,
and a site keeps its partition or image in one override file. The config schema takes them
from here; the targets (deploy/slurm/, deploy/k8s/) read the checked values.

What may go into the sbatch header is checked when the config is composed. sbatch reads
`#SBATCH` lines only up to the first line that is not a comment: a newline (or any control
character) in a header value ends the header there, every option after it is silently lost
(`--nodes`, `--export`, `--exclusive`) and the rest of the value runs as shell. For an option
given twice the last one wins, so a `deploy.slurm.sbatch` entry that sets one of dspark's own
options would silently undo what the job needs; it is refused, with the key that sets it.
sbatch also takes any unambiguous prefix of a long option (`--nod=3`), so a prefix counts as
the option.
"""

# No `from __future__ import annotations`: OmegaConf reads every field's type with
# get_type_hints, which compiles each annotation kept as a string.
import re
import shlex
from dataclasses import field

from dspark_cli.config.domain import between, checked, schema_class

# -- what may go into the sbatch header -----------------------------------------------------
_SERVER = "each node's server gets the whole node"
# dspark's own options: what sets each one (a key) or why the job needs it as dspark sets it.
OWN: dict[str, str] = {
    "job-name": "set deploy.slurm.job_name",
    "time": "set deploy.slurm.time",
    "partition": "set deploy.slurm.partition",
    "account": "set deploy.slurm.account",
    "qos": "set deploy.slurm.qos",
    "nodes": "set hw.nodes",
    "gpus-per-node": "dspark asks for hw.num_gpus per node",
    "gpus": "dspark asks for hw.num_gpus per node (--gpus-per-node)",
    "gpus-per-task": "dspark asks for hw.num_gpus per node (--gpus-per-node)",
    "ntasks": "one task per node runs that node's command",
    "ntasks-per-node": "one task per node runs that node's command",
    "export": "--export=ALL carries the plan's secrets into the job",
    "exclusive": _SERVER,
    "oversubscribe": _SERVER,
    "mem": f"{_SERVER}'s memory (--mem=0)",
    "mem-per-cpu": f"{_SERVER}'s memory (--mem=0)",
    "mem-per-gpu": f"{_SERVER}'s memory (--mem=0)",
    "cpus-per-task": f"{_SERVER}'s CPUs (srun --cpus-per-task)",
    "cpus-per-gpu": f"{_SERVER}'s CPUs (srun --cpus-per-task)",
    "output": "the job's output is the run directory's server.log",
    "error": "the job's output is the run directory's server.log",
    "array": "one job serves one deployment",
}
SHORT = {"J": "job-name", "t": "time", "p": "partition", "A": "account", "q": "qos",
         "N": "nodes", "G": "gpus", "n": "ntasks", "s": "oversubscribe", "c": "cpus-per-task",
         "o": "output", "e": "error", "a": "array"}
# dspark's options that never change: an entry repeating one exactly is harmless.
FIXED = ("--ntasks-per-node=1", "--export=ALL", "--exclusive", "--mem=0")
_PLAIN = re.compile(r"[^\s\"'\\#]+")
_TIME = re.compile(r"(?i)(\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|infinite|unlimited)")


def value_problem(value: object) -> str | None:
    """Why a one-word header value (job name, partition, account, qos) is refused, or None."""
    text = str(value)
    if not text.isprintable():
        return "holds a control character (a newline ends sbatch's header)"
    if not _PLAIN.fullmatch(text):
        return "is not one word (no blanks, quotes, backslashes or '#')"
    return None


def time_problem(value: object) -> str | None:
    """Why `deploy.slurm.time` is no Slurm time limit, or None."""
    return value_problem(value) or (
        None if _TIME.fullmatch(str(value)) else
        "is not a Slurm time (MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, UNLIMITED)")


def _own(token: str) -> str | None:
    """The dspark option `token` sets (a long name, a prefix of one, or a short letter)."""
    if token.startswith("--"):
        name = token[2:].split("=", 1)[0]
        if name in OWN:
            return name
        prefixed = [o for o in OWN if len(name) >= 2 and o.startswith(name)]
        return prefixed[0] if prefixed else None
    if token.startswith("-") and len(token) > 1:
        return SHORT.get(token[1])
    return None


def entry_problem(entry: object) -> str | None:
    """Why a `deploy.slurm.sbatch` entry is refused, or None."""
    text = str(entry)
    if not text.isprintable():
        return "holds a control character (a newline ends sbatch's header)"
    try:
        tokens = shlex.split(text)
    except ValueError as e:
        return f"cannot be parsed as sbatch options ({e})"
    if not tokens or not tokens[0].startswith("-"):
        return "is not an sbatch option (--name=value)"
    for token in tokens:
        own = _own(token)
        if own is not None and token not in FIXED:
            return (f"sets --{own}, which dspark sets itself ({OWN[own]}); a repeated option's "
                    "last value wins, so drop the entry")
    return None


# -- the settings ---------------------------------------------------------------------------
_WORD = checked(value_problem, "one word of printable characters")
INT32 = between(1, 2**31 - 1)  # Kubernetes' counts and probe settings are int32


@schema_class
class SlurmConf:
    """The sbatch header and how `dspark serve` follows the job. Every header value is checked
    when the config is composed (`entry_problem` and the rest above): a newline would end the
    header."""

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
