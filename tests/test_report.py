"""`dspark report`: the report's structure and numbers held to the run's records, byte-identical
renderings, and clear refusals of bad input (nothing written)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from dspark_cli.report import markdown
from dspark_cli.report.markdown import write_report
from tests.conftest import run_dspark
from tests.report_factory import ARMS, BASELINE, CONCURRENCIES, bench_run, smoke_run


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smoke run and a bench run (3 repeats) of the seed's deployment, side by side."""
    root = tmp_path_factory.mktemp("records")
    smoke_run(root / "smoke")
    bench_run(root / "bench", repeats=3)
    return root


def sections(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, re.MULTILINE)


def tables(text: str, heading: str) -> list[list[str]]:
    """The rows of the first table under `### heading` (or `## heading`)."""
    part = re.split(rf"^#{{2,3}} {re.escape(heading)}$", text, flags=re.MULTILINE)[1]
    rows = []
    for line in part.splitlines():
        if line.startswith("|---"):
            continue
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip("|").split(" | ")])
        elif rows:
            break
    return rows


def test_every_section_in_the_seed_order_and_one_table_per_concurrency(records: Path,
                                                                        tmp_path: Path) -> None:
    _, text = write_report([records], tmp_path)
    assert sections(text) == list(markdown.SECTIONS)
    assert re.findall(r"^### Concurrency (\d+)$", text, re.MULTILINE) == [
        str(c) for c in CONCURRENCIES]
    for c in CONCURRENCIES:
        rows = tables(text, f"Concurrency {c}")
        assert [r[0] for r in rows[1:]] == list(ARMS)
    assert "unknown" not in text.split("## Container Provenance")[0]  # all known from records


def test_numbers_are_the_records(records: Path, tmp_path: Path) -> None:
    report, text = write_report([records], tmp_path)
    summary = json.loads((records / "bench" / "summary.json").read_text())
    smoke = json.loads((records / "smoke" / "smoke.json").read_text())
    speedups = {(s["arm"], s["concurrency"]): s for s in summary["speedups"]}
    assert len(summary["cells"]) == 63 and len(summary["results"]) == 21
    for result in summary["results"]:
        row = next(r for r in tables(text, f"Concurrency {result['concurrency']}")
                   if r[0] == result["arm"])
        t = result["throughput"]
        assert row[1] == f"{t['estimate']:,.2f} [{t['low']:,.2f}, {t['high']:,.2f}] (n=3)"
        ttft = result["latency_ms"]["ttft"]
        assert row[4] == f"{ttft['p50']:,.1f} / {ttft['p99']:,.1f}"
        if result["arm"] != "none":  # no drafts, no acceptance
            assert row[2:4] == [f"{result['acceptance_length']:.3f}",
                                f"{result['accepted_per_draft']:.3f}"]
        if result["arm"] == BASELINE:
            assert row[6:8] == ["-", "baseline"]
        else:
            s = speedups[(result["arm"], result["concurrency"])]
            r = s["ratio"]
            assert row[6] == f"{r['estimate']:.3f}x [{r['low']:.3f}, {r['high']:.3f}]"
            assert row[7] == s["verdict"]
        assert row[8] == "yes"
    assert summary["results_sentence"] in text
    spec = smoke["counters"]["spec_decode"]
    assert f"num_drafts_total:       {spec['drafts']:>3}" in text
    assert f"num_draft_tokens_total: {spec['draft_tokens']}  # 126 = 18 x K=7" in text
    assert report.smoke is not None and report.smoke.counters.accepted == spec["accepted"]
    launch = (records / "smoke" / "launch.sh").read_text()
    assert launch.split("set -euo pipefail\n")[1].strip() in text
    assert "- Checkpoint size: 166,878,536,440 bytes across 48 safetensors shards" in text
    assert "AITER wheel SHA256: 30360d15819a9c8e3ec8e4ae665683abf4c5358d5be1f49a9aa2f7962c0032db" \
        in text
    assert report.methodology is not None and report.methodology.repeats == 3
    assert report.methodology.concurrency_order == CONCURRENCIES
    assert "faster at concurrencies 4, 8, 16, 32, 64, 128 and 256" in report.results.sentence


def test_the_same_records_give_byte_identical_files(records: Path, tmp_path: Path) -> None:
    """No time of rendering, no order of discovery: rendering again (later, with the sources
    named in another order) gives the same bytes."""
    write_report([records / "bench", records / "smoke"], tmp_path)
    first = {n: (tmp_path / n).read_bytes() for n in ("report.md", "report.json")}
    write_report([records / "bench", records / "smoke"], tmp_path)
    assert {n: (tmp_path / n).read_bytes() for n in first} == first
    other = tmp_path / "other"
    write_report([records / "smoke", records / "bench"], other)
    a, b = first["report.md"].decode(), (other / "report.md").read_text()
    assert a.split("## Summary")[1] == b.split("## Summary")[1]


def test_the_cli_writes_and_prints_the_report(records: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_dspark("report", str(records / "smoke"), str(records / "bench"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (out / "report.md").read_text()
    assert "![throughput and speedup vs concurrency]" not in done.stdout  # no plot recorded
    again = run_dspark("report", str(records / "smoke"), str(records / "bench"), "--out",
                       str(out), "--json")
    assert json.loads(again.stdout) == json.loads((out / "report.json").read_text())


@pytest.mark.parametrize("case", ["missing", "empty", "two_smokes"])
def test_bad_input_is_a_usage_error_and_writes_nothing(records: Path, tmp_path: Path,
                                                       case: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = {"missing": [str(tmp_path / "nope")], "empty": [str(empty)],
            "two_smokes": [str(records / "smoke"), str(_copy_smoke(records, tmp_path))]}[case]
    done = run_dspark("report", *args, "--out", str(empty))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.startswith("dspark: ")
    assert list(empty.iterdir()) == []


def _copy_smoke(records: Path, tmp_path: Path) -> Path:
    target = tmp_path / "smoke2"
    shutil.copytree(records / "smoke", target)
    return target


def test_methodology_states_the_verdict_rule_and_the_alternating_order(
        records: Path, tmp_path: Path) -> None:
    _, text = write_report([records], tmp_path)
    method = text.split("## Throughput Methodology")[1].split("## Results")[0]
    assert "comparable only when the speedup's 90% interval lies within it" in method
    assert "else inconclusive, with the smallest change the repeats could detect" in method
    assert "alternating order repeat by repeat (A/B, then B/A)" in method
