"""The cpu profile preloads tcmalloc and Intel OpenMP as vLLM's CPU backend asks: LD_PRELOAD in
the plan's env holds only libraries that exist, found by a finder the plan is given (the plan
stays a pure function of config and finder); an explicit LD_PRELOAD or `hw.preload=[]` wins."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from dspark_cli.launch.plan import build_plan
from dspark_cli.machine.detect import find_libraries, installed_libraries, search_dirs
from tests.conftest import compose_typed, run_dspark

TCMALLOC, IOMP = "libtcmalloc_minimal.so.4", "libiomp5.so"


class Finder:
    """A fixed answer, and a record of what was asked."""

    def __init__(self, found: dict[str, str]) -> None:
        self.found, self.asked = found, []

    def __call__(self, names: Sequence[str]) -> tuple[str, ...]:
        self.asked.append(list(names))
        return tuple(self.found[n] for n in names if n in self.found)


def test_the_first_directory_that_has_a_library_wins_and_missing_ones_are_left_out(
        tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / IOMP).write_bytes(b"")
    (a / IOMP).write_bytes(b"")
    (b / TCMALLOC).write_bytes(b"")
    (a / "libnothing.so").mkdir()  # a directory is not a library
    assert find_libraries([TCMALLOC, "libnothing.so", IOMP], [a, b]) == (
        str(b / TCMALLOC), str(a / IOMP))
    assert find_libraries([TCMALLOC], [tmp_path / "none"]) == ()


def test_the_environments_own_lib_is_searched_first() -> None:
    assert search_dirs()[0] == Path(sys.prefix) / "lib"


def test_the_cpu_plan_preloads_what_was_found_in_order() -> None:
    finder = Finder({TCMALLOC: "/l/tc.so", IOMP: "/l/iomp.so"})
    plan = build_plan(compose_typed(["+hw=cpu"]), finder)
    assert plan.env_map["LD_PRELOAD"] == "/l/tc.so:/l/iomp.so"
    assert finder.asked == [[TCMALLOC, IOMP]]


def test_nothing_found_means_no_ld_preload() -> None:
    assert "LD_PRELOAD" not in build_plan(compose_typed(["+hw=cpu"]), Finder({})).env_map


@pytest.mark.parametrize("overrides", [["hw.preload=[]"], ["+hw.env.LD_PRELOAD=/mine.so"]])
def test_the_config_turns_it_off_or_takes_over(overrides: list[str]) -> None:
    finder = Finder({TCMALLOC: "/l/tc.so"})
    plan = build_plan(compose_typed(["+hw=cpu", *overrides]), finder)
    assert plan.env_map.get("LD_PRELOAD") in (None, "/mine.so")
    assert finder.asked == []


def test_gpu_profiles_preload_nothing() -> None:
    finder = Finder({TCMALLOC: "/l/tc.so", IOMP: "/l/iomp.so"})
    assert "LD_PRELOAD" not in build_plan(compose_typed(["+hw=mi350x"]), finder).env_map
    assert finder.asked == []


def test_the_dry_run_preloads_only_files_that_exist_here() -> None:
    done = run_dspark("serve", "+hw=cpu", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)["env"]
    found = installed_libraries([TCMALLOC, IOMP])
    assert env.get("LD_PRELOAD", "") == ":".join(found)
    assert all(Path(p).is_file() for p in found)
