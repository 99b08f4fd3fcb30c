"""Lossless at temperature 0: the pinned prompt file, the comparison token for token, the probe
against a real process speaking HTTP (the fake vLLM, which can break verification on purpose),
and the summary that turns a cell below the identity share invalid."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest

from dspark_cli.bench import lossless
from dspark_cli.bench.cell import CellRecord
from dspark_cli.bench.lossless import answer
from dspark_cli.bench.protocol import build_protocol
from dspark_cli.bench.summary import summarize
from dspark_cli.config import bench as bench_schema
from dspark_cli.config.bench import LosslessConf
from dspark_cli.errors import UsageError
from dspark_cli.paths import conf_dir
from dspark_cli.server.process import free_port
from tests.conftest import compose_typed, run_dspark, run_dspark_process, wait_until
from tests.doubles.fake_engine import LOSSY_INDEX
from tests.doubles.fake_vllm import command


def bench_conf(*overrides: str) -> Any:
    bench_schema.register()
    return compose_typed(["+hw=cpu", *overrides], config="bench").bench


PINNED = bench_conf("bench=cpu").lossless
# vLLM 0.32's own words (config/vllm.py) for a downgrade the bench marks but does not fail.
DOWNGRADE = ("Pooling models do not support full cudagraphs. Overriding cudagraph_mode to "
             "PIECEWISE.")


def spec(**changes: Any) -> lossless.LosslessSpec:
    conf = LosslessConf(**{"prompts": PINNED.prompts, "sha256": PINNED.sha256, "max_tokens": 8,
                           **changes})
    found = lossless.lossless_spec(conf, ["none", "draft_model"])
    assert found is not None
    return found


def test_the_shipped_prompts_are_pinned_and_load() -> None:
    path = conf_dir() / PINNED.prompts
    assert hashlib.sha256(path.read_bytes()).hexdigest() == PINNED.sha256
    prompts = lossless.load_prompts(spec())
    assert len(prompts.prompts) == 8 and prompts.prompts[0] == "The capital of France is"
    # The GPU protocol pins the same file.
    seed = bench_conf("bench=speed_bench_throughput_1k")
    assert seed.lossless.sha256 == PINNED.sha256 and seed.lossless.min_identical == 0.875


def test_a_changed_prompt_file_is_refused(tmp_path: Path) -> None:
    changed = tmp_path / "p.jsonl"
    changed.write_bytes((conf_dir() / PINNED.prompts).read_bytes() + b'{"prompt": "x"}\n')
    with pytest.raises(UsageError, match="not the pinned"):
        lossless.load_prompts(spec(prompts=str(changed)))
    (tmp_path / "bad.jsonl").write_text('{"text": 1}\n')
    digest = hashlib.sha256(b'{"text": 1}\n').hexdigest()
    with pytest.raises(UsageError, match="is not JSONL of"):
        lossless.load_prompts(spec(prompts=str(tmp_path / "bad.jsonl"), sha256=digest))


@pytest.mark.parametrize(("changes", "message"), [
    ({"sha256": None}, "must be pinned"),
    ({"reference": "ngram"}, "is not one of bench.arms"),
])
def test_a_wrong_setting_is_a_usage_error(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        spec(**changes)


def test_disabled_is_no_check() -> None:
    assert lossless.lossless_spec(LosslessConf(enabled=False), ["none"]) is None
    bench = bench_conf("bench=cpu", "bench.lossless.enabled=false")
    assert build_protocol(bench).lossless is None


@pytest.mark.parametrize(("a", "b", "index"), [
    ([1, 2, 3], [1, 2, 3], None), ([1, 2, 3], [1, 9, 3], 1), ([1, 2], [1, 2, 3], 2),
    ("abc", "abd", 2), ("", "x", 0),
])
def test_first_divergence(a: Any, b: Any, index: int | None) -> None:
    assert lossless.first_divergence(a, b) == index


def answers(ids: list[list[int]] | None, texts: list[str], **extra: Any) -> dict[str, Any]:
    return {"reference": "none", "min_identical": 1.0, "token_ids": ids, "texts": texts,
            "errors": [], **extra}


def test_token_ids_are_compared_where_both_have_them_else_the_text() -> None:
    ref = answers([[1, 2, 3], [4, 5, 6]], ["a b c", "d e f"])
    mine = answers([[1, 2, 3], [4, 7, 6]], ["a b c", "d e f"])  # same text, another token
    by_ids = lossless.compare("none-c2", ref, mine)
    assert (by_ids.compared_by, by_ids.identical, by_ids.total) == ("token_ids", 1, 2)
    assert by_ids.divergences == ((1, 1),) and by_ids.share == 0.5
    why = lossless.lossless_reason(by_ids, mine)
    assert why == ("lossless: 1 of 2 greedy sequences identical to none's (none-c2), 50% < "
                   "100%; first divergence at token 1 of prompt 1")
    assert lossless.Comparison.from_dict(by_ids.to_dict()) == by_ids
    by_text = lossless.compare("none-c2", ref, answers(None, ["a b c", "d e X"]))
    assert (by_text.compared_by, by_text.divergences) == ("text", ((1, 4),))
    assert lossless.lossless_reason(by_text, answers(None, [], min_identical=0.5)) is None
    failed = answers(None, ["a"], errors=["prompt 1: ReadTimeout: timed out"])
    assert lossless.compare("none-c2", ref, failed) is None
    assert lossless.lossless_reason(None, failed) == \
        "lossless probe failed: prompt 1: ReadTimeout: timed out"


PROTOCOL = {"name": "cpu", "arms": ["none", "draft_model"], "baseline": "none",
            "concurrencies": [8, 2], "repeats": 2}


def record(arm: str, c: int, r: int, ids: list[list[int]], valid: bool = True,
           reasons: tuple[str, ...] = ()) -> CellRecord:
    return CellRecord.from_dict({
        "arm": arm, "concurrency": c, "repeat": r, "valid": valid, "reasons": list(reasons),
        "output_throughput": 100.0 + r, "protocol": PROTOCOL,
        "lossless": answers(ids, [" ".join(map(str, i)) for i in ids])})


def test_the_summary_compares_every_cell_with_the_reference_even_one_run_later() -> None:
    good, lossy = [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 9]]
    # B/A order: the draft_model cell of repeat 2 ran before the reference's; and the first
    # draft_model cell ran before any reference existed (a reference arm listed second).
    recs = [record("draft_model", 8, 1, good), record("none", 8, 1, good),
            record("none", 8, 2, good), record("draft_model", 8, 2, lossy),
            record("none", 2, 1, good), record("draft_model", 2, 1, good)]
    s = summarize(recs, protocol="cpu", arms=PROTOCOL["arms"], baseline="none",
                  concurrencies=[8, 2], repeats=2)
    rows = {c.cell_id: c for c in s.cells}
    assert all(rows[k].valid for k in rows if k != "draft_model-c8-r2")
    bad = rows["draft_model-c8-r2"]
    assert not bad.valid and bad.reasons == (
        "lossless: 1 of 2 greedy sequences identical to none's (none-c8-r1), 50% < 100%; "
        "first divergence at token 2 of prompt 1",)
    assert bad.to_dict()["lossless"]["divergences"] == [{"prompt": 1, "index": 2}]
    assert s.result("draft_model", 8).throughputs == (101.0,)  # the lossy repeat left out
    table = {t["arm"]: t for t in s.as_dict()["lossless"]}
    assert table["draft_model"] == {
        "arm": "draft_model", "reference": "none", "compared_by": "token_ids", "cells": 3,
        "unchecked": 0, "probe_failed": 0, "identical": 5, "total": 6, "share": 0.8333,
        "min_identical": 1.0, "below": ["draft_model-c8-r2"],
        "first_divergence": {"cell": "draft_model-c8-r2", "prompt": 1, "index": 2}}
    assert table["none"]["share"] == 1.0 and table["none"]["below"] == []
    # Summarizing again (the record already says so) adds the reason once.
    again = summarize([*recs[:3], record("draft_model", 8, 2, lossy, False, bad.reasons),
                       *recs[4:]], protocol="cpu", arms=PROTOCOL["arms"], baseline="none",
                      concurrencies=[8, 2], repeats=2)
    assert next(c for c in again.cells if c.cell_id == "draft_model-c8-r2").reasons == \
        bad.reasons


@pytest.fixture
def fake(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    port = free_port()
    proc = subprocess.Popen(command(port, *request.param, "--boot-delay", "0"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(base + "/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(healthy, 10, "the fake server to answer /health")
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("fake", [("healthy",)], indirect=True)
def test_the_probe_records_token_ids_and_repeats_itself(fake: str) -> None:
    prompts = lossless.load_prompts(spec())
    first, second = (answer(httpx.Client(), fake, "tiny", prompts, 10) for _ in range(2))
    assert first["errors"] == [] and len(first["texts"]) == 8
    assert [len(t) for t in first["token_ids"]] == [8] * 8
    assert (first["prompts_sha256"], first["max_tokens"]) == (PINNED.sha256, 8)
    assert lossless.compare("ref", first, second).share == 1.0
    wrong = answer(httpx.Client(), fake, "nope", prompts, 10)  # a model the server does not serve
    assert wrong["errors"][0].startswith("prompt 0: HTTP 404")


@pytest.mark.parametrize("fake", [("lossy_speculation", "--speculative", "draft_model")],
                         indirect=True)
def test_a_server_that_changes_one_token_under_speculation_fails_the_check(fake: str) -> None:
    prompts = lossless.load_prompts(spec())
    # the double changes the first answer only
    reference = answer(httpx.Client(), fake, "tiny", prompts, 10)
    lossy, clean = reference, answer(httpx.Client(), fake, "tiny", prompts, 10)
    check = lossless.compare("none-c2", clean, lossy)
    assert (check.identical, check.total, check.divergences) == (7, 8, ((0, LOSSY_INDEX),))
    assert "7 of 8 greedy sequences identical" in lossless.lossless_reason(check, lossy)


@pytest.mark.vllm  # the load generator is vLLM's own `vllm bench serve`
def test_bench_marks_the_speculative_cell_of_a_lossy_server_invalid(tmp_path: Path) -> None:
    port, run_dir = free_port(), tmp_path / "run"
    # Each arm's server is told which profile it stands for, in the order the cells boot.
    boots = tmp_path / "boots.json"
    boots.write_text(json.dumps([["--speculative", "none"], ["--speculative", "draft_model"]]))
    fake = ",".join(command(port, "lossy_speculation", "--k", "3", "--per-boot", str(boots),
                            "--print-line", f"'{DOWNGRADE}'"))
    done = run_dspark_process("bench", "bench=cpu", "+hw=cpu", f"server.port={port}",
                              f"server.command=[{fake}]", "server.ready_timeout_s=20",
                              "bench.warmups=[]", "bench.measured_prompts=4",
                              "bench.concurrency=2", "bench.phase_timeout_s=120",
                              f"hydra.run.dir={run_dir}", "--json", timeout=600)
    assert done.returncode == 1, done.stderr[-3000:]  # an invalid cell
    cells = {c["cell_id"]: c for c in json.loads(done.stdout)["cells"]}
    assert cells["none-c2"]["valid"] and not cells["draft_model-c2"]["valid"]
    assert cells["draft_model-c2"]["reasons"] == [
        f"lossless: 7 of 8 greedy sequences identical to none's (none-c2), 88% < 100%; first "
        f"divergence at token {LOSSY_INDEX} of prompt 0"]
    record = json.loads((run_dir / "cells" / "draft_model-c2" / "cell.json").read_text())
    assert record["reasons"] == cells["draft_model-c2"]["reasons"]  # judged as it finished
    assert record["lossless"]["comparison"]["divergences"] == [
        {"prompt": 0, "index": LOSSY_INDEX}]
    assert record["lossless"]["token_ids"][0][LOSSY_INDEX] != json.loads(
        (run_dir / "cells" / "none-c2" / "cell.json").read_text()
    )["lossless"]["token_ids"][0][LOSSY_INDEX]
    # vLLM's override line marks both cells degraded, not invalid.
    (line,) = record["degraded"]  # "family: the log line"
    assert line.startswith("cudagraph_downgrade: ") and line.endswith(DOWNGRADE)
    assert cells["none-c2"]["degraded"] and cells["none-c2"]["valid"]
    # The probe ran after the counters were read: the token counts still agree.
    assert record["metrics_delta"]["generation_tokens"] == record["total_output_tokens"]

    report = run_dspark("report", str(run_dir), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr[-2000:]
    text = (tmp_path / "report" / "report.md").read_text()
    section = text.split("### Lossless at temperature 0")[1]
    assert "| draft_model | token_ids | 1 | 7 of 8 | 87.5% (100.0%) | draft_model-c2, prompt " \
        f"0, index {LOSSY_INDEX} | draft_model-c2 |" in section
    assert "| none | token_ids | 1 | 8 of 8 | 100.0% (100.0%) | - | none |" in section
    assert "yes; DEGRADED (cudagraph_downgrade: vLLM overrode what was asked)" in text
