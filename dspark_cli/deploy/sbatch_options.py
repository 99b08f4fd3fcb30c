"""What may go into the sbatch header (`deploy.slurm.*`), checked when the config is composed.

sbatch reads `#SBATCH` lines only up to the first line that is not a comment: a newline (or any
control character) in a header value ends the header there, every option after it is silently
lost (`--nodes`, `--export`, `--exclusive`) and the rest of the value runs as shell. For an
option given twice the last one wins, so a `deploy.slurm.sbatch` entry that sets one of
dspark's own options would silently undo what the job needs; it is refused, with the key that
sets it. sbatch also takes any unambiguous prefix of a long option (`--nod=3`), so a prefix
counts as the option. Pure and import-light: the config schema uses it.
"""

from __future__ import annotations

import re
import shlex

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
