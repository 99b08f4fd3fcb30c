"""`dspark env`: this host as dspark sees it, as one frozen record: the GPUs and the profile
they match, Python, vLLM (and what it supports of DSpark), torch, AITER, the option table
planning uses, the chosen profile's pins against what is installed, and what a run here would
refuse.

Read from metadata, source files and the GPU tools: nothing imports vLLM or torch, unless asked
(`derive`: the installed vLLM's option table is derived when no cached entry holds it).

What the installed vLLM supports of DSpark, read from its source files (never imported: an
import takes seconds): the `dspark` speculative method, `enable_adaptive_verification`, and the
V2 model runner switch (`VLLM_USE_V2_MODEL_RUNNER` in its envs.py).

`render` puts it on one screen: a line per fact, the pins as expected/installed, then what a run
here would refuse. Plain text (no table to wrap in a log)."""

from __future__ import annotations

import importlib.util
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dspark_cli.launch import runtime
from dspark_cli.launch.runtime import Runtime, installed, installed_vllm
from dspark_cli.launch.vllm_options import active
from dspark_cli.machine.detect import Machine
from dspark_cli.status import Finding
from dspark_cli.untrusted import printable
from dspark_cli.vllm import options as vllm_options
from dspark_cli.vllm.options import has_field

_LIMIT = 4 << 20  # bytes read of one source file


@dataclass(frozen=True)
class VllmSupport:
    """True/False as the installed vLLM's source says; None where there is no vLLM to read."""

    method_dspark: bool | None
    adaptive_verification: bool | None
    v2_model_runner: bool | None

    def to_dict(self) -> dict[str, bool | None]:
        return asdict(self)


def _package_root() -> Path | None:
    spec = importlib.util.find_spec("vllm")
    roots = list(spec.submodule_search_locations or []) if spec else []
    return Path(roots[0]) if roots else None


def _text(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""


def support() -> VllmSupport:
    root = _package_root()
    if root is None:
        return VllmSupport(None, None, None)
    speculative = _text(root / "config" / "speculative.py")
    return VllmSupport(
        method_dspark=re.search(r"""Literal\[[^\]]*['"]dspark['"]""", speculative) is not None,
        adaptive_verification=has_field("enable_adaptive_verification"),
        v2_model_runner="VLLM_USE_V2_MODEL_RUNNER" in _text(root / "envs.py"),
    )


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
             "ok": runtime.matches(key, str(want), have.get(key))}
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
                  if f.rule != runtime.RULE or not wrong else
                  f"{wrong} of the {len(pins)} pins differ from what is installed "
                  f"(`{runtime.KEY}=null` measures without them)"}
                 for f in findings if f.failed]
    refusals += support_refusals(choice, have)
    reference = None
    if choice.reference and not pins:  # the pins say it all when there are some
        ref_pins = runtime.reference_pins(choice.reference)
        reference = {"image": choice.reference,
                     "differences": runtime.mismatches(ref_pins, actual)}
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
    found = installed_vllm()
    if found is not None and not derive:
        identity = {"dist": found.dist, "version": found.version, "commit": found.commit}
        path = vllm_options.entry_path(identity)
        cached = vllm_options.cache_enabled() and vllm_options.load(path, identity)
        if not cached:
            return {"kind": "installed", "ready": False, "described":
                    f"installed {found.describe()}: not derived yet (the first plan derives it "
                    "from vLLM's parser; `dspark env --vllm` does it now)"}, False
    source = active().source
    return {"kind": source.kind, "ready": True, "described": source.describe()}, True


def _gpus(env: HostEnv) -> str:
    gpus = env.machine.get("gpus") or []
    if not gpus:
        return f"none detected (platform {env.machine.get('platform')})"
    names: dict[str, int] = {}
    for g in gpus:
        label = g.get("name") + (f" [{g['arch']}]" if g.get("arch") else "")
        names[label] = names.get(label, 0) + 1
    driver = f", driver {env.machine['driver']}" if env.machine.get("driver") else ""
    return ", ".join(f"{n} x {label}" for label, n in names.items()) + driver


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else "yes" if value else "NO"


def render(env: HostEnv) -> str:
    lines = [f"GPUs:          {_gpus(env)}"]
    profile = env.profile or "none"
    how = ("given with +hw" if env.chosen_by == "+hw" else "detected" if env.profile
           else "no profile matches these GPUs: +hw=<profile>")
    match = (f"; this machine matches {env.detected_profile}"
             if env.chosen_by == "+hw" and env.detected_profile not in (None, env.profile)
             else "")
    lines.append(f"Profile:       {profile} ({how}{match})")
    py = env.python
    lines.append(f"Python:        {py['version']} ({py['executable']})")
    if env.vllm is None:
        lines.append("vLLM:          not installed")
    else:
        v, s = env.vllm, env.vllm["supports"]
        commit = f", commit {v['commit']}" if v.get("commit") else ""
        lines.append(f"vLLM:          {v['dist']} {v['version']}{commit}")
        lines.append(f"  knows:       method=dspark {_yes(s['method_dspark'])}, "
                     f"enable_adaptive_verification {_yes(s['adaptive_verification'])}, "
                     f"V2 model runner {_yes(s['v2_model_runner'])}")
    t = env.torch
    build = ", ".join(f"{k.upper()} {t[k]}" for k in ("rocm", "cuda") if t.get(k)) or "CPU"
    lines.append("torch:         " + (f"{t['version']} ({build})" if t.get("version")
                                      else "not installed"))
    a = env.aiter
    lines.append("AITER:         " + (" ".join(p for p in (
        a["version"], a.get("commit") and f"commit {a['commit']}",
        a.get("wheel_sha256") and f"wheel sha256 {a['wheel_sha256']}") if p)
        if a.get("version") else "not installed"))
    lines.append(f"Option table:  {env.option_table['described']}")
    if env.pins:
        lines.append("Pins (runtime.expected):")
        lines += [f"  {'ok ' if p['ok'] else 'BAD'} {p['pin']}: expected {p['expected']}, "
                  f"installed {p['installed'] or 'nothing'}" for p in env.pins]
    else:
        lines.append("Pins:          none set (an image group pins software: +image=<name>)")
    if env.reference and env.reference["differences"]:
        lines.append(f"Unlike +image={env.reference['image']} (noted, not refused):")
        lines += [f"  {d}" for d in env.reference["differences"]]
    for note in env.not_checked:
        lines.append(f"Not checked:   {note}")
    if env.refusals:
        lines.append("A run here would refuse:")
        lines += [f"  {r['rule']}: {r['message']}" for r in env.refusals]
    else:
        lines.append("A run here would refuse: nothing dspark can check without a boot")
    # Every fact was read from the host (a package's metadata, a GPU tool): a control
    # character or line break in one is shown escaped, so no fact can forge a line.
    return "\n".join(printable(line) for line in lines) + "\n"
