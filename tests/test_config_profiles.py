"""The config tree itself: every YAML file under conf/ composes, the GPU profiles share their
bases (conf/bases/, never selectable as an option) and interpolate TP from their GPU count, the
DeepSeek-V4 family's facts reach a local checkpoint, and the rendered deployments stay exactly
what they were (golden files in tests/data/golden/, written from the config before the hw
profiles shared their bases).

Regenerate the goldens only for an intended change of a rendered deployment:
    .venv/bin/python -m tests.test_config_profiles --write-goldens
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from dspark_cli.config import bench as bench_schema
from dspark_cli.config import schema
from dspark_cli.config import smoke as smoke_schema
from dspark_cli.config import validate as validate_schema
from dspark_cli.config.strict import check_known_keys
from dspark_cli.config.typed import to_typed
from dspark_cli.launch import vllm_options
from dspark_cli.launch.plan import build_plan
from dspark_cli.launch.render import plan_dict, shell_script
from dspark_cli.machine.profiles import profile_patterns
from dspark_cli.paths import conf_dir
from tests.conftest import compose_config, compose_typed, run_dspark, seed_cache

CONF = conf_dir()
BASES = CONF / "bases"
GOLDEN = Path(__file__).parent / "data" / "golden"
HW_PROFILES = ("mi350x", "mi355x", "mi300x", "h200", "b200", "cpu")
# The cpu profile's tiny model lives under DSPARK_CACHE_DIR: pinned for the goldens.
GOLDEN_CACHE_DIR = "/golden-cache"
def golden_libraries(names: Sequence[str]) -> tuple[str, ...]:
    """`hw.preload` as if every library were installed under one directory."""
    return tuple(f"/golden-libs/{name}" for name in names)


VARIANTS = {
    "default": [],
    "speculative=dspark_fixed": ["speculative=dspark_fixed"],
    "speculative=none": ["speculative=none"],
    "compilation=eager": ["compilation=eager"],
    "serving.args.max_num_seqs=512": ["serving.args.max_num_seqs=512"],
}


def rendering(profile: str, overrides: list[str]) -> dict[str, object]:
    """What `dspark serve +hw=<profile> <overrides>` renders: the `--dry-run` script, the
    `--json` plan (less its preflight findings, which belong to the rules, not the config),
    and the resolved hw and model groups (what `--cfg job --resolve` prints for them)."""
    cfg = compose_config([f"+hw={profile}", *overrides])
    plan = build_plan(to_typed(cfg), golden_libraries)  # the same on every host
    return {
        "script": shell_script(plan),
        "plan": plan_dict(plan),
        "config": OmegaConf.to_container(OmegaConf.masked_copy(cfg, ["hw", "model"]),
                                         resolve=True, enum_to_str=True),
    }


def golden_renderings(profile: str) -> dict[str, dict[str, object]]:
    return {name: rendering(profile, overrides) for name, overrides in VARIANTS.items()}


@pytest.mark.parametrize("profile", HW_PROFILES)
def test_rendered_deployment_matches_its_golden(profile: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    vllm_options.table()  # the vLLM option table: from the session's cache, not the golden one
    monkeypatch.setenv("DSPARK_CACHE_DIR", GOLDEN_CACHE_DIR)
    actual = golden_renderings(profile)
    assert actual["default"]["script"] == (GOLDEN / f"{profile}.sh").read_text()
    assert actual == json.loads((GOLDEN / f"{profile}.json").read_text())


# --- the options of each group, read from conf/ -------------------------------------------------

LAUNCH_GROUPS = ("model", "speculative", "compilation", "serving")
LAUNCHING = ("serve", "smoke", "bench", "validate")  # primaries that plan a launch on a hw
PRIMARIES = (*LAUNCHING, "verify-checkpoint")
CHECKPOINT_DIR = "/ckpt/DeepSeek-V4-Local"  # not a local directory: the dry run skips its checks


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def plain(path: Path) -> DictConfig:
    cfg = OmegaConf.load(path)
    assert isinstance(cfg, DictConfig)
    return cfg


def gpu_profiles() -> list[str]:
    return [p for p, (platform, _) in profile_patterns().items() if platform != "cpu"]


def needs_path(option: str) -> list[str]:
    """`model.path=...` where the model option leaves its path to the user (`???`)."""
    own = plain(CONF / "model" / f"{option}.yaml")
    return [f"model.path={CHECKPOINT_DIR}"] if OmegaConf.is_missing(own, "path") else []


@pytest.fixture(autouse=True)
def _command_schemas(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smoke_schema.register()
    bench_schema.register()
    validate_schema.register()
    # The tiny model's home: private to each test (the vLLM option table copied in).
    monkeypatch.setenv("DSPARK_CACHE_DIR", str(seed_cache(tmp_path / "cache")))


def assert_composes(cfg: DictConfig) -> None:
    """No unknown key, no missing value, every interpolation resolves, and a launch plans."""
    check_known_keys(cfg)
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    if "hw" in cfg:
        build_plan(to_typed(cfg))


def launch_cases() -> Iterator[tuple[str, list[str]]]:
    for hw in options("hw"):
        yield hw, []
        for group in LAUNCH_GROUPS:
            for option in options(group):
                extra = needs_path(option) if group == "model" else []
                yield hw, [f"{group}={option}", *extra]


@pytest.mark.parametrize(("hw", "overrides"), list(launch_cases()),
                         ids=lambda v: v if isinstance(v, str) else " ".join(v) or "default")
def test_every_hw_profile_composes_with_every_launch_option(hw: str,
                                                            overrides: list[str]) -> None:
    cfg = compose_config([f"+hw={hw}", *overrides])
    assert_composes(cfg)
    assert cfg.hw.name == hw
    for override in overrides:
        group, _, option = override.partition("=")
        if group in LAUNCH_GROUPS:
            assert cfg[group].name == option, f"{override} composed {cfg[group].name}"


@pytest.mark.parametrize("config", LAUNCHING)
@pytest.mark.parametrize("hw", ["cpu", "mi350x"])
def test_every_launching_primary_config_composes(config: str, hw: str) -> None:
    assert_composes(compose_config([f"+hw={hw}"], config=config))


@pytest.mark.parametrize("config", LAUNCHING)
@pytest.mark.parametrize("option", options("deploy"))
def test_every_deploy_target_composes_for_every_launching_primary(option: str,
                                                                   config: str) -> None:
    cfg = compose_config(["+hw=mi350x", "hw.nodes=2", f"deploy={option}"], config=config)
    assert_composes(cfg)
    assert cfg.deploy.target == option


def test_deploy_is_local_by_default_for_every_launching_primary() -> None:
    for config in LAUNCHING:
        assert compose_config(["+hw=cpu"], config=config).deploy.target == "local"


SEED_PROTOCOL = "speed_bench_throughput_1k"


@pytest.mark.parametrize("option", options("bench"))
def test_every_bench_protocol_composes(option: str) -> None:
    """A protocol names itself; an option named after a GPU profile is that profile's
    protocol (what `dspark validate +hw=<profile>` runs by default): the seed's."""
    cfg = compose_config(["+hw=mi350x", f"bench={option}"], config="bench")
    assert_composes(cfg)
    gpu_profile = option in options("hw") and option != "cpu"
    assert cfg.bench.name == (SEED_PROTOCOL if gpu_profile else option)


@pytest.mark.parametrize("config", LAUNCHING)
@pytest.mark.parametrize("option", options("image"))
def test_every_image_group_pins_software_on_every_launching_primary(option: str,
                                                                     config: str) -> None:
    """An image group (`+image=`) is software only: it sets runtime pins and image facts, and
    composes beside any hw profile."""
    cfg = compose_config(["+hw=mi350x", f"+image={option}"], config=config)
    assert_composes(cfg)
    assert any(v is not None for v in OmegaConf.to_container(cfg.runtime.expected).values())
    own = OmegaConf.load(CONF / "image" / f"{option}.yaml")
    assert set(own) == {"runtime"}, f"image/{option}.yaml sets more than runtime.*"


@pytest.mark.parametrize("profile", options("hw"))
def test_validate_runs_the_protocol_of_its_hw_profile(profile: str) -> None:
    cfg = compose_config([f"+hw={profile}"], config="validate")
    assert cfg.bench.name == ("cpu" if profile == "cpu" else SEED_PROTOCOL)
    chosen = compose_config([f"+hw={profile}", "bench=cpu"], config="validate")
    assert chosen.bench.name == "cpu"


@pytest.mark.parametrize("option", options("model"))
def test_every_model_option_composes_for_verify_checkpoint(option: str) -> None:
    """verify-checkpoint composes no hw profile: only its model group has to be complete."""
    cfg = compose_config([f"model={option}", *needs_path(option)], config="verify-checkpoint")
    check_known_keys(cfg)
    OmegaConf.to_container(cfg.model, resolve=True, throw_on_missing=True)
    assert cfg.model.name == option


def test_verify_checkpoint_composes_with_just_a_path() -> None:
    cfg = compose_config([f"model.path={CHECKPOINT_DIR}"], config="verify-checkpoint")
    OmegaConf.to_container(cfg.model, resolve=True, throw_on_missing=True)


def test_dsparks_hydra_logging_composes() -> None:
    schema.register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("serve", overrides=["+hw=cpu", "hydra/hydra_logging=dspark"],
                      return_hydra_config=True)
    assert cfg.hydra.hydra_logging.formatters.simple.format == "dspark: %(message)s"


def defaults_of(path: Path) -> list[Path]:
    """The config files a file's defaults list includes by path (not `override` entries)."""
    found = []
    for entry in plain(path).get("defaults", []):
        if isinstance(entry, str) and entry != "_self_":
            base = CONF if entry.startswith("/") else path.parent
            found.append(base / f"{entry.lstrip('/')}.yaml")
    return found


def base_chain(path: Path) -> list[Path]:
    chain = []
    for base in defaults_of(path):
        chain += [*base_chain(base), base]
    return chain


def test_every_yaml_file_under_conf_is_composed_by_these_tests() -> None:
    """A new file under conf/ must be a primary, an option of a group composed above, or a
    base some option lists: nothing is left that no test composes."""
    composed_groups = {*LAUNCH_GROUPS, "hw", "bench", "logs", "deploy", "image",
                       "hydra/hydra_logging"}
    covered = {CONF / f"{p}.yaml" for p in PRIMARIES} | {CONF / "launch.yaml"}
    covered |= {CONF / "bases" / "smoke.yaml"}  # smoke's and validate's: composed above
    covered |= {p for g in composed_groups for p in (CONF / g).glob("*.yaml")}
    for group in ("hw", "model"):
        for option in (CONF / group).glob("*.yaml"):
            covered |= set(base_chain(option))
    everything = set(CONF.rglob("*.yaml"))
    assert everything - covered == set(), "no test composes these; unused bases?"
    assert all(p.is_file() for p in covered)
    # launch.yaml's groups are the ones composed above (logs: vllm among them).
    assert {next(iter(e)) for e in plain(CONF / "launch.yaml").defaults} == {
        *LAUNCH_GROUPS, "logs", "deploy"}


# --- bases: shared, never selectable --------------------------------------------------------


def test_the_groups_options_are_exactly_the_profiles_and_no_base() -> None:
    schema.register()
    with initialize_config_dir(str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        hw_options, model_options = loader.get_group_options("hw"), loader.get_group_options(
            "model")
    base_names = {p.stem for p in BASES.rglob("*.yaml")}
    assert sorted(hw_options) == options("hw") == sorted(profile_patterns())
    assert sorted(model_options) == options("model")
    assert not base_names & {*hw_options, *model_options}
    assert not list((CONF / "hw").glob("*/*.yaml")) and not list((CONF / "model").glob("*/*"))


@pytest.mark.parametrize("group", ["hw", "model"])
def test_every_option_names_itself_in_its_own_file(group: str) -> None:
    """A base has no name: dropped into a group, it fails here. hw options also keep platform
    and detect in their own file, because detection reads them without composing."""
    for option in options(group):
        own = plain(CONF / group / f"{option}.yaml")
        node = own.hw if group == "hw" else own
        assert node.get("name") == option, f"{group}/{option}.yaml does not name itself"
        if group == "hw":
            assert node.get("platform"), f"hw/{option}.yaml: platform must be in the file"
            if node.platform != "cpu":
                assert node.get("detect"), f"hw/{option}.yaml: detect must be in the file"
    for base in BASES.rglob("*.yaml"):
        node = plain(base)
        assert "name" not in node.get("hw", {}) and "name" not in node, base


@pytest.mark.parametrize("base", sorted(p.stem for p in BASES.rglob("*.yaml")))
def test_choosing_a_base_as_a_profile_is_refused(base: str) -> None:
    for overrides in ([f"+hw={base}"], ["+hw=cpu", f"model={base}"],
                      [f"+hw=bases/hw/{base}"], ["+hw=cpu", f"model=bases/model/{base}"]):
        with pytest.raises(HydraException, match="Could not find"):
            compose_config(overrides)


def test_serve_help_lists_the_profiles_and_no_base() -> None:
    done = run_dspark("serve", "+hw=cpu", "--help")
    assert done.returncode == 0, done.stderr
    listed = {m.group(1): re.findall(r"^    (\w+)  ", m.group(2), re.MULTILINE)
              for m in re.finditer(r"^  \+?(hw|model)=NAME.*:\n((?:    .*\n)+)", done.stdout,
                                   re.MULTILINE)}
    assert listed == {"hw": options("hw"), "model": options("model")}
    assert "bases" not in done.stdout


@pytest.mark.parametrize("option", [*(CONF / "hw").glob("*.yaml"), *(CONF / "model").glob(
    "*.yaml")], ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_an_option_restates_nothing_its_bases_set(option: Path) -> None:
    def keys(node: object, prefix: str = "") -> set[str]:
        if not isinstance(node, dict):
            return {prefix}
        return {k for key, v in node.items() if key != "defaults"
                for k in keys(v, f"{prefix}.{key}" if prefix else str(key))}

    own = keys(OmegaConf.to_container(plain(option)))
    inherited = set().union(*(keys(OmegaConf.to_container(plain(b)))
                              for b in base_chain(option)))
    if option.parent.name == "model":  # `# @package model`: the base's keys sit under model
        own = {f"model.{k}" for k in own}
        inherited = {f"model.{k}" for k in inherited}
    assert own & inherited == set(), f"{option.name} repeats its base"


# --- hardware: TP from the GPU count; MI350X and MI355X are one deployment -------------------


@pytest.mark.parametrize("profile", gpu_profiles())
def test_gpu_profile_tp_is_its_gpu_count_by_interpolation(profile: str) -> None:
    cfg = compose_config([f"+hw={profile}"])
    raw = OmegaConf.to_container(cfg.hw.args, resolve=False)
    assert raw["tensor_parallel_size"] == "${hw.num_gpus}"
    assert cfg.hw.args.tensor_parallel_size == cfg.hw.num_gpus == 8
    argv = build_plan(compose_typed([f"+hw={profile}", "hw.num_gpus=4"])).argv
    i = argv.index("--tensor-parallel-size")
    assert argv[i + 1] == "4"


def test_the_cli_renders_tp_from_an_overridden_gpu_count() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.num_gpus=4", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "  --tensor-parallel-size 4 \\\n" in done.stdout


@pytest.mark.parametrize("overrides", list(VARIANTS.values()), ids=list(VARIANTS))
def test_mi350x_and_mi355x_render_the_same_deployment(overrides: list[str]) -> None:
    mi350x = compose_config(["+hw=mi350x", *overrides])
    mi355x = compose_config(["+hw=mi355x", *overrides])
    assert (shell_script(build_plan(to_typed(mi350x)))
            == shell_script(build_plan(to_typed(mi355x))))
    a, b = (OmegaConf.to_container(c.hw, resolve=True) for c in (mi350x, mi355x))
    assert {k: v for k, v in a.items() if k not in ("name", "detect")} == {
        k: v for k, v in b.items() if k not in ("name", "detect")}


# --- a DeepSeek-V4 checkpoint anywhere keeps the family's facts ------------------------------

FAMILY_FLAGS = {"--max-model-len": "32768", "--kv-cache-dtype": "fp8",
                "--trust-remote-code": True, "--tokenizer-mode": "deepseek_v4",
                "--reasoning-parser": "deepseek_v4"}


def test_deepseek_v4_local_renders_the_familys_flags() -> None:
    from tests.test_serve_dry_run import parse_script

    done = run_dspark("serve", "+hw=mi350x", "model=deepseek_v4_local",
                      f"model.path={CHECKPOINT_DIR}", "--dry-run")
    assert done.returncode == 0, done.stderr
    env, positional, flags = parse_script(done.stdout)
    assert positional == ["vllm", "serve", CHECKPOINT_DIR]
    assert {f: flags.get(f) for f in FAMILY_FLAGS} == FAMILY_FLAGS
    assert "--served-model-name" not in flags  # served under its path, as vLLM does
    # Everything else is the pinned profile's deployment: same env, same flags.
    pinned_env, _, pinned_flags = parse_script(
        run_dspark("serve", "+hw=mi350x", "--dry-run").stdout)
    pinned_flags.pop("--served-model-name")
    assert (env, flags) == (pinned_env, pinned_flags)


def test_deepseek_v4_local_is_the_family_without_the_pins() -> None:
    local = compose_config(["+hw=mi350x", "model=deepseek_v4_local",
                            f"model.path={CHECKPOINT_DIR}"]).model
    pinned = compose_config(["+hw=mi350x"]).model
    assert local.family == pinned.family == "deepseek_v4"
    assert all(v is None for v in local.expected.values())
    assert pinned.expected.num_shards == 48 and pinned.args.served_model_name == "dsv4flash"
    assert local.args.served_model_name is None
    assert {**local.args, "served_model_name": None} == {**pinned.args,
                                                          "served_model_name": None}


def test_deepseek_v4_local_needs_a_path() -> None:
    done = run_dspark("serve", "+hw=mi350x", "model=deepseek_v4_local", "--dry-run")
    assert done.returncode == 2 and "`model.path` has no value" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "unexpected" not in done.stderr


@pytest.mark.parametrize(("model", "fails"), [("deepseek_v4_local", True), ("local", False)])
def test_the_sparse_mla_rule_applies_to_the_family_option(model: str, fails: bool) -> None:
    done = run_dspark("serve", "+hw=mi350x", f"model={model}", f"model.path={CHECKPOINT_DIR}",
                      "model.args.kv_cache_dtype=auto", "--dry-run")
    assert ("preflight sparse-mla-fp8-kv FAILED" in done.stderr) is fails, done.stderr
    assert done.returncode == (1 if fails else 0), done.stderr


def write_goldens() -> None:
    vllm_options.table()  # read from the real cache before DSPARK_CACHE_DIR moves
    os.environ["DSPARK_CACHE_DIR"] = GOLDEN_CACHE_DIR
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for profile in HW_PROFILES:
        renderings = golden_renderings(profile)
        (GOLDEN / f"{profile}.sh").write_text(renderings["default"]["script"])
        (GOLDEN / f"{profile}.json").write_text(json.dumps(renderings, indent=2) + "\n")


if __name__ == "__main__" and sys.argv[1:] == ["--write-goldens"]:
    write_goldens()
