"""`dspark prepare speed-bench`: a local copy of SPEED-Bench's release (rows as the release
holds them: question_id, category, turns, ...) turned into the request file the seed protocol
reads, with the override that pins it on stdout; placeholder rows and bad rows refused."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

from dspark_cli.bench.dataset import SPEED_BENCH_SENTINEL
from tests.conftest import run_dspark

SEED_BENCH = ("bench", "bench=speed_bench_throughput_1k", "+hw=mi350x")


def release(directory: Path, rows: int = 900, placeholders: int = 0,
            subset: str = "throughput_1k") -> Path:
    """The release's `subset` as JSONL rows (what `datasets` writes of its Parquet)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(rows):
        text = SPEED_BENCH_SENTINEL if i < placeholders else (
            f"Question {i}: explain, in about a thousand tokens, topic number {i}.")
        lines.append(json.dumps({"question_id": f"{subset}-{i}", "category": "qa",
                                 "sub_category": "general", "turns": [text],
                                 "source": "fixture", "src_id": str(i), "difficulty": "medium",
                                 "multiturn": False}))
    (directory / f"{subset}.jsonl").write_text("\n".join(lines) + "\n")
    return directory


def prepared(cwd: Path, rows: int = 900) -> list[str]:
    """A pinned request set where the seed protocol reads it (`cwd/data/speed_bench`), made by
    the real command; the overrides it printed."""
    source = release(cwd / "release", rows)
    done = run_dspark("prepare", "speed-bench", str(source), cwd=cwd)
    assert done.returncode == 0, done.stderr
    return shlex.split(done.stdout)


def test_the_release_becomes_the_pinned_request_file(tmp_path: Path) -> None:
    overrides = prepared(tmp_path)
    out = tmp_path / "data" / "speed_bench" / "throughput_1k.jsonl"
    sha = hashlib.sha256(out.read_bytes()).hexdigest()
    assert overrides == [f"bench.dataset.sha256={sha}"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 900
    assert rows[3]["messages"] == [{"role": "user", "content": (
        "Question 3: explain, in about a thousand tokens, topic number 3.")}]
    assert rows[3]["category"] == "qa" and rows[3]["question_id"] == "throughput_1k-3"
    # the same release gives the same bytes: the pin is reproducible
    again = run_dspark("prepare", "speed-bench", str(tmp_path / "release"), "--json",
                       cwd=tmp_path)
    assert json.loads(again.stdout)["sha256"] == sha
    # and the seed protocol's dry run finds the set and its pin
    done = run_dspark(*SEED_BENCH, *overrides, "--dry-run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"(pinned sha256 {sha})" in done.stdout


def test_another_directory_is_named_in_the_overrides(tmp_path: Path) -> None:
    source = release(tmp_path / "rel", 10, subset="throughput_2k")
    done = run_dspark("prepare", "speed-bench", str(source), "--subset", "throughput_2k",
                      "--out", str(tmp_path / "sets"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    sha = hashlib.sha256((tmp_path / "sets" / "throughput_2k.jsonl").read_bytes()).hexdigest()
    assert shlex.split(done.stdout) == ["bench.dataset.subset=throughput_2k",
                                        f"bench.dataset.path={tmp_path / 'sets'}",
                                        f"bench.dataset.sha256={sha}"]


def test_placeholder_rows_are_refused_unless_dropped_on_purpose(tmp_path: Path) -> None:
    source = release(tmp_path / "rel", 20, placeholders=5)
    done = run_dspark("prepare", "speed-bench", str(source), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "5 of 20 throughput_1k rows are SPEED-Bench's placeholders" in done.stderr
    assert "--drop-placeholders" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "data").exists()
    done = run_dspark("prepare", "speed-bench", str(source), "--drop-placeholders",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "15 requests (5 placeholder rows left out)" in done.stderr
    assert len((tmp_path / "data/speed_bench/throughput_1k.jsonl").read_text().splitlines()) == 15


def test_bad_input_is_one_paragraph(tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{"turns": ["ok"]}\nnot json\n')
    (tmp_path / "shape.jsonl").write_text('{"prompt": "no turns"}\n')
    for args, code, fragment in [
        ((str(tmp_path / "nowhere"),), 2, "does not exist"),
        ((str(tmp_path / "bad.jsonl"),), 2, "bad.jsonl line 2 is not JSON"),
        ((str(tmp_path / "shape.jsonl"),), 2, "has neither `turns`"),
        ((str(tmp_path / "bad.jsonl"), "--subset", "throughput_3k"), 2, "unknown SPEED-Bench"),
        ((str(tmp_path),), 2, "holds no throughput_1k rows"),
    ]:
        done = run_dspark("prepare", "speed-bench", *args, cwd=tmp_path)
        assert done.returncode == code, (args, done.stderr)
        assert fragment in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) <= 2, done.stderr


def test_bench_and_validate_dry_runs_refuse_a_missing_or_unpinned_request_set(
        tmp_path: Path) -> None:
    for command in (SEED_BENCH, ("validate", "+hw=mi350x")):
        done = run_dspark(*command, "--dry-run", cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert "preflight bench-request-set FAILED" in done.stderr
        assert "dspark prepare speed-bench SRC" in done.stderr
    prepared(tmp_path, rows=900)
    done = run_dspark(*SEED_BENCH, "--dry-run", cwd=tmp_path)  # made, not pinned
    assert done.returncode == 1 and "is not pinned" in done.stderr, done.stderr


def test_a_real_validate_refuses_the_request_set_before_the_smoke_boots(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = run_dspark("validate", "+hw=cpu", "bench=speed_bench_throughput_1k",
                      "bench.concurrency=4", f"hydra.run.dir={run}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "throughput_1k.jsonl does not exist" in done.stderr
    assert not (run / "smoke").exists() and not (run / "checkpoint").exists()
