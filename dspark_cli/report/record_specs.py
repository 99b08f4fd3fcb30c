"""The fields of each record the report reads, and their JSON types: what `untrusted.check`
holds a record to before the report trusts it (a record failing it is exit 2, naming the file
and the field). Keys are dotted paths; `*` is every item of a list or value of an object."""

from __future__ import annotations

from dspark_cli.untrusted import BOOL, COUNT, INT, LIST, MAP, MARGIN, NUMBER, TEXT

VALIDATE = {"stages": LIST, "stages.*": MAP, "stages.*.name": TEXT, "stages.*.status": TEXT,
            "stages.*.detail": TEXT, "exit_code": INT}
VALIDATE_REQUIRED = ("stages", "stages.*.name", "stages.*.status")

TESTS = {"status": TEXT, "node_ids": LIST, "node_ids.*": TEXT, "source": TEXT, "counts": MAP,
         "counts.*": COUNT, "detail": TEXT}
TESTS_REQUIRED = ("status",)

CHECKPOINT = {"num_shards": COUNT, "total_bytes": COUNT}

# The focused stage's source tree (validate/source.py) and its lint/format results.
SOURCE = {"path": TEXT, "git": BOOL, "error": TEXT, "branch": TEXT, "head": TEXT,
          "upstream": TEXT, "base": TEXT, "files": LIST, "files.*": MAP, "files.*.path": TEXT,
          "files.*.insertions": COUNT, "files.*.deletions": COUNT, "files.*.kind": TEXT,
          "insertions": COUNT, "deletions": COUNT, "uncommitted": COUNT}
SOURCE_REQUIRED = ("git", "files.*.path", "files.*.kind")
LINT = {"results": LIST, "results.*": MAP, "results.*.command": TEXT,
        "results.*.exit_code": INT, "results.*.summary": TEXT, "results.*.status": TEXT,
        "results.*.files": COUNT}
LINT_REQUIRED = ("results", "results.*.command", "results.*.status")

SMOKE = {"verdict": MAP, "verdict.passed": BOOL, "verdict.summary": TEXT, "mode": TEXT,
         "checks": LIST, "checks.*": MAP, "checks.*.name": TEXT, "checks.*.status": TEXT,
         "checks.*.evidence": TEXT, "checks.*.data": MAP, "checks.*.data.k": COUNT,
         "checks.*.data.rule": TEXT, "request": MAP, "request.completion_tokens": COUNT,
         "counters": MAP, "counters.spec_decode": MAP, "counters.spec_decode.drafts": COUNT,
         "counters.spec_decode.draft_tokens": COUNT, "counters.spec_decode.accepted": COUNT,
         "versions": MAP, "checks.*.data.families": LIST, "checks.*.data.families.*": TEXT,
         "checks.*.data.events": LIST, "checks.*.data.events.*": MAP,
         "checks.*.data.events.*.pattern": TEXT, "checks.*.data.events.*.line_no": COUNT,
         "checks.*.data.events.*.line": TEXT, "checks.*.data.evidence": MAP,
         "checks.*.data.evidence.*": MAP, "checks.*.data.evidence.*.expected": BOOL,
         "checks.*.data.evidence.*.line_no": COUNT, "checks.*.data.evidence.*.line": TEXT}
SMOKE_REQUIRED = ("verdict", "verdict.passed", "checks.*.name", "checks.*.status",
                  "counters.spec_decode.drafts", "counters.spec_decode.draft_tokens",
                  "counters.spec_decode.accepted")

_CHECKPOINT = {"path": TEXT, "exists": BOOL, "config_sha256": TEXT, "index_sha256": TEXT,
               "name": TEXT, "name_from": TEXT, "model_type": TEXT, "expert_dtype": TEXT,
               "architecture": TEXT, "quantization": MAP, "num_shards": COUNT,
               "total_bytes": COUNT}
PROVENANCE = {"hardware": MAP, "hardware.gpus": LIST, "hardware.gpus.*": MAP,
              "hardware.gpus.*.name": TEXT, "hardware.platform": TEXT, "platform": TEXT,
              "checkpoint": MAP, **{f"checkpoint.{k}": v for k, v in _CHECKPOINT.items()},
              "runtime": MAP, "runtime.vllm_commit": TEXT, "runtime.vllm_version": TEXT,
              "runtime.aiter_wheel_sha256": TEXT, "packages": MAP, "torch_backends": MAP,
              "argv": LIST, "argv.*": TEXT}
# An attached smoke's `versions` (the server's own and this host's provenance).
SMOKE.update({f"versions.{k}": v for k, v in PROVENANCE.items()})

CONFIG = {"model": MAP, "model.path": TEXT, "model.name": TEXT, "model.args": MAP,
          "model.args.served_model_name": TEXT, "hw": MAP, "hw.name": TEXT, "hw.args": MAP,
          "runtime": MAP, "runtime.image": MAP, "runtime.image.tag": TEXT,
          "runtime.image.id": TEXT, "runtime.image.base_digest": TEXT,
          "runtime.image.vllm_patch": TEXT, "runtime.image.published": TEXT,
          "runtime.expected": MAP, "runtime.expected.vllm_commit": TEXT, "logs": MAP,
          "logs.fatal": MAP, "logs.fatal.*": TEXT, "bench": MAP, "bench.name": TEXT,
          "bench.dataset": MAP, "bench.dataset.kind": TEXT, "bench.dataset.subset": TEXT,
          "bench.dataset.path": TEXT, "bench.dataset.sha256": TEXT,
          "bench.dataset.input_tokens": INT, "bench.dataset.seed": INT, "bench.sampling": MAP,
          "bench.sampling.temperature": NUMBER, "bench.sampling.top_p": NUMBER,
          "bench.sampling.max_output_tokens": INT, "bench.sampling.ignore_eos": BOOL,
          "bench.warmups": LIST, "bench.warmups.*": MAP, "bench.warmups.*.num_prompts": COUNT,
          "bench.warmups.*.concurrency": COUNT, "bench.warmups.*.output_tokens": COUNT,
          "bench.measured_prompts": COUNT, "bench.concurrencies": LIST,
          "bench.concurrencies.*": COUNT, "bench.arms": LIST, "bench.arms.*": TEXT,
          "bench.baseline": TEXT, "bench.repeats": COUNT, "bench.equivalence_margin": MARGIN}
CONFIG_REQUIRED = ("bench.warmups.*.num_prompts", "bench.warmups.*.output_tokens")
