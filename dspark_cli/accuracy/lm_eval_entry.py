"""lm_eval's run of dspark's one task, in lm_eval's own interpreter (`validate.accuracy.python`).

It does what `python -m lm_eval run` does for the task (the same `simple_evaluate` with the
CLI's defaults, the same results and samples files under --output_path, the same table printed)
but indexes only the task directory: lm_eval's CLI always indexes the thousands of tasks it
ships first, most of its 10 s of CPU per arm here (benchmarks/accuracy_entry.py). Only lm_eval and
the standard library are imported: dspark is not installed in that interpreter. `eval_argv`
(accuracy/plan.py) starts it through `BOOT`, which runs this file by its path without putting
its directory on sys.path.
"""

from __future__ import annotations

import argparse
import logging

BOOT = ("import runpy, sys; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')")
MODEL = "local-completions"  # lm_eval's client of an OpenAI-compatible /v1/completions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lm_eval_entry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_args", required=True)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--include_path", required=True)
    parser.add_argument("--output_path", required=True)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] "
                        "%(message)s")

    from lm_eval import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import make_table

    tracker = EvaluationTracker(output_path=args.output_path)
    results = simple_evaluate(
        model=MODEL, model_args=args.model_args, tasks=[args.tasks], limit=args.limit,
        batch_size=1, fewshot_as_multiturn=False, log_samples=True, evaluation_tracker=tracker,
        task_manager=TaskManager(include_path=args.include_path, include_defaults=False))
    if results is None:
        return 1
    samples = results.pop("samples")
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    print(make_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
