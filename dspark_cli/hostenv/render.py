"""`dspark env` on one screen: a line per fact, the pins as expected/installed, then what a run
here would refuse. Plain text (no table to wrap in a log)."""

from __future__ import annotations

from dspark_cli.hostenv.facts import HostEnv


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
    return "\n".join(lines) + "\n"
