"""A node layout as an sbatch script: one job of `nodes` nodes whose single `srun` step starts
one task per node; each task takes its rank from `SLURM_NODEID` and runs that node's command.

The head's address is resolved in the job, not guessed at submission: the first host of the
job's node list (`scontrol show hostnames`), then its `NodeAddr` from slurm.conf, then DNS
(`getent`) when NodeAddr is only the node's name.

Each node's server gets the whole node, also where a site binds tasks to cores
(`TaskPlugin=task/affinity`) and counts memory (`CR_CPU_Memory`): the header asks for
`--exclusive` and `--mem=0` (all of each node's memory), and the srun step for the node's CPUs
(`--cpus-per-task`, from `SLURM_JOB_CPUS_PER_NODE`: since Slurm 22.05 srun no longer inherits
sbatch's --cpus-per-task, and a task would be pinned to one CPU). Every header value is
checked first (`sbatch_options.py`): a control character would end the header.

Secrets never enter the script: a secret-named variable or a URL password
(`${DSPARK_URL_PASSWORD_N}`) is demanded from the environment, which sbatch (`--export=ALL`,
explicit in the header) hands to the batch step and srun (`--export=ALL`) to every task; the
submitter puts the values there (`secret_environment`). Pure: text in, text out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dspark_cli.deploy.node_script import (
    HEAD_VAR,
    dispatch,
    exports,
    refuse_loopback_head,
    url_refs,
)
from dspark_cli.deploy.sbatch_options import FIXED, entry_problem, time_problem, value_problem
from dspark_cli.errors import UsageError
from dspark_cli.launch.layout import NodeLayout

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

