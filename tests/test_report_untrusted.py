"""Records read back are untrusted input (`dspark report`, `dspark bench --report`): run
directories that were edited, copied, truncated or planted. Nothing outside the given
directories is read or followed, everything written is redacted, types are checked (exit 2
naming the file and the field), record text cannot break out of report.md, summaries are
recomputed from the cells, and records of different models or datasets are refused. Real
records on disk (tests/report_factory.py), the real CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from dspark_cli.report import markdown
from tests.conftest import run_dspark, run_dspark_process
from tests.report_factory import bench_run, edit_json, smoke_run

SECRET = "hf_plantedSecret12345"
URL_PW = "urlpw-planted-6789"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    smoke_run(root / "smoke")
    bench_run(root / "bench", repeats=2)
    return root


@pytest.fixture
def records(pristine: Path, tmp_path: Path) -> Path:
    """A copy to edit, as an operator (or an attacker) would."""
    root = tmp_path / "records"
    shutil.copytree(pristine, root, symlinks=True)
    return root


def report(*dirs: Path, out: Path) -> Any:
    return run_dspark("report", *map(str, dirs), "--out", str(out), timeout=600)


def refused(done: Any, out: Path, *words: str) -> None:
    """Exit 2, one clear message naming what is wrong, no traceback, nothing written."""
    assert done.returncode == 2, done.stderr + done.stdout[-2000:]
    assert done.stderr.startswith("dspark: ") and "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr
    assert not (out / "report.md").exists() and not (out / "report.json").exists()


def a_cell(records: Path) -> Path:
    return sorted((records / "bench" / "cells").glob("*/cell.json"))[0]


# -- nothing outside the given directories is read or followed --------------------------------
@pytest.mark.parametrize("where", ["smoke/launch.sh", "smoke/provenance.json",
                                   "smoke/config.yaml", "bench/arms/none/launch.sh",
                                   "bench/arms/none/provenance.json", "cell", "smoke/smoke.json",
                                   "bench/summary.png"])
def test_a_record_linked_out_of_its_run_directory_is_refused(records: Path, tmp_path: Path,
                                                             where: str) -> None:
    target = a_cell(records) if where == "cell" else records / where
    target.unlink(missing_ok=True)
    target.symlink_to("/etc/passwd")
    out = tmp_path / "out"
    done = report(records / "smoke", records / "bench", out=out)
    refused(done, out, str(target), "leads outside")
    assert "root:" not in done.stdout + done.stderr


def test_a_link_inside_the_run_directory_is_followed(records: Path, tmp_path: Path) -> None:
    launch = records / "smoke" / "launch.sh"
    launch.rename(records / "smoke" / "launch.real")
    launch.symlink_to("launch.real")
    done = report(records / "smoke", records / "bench", out=tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "vllm serve" in (tmp_path / "out" / "report.md").read_text()


def test_a_cell_directory_given_alone_never_reads_its_run_above(records: Path,
                                                                tmp_path: Path) -> None:
    """`report DIR` with DIR a cell's directory: the run's arms and summary two levels up are
    outside DIR and are not read (a planted file there would be)."""
    cell_dir = a_cell(records).parent
    (records / "bench" / "arms" / "none" / "launch.sh").write_text(f"export X=above-{SECRET}\n")
    (records / "bench" / "summary.json").write_text("{not json")
    out = tmp_path / "out"
    done = report(cell_dir, out=out)
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    assert f"above-{SECRET}" not in text and str(records / "bench") + "/arms" not in text
    assert json.loads((out / "report.json").read_text())["sources"] == [str(cell_dir)]


# -- everything written is redacted, whatever its source ----------------------------------------
def test_secrets_in_an_edited_launch_sh_are_redacted(records: Path, tmp_path: Path) -> None:
    launch = records / "smoke" / "launch.sh"
    launch.write_text(launch.read_text().replace(
        "set -euo pipefail\n",
        f"set -euo pipefail\nexport HF_TOKEN={SECRET}\nexport MY_API_KEY='{SECRET}x'\n"
        f"DB_PASSWORD=\"{SECRET}y\" true\n", 1) + f" --api-key {SECRET}z --hf-token={SECRET}w\n")
    out = tmp_path / "out"
    done = report(records / "smoke", records / "bench", out=out)
    assert done.returncode == 0, done.stderr
    for written in (out / "report.md", out / "report.json"):
        text = written.read_text()
        assert SECRET not in text
        assert "HF_TOKEN=<redacted>" in text and "--api-key <redacted>" in text
    assert SECRET not in done.stdout + done.stderr


def test_a_url_password_in_model_path_is_redacted_from_every_record(records: Path,
                                                                    tmp_path: Path) -> None:
    url = f"https://me:{URL_PW}@models.example.invalid/m"
    for prov in (records / "smoke" / "provenance.json",
                 records / "bench" / "arms" / "none" / "provenance.json"):
        edit_json(prov, lambda d: d["checkpoint"].update(path=url))
    config = records / "smoke" / "config.yaml"
    config.write_text(re.sub(r"(?m)^(  path: ).*$", rf"\g<1>{url}", config.read_text(),
                             count=1))
    out = tmp_path / "out"
    done = report(records / "smoke", out=out)
    assert done.returncode == 0, done.stderr
    for written in (out / "report.md", out / "report.json"):
        text = written.read_text()
        assert URL_PW not in text and "me:<redacted>@models.example.invalid" in text
    assert URL_PW not in done.stdout + done.stderr


@pytest.mark.vllm  # the smoke stage boots the real vLLM (which fails to load the URL)
def test_validate_json_holds_no_url_password(tmp_path: Path) -> None:
    """`dspark validate` with a URL password in model.path: its stages' details (a checkpoint
    that is not there names the path) are written redacted, and so is the report."""
    run = tmp_path / "run"
    done = run_dspark_process("validate", "+hw=cpu", "model.synthetic=null",
                              "validate.accuracy=null", f"model.path=https://me:{URL_PW}@h.invalid/m",
                              f"hydra.run.dir={run}", timeout=600)
    assert done.returncode != 70, done.stderr
    written = {p.name: p.read_text() for p in run.rglob("*") if p.is_file()}
    assert "validate.json" in written, (done.returncode, done.stderr[-2000:])
    assert "me:<redacted>@h.invalid" in written["validate.json"]
    for name, text in written.items():
        assert URL_PW not in text, name
    assert URL_PW not in done.stdout + done.stderr


# -- types are checked: a malformed record is exit 2 naming the file and the field --------------
@pytest.mark.parametrize(("field", "value"), [
    ("valid", "false"), ("valid", 0), ("output_throughput", "NaN"), ("output_throughput", "1e9"),
    ("concurrency", "4"), ("concurrency", 4.5), ("reasons", "none"), ("protocol", None),
    ("latency_ms", {"ttft": {"p50": "fast"}}), ("arm", ["none"]), ("concurrency", -4),
    ("output_throughput", -1.5), ("repeat", True),
])
def test_a_cell_field_of_the_wrong_type_is_exit_2_naming_it(records: Path, tmp_path: Path,
                                                            field: str, value: Any) -> None:
    cell = a_cell(records)
    edit_json(cell, lambda d: d.update({field: value}))
    out = tmp_path / "out"
    refused(report(records / "bench", out=out), out, str(cell), field)
    bench = run_dspark("bench", "--report", str(records / "bench"), timeout=600)
    assert bench.returncode == 2 and str(cell) in bench.stderr and field in bench.stderr


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_numbers_are_no_json(records: Path, tmp_path: Path, constant: str) -> None:
    cell = a_cell(records)
    cell.write_text(re.sub(r'"output_throughput": [0-9.]+', f'"output_throughput": {constant}',
                           cell.read_text()))
    out = tmp_path / "out"
    refused(report(records / "bench", out=out), out, str(cell), constant)


@pytest.mark.parametrize(("record", "change", "field"), [
    ("smoke/smoke.json", lambda d: d["verdict"].update(passed="false"), "verdict.passed"),
    ("smoke/smoke.json", lambda d: d.pop("verdict"), "verdict"),
    ("smoke/smoke.json", lambda d: d["checks"][0].update(status=1), "status"),
    ("smoke/smoke.json", lambda d: d["counters"]["spec_decode"].update(drafts="18"), "drafts"),
    ("smoke/smoke.json", lambda d: d["checks"][8]["data"].update(k=7.5), "k"),
    ("smoke/provenance.json", lambda d: d["checkpoint"].update(total_bytes="big"),
     "checkpoint.total_bytes"),
    ("smoke/provenance.json", lambda d: d["hardware"].update(gpus="eight"), "hardware.gpus"),
    ("smoke/smoke.json", lambda d: d["counters"]["spec_decode"].pop("accepted"), "accepted"),
])
def test_a_smoke_record_field_of_the_wrong_type_is_exit_2(records: Path, tmp_path: Path,
                                                          record: str, change: Any,
                                                          field: str) -> None:
    edit_json(records / record, change)
    out = tmp_path / "out"
    refused(report(records / "smoke", out=out), out, str(records / record), field)


@pytest.mark.parametrize(("old", "new", "field"), [
    ("  repeats: 2", "  repeats: many", "bench.repeats"),
    ("  equivalence_margin: 0.02", "  equivalence_margin: .nan", "bench.equivalence_margin"),
    ("  baseline: dspark_fixed", "  baseline: [dspark_fixed]", "bench.baseline"),
])
def test_an_arms_config_of_the_wrong_type_is_exit_2(records: Path, tmp_path: Path, old: str,
                                                   new: str, field: str) -> None:
    config = records / "bench" / "arms" / "none" / "config.yaml"
    assert old in config.read_text()
    config.write_text(config.read_text().replace(old, new, 1))
    out = tmp_path / "out"
    refused(report(records / "bench", out=out), out, str(config), field)


def test_a_truncated_record_is_exit_2_naming_the_file(records: Path, tmp_path: Path) -> None:
    smoke = records / "smoke" / "smoke.json"
    smoke.write_text(smoke.read_text()[:200])
    out = tmp_path / "out"
    refused(report(records / "smoke", out=out), out, str(smoke), "not valid JSON")


def test_validate_json_stages_are_checked(records: Path, tmp_path: Path) -> None:
    (records / "validate.json").write_text(json.dumps(
        {"stages": [{"name": "smoke", "status": {"passed": True}}], "exit_code": 0}))
    out = tmp_path / "out"
    refused(report(records, out=out), out, "validate.json", "status")


# -- the report's text is escaped for Markdown ----------------------------------------------------
HOSTILE = ("x\n# Planted heading\n<!-- hidden\n```\n</table><script>alert(1)</script> "
           "[a](http://e) *b*")


def test_record_strings_cannot_break_out_of_report_md(records: Path, tmp_path: Path) -> None:
    def plant(d: Any) -> None:
        d["verdict"]["summary"] = HOSTILE
        d["checks"][0]["evidence"] = HOSTILE
        d["checks"][1]["name"] = "| fake | row |\n## Results"
        d["mode"] = "`managed"

    edit_json(records / "smoke" / "smoke.json", plant)
    launch = records / "smoke" / "launch.sh"
    launch.write_text(launch.read_text() + "```\nPlanted line\n<!--\n")
    edit_json(records / "smoke" / "provenance.json",
              lambda d: d["runtime"].update(vllm_version="1\n```\n# Out of the block"))
    out = tmp_path / "out"
    done = report(records / "smoke", records / "bench", out=out)
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    assert re.findall(r"^## (.+)$", text, re.M) == list(markdown.SECTIONS)
    assert re.findall(r"^# (.+)$", text, re.M) == ["Validation report"]
    assert "<!--" not in text.replace("```bash", "").split("## Serving Configuration")[0]
    assert "<script>" not in text and "[a](http://e)" not in text
    assert "&lt;script&gt;" in text and "\\*b\\*" in text
    # the launch script keeps its planted lines, inside a fence they cannot close
    serving = text.split("## Serving Configuration")[1].split("## Throughput Methodology")[0]
    fence = serving.strip().splitlines()[0]
    assert fence.startswith("````") and fence.endswith("bash")
    assert serving.count(fence[:-4]) == 2 and "```\nPlanted line\n<!--\n" in serving
    smoke_table = text.split("## Serving Smoke Validation")[1].split("## Reproduction")[0]
    checks_table = smoke_table[smoke_table.index("| check |"):].split("\n\n")[0]
    rows = checks_table.splitlines()
    planted = json.loads((records / "smoke" / "smoke.json").read_text())["checks"]
    assert len(rows) == 2 + len(planted)  # header, rule, one row per check: no row planted
    assert all(len(re.split(r"(?<!\\)\|", ln)) == 5 for ln in rows)  # three cells each


# -- summaries are recomputed from the cells ------------------------------------------------------
def test_an_edited_summary_json_does_not_win(records: Path, pristine: Path,
                                             tmp_path: Path) -> None:
    def inflate(d: Any) -> None:
        for r in d["results"]:
            r["throughput"] = {"estimate": 1e9, "low": 1e9, "high": 1e9, "n": 2}
        for s in d["speedups"]:
            s["verdict"] = "faster"
        d["results_sentence"] = "dspark_adaptive is 1000x faster."

    edit_json(records / "bench" / "summary.json", inflate)
    report(pristine / "bench", out=tmp_path / "clean")
    done = report(records / "bench", out=tmp_path / "edited")
    assert done.returncode == 0, done.stderr
    clean = (tmp_path / "clean" / "report.md").read_text().replace(str(pristine), "ROOT")
    edited = (tmp_path / "edited" / "report.md").read_text().replace(str(records), "ROOT")
    assert "1000x" not in edited and "1,000,000,000" not in edited
    assert edited.split("## Summary")[1] == clean.split("## Summary")[1]


# -- records that do not belong together are refused ----------------------------------------------
def test_a_smoke_and_a_bench_of_different_models_are_refused(records: Path,
                                                             tmp_path: Path) -> None:
    config = records / "smoke" / "config.yaml"
    config.write_text(re.sub(r"(?m)^(  path: ).*$", r"\g<1>/models/another-model",
                             config.read_text(), count=1))
    out = tmp_path / "out"
    refused(report(records / "smoke", records / "bench", out=out), out, "do not belong together",
            "/models/another-model")


def test_a_bench_without_arms_is_judged_by_its_cells_launches(records: Path,
                                                              tmp_path: Path) -> None:
    """The smoke served the seed's model, the bench's cells another (their own launch records
    say so; the run has no `arms/` folder): refused, both models named."""
    shutil.rmtree(records / "bench" / "arms")
    for cell in (records / "bench" / "cells").glob("*/cell.json"):
        edit_json(cell, lambda d: d.update(launch={"plan": {"model_path": "/models/another"}}))
    out = tmp_path / "out"
    refused(report(records / "smoke", records / "bench", out=out), out,
            "do not belong together", "/models/another", "/models/DeepSeek-V4-Flash-DSpark")


def test_a_sweeps_jobs_of_different_models_are_not_merged(records: Path, tmp_path: Path) -> None:
    """A multirun directory whose jobs' cells served different models (each job's launches
    name its own): `bench --report` and `report` refuse, both models named."""
    sweep = tmp_path / "sweep"
    for job, model in (("0", "/models/first"), ("1", "/models/second")):
        shutil.copytree(records / "bench" / "cells", sweep / job / "cells")
        for cell in (sweep / job / "cells").glob("*/cell.json"):
            edit_json(cell, lambda d, m=model: d.update(launch={"plan": {"model_path": m}}))
    bench = run_dspark("bench", "--report", str(sweep), timeout=600)
    assert bench.returncode == 2, bench.stderr
    assert "/models/first" in bench.stderr and "/models/second" in bench.stderr
    out = tmp_path / "out"
    refused(report(sweep, out=out), out, "do not belong together", "/models/first",
            "/models/second")


@pytest.mark.parametrize("what", ["dataset", "model"])
def test_cells_of_different_datasets_or_models_are_not_merged(records: Path, tmp_path: Path,
                                                              what: str) -> None:
    cell = a_cell(records)
    if what == "dataset":
        edit_json(cell, lambda d: d["dataset"].update(sha256="6" * 64))
    else:
        for each in (records / "bench" / "cells").glob("*/cell.json"):
            edit_json(each, lambda d: d.update(launch={"plan": {"model_path": "/models/m"}}))
        edit_json(cell, lambda d: d.update(launch={"plan": {"model_path": "/models/other"}}))
    out = tmp_path / "out"
    refused(report(records / "bench", out=out), out, "do not belong together")
    bench = run_dspark("bench", "--report", str(records / "bench"), timeout=600)
    assert bench.returncode == 2 and "do not belong together" in bench.stderr


# -- writing beside untrusted records -------------------------------------------------------------
def test_bench_report_replaces_planted_links_instead_of_writing_through_them(
        records: Path, tmp_path: Path) -> None:
    """summary.json, .csv and .png each a link to a file of someone's: one `bench --report`
    replaces every link, and no file linked to changes. Every speculative cell is marked
    invalid, so no load has a winner and no proposal is preflighted (a vLLM import;
    test_bench_proposal preflights one)."""
    for cell in (records / "bench" / "cells").glob("*/cell.json"):
        if not cell.parent.name.startswith("none-"):
            edit_json(cell, lambda d: d.update(valid=False, reasons=["edited"]))
    names = ("summary.json", "summary.csv", "summary.png")
    for name in names:
        victim = tmp_path / f"victim-{name}.txt"
        victim.write_text("precious\n")
        planted = records / "bench" / name
        planted.unlink(missing_ok=True)
        planted.symlink_to(victim)
    done = run_dspark("bench", "--report", str(records / "bench"), timeout=600)
    assert done.returncode == 1, done.stderr  # 1: a cell is invalid
    assert "preflight" not in json.loads((records / "bench" / "proposal.json").read_text())
    for name in names:
        assert (tmp_path / f"victim-{name}.txt").read_text() == "precious\n", name
        planted = records / "bench" / name
        assert not planted.is_symlink() and planted.stat().st_size > 0, name


def test_report_md_replaces_a_planted_link(records: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(victim)
    done = report(records / "smoke", out=out)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "precious\n" and not (out / "report.md").is_symlink()
