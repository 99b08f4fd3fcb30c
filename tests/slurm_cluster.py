"""A real Slurm cluster on this host for the tests: munge, slurmctld and two slurmd daemons
acting as nodes n1 and n2 (Debian's `slurm-wlm` allows several slurmd on one host), all in one
temporary directory with their own ports and munge socket, so nothing in /etc is used or
changed. Needs root and the packages (`make slurm` installs them); `unavailable()` says why not.

    with SlurmCluster.start(Path(tmp)) as cluster:
        subprocess.run(["sbatch", ...], env={**os.environ, **cluster.env})
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dspark_cli.server.process import free_port

NODES = ("n1", "n2")
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "scancel", "scontrol",
           "sinfo")
START_TIMEOUT_S = 60.0
NODE_CPUS, NODE_MEMORY_MB = 2, 8000  # each node as slurm.conf describes it
DEF_MEM_PER_CPU_MB = 500  # what a job gets per CPU unless it asks for memory
# How often a test asks squeue whether a job is still there: each ask is a process and an RPC
# to slurmctld, which on a 2-core machine take CPU from the job being waited for.
QUEUE_POLL_S = 0.5


def unavailable() -> str | None:
    """Why this host cannot run the test cluster, or None."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd runs jobs as any user)"
    missing = [d for d in DAEMONS if shutil.which(d) is None
               and not Path("/usr/sbin", d).exists()]
    if missing:
        return (f"Slurm is not installed ({', '.join(missing)} missing); `make slurm` installs "
                "Debian's slurm-wlm and munge")
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def slurm_conf(root: Path, ctld_port: int, node_ports: dict[str, int], socket_path: Path) -> str:
    """A slurm.conf configured like a site's: one controller and the nodes on 127.0.0.1, no
    accounting, no cgroups (proctrack/linuxproc), but tasks bound to their cores
    (task/affinity, TaskPluginParam=cores) and memory a consumable resource (CR_CPU_Memory,
    DefMemPerCPU): a job gets the CPUs and memory it asks for, not the node's. Node resources
    as configured, not as detected. Job ids start at 100 x the controller's port: clusters
    that run at once (one per xdist worker) never share one, so a job's processes, found by
    SLURM_JOB_ID, are its own."""
    lines = [
        "ClusterName=dsktest",
        f"FirstJobId={ctld_port * 100}",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={socket_path}",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/slurmctld.log",
        f"SlurmdLogFile={root}/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/affinity",
        "TaskPluginParam=cores",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory",
        f"DefMemPerCPU={DEF_MEM_PER_CPU_MB}",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "KillWait=5",
        "MinJobAge=10",
        "InactiveLimit=0",
        "SlurmdTimeout=120",
    ]
    for name, port in node_ports.items():
        lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
                     f"CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} State=UNKNOWN")
    lines.append(f"PartitionName=debug Nodes={','.join(node_ports)} Default=YES "
                 "MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    root: Path
    env: dict[str, str]  # SLURM_CONF for every client (sbatch, srun, squeue, ...)
    pids: list[int]

    @classmethod
    def start(cls, root: Path) -> SlurmCluster:
        """Bring up munge, slurmctld and the nodes, and wait until both nodes are idle."""
        for sub in ("state", "munge", *(f"spool/{n}" for n in NODES)):
            (root / sub).mkdir(parents=True, exist_ok=True)
        key, sock = root / "munge" / "munge.key", root / "munge" / "munge.socket"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (root / "munge").chmod(0o700)
        conf = root / "slurm.conf"
        ports = {n: free_port() for n in NODES}
        conf.write_text(slurm_conf(root, free_port(), ports, sock))
        cluster = cls(root, {"SLURM_CONF": str(conf)}, [])
        try:
            cluster._daemon([_binary("munged"), "--force", f"--socket={sock}",
                             f"--key-file={key}", f"--pid-file={root}/munge/munged.pid",
                             f"--log-file={root}/munge/munged.log",
                             f"--seed-file={root}/munge/munged.seed"], root / "munge/munged.pid")
            cluster._daemon([_binary("slurmctld"), "-f", str(conf), "-i"],
                            root / "slurmctld.pid")
            for node in NODES:
                cluster._daemon([_binary("slurmd"), "-f", str(conf), "-N", node],
                                root / f"slurmd-{node}.pid")
            cluster.wait_idle()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _daemon(self, argv: list[str], pid_file: Path) -> None:
        """Start a daemon that forks into the background and wait for its pid file."""
        subprocess.run(argv, check=True, env={**os.environ, **self.env}, capture_output=True,
                       timeout=30)
        deadline = time.monotonic() + 15
        while not pid_file.is_file() or not pid_file.read_text().strip():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{argv[0]} wrote no pid file {pid_file}; see {self.root}")
            time.sleep(0.05)
        self.pids.append(int(pid_file.read_text().split()[0]))

    def run(self, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.env})

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-N", "-h", "-o", "%N %T").stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout: float = START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if all(states.get(n, "").startswith("idle") for n in NODES):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Slurm nodes not idle after {timeout} s: {states}; "
                                   f"logs in {self.root}")
            time.sleep(0.2)

    def jobs(self) -> list[str]:
        """Job ids squeue still lists (any state)."""
        out = self.run("squeue", "-h", "-o", "%i").stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def stop(self) -> None:
        """Cancel every job, stop the daemons (slurmd first, munge last), wait for them."""
        if self.jobs():
            self.run("scancel", "--full", *self.jobs())
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            deadline = time.monotonic() + 10
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.pids.clear()

    def __enter__(self) -> SlurmCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of ours (daemons fork away, so this is rare) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
