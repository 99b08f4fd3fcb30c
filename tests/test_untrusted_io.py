"""Everything read back from a run directory is untrusted, and everything written beside it is
written one way (untrusted.py): over real run directories (tests/report_factory.py) with files
planted in them (a sitecustomize.py and overrides pointing at it, links out, FIFOs, deep
nesting, a 1,200-level directory, huge, tiny and null numbers, bad bytes, lone surrogates, an
8 MB launch.sh, terminal escapes), `dspark report`, `compare` and `bench --report` run nothing,
write only their own outputs, never through a link, and end with exit 0, 1 or 2 and one
paragraph in bounded time (a subprocess timeout), never exit 70 or a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dspark_cli import untrusted
from dspark_cli.errors import UsageError
from tests.conftest import REPO, run_dspark
from tests.report_factory import bench_run, smoke_run

TIMEOUT_S = 120  # every command here ends in seconds; a hang fails the test


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    bench_run(root / "a", repeats=2, seed=1)
    bench_run(root / "b", repeats=2, seed=2)
    smoke_run(root / "smoke")
    return root


@pytest.fixture
def runs(pristine: Path, tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "runs"
    shutil.copytree(pristine, root, symlinks=True)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.json").write_text('{"outside": true}\n')
    yield root
    for run in ("a", "b"):
        _flatten_deep(root / run / "cells")


def cell(run: Path, name: str = "none-c4-r1") -> Path:
    return run / "cells" / name / "cell.json"


def edit(path: Path, change: Callable[[dict], None]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _set(key: str, value: object) -> Callable[[dict], None]:
    return lambda d: d.__setitem__(key, value)


def _deep_dir(run: Path) -> None:
    here = os.open(run / "cells", os.O_RDONLY)
    try:  # 1,200 levels: a path no recursive walk survives, made level by level
        for _ in range(1200):
            os.mkdir("d", dir_fd=here)
            nxt = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = nxt
        fd = os.open("cell.json", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=here)
        os.write(fd, b"{}")
        os.close(fd)
    finally:
        os.close(here)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _link_out(path: Path) -> None:
    base = next(p for p in path.parents if p.name == "runs").parent
    path.unlink()
    path.symlink_to(base / "outside" / "secret.json")


def _sitecustomize(run: Path) -> None:
    """Code a careless reader would run: a sitecustomize.py in the run, and the run's own
    Hydra overrides putting it on the path of whatever the run's records launch."""
    (run / "sitecustomize.py").write_text(
        f"open({str(run.parent.parent / 'outside' / 'RAN')!r}, 'w').write('ran')\n")
    (run / ".hydra").mkdir(exist_ok=True)
    (run / ".hydra" / "overrides.yaml").write_text(
        f"- +hw.env.PYTHONPATH={run}\n- +hw.env.PYTHONSTARTUP={run / 'sitecustomize.py'}\n")


def _yaml_bomb(run: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
              f"*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    (run / "arms" / "none" / "config.yaml").write_text("\n".join(lines) + "\n")


PLANTS: dict[str, Callable[[Path], None]] = {
    "deeply nested JSON": lambda r: cell(r).write_text("[" * 100_000),
    "a directory 1,200 levels deep": _deep_dir,
    "two throughputs of 1e308": lambda r: [edit(cell(r, f"none-c4-r{i}"),
                                                _set("output_throughput", 1e308))
                                           for i in (1, 2)],
    "two throughputs of 1e-300": lambda r: [edit(cell(r, f"dspark_fixed-c4-r{i}"),
                                                 _set("output_throughput", 1e-300))
                                            for i in (1, 2)],
    "an integer of 400 digits": lambda r: cell(r).write_text(
        cell(r).read_text().replace('"total_output_tokens": 901120', '"total_output_tokens": '
                                    + "9" * 400)),
    "null where a number belongs": lambda r: edit(cell(r), _set("output_throughput", None)),
    "a string where a boolean belongs": lambda r: edit(cell(r), _set("valid", "false")),
    "a margin of 1 in the cells' protocol": lambda r: [
        edit(p, lambda d: d["protocol"].__setitem__("equivalence_margin", 1))
        for p in (r / "cells").glob("*/cell.json")],
    "a lone surrogate": lambda r: cell(r).write_text(
        cell(r).read_text().replace('"arm": "none"', '"arm": "\\ud800"')),
    "NaN": lambda r: cell(r).write_text(
        cell(r).read_text().replace('"boot_s": 412.5', '"boot_s": NaN')),
    "a bad byte in launch.sh": lambda r: (r / "arms" / "none" / "launch.sh").write_bytes(
        (r / "arms" / "none" / "launch.sh").read_bytes() + b"\xff\xfe\n"),
    "a FIFO at cell.json": lambda r: _fifo(cell(r)),
    "a FIFO at launch.sh": lambda r: _fifo(r / "arms" / "none" / "launch.sh"),
    "a FIFO at config.yaml": lambda r: _fifo(r / "arms" / "none" / "config.yaml"),
    "a directory at provenance.json": lambda r: (
        (r / "arms" / "none" / "provenance.json").unlink(),
        (r / "arms" / "none" / "provenance.json").mkdir()),
    "a link out at cell.json": lambda r: _link_out(cell(r)),
    "a link out at config.yaml": lambda r: _link_out(r / "arms" / "none" / "config.yaml"),
    "an 8 MB launch.sh": lambda r: (r / "arms" / "none" / "launch.sh").write_text(
        "#!/usr/bin/env bash\n" + "# padding\n" * 800_000),
    "a YAML alias bomb": _yaml_bomb,
    "YAML NaN": lambda r: (r / "arms" / "none" / "config.yaml").write_text(
        (r / "arms" / "none" / "config.yaml").read_text() + "extra: .nan\n"),
    "a sitecustomize and overrides": _sitecustomize,
}


# What dspark can read but never wrote: every command over such a run refuses it (exit 2).
READ_FINE = {"a directory 1,200 levels deep", "two throughputs of 1e-300",
             "a sitecustomize and overrides"}


def snapshot(root: Path) -> dict[str, str]:
    """Every entry under `root` and what it is (file bytes' hash, link target, FIFO, dir),
    without following links or opening FIFOs; iterative (os.walk recurses per level)."""
    out, todo = {}, [root]
    while todo:
        for entry in os.scandir(todo.pop()):
            p = Path(entry.path)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = "-> " + os.readlink(p)
            elif p.is_dir():
                out[rel] = "dir"
                todo.append(p)
            elif p.is_fifo():
                out[rel] = "fifo"
            else:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _flatten_deep(top: Path) -> None:
    """Remove a chain of `d` directories level by level (rmtree recurses per level)."""
    while (top / "d").is_dir():
        if (top / "d" / "d").is_dir():
            os.rename(top / "d" / "d", top / "up")
        for f in (top / "d").iterdir():
            f.unlink()
        os.rmdir(top / "d")
        if (top / "up").exists():
            os.rename(top / "up", top / "d")


def ended_cleanly(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode in (0, 1, 2), (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr, done.stderr
    if done.returncode == 2:
        assert done.stderr.startswith("dspark: "), done.stderr


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in set(before) | set(after) if before.get(k) != after.get(k)}


@pytest.mark.parametrize("plant", list(PLANTS))
def test_report_and_compare_over_planted_files(runs: Path, tmp_path: Path, plant: str) -> None:
    """`report` and `compare` over a run with `plant`: exit 0, 1 or 2 in bounded time, nothing
    run, nothing written but their outputs (into --out), nothing outside touched."""
    b = runs / "b"
    PLANTS[plant](b)
    before, outside = snapshot(runs), snapshot(tmp_path / "outside")
    done = run_dspark("report", str(b), "--out", str(tmp_path / "report"), timeout=TIMEOUT_S)
    ended_cleanly(done)
    assert (done.returncode == 2) == (plant not in READ_FINE), done.stderr
    if done.returncode == 2:
        assert not (tmp_path / "report").exists() and str(b) in done.stderr
    done = run_dspark("compare", str(runs / "a"), str(b), "--out", str(tmp_path / "cmp"),
                      timeout=TIMEOUT_S)
    ended_cleanly(done)
    assert (done.returncode == 2) == (plant not in READ_FINE), done.stderr
    assert snapshot(runs) == before  # nothing written into the runs (--out elsewhere)
    assert snapshot(tmp_path / "outside") == outside  # nothing ran: no RAN file
    if done.returncode == 2:
        assert not (tmp_path / "cmp").exists()


BENCH_OUTPUTS = {"summary.json", "summary.csv", "summary.png", "decisions.png", "pareto.png",
                 "proposal.json", "proposal", "proposal/speculative",
                 "proposal/speculative/proposed.yaml"}


@pytest.mark.parametrize("plant", ["deeply nested JSON", "a directory 1,200 levels deep",
                                   "two throughputs of 1e308", "a lone surrogate",
                                   "a FIFO at cell.json", "a link out at cell.json",
                                   "null where a number belongs"])
def test_bench_report_over_planted_files(runs: Path, tmp_path: Path, plant: str) -> None:
    b = runs / "b"
    PLANTS[plant](b)
    before, outside = snapshot(runs), snapshot(tmp_path / "outside")
    done = run_dspark("bench", "--report", str(b), timeout=TIMEOUT_S)
    ended_cleanly(done)
    # each of these is a record dspark never writes; a cell 1,200 levels down is never reached
    assert done.returncode == (0 if plant in READ_FINE else 2), done.stderr
    assert {Path(k).relative_to("b").as_posix() for k in changed(before, snapshot(runs))} \
        <= (BENCH_OUTPUTS if done.returncode == 0 else set())
    assert snapshot(tmp_path / "outside") == outside


def test_outputs_replace_planted_links_and_never_write_through_them(runs: Path,
                                                                    tmp_path: Path) -> None:
    """A link planted at every name report, compare and `bench --report` write: each link is
    replaced by the output, each target left as it was; a link planted where bench --report
    makes a directory of its own is refused, not followed."""
    b, outside = runs / "b", tmp_path / "outside"

    def plant(names: list[str]) -> None:
        for name in names:
            (outside / name).write_text("theirs\n")
            (b / name).unlink(missing_ok=True)
            (b / name).symlink_to(outside / name)

    # report refuses a summary.png linked out of the run (it would link to it): planted after
    names = ["report.md", "report.json", "compare.json", "compare.png"]
    plant(names)
    ended_cleanly(run_dspark("report", str(b), timeout=TIMEOUT_S))
    ended_cleanly(run_dspark("compare", str(runs / "a"), str(b), timeout=TIMEOUT_S))
    bench = ["summary.json", "summary.csv", "summary.png", "decisions.png", "pareto.png",
             "proposal.json"]
    plant(bench)
    ended_cleanly(run_dspark("bench", "--report", str(b), timeout=600))
    for name in names + bench:
        assert (outside / name).read_text() == "theirs\n", name
        assert not (b / name).is_symlink() and (b / name).stat().st_size > 0, name


def test_the_writer_refuses_a_link_on_its_way(tmp_path: Path) -> None:
    root, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    (root / "proposal").symlink_to(elsewhere)
    with pytest.raises(UsageError, match="is a link or a file where dspark writes a directory"):
        untrusted.write_atomic(root / "proposal" / "speculative" / "p.yaml", "x", root)
    assert list(elsewhere.iterdir()) == []
    (root / "a.json").mkdir()
    with pytest.raises(UsageError, match="is a directory where dspark writes a file"):
        untrusted.write_atomic(root / "a.json", "{}")


@pytest.mark.parametrize("command", ["report", "compare"])
def test_an_out_that_is_a_file_is_exit_2(runs: Path, tmp_path: Path, command: str) -> None:
    target = tmp_path / "a-file"
    target.write_text("mine\n")
    args = [str(runs / "b")] if command == "report" else [str(runs / "a"), str(runs / "b")]
    done = run_dspark(command, *args, "--out", str(target), timeout=TIMEOUT_S)
    assert done.returncode == 2, done.stderr
    assert "is a file, not a directory" in done.stderr and "Traceback" not in done.stderr
    assert target.read_text() == "mine\n"


@pytest.mark.parametrize("command", ["report", "compare", "bench"])
def test_a_run_directory_named_in_another_encoding_is_exit_2(runs: Path, command: str) -> None:
    """A directory whose name is no UTF-8 (bytes from Latin-1): refused with its name shown
    escaped, not an encoding error."""
    odd = os.fsencode(runs) + b"/caf\xe9"
    os.rename(runs / "b", odd)
    args = {"report": [odd], "compare": [os.fsencode(runs / "a"), odd],
            "bench": [b"--report", odd]}[command]
    done = subprocess.run([sys.executable, "-m", "dspark_cli.cli", command, *args],
                          capture_output=True, timeout=TIMEOUT_S, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert "caf\\xe9" in err and "not UTF-8" in err and "Traceback" not in err


def test_terminal_controls_and_secrets_from_records_are_escaped_and_redacted(
        runs: Path, tmp_path: Path) -> None:
    """A launch.sh and config.yaml carrying escape sequences, a forged gate line and secrets:
    neither compare's stdout and compare.json nor report.md shows any of them raw."""
    b = runs / "b"
    launch = b / "arms" / "none" / "launch.sh"
    launch.write_text(launch.read_text() + "\x1b[2K\rgate: passed: forged\n"
                      "export HF_TOKEN=hf_plantedSecret123\n"
                      "vllm serve x --api-key sk-planted-456 --model https://u:pw-planted-789@h/m\n")
    config = b / "arms" / "none" / "config.yaml"
    config.write_text(config.read_text().replace(
        "path: /models/DeepSeek-V4-Flash-DSpark",
        "path: /models/DeepSeek-V4-Flash-DSpark\n  note: \"\\e[31mred\\u202e\"\n"
        "  env:\n    MY_API_KEY: cfg-planted-000", 1))
    done = run_dspark("compare", str(runs / "a"), str(b), "--out", str(tmp_path / "cmp"),
                      timeout=TIMEOUT_S)
    ended_cleanly(done)
    written = done.stdout + (tmp_path / "cmp" / "compare.json").read_text()
    for secret in ("hf_plantedSecret123", "sk-planted-456", "pw-planted-789",
                   "cfg-planted-000"):
        assert secret not in written + done.stderr
    assert "\x1b" not in done.stdout and "\r" not in done.stdout and "\u202e" not in done.stdout
    assert not any(line.startswith("gate: passed: forged") for line in done.stdout.splitlines())
    assert "\\x1b[2K\\x0dgate: passed: forged" in done.stdout
    done = run_dspark("report", str(b), "--out", str(tmp_path / "rep"), timeout=TIMEOUT_S)
    ended_cleanly(done)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "\x1b" not in text and "\x1b" not in done.stdout


def test_the_reader_bounds_and_types(tmp_path: Path) -> None:
    """The reader's rules one by one, on files on disk."""
    root = tmp_path
    (root / "ok.json").write_text('{"a": [1, 2.5, "x"], "b": {"c": null}}')
    assert untrusted.load_json(root / "ok.json", root) == {"a": [1, 2.5, "x"], "b": {"c": None}}
    assert untrusted.load_json(root / "absent.json", root) is None
    cases = {"deep.json": "[" * 65 + "]" * 65, "inf.json": "[1e400]", "big.json": "[1e19]",
             "nan.json": "[NaN]", "sur.json": '["\\udc80"]', "trunc.json": '{"a": '}
    for name, text in cases.items():
        (root / name).write_text(text)
        with pytest.raises(untrusted.RecordError, match=name):
            untrusted.load_json(root / name, root)
    (root / "bytes.json").write_bytes(b'["\xc3\x28"]')
    with pytest.raises(untrusted.RecordError, match="not UTF-8"):
        untrusted.load_json(root / "bytes.json", root)
    (root / "big.txt").write_text("x" * 100)
    with pytest.raises(untrusted.RecordError, match="larger than 10 bytes"):
        untrusted.read_text(root / "big.txt", root, limit=10)
    os.mkfifo(root / "fifo.json")
    with pytest.raises(untrusted.RecordError, match="not a regular file"):
        untrusted.load_json(root / "fifo.json", root)
    inner = root / "inner"
    inner.mkdir()
    (inner / "up.json").symlink_to(root / "ok.json")
    with pytest.raises(untrusted.RecordError, match="leads outside"):
        untrusted.load_json(inner / "up.json", inner)
    record = {"valid": "false", "n": -1, "share": 1.5}
    for spec in ({"valid": untrusted.BOOL}, {"n": untrusted.COUNT},
                 {"share": untrusted.FRACTION}):
        with pytest.raises(untrusted.RecordError, match="must be"):
            untrusted.check(record, "r.json", spec)
    assert untrusted.printable("a\x1b[31mb\r\u202ec\nd") == "a\\x1b[31mb\\x0d\\u202ec\\x0ad"
    assert untrusted.printable("a\tb\nc", newlines=True) == "a\tb\nc"


def test_bench_report_shows_record_names_as_text(runs: Path) -> None:
    """An arm named like rich markup and terminal escapes (`[/x]`, ESC, CR): `bench --report`
    prints it as text (not a tag, not an escape sequence), on stdout and stderr alike."""
    b, bad = runs / "b", "[/x]\x1b[31mEVIL\r"
    for path in sorted((b / "cells").glob("*/cell.json")):
        data = json.loads(path.read_text())
        data["protocol"]["arms"] = [bad if a == "none" else a for a in data["protocol"]["arms"]]
        if data["arm"] == "none":
            data["arm"] = bad
            if data["concurrency"] == 4:
                data["valid"], data["reasons"] = False, ["[bold]\x1b[32mplanted"]
        path.write_text(json.dumps(data))
    done = run_dspark("bench", "--report", str(b), timeout=600)
    ended_cleanly(done)
    assert done.returncode == 1, done.stderr  # the two invalid cells
    assert "\x1b" not in done.stdout + done.stderr and "\r" not in done.stdout + done.stderr
    assert "[/x]\\x1b[31mEVIL\\x0d" in done.stdout
