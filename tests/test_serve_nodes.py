"""`dspark serve hw.nodes=2 --dry-run`: every node's env and command, shell-ready (each block run
by bash gives exactly that node's argv, the head's address from DSPARK_HEAD_ADDR), `--json`
with the layout, and the seed's single-node command unchanged. vLLM's parser on every node's
command is test_smoke_nodes' (the same `node_verdicts`, with the model there)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dspark_cli.launch.plan import build_plan
from tests.conftest import compose_typed, run_dspark

SEED = Path(__file__).parent / "data" / "golden" / "mi350x.sh"
# Stands in for `vllm` when a node's block is run: prints the argv it got, as JSON.
ECHO_VLLM = (f'vllm() {{ {sys.executable} -c "import json, sys; '
             'print(json.dumps(sys.argv[1:]))" "$@"; }\n')


def blocks(stdout: str) -> list[str]:
    parts = stdout.split("\n\n# node ")
    return [parts[0] + "\n", *("# node " + p for p in parts[1:])]


def run_block(block: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A node's block run by bash, `vllm` printing its argv; also the env it exported."""
    script = ECHO_VLLM + block + 'env | grep -E "^(VLLM|AITER|DSPARK)_" | sort\n'
    return subprocess.run(["bash", "-euc", script], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", **env}, timeout=30)


def test_two_nodes_on_mi350x_print_each_nodes_env_and_command_shell_ready() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "--dry-run")
    assert done.returncode == 0, done.stderr
    cfg = compose_typed(["+hw=mi350x", "hw.nodes=2"])
    layout = build_plan(cfg).layout
    found = blocks(done.stdout)
    assert [b.splitlines()[0] for b in found] == [
        "# node 0 of 2 (the head, dp): serves the API on port 8000",
        "# node 1 of 2 (dp): headless"]
    for block, node in zip(found, layout.launches, strict=True):
        ran = run_block(block, {"DSPARK_HEAD_ADDR": "10.20.30.40"})
        assert ran.returncode == 0, ran.stderr
        argv_line, *env_lines = ran.stdout.splitlines()
        assert tuple(json.loads(argv_line)) == node.resolved("10.20.30.40")[1:]
        exported = dict(line.split("=", 1) for line in env_lines)
        assert exported.pop("DSPARK_HEAD_ADDR") == "10.20.30.40"
        assert exported == dict(node.env)
    head_argv = json.loads(run_block(found[0], {"DSPARK_HEAD_ADDR": "h"}).stdout.splitlines()[0])
    assert head_argv[head_argv.index("--data-parallel-size") + 1] == "2"
    assert "--headless" in json.loads(run_block(found[1], {"DSPARK_HEAD_ADDR": "h"})
                                      .stdout.splitlines()[0])


def test_a_node_block_refuses_to_run_without_the_head_address() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "--dry-run")
    ran = run_block(blocks(done.stdout)[1], {})
    assert ran.returncode != 0
    assert "set DSPARK_HEAD_ADDR to the address of the head node" in ran.stderr
    assert ran.stdout == "", "nothing ran"


def test_a_configured_head_address_is_written_in_and_needs_no_variable() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "hw.head_address=10.0.0.1",
                      "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "DSPARK_HEAD_ADDR" not in done.stdout
    assert done.stdout.count("--data-parallel-address 10.0.0.1") == 2


def test_json_has_the_layout_and_its_preflight() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "+hw.env.HF_TOKEN=hf_secret_value",
                      "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["layout"]["mode"] == "dp" and doc["layout"]["nodes"] == 2
    assert [n["serves_api"] for n in doc["layout"]["launches"]] == [True, False]
    assert all(n["env"]["HF_TOKEN"] == "<redacted>" for n in doc["layout"]["launches"])
    assert "hf_secret_value" not in done.stdout + done.stderr
    rules = {f["rule"]: f["status"] for f in doc["preflight"]}
    assert rules["layout-sizes-multiply"] == rules["layout-gpus-per-node"] == "passed"


def test_secrets_never_print_on_any_node() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=2", "+hw.env.HF_TOKEN=hf_secret_value",
                      "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "hf_secret_value" not in done.stdout + done.stderr
    assert done.stdout.count('export HF_TOKEN="${HF_TOKEN:?') == 2


def test_one_node_prints_the_seeds_command_byte_for_byte() -> None:
    done = run_dspark("serve", "+hw=mi350x", "hw.nodes=1", "--dry-run", "--json")
    assert "layout" not in json.loads(done.stdout)
    done = run_dspark("serve", "+hw=mi350x", "--dry-run")
    assert done.returncode == 0 and done.stdout == SEED.read_text()
