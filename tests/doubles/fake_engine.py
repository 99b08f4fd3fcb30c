"""The fake vLLM's engine: its Prometheus counters, its greedy answers and its speculative
steps, shared by the HTTP handler threads of `fake_vllm.py`.

Speculation is simulated per request as verify steps of (proposed, accepted) draft tokens: a
fixed-K drafter proposes K every step; with `--adaptive` some steps propose fewer (adaptive
verification trimming). The Prometheus counters keep draft_tokens == drafts x K either way (as
the seed report's adaptive run showed: 126 = 18 x 7); with `--per-request-spec-decode-metrics`
the steps are also answered per request, in vLLM 0.32's `metrics.speculative_decoding` shape.
"""

from __future__ import annotations

import argparse
import threading
import time
import zlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

MISCOUNT_BY = 3
SHORT_BY = 7
LOSSY_INDEX = 3  # the token lossy_speculation changes
TRIM_EVERY = 3  # adaptive: every third step proposes K - 2 (at least one) tokens
STALL_TOKENS = 5  # stalled: what a request generates before the engine stops


class Engine:
    """Counters and behaviour of the fake engine, shared by the handler threads."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.lossy_done = False
        self.registry = CollectorRegistry()
        labels = ["model_name", "engine"]
        values = (args.model, "0")

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=self.registry)

        self.generation = counter("vllm:generation_tokens", "Generation tokens.").labels(*values)
        self.prompt = counter("vllm:prompt_tokens", "Prompt tokens.").labels(*values)
        self.preemptions = counter("vllm:num_preemptions", "Preemptions.").labels(*values)
        self.success = Counter(
            "vllm:request_success",
            "Finished requests.",
            [*labels, "finished_reason"],
            registry=self.registry,
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Running requests.", labels, registry=self.registry
        ).labels(*values)
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Waiting requests.", labels, registry=self.registry
        ).labels(*values)
        self.served = 0  # completions answered (stalled: until --stall-after)
        self.spec = None
        if args.k:
            self.spec = (
                counter("vllm:spec_decode_num_drafts", "Drafts.").labels(*values),
                counter("vllm:spec_decode_num_draft_tokens", "Draft tokens.").labels(*values),
                counter("vllm:spec_decode_num_accepted_tokens", "Accepted.").labels(*values),
            )
            per_pos = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted per position.",
                [*labels, "position"],
                registry=self.registry,
            )
            self.per_pos = [per_pos.labels(*values, str(i)) for i in range(args.k)]

    def mark_event(self) -> None:
        if self.args.event_file:
            with open(self.args.event_file, "w") as f:
                f.write(repr(time.time()))

    def stalls(self) -> bool:
        """Whether this completion meets the stalled engine: then it is counted as running,
        with its first STALL_TOKENS tokens generated, and never finishes."""
        with self.lock:
            if self.args.scenario != "stalled" or self.served < self.args.stall_after:
                self.served += 1
                return False
            self.running.inc()
            self.generation.inc(STALL_TOKENS)
            return True

    def generate(self, prompt_tokens: int, max_tokens: int) -> tuple[int, list[tuple[int, int]]]:
        """Account one completion: how many tokens were generated, and its verify steps."""
        scenario = self.args.scenario
        n = max(max_tokens - SHORT_BY, 1) if scenario == "short_tokens" else max_tokens
        with self.lock:
            self.prompt.inc(prompt_tokens)
            self.generation.inc(n + (MISCOUNT_BY if scenario == "counter_mismatch" else 0))
            if scenario == "preemption":
                self.preemptions.inc()
            self.success.labels(self.args.model, "0", "length").inc()
            steps = self._account_spec(n) if self.spec else []
        return n, steps

    def token_ids(self, prompt: str, n: int, probe: bool) -> list[int]:
        """The greedy answer to `prompt`: ids that depend on the prompt alone; lossy
        speculation changes one token of its first probe answer."""
        ids = [(zlib.crc32(prompt.encode()) + 31 * i) % 50000 for i in range(n)]
        lossy = self.args.scenario == "lossy_speculation" and self.args.speculative != "none"
        with self.lock:
            if lossy and probe and not self.lossy_done and n > LOSSY_INDEX:
                self.lossy_done = True
                ids[LOSSY_INDEX] += 1
        return ids

    def _account_spec(self, n: int) -> list[tuple[int, int]]:
        """Simulate drafting: each step proposes K (adaptive: fewer every TRIM_EVERY-th step)
        and accepts 0..proposed (a fixed cycle); returns the steps as (proposed, accepted)."""
        k = self.args.k
        drafts = draft_tokens = accepted = 0
        produced, step = 1, 0  # the first token comes from prefill
        steps = []
        while produced < n:
            proposed = max(k - 2, 1) if self.args.adaptive and step % TRIM_EVERY == 1 else k
            a = min(step % (k + 1), proposed, n - produced - 1)
            drafts, draft_tokens, accepted = drafts + 1, draft_tokens + k, accepted + a
            for pos in range(a):
                self.per_pos[pos].inc()
            steps.append((proposed, a))
            produced += a + 1
            step += 1
        if self.args.scenario == "bad_spec_counters":
            draft_tokens -= 2
        self.spec[0].inc(drafts)
        self.spec[1].inc(draft_tokens)
        self.spec[2].inc(accepted)
        return steps

    def request_metrics(self, steps: list[tuple[int, int]]) -> dict[str, Any] | None:
        """The answer's `metrics` (vLLM 0.32's per-request spec-decode metrics), or None when
        the server was not asked for them."""
        level, k = self.args.per_request_spec_decode_metrics, self.args.k
        if level == "none" or not k:
            return None
        histogram = [0] * (k + 1)
        for _, a in steps:
            histogram[a] += 1
        drafted, accepted = sum(p for p, _ in steps), sum(a for _, a in steps)
        out: dict[str, Any] = {
            "mean_acceptance_length": 1.0 + accepted / len(steps) if steps else 1.0,
            "draft_acceptance_rate": accepted / drafted if drafted else 0.0,
            "acceptance_histogram": histogram, "num_spec_steps": len(steps),
            "num_accepted_draft_tokens": accepted, "num_draft_tokens": drafted,
            "num_spec_tokens": k}
        if level == "detailed":
            out["per_step_accepted"] = [a for _, a in steps]
            out["per_step_drafted"] = [p for p, _ in steps]
        return {"speculative_decoding": out}
