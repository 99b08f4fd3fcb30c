"""`dspark smoke --dry-run`: the launch a smoke boots is the one `serve --dry-run` prints for
the same config (one launch), with the same preflight; nothing starts, nothing is written."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import run_dspark


def test_the_smoke_boots_what_serve_prints(tmp_path: Path) -> None:
    smoke = run_dspark("smoke", "+hw=mi350x", "--dry-run", cwd=tmp_path)
    serve = run_dspark("serve", "+hw=mi350x", "--dry-run", cwd=tmp_path)
    assert smoke.returncode == serve.returncode == 0, smoke.stderr
    first, rest = smoke.stdout.split("\n", 1)
    assert first.startswith("# dspark smoke boots this launch") and rest == serve.stdout
    assert smoke.stderr == serve.stderr  # the same preflight
    assert list(tmp_path.iterdir()) == []


def test_an_attached_smoke_boots_nothing(tmp_path: Path) -> None:
    done = run_dspark("smoke", "+hw=cpu", "server.url=http://127.0.0.1:9", "--dry-run",
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "# dspark smoke: attaches to http://127.0.0.1:9; boots nothing\n"
