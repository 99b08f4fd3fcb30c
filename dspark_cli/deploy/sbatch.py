"""A node layout as an sbatch script: one job of `nodes` nodes whose single `srun` step starts
one task per node; each task takes its rank from `SLURM_NODEID` and runs that node's command.

The head's address is resolved in the job, not guessed at submission: the first host of the
job's node list (`scontrol show hostnames`), then its `NodeAddr` from slurm.conf, then DNS
(`getent`) when NodeAddr is only the node's name.

Secrets never enter the script: a secret-named variable or a URL password
(`${DSPARK_URL_PASSWORD_N}`) is demanded from the environment, which sbatch (`--export=ALL`,
explicit in the header) hands to the batch step and srun (`--export=ALL`) to every task; the
submitter puts the values there (`secret_environment`). Pure: text in, text out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dspark_cli.deploy.node_script import HEAD_VAR, dispatch, exports, url_refs
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


def header(layout: NodeLayout, spec: SbatchSpec) -> list[str]:
    # --export=ALL (sbatch's default, stated): the submitting environment, secrets included,
    # reaches the job; the script only refers to them.
    options = [f"--job-name={spec.job_name}", f"--nodes={layout.nodes}", "--ntasks-per-node=1",
               "--export=ALL"]
    if spec.gpus and layout.gpus_per_node > 0:
        options.append(f"--gpus-per-node={layout.gpus_per_node}")
    options.append(f"--time={spec.time}")
    if spec.partition:
        options.append(f"--partition={spec.partition}")
    if spec.account:
        options.append(f"--account={spec.account}")
    options += spec.extra
    return [f"#SBATCH {o}" for o in options]


def sbatch_script(layout: NodeLayout, spec: SbatchSpec, env: Sequence[tuple[str, str]],
                  argv_of: Mapping[int, Sequence[str]] | None = None) -> str:
    """The whole script: header, setup, the plan's environment, the head's address, and one
    `srun` task per node running the rank dispatch (`exec`, so scancel's signals reach vLLM).
    `argv_of` replaces a rank's argv (how vLLM really runs on this host)."""
    nodes = layout.nodes
    refs = url_refs(layout, env)
    srun = (f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1 --kill-on-bad-exit=1 "
            "--export=ALL bash -c dspark_node")
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
    lines += [*refs.exports(), *exports(env, refs=refs), "", HEAD_ADDRESS]
    body = dispatch(layout, f"${RANK_VAR}", argv_of, dict(env), refs)
    lines += ["dspark_node() {", *("  " + ln if ln else ln for ln in body.splitlines()), "}",
              "export -f dspark_node", "", srun]
    return "\n".join(lines) + "\n"

