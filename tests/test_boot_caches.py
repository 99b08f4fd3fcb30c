"""A boot's caches from its log: the H200 evidence's cold and warm boots of the same launch
(vLLM 0.26: torch.compile compiled afresh, then loaded from the cache), and what a bench boot's
environment gets for `bench.warm_caches`."""

from __future__ import annotations

from pathlib import Path

from dspark_cli.server.bootcache import (
    CACHE_DIRS,
    PROFILE_CACHE_VAR,
    boot_caches,
    cache_dirs,
    cache_env,
    compared,
    read_boot_caches,
    snapshot,
    vllm_has,
)

EVIDENCE = Path(__file__).resolve().parents[1] / "evidence/h200-vllm-0.26"


def test_a_cold_boot_compiles_and_the_next_loads_from_the_cache() -> None:
    cold = read_boot_caches(EVIDENCE / "smoke-cold/server.log")
    warm = read_boot_caches(EVIDENCE / "smoke-warm/server.log")
    assert cold is not None and warm is not None
    # two compiled models (the target's backbone and the DSpark head): their totals summed
    assert cold["torch_compile"] == {"took_s": 25.32, "cache": "miss"}
    assert warm["torch_compile"] == {"took_s": 2.05, "cache": "hit"}
    # FlashInfer's autotune cache file was there, with no entry for this model: a miss both times
    assert cold["flashinfer_autotune"]["cache"] == warm["flashinfer_autotune"]["cache"] == "miss"
    assert cold["graph_capture"] == {"took_s": 1.0, "cache": None}
    assert cold["weights"]["took_s"] == 0.01 and cold["weights"]["cache"] is None
    assert cold["adaptive_profile"] == {"took_s": None, "cache": None}  # 0.26 says nothing


def test_one_graph_compiled_afresh_is_a_miss_and_silence_is_unknown() -> None:
    lines = [
        "INFO [backends.py:292] Directly load the compiled graph(s) for compile range "
        "(1, 16384) from the cache, took 0.475 s",
        "INFO [backends.py:393] Compiling a graph for compile range (1, 8) takes 3.10 s",
    ]
    assert boot_caches(lines)["torch_compile"]["cache"] == "miss"
    assert boot_caches(lines[:1])["torch_compile"]["cache"] == "hit"
    assert boot_caches([])["torch_compile"] == {"took_s": None, "cache": None}
    assert read_boot_caches(Path("/nonexistent/server.log")) is None


def test_warm_boots_keep_the_users_caches_cold_ones_get_fresh_private_ones(tmp_path: Path) -> None:
    assert cache_env(True, tmp_path, profile_cache=False) == {}
    assert cache_env(True, tmp_path, profile_cache=True) == {PROFILE_CACHE_VAR: "1"}
    cold = cache_env(False, tmp_path / "caches", profile_cache=True)
    assert cold.pop(PROFILE_CACHE_VAR) == "0"
    assert set(cold) == set(CACHE_DIRS) and {
        "VLLM_CACHE_ROOT",
        "TRITON_CACHE_DIR",
        "TORCHINDUCTOR_CACHE_DIR",
    } <= set(cold)
    assert all(Path(d).parent == tmp_path / "caches" for d in cold.values())
    assert len(set(cold.values())) == len(cold)


def test_the_installed_vllms_variables_are_read_not_guessed() -> None:
    assert vllm_has("VLLM_CACHE_ROOT")
    assert not vllm_has("VLLM_NO_SUCH_VARIABLE_FOR_DSPARK")


def test_the_report_shows_each_arms_boot_breakdown_and_its_load_generators() -> None:
    from dspark_cli.report.evidence import watches

    def cell(cell_id: str, arm: str, pid: int, compile_cache: str | None) -> dict[str, object]:
        return {
            "cell_id": cell_id,
            "arm": arm,
            "concurrency": 2,
            "load_generator": {"pid": pid},
            "caches": {
                "warm": True,
                "env": {},
                "dirs": {"inductor": {"path": "/i", "cache": compile_cache}},
                "boot": {
                    "weights": {"took_s": 2.0, "cache": None},
                    "torch_compile": {
                        "took_s": 20.0 if compile_cache == "miss" else 2.0,
                        "cache": compile_cache,
                    },
                },
            },
        }

    text = "\n".join(
        watches(
            [
                cell("a-c2", "a", 7, "miss"),
                cell("b-c2", "b", 8, "hit"),
                cell("a-c4", "a", 7, "hit"),
                cell("b-c4", "b", 8, "hit"),
            ]
        )
    )
    assert "Boot caches per arm" in text
    rows = {
        line.split("|")[1].strip(): [x.strip() for x in line.split("|")[2:-1]]
        for line in text.splitlines()
        if line.startswith("| a ") or line.startswith("| b ")
    }
    # arm, cells, caches, weights, torch.compile, autotune, graphs, profile, directories,
    # load generators
    assert rows["a"] == [
        "2",
        "warm",
        "2.0 s",
        "11.0 s 1/2 hit",
        "-",
        "-",
        "-",
        "inductor 1/2 hit",
        "1",
    ]
    assert rows["b"] == [
        "2",
        "warm",
        "2.0 s",
        "2.0 s 2/2 hit",
        "-",
        "-",
        "-",
        "inductor 2/2 hit",
        "1",
    ]


def test_vllm_cpus_aot_compilation_saved_is_a_miss_loaded_a_hit() -> None:
    saved = (
        "(Worker pid=21002) INFO 12-07 00:08:58 [decorators.py:743] [backbone] saved AOT "
        "compiled function to /h/.cache/vllm/torch_compile_cache/torch_aot_compile/7a/r0"
    )
    loaded = (
        "(Worker pid=4313) INFO 12-04 16:32:19 [decorators.py:311] Directly load AOT "
        "compilation from path /h/.cache/vllm/torch_compile_cache/torch_aot_compile/b0"
    )
    assert boot_caches([saved])["torch_compile"]["cache"] == "miss"
    assert boot_caches([loaded])["torch_compile"]["cache"] == "hit"


def test_a_cache_directory_that_gains_files_missed_one_that_held_them_hit(tmp_path: Path) -> None:
    dirs = cache_dirs(
        {"HOME": str(tmp_path / "home"), "TRITON_CACHE_DIR": str(tmp_path / "triton")},
        str(tmp_path / "ind"),
    )
    assert dirs["vllm"] == tmp_path / "home/.cache/vllm/torch_compile_cache"
    assert dirs["inductor"] == tmp_path / "ind" and "aiter-jit" not in dirs
    (tmp_path / "ind" / "fx").mkdir(parents=True)
    (tmp_path / "ind" / "fx" / "graph").write_text("compiled")
    before = snapshot(dirs)
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "kernel").write_text("jit")  # this boot's
    seen = compared(dirs, before, snapshot(dirs))
    assert {var: d["cache"] for var, d in seen.items()} == {
        "vllm": None,
        "triton": "miss",
        "flashinfer": None,
        "inductor": "hit",
    }
    assert seen["triton"]["files_after"] == 1
    again = snapshot(dirs)
    (tmp_path / "triton" / "another").write_text("jit")  # reused one kernel, made another
    assert compared(dirs, again, snapshot(dirs))["triton"]["cache"] == "partial"
