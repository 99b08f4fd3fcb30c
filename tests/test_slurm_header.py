"""The sbatch header holds only what dspark means: a control character in any header value
(it would end sbatch's header and run the rest as shell) and an extra option that contradicts
dspark's own (the last of a repeated option wins) are refused with exit 2 before anything is
written; harmless repeats and site options pass."""

from __future__ import annotations

import pytest

from dspark_cli.deploy.cluster import is_loopback
from dspark_cli.deploy.slurm.job import SbatchSpec, check_header
from dspark_cli.errors import UsageError
from tests.conftest import run_dspark

BASE = ("serve", "+hw=cpu", "hw.nodes=2", "deploy=slurm")


def header(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if ln.startswith("#SBATCH ")]


HEADER_KEYS = ["job_name", "partition", "account", "qos", "time"]


@pytest.mark.parametrize("key", HEADER_KEYS)
def test_a_newline_in_a_header_value_is_refused_before_anything_is_written(key, tmp_path):
    run = tmp_path / "run"
    value = f"a\ntouch {tmp_path / 'X'}"
    done = run_dspark(*BASE, f"deploy.slurm.{key}='{value}'", f"hydra.run.dir={run}",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"deploy.slurm.{key}" in done.stderr and "control character" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (run / "job.sbatch").exists() and not (run / "config.yaml").exists()
    assert not (tmp_path / "X").exists()


@pytest.mark.parametrize("key", HEADER_KEYS)
@pytest.mark.parametrize("char", ["\n", "\r", "\t", "\x00", "\x1b", "\x85", "\u2028"])
def test_every_control_character_is_refused(key, char):
    with pytest.raises(UsageError, match=rf"deploy\.slurm\.{key}.*control character"):
        check_header(SbatchSpec(**{"job_name": "j", "time": "10", key: f"a{char}b"}))
    with pytest.raises(UsageError, match=r"deploy\.slurm\.sbatch.*control character"):
        check_header(SbatchSpec(job_name="j", time="10", extra=(f"--comment=a{char}b",)))


def test_a_newline_in_an_extra_option_is_refused_in_a_dry_run_too(tmp_path):
    done = run_dspark(*BASE, f"deploy.slurm.sbatch=['--comment=a\ntouch {tmp_path}/X']",
                      "--dry-run")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "deploy.slurm.sbatch" in done.stderr and "control character" in done.stderr


@pytest.mark.parametrize("key", ["job_name", "partition", "account", "qos"])
@pytest.mark.parametrize("value", ["two words", "a'b", 'a"b', "a\\b", "a#b"])
def test_a_header_word_that_sbatch_would_split_is_refused(key, value):
    with pytest.raises(UsageError, match=rf"deploy\.slurm\.{key}"):
        check_header(SbatchSpec(**{"job_name": "j", "time": "10", key: value}))


@pytest.mark.parametrize("time", ["10", "10:00", "04:00:00", "2-00", "2-12:00", "1-00:00:00",
                                  "UNLIMITED", "infinite"])
def test_slurm_times_pass(time):
    check_header(SbatchSpec(job_name="j", time=time))


@pytest.mark.parametrize("time", ["soon", "4h", "1:2:3:4", "-1", ""])
def test_what_is_no_slurm_time_is_refused(time):
    with pytest.raises(UsageError, match=r"deploy\.slurm\.time"):
        check_header(SbatchSpec(job_name="j", time=time))


def test_a_bad_time_is_refused_when_the_config_is_composed():
    done = run_dspark(*BASE, "deploy.slurm.time=soon", "--dry-run")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert "deploy.slurm.time=soon" in done.stderr


@pytest.mark.parametrize(("entry", "option"), [
    ("--nodes=3", "--nodes"), ("-N 3", "--nodes"), ("-N3", "--nodes"), ("--nod=3", "--nodes"),
    ("--nodes 3", "--nodes"), ("--export=NONE", "--export"), ("--exclusive=user", "--exclusive"),
    ("--oversubscribe", "--oversubscribe"), ("-s", "--oversubscribe"),
    ("--ntasks-per-node=2", "--ntasks-per-node"), ("--ntasks=4", "--ntasks"),
    ("--mem=10G", "--mem"), ("--mem-per-cpu=1G", "--mem-per-cpu"),
    ("--cpus-per-task=4", "--cpus-per-task"), ("-c 4", "--cpus-per-task"),
    ("--gpus-per-node=4", "--gpus-per-node"), ("--gpus=8", "--gpus"),
    ("--time=1", "--time"), ("-t 1", "--time"), ("--partition=x", "--partition"),
    ("-p x", "--partition"), ("--job-name=x", "--job-name"), ("-J x", "--job-name"),
    ("--account=a", "--account"), ("--qos=high", "--qos"),
    ("--constraint=h200 --qos=high", "--qos"), ("--output=/tmp/o", "--output"),
    ("--error=/tmp/e", "--error"), ("--array=0-3", "--array"),
])
def test_an_extra_option_that_dspark_sets_itself_is_refused(entry, option):
    with pytest.raises(UsageError, match=f"sets {option}, which dspark sets itself"):
        check_header(SbatchSpec(job_name="j", time="10", extra=(entry,)))


@pytest.mark.parametrize("entry", ["--nodes=3", "-N 3", "--export=NONE"])
def test_serve_refuses_a_contradicting_option_before_writing(entry, tmp_path):
    run = tmp_path / "run"
    done = run_dspark(*BASE, f"deploy.slurm.sbatch=['{entry}']", f"hydra.run.dir={run}",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "which dspark sets itself" in done.stderr and "deploy.slurm.sbatch" in done.stderr
    assert "Traceback" not in done.stderr and not (run / "config.yaml").exists()


@pytest.mark.parametrize("entry", ["", "constraint=h200", "--comment='unbalanced"])
def test_what_is_no_sbatch_option_is_refused(entry):
    with pytest.raises(UsageError, match=r"deploy\.slurm\.sbatch"):
        check_header(SbatchSpec(job_name="j", time="10", extra=(entry,)))


def test_site_options_pass_and_a_repeat_of_dspark_s_own_is_written_once():
    extra = "['--exclusive','--constraint=h200','--mem=0']"
    done = run_dspark(*BASE, f"deploy.slurm.sbatch={extra}", "deploy.slurm.qos=high",
                      "deploy.slurm.account=proj-1", "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = header(done.stdout)
    assert lines.count("#SBATCH --exclusive") == 1 and lines.count("#SBATCH --mem=0") == 1
    assert "#SBATCH --constraint=h200" in lines and "#SBATCH --qos=high" in lines
    assert "#SBATCH --account=proj-1" in lines


def test_the_header_asks_for_whole_nodes_and_the_step_for_their_cpus():
    done = run_dspark(*BASE, "--dry-run")
    assert done.returncode == 0, done.stderr
    lines = header(done.stdout)
    assert {"#SBATCH --exclusive", "#SBATCH --mem=0", "#SBATCH --export=ALL",
            "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1"} <= set(lines)
    srun = next(ln for ln in done.stdout.splitlines() if ln.startswith("srun "))
    assert '--cpus-per-task="$node_cpus"' in srun and "--mem=0" in srun
    # the header is one block: sbatch reads every option
    body = done.stdout.splitlines()
    first_other = next(i for i, ln in enumerate(body[1:], 1) if not ln.startswith("#"))
    assert all(not ln.startswith("#SBATCH") for ln in body[first_other:])


@pytest.mark.parametrize(("target", "address"), [
    ("slurm", "127.0.0.1"), ("k8s", "127.0.0.1"), ("slurm", "localhost"), ("k8s", "::1"),
    ("k8s", "127.1.2.3"), ("slurm", "0.0.0.0")])
def test_a_loopback_head_address_on_a_cluster_target_is_refused(target, address):
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", f"deploy={target}",
                      f"hw.head_address='{address}'", "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "hw.head_address" in done.stderr and "this host's own address" in done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


@pytest.mark.parametrize("address", ["LOCALHOST.", "node.localhost", "[::1]", "127.0.0.2",
                                     "::", "ip6-localhost"])
def test_every_loopback_spelling_is_loopback(address):
    assert is_loopback(address)


@pytest.mark.parametrize("address", ["10.0.0.7", "head-0.cluster", "fe80::1", "localhostx"])
def test_other_addresses_are_not(address):
    assert not is_loopback(address)


def test_a_cluster_head_address_passes():
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "deploy=slurm",
                      "hw.head_address=10.0.0.7", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "10.0.0.7" in done.stdout


@pytest.mark.parametrize(("per_node", "cpus"), [("2(x2)", "2"), ("72(x2),36", "36"),
                                                 ("128", "128"), ("16,64(x3)", "16")])
def test_each_task_gets_the_fewest_cpus_of_the_jobs_nodes(per_node, cpus):
    import subprocess

    from dspark_cli.deploy.slurm.job import NODE_CPUS

    done = subprocess.run(["bash", "-c", NODE_CPUS + 'echo "$node_cpus"'], capture_output=True,
                          text=True, env={"SLURM_JOB_CPUS_PER_NODE": per_node,
                                          "PATH": "/usr/bin:/bin"})
    assert done.stdout.strip() == cpus, done.stderr
