"""This host as dspark sees it, as one frozen record: the GPUs and the profile they match,
Python, vLLM (and what it supports of DSpark), torch, AITER, the option table planning uses,
the chosen profile's pins against what is installed, and what a run here would refuse.

Read from metadata, source files and the GPU tools: nothing imports vLLM or torch, unless asked
(`derive`: the installed vLLM's option table is derived when no cached entry holds it)."""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dspark_cli.hostenv.vllm_support import VllmSupport, support
from dspark_cli.launch import runtime_pins
from dspark_cli.launch.runtime import Runtime, installed, installed_vllm
from dspark_cli.machine.detect import Machine
from dspark_cli.status import Finding

NO_VLLM = ("no vLLM is installed in this Python: serve, smoke and bench need the platform's "
           "vLLM (exit 4); run dspark inside the vLLM image, or `make setup` on a CPU machine")


@dataclass(frozen=True)
class Choice:
    """What the composed config asks of this host (typed at the command edge)."""

    profile: str | None  # the hw profile planning uses (None: none matched this machine)
    chosen_by: str  # "+hw" (given) or "detected"
    method: str | None
    adaptive: bool
    pins: Mapping[str, Any] | None  # runtime.expected
    reference: str | None  # runtime.reference


@dataclass(frozen=True)
class HostEnv:
    python: dict[str, str]
    machine: dict[str, Any]
    detected_profile: str | None
    profile: str | None
    chosen_by: str
    vllm: dict[str, Any] | None
    torch: dict[str, str | None]
    aiter: dict[str, str | None]
    option_table: dict[str, Any]
    pins: list[dict[str, Any]]
    reference: dict[str, Any] | None
    refusals: list[dict[str, Any]]
    not_checked: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        return bool(self.refusals)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "would_refuse": self.refused}


def python_facts() -> dict[str, str]:
    return {"version": platform.python_version(), "implementation":
            platform.python_implementation(), "executable": sys.executable}


def vllm_facts(have: VllmSupport) -> dict[str, Any] | None:
    found = installed_vllm()
    if found is None:
        return None
    return {"dist": found.dist, "version": found.version, "commit": found.commit,
            "supports": have.to_dict()}


def pin_rows(pins: Mapping[str, Any] | None, actual: Runtime) -> list[dict[str, Any]]:
    """One row per pin set: expected, installed, and whether they match."""
    have = actual.to_dict()
    return [{"pin": key, "expected": str(want), "installed": have.get(key),
             "ok": runtime_pins.matches(key, str(want), have.get(key))}
            for key, want in sorted((pins or {}).items()) if want is not None]


def support_refusals(choice: Choice, have: VllmSupport) -> list[dict[str, Any]]:
    """What the installed vLLM would refuse of the chosen launch, read from its source."""
    if have.method_dspark is None or choice.method != "dspark":
        return []
    out = []
    if not have.method_dspark:
        out.append(("vllm-knows-dspark", "the installed vLLM has no speculative method "
                    "`dspark`: it refuses the launch's --speculative-config", "speculative"))
    if choice.adaptive and not have.adaptive_verification:
        out.append(("vllm-knows-adaptive", "the installed vLLM's SpeculativeConfig has no "
                    "enable_adaptive_verification", "speculative"))
    if not have.v2_model_runner:
        out.append(("vllm-knows-v2-runner", "the installed vLLM knows no "
                    "VLLM_USE_V2_MODEL_RUNNER: DSpark needs the V2 model runner", "speculative"))
    return [{"rule": r, "message": m, "key": k} for r, m, k in out]


def collect(choice: Choice, machine: Machine, detected: str | None, table: Mapping[str, Any],
            findings: Sequence[Finding], not_checked: Sequence[str] = ()) -> HostEnv:
    """The record; `findings` are the preflight's on this machine (the rules it could run)."""
    actual = installed()
    have = support()
    vllm = vllm_facts(have)
    refusals = [] if vllm else [{"rule": "vllm-installed", "message": NO_VLLM, "key": None}]
    if choice.profile is None:
        refusals.append({"rule": "hw-profile", "key": "+hw", "message": (
            "no hardware profile matches the GPUs detected: serve, smoke and bench refuse to "
            "guess (exit 2); pick one with +hw=<profile>")})
    pins = pin_rows(choice.pins, actual)
    wrong = sum(not p["ok"] for p in pins)
    refusals += [{"rule": f.rule, "key": f.key, "message": f.message
                  if f.rule != runtime_pins.RULE or not wrong else
                  f"{wrong} of the {len(pins)} pins differ from what is installed "
                  f"(`{runtime_pins.KEY}=null` measures without them)"}
                 for f in findings if f.failed]
    refusals += support_refusals(choice, have)
    reference = None
    if choice.reference and not pins:  # the pins say it all when there are some
        ref_pins = runtime_pins.reference_pins(choice.reference)
        reference = {"image": choice.reference,
                     "differences": runtime_pins.mismatches(ref_pins, actual)}
    return HostEnv(
        python=python_facts(), machine=machine.to_dict(), detected_profile=detected,
        profile=choice.profile, chosen_by=choice.chosen_by, vllm=vllm,
        torch={"version": actual.torch, "cuda": actual.cuda, "rocm": actual.rocm},
        aiter={"version": actual.aiter_version, "commit": actual.aiter_commit,
               "wheel_sha256": actual.aiter_wheel_sha256},
        option_table=dict(table), pins=pins, reference=reference,
        refusals=refusals, not_checked=list(not_checked))


def option_table(derive: bool) -> tuple[dict[str, Any], bool]:
    """(where planning's option table comes from, whether it is at hand): shipped (no vLLM),
    the installed vLLM's cached entry, or not derived yet. `derive` derives it (imports vLLM
    in a subprocess, seconds) when no entry holds it."""
    from dspark_cli.launch.vllm_table import active
    from dspark_cli.vllm import options_cache

    found = installed_vllm()
    if found is not None and not derive:
        identity = {"dist": found.dist, "version": found.version, "commit": found.commit}
        path = options_cache.entry_path(identity)
        cached = options_cache.cache_enabled() and options_cache.load(path, identity)
        if not cached:
            return {"kind": "installed", "ready": False, "described":
                    f"installed {found.describe()}: not derived yet (the first plan derives it "
                    "from vLLM's parser; `dspark env --vllm` does it now)"}, False
    source = active().source
    return {"kind": source.kind, "ready": True, "described": source.describe()}, True
