"""The accuracy eval as data (pure): the settings `validate.accuracy` gives, the lm_eval task
that reads the pinned local file (GSM8K's prompt, answer filter and metric, as lm-evaluation-
harness's own gsm8k task has them), and the lm_eval command that scores one arm's server
through its OpenAI-compatible completions endpoint. Nothing here touches the disk or the net."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from dspark_cli.accuracy import lm_eval_entry
from dspark_cli.errors import UsageError
from dspark_cli.paths import conf_dir

if TYPE_CHECKING:
    from dspark_cli.config.validate import AccuracyStage

TASK = "dspark_gsm8k"  # the task's name inside lm_eval (its YAML is written into the run)
FILTER = "strict-match"  # GSM8K's: the number after "#### ", the first one
METRIC = "exact_match"
ANSWER_PATTERN = r"#### (\-?[0-9\.\,]+)"
# lm_eval's output keeps the dataset offline: no hub, no download, only the local file.
OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class AccuracySpec:
    """`validate.accuracy`, checked: the pinned dataset and how each arm is asked."""

    dataset: Path
    sha256: str
    limit: int | None  # the first N documents (None: all)
    num_fewshot: int  # examples from the same file before each question (the doc left out)
    max_gen_toks: int
    temperature: float
    num_concurrent: int  # requests lm_eval keeps in flight
    margin: float  # the equivalence margin on the accuracy difference (absolute)
    baseline: str  # the arm every other is compared with (no speculation: `none`)
    python: str  # the interpreter that runs lm_eval
    timeout_s: float  # one arm's eval

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": str(self.dataset), "sha256": self.sha256, "limit": self.limit,
                "num_fewshot": self.num_fewshot, "max_gen_toks": self.max_gen_toks,
                "temperature": self.temperature, "num_concurrent": self.num_concurrent,
                "margin": self.margin, "baseline": self.baseline, "python": self.python,
                "timeout_s": self.timeout_s}


def _at_least(key: str, value: int, least: int) -> int:
    if value < least:
        raise UsageError(f"validate.accuracy.{key}={value!r} must be an integer >= {least}.")
    return value


def default_python() -> str:
    """lm_eval's interpreter when neither validate.accuracy.python nor DSPARK_EVAL_PYTHON names
    one: a source checkout's `.venv-eval` (what `make setup` makes, lm_eval beside dspark but
    out of vLLM's venv), else dspark's own Python."""
    checkout = conf_dir().parent / ".venv-eval" / "bin" / "python"
    return str(checkout) if checkout.is_file() else sys.executable


def accuracy_spec(conf: AccuracyStage | None, default_python: str,
                  arms: Sequence[str]) -> AccuracySpec | None:
    """The stage's settings for the bench's `arms` (None: `validate.accuracy=null`, the stage
    is skipped); UsageError naming the key when one is wrong. A relative dataset path is under
    dspark's conf/."""
    if conf is None:
        return None
    baseline = conf.baseline or "none"
    if baseline not in arms:
        raise UsageError(f"validate.accuracy.baseline={baseline} is not one of bench.arms "
                         f"{list(arms)}: every arm's accuracy is compared with it.",
                         hint="add the no-speculation arm to bench.arms, or name another "
                         "arm in validate.accuracy.baseline")
    if not conf.dataset:
        raise UsageError("validate.accuracy.dataset is not set; give a GSM8K-format JSONL file "
                         "(question, answer ending in '#### N') and its SHA-256 in "
                         "validate.accuracy.sha256, or validate.accuracy=null to skip the stage.")
    sha = (conf.sha256 or "").lower()
    if not _SHA256.match(sha):
        raise UsageError(f"validate.accuracy.sha256={conf.sha256!r} is not a SHA-256 "
                         "(64 hex digits); pin the dataset with `sha256sum FILE`.")
    margin, temperature = conf.margin, conf.temperature
    if not 0 < margin < 1:
        raise UsageError(f"validate.accuracy.margin={margin!r} must be a number in (0, 1): the "
                         "largest accuracy difference (absolute, 0.02 = 2 points) still "
                         "comparable.")
    if temperature < 0:
        raise UsageError(f"validate.accuracy.temperature={temperature!r} must be >= 0.")
    path = Path(conf.dataset).expanduser()
    return AccuracySpec(
        dataset=path if path.is_absolute() else conf_dir() / path, sha256=sha,
        limit=None if conf.limit is None else _at_least("limit", conf.limit, 1),
        num_fewshot=_at_least("num_fewshot", conf.num_fewshot, 0),
        max_gen_toks=_at_least("max_gen_toks", conf.max_gen_toks, 1),
        temperature=float(temperature),
        num_concurrent=_at_least("num_concurrent", conf.num_concurrent, 1),
        margin=float(margin), baseline=baseline, python=conf.python or default_python,
        timeout_s=float(conf.timeout_s or 3600.0))


def task_yaml(spec: AccuracySpec, data_file: Path) -> str:
    """lm_eval's task for the pinned file: GSM8K's prompt, target, answer filter and metric
    (lm_eval's tasks/gsm8k/gsm8k.yaml, its strict match), greedy unless a temperature is set."""
    sampling: dict[str, Any] = {"do_sample": spec.temperature > 0,
                                "temperature": spec.temperature}
    task = {
        "task": TASK,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data_file)}},
        "test_split": "test",
        "fewshot_split": "test",  # lm_eval leaves the document itself out of its examples
        "num_fewshot": spec.num_fewshot,
        "output_type": "generate_until",
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{answer}}",
        "target_delimiter": " ",
        "fewshot_delimiter": "\n\n",
        "generation_kwargs": {"until": ["Question:", "</s>", "<|im_end|>"],
                              "max_gen_toks": spec.max_gen_toks, **sampling},
        "filter_list": [{"name": FILTER, "filter": [
            {"function": "regex", "regex_pattern": ANSWER_PATTERN},
            {"function": "take_first"}]}],
        "metric_list": [{"metric": METRIC, "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": False,
                         "regexes_to_ignore": [",", "\\$", "(?s).*#### ", "\\.$"]}],
        "metadata": {"version": 1.0},
    }
    return yaml.safe_dump(task, sort_keys=False, allow_unicode=True)


def eval_argv(spec: AccuracySpec, task_dir: Path, model: str, base_url: str,
              out_dir: Path) -> list[str]:
    """lm_eval (`lm_eval_entry`, in `spec.python`) against `base_url`'s /v1/completions, the
    prompts sent as text (no tokenizer here), every sample logged under `out_dir`. UsageError
    for a served name lm_eval's comma-separated model_args cannot carry."""
    if "," in model or "=" in model:
        raise UsageError(f"the served model name {model!r} holds ',' or '=', which lm_eval's "
                         "--model_args cannot carry; set model.args.served_model_name.")
    args = (f"model={model},base_url={base_url}/v1/completions,tokenizer_backend=None,"
            f"tokenized_requests=False,num_concurrent={spec.num_concurrent}")
    argv = [spec.python, "-c", lm_eval_entry.BOOT, str(Path(lm_eval_entry.__file__)),
            "--model_args", args, "--tasks", TASK, "--include_path", str(task_dir),
            "--output_path", str(out_dir)]
    return argv + (["--limit", str(spec.limit)] if spec.limit is not None else [])
