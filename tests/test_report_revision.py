"""The report's Source Revision and the focused stage's lint results, held to real records:
a real git repository made here with real commits, the focused stage run by `validate`'s own
code in it (real pytest, real `ruff check` / `ruff format --check` on the changed files), and
the report built from what it wrote. Edited records are refused or neutralized."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dspark_cli.config import validate as schema
from dspark_cli.paths import LINT_JSON, SOURCE_JSON
from dspark_cli.report.markdown import write_report
from dspark_cli.validate import stages
from tests.conftest import compose_typed, run_dspark

# ruff comes with the dev extra (not in the lowest-versions lane, whose tests needing it skip).
RUFF = next((str(p) for p in (Path(sys.executable).parent / "ruff", shutil.which("ruff"))
             if p and Path(p).is_file()), None)
needs_ruff = pytest.mark.skipif(RUFF is None, reason="no ruff here (the dev extra)")
LINT = [f"{RUFF} check --no-cache --isolated {{changed}}",
        f"{RUFF} format --check --no-cache --isolated {{changed}}"]
TEST = "def test_one():\n    assert 1 + 1 == 2\n"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


def git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def repo(tmp_path: Path, runtime: str = "VALUE = 1\n") -> Path:
    """main with one commit; branch `feature` on top of it: one runtime file changed, one
    test file added, one line of the old file deleted."""
    src = tmp_path / "vllm"
    (src / "vllm").mkdir(parents=True)
    (src / "vllm" / "old.py").write_text("A = 1\nB = 2\n")
    (src / ".gitignore").write_text("__pycache__/\n")  # as vLLM's own: the tests' bytecode
    git(src, "init", "-q", "-b", "main")
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "base")
    git(src, "checkout", "-q", "-b", "feature")
    (src / "vllm" / "old.py").write_text("A = 1\n")
    (src / "vllm" / "adaptive.py").write_text(runtime)
    (src / "tests").mkdir()
    (src / "tests" / "test_adaptive.py").write_text(TEST)
    git(src, "add", ".")
    git(src, "commit", "-q", "-m", "feature")
    return src


def run_stage(tmp_path: Path, src: Path, *overrides: str) -> tuple[Path, stages.StageResult]:
    schema.register()
    cfg = compose_typed(["+hw=cpu", f"validate.tests.source={src}",
                          "validate.tests.node_ids=[tests/test_adaptive.py]",
                          "validate.tests.upstream=main", *overrides], config="validate")
    run = tmp_path / "run"
    return run, stages.tests(cfg, run / "tests")


def lint_overrides() -> str:
    return "validate.tests.lint=[" + ",".join(f"'{c}'" for c in LINT) + "]"


@needs_ruff
def test_the_source_revision_is_what_git_says(tmp_path: Path) -> None:
    src = repo(tmp_path)
    run, result = run_stage(tmp_path, src, lint_overrides())
    assert result.status.value == "passed", result.detail
    rec = json.loads((run / "tests" / SOURCE_JSON).read_text())
    head, base = git(src, "rev-parse", "HEAD"), git(src, "rev-parse", "main")
    assert (rec["branch"], rec["head"], rec["base"]) == ("feature", head, base)
    shortstat = git(src, "diff", "--shortstat", base, "HEAD")  # "3 files changed, 3 ins..."
    assert shortstat == (f"3 files changed, {rec['insertions']} insertions(+), "
                         f"{rec['deletions']} deletion(-)")
    report, text = write_report([run], tmp_path / "out")
    section = text.split("## Source Revision")[1].split("\n## ")[0]
    assert f"- Branch: `feature`\n- Head: `{head}`" in section
    assert f"- Base (merge-base with `main`): `{base}`" in section
    assert "- Changed files: 2 runtime files and 1 test file" in section
    assert f"- Total diff: {rec['insertions']} insertions, 1 deletions" in section
    assert "- Work tree: clean" in section
    assert "| `tests/test_adaptive.py` | test | 2 | 0 |" in section
    focused = text.split("## Focused Validation")[1].split("\n## ")[0]
    assert "Changed-file lint and format checks passed:" in focused
    lint = json.loads((run / "tests" / LINT_JSON).read_text())["results"]
    assert [r["exit_code"] for r in lint] == [0, 0] and all(r["files"] == 3 for r in lint)
    for r in lint:  # the command as run, the changed files in place of {changed}
        assert "vllm/adaptive.py" in r["command"] and f"| `{r['command']}` | passed | 0 |" \
            in focused
    assert report.revision is not None and report.revision.head == head


@needs_ruff
def test_a_lint_failure_fails_the_focused_stage_and_the_report_says_so(tmp_path: Path) -> None:
    src = repo(tmp_path, runtime="import os\nVALUE   =  1\n")  # unused import, unformatted
    run, result = run_stage(tmp_path, src, lint_overrides())
    assert result.status.value == "failed" and "lint failed" in result.detail
    lint = json.loads((run / "tests" / LINT_JSON).read_text())["results"]
    assert [r["exit_code"] for r in lint] == [1, 1]
    assert "F401" in (run / "tests" / "lint-1.log").read_text()
    _, text = write_report([run], tmp_path / "out")
    focused = text.split("## Focused Validation")[1].split("\n## ")[0]
    assert "Result: **failed**" in focused and "lint and format checks failed:" in focused
    assert focused.count("| failed | 1 |") == 2
    assert "1 file would be reformatted" in focused  # ruff format's own last line


def test_a_directory_that_is_no_git_tree_is_said_so(tmp_path: Path) -> None:
    src = tmp_path / "plain"
    (src / "tests").mkdir(parents=True)
    (src / "tests" / "test_adaptive.py").write_text(TEST)
    run, result = run_stage(tmp_path, src, lint_overrides())
    assert result.status.value == "passed", result.detail  # nothing changed: lint skipped
    assert json.loads((run / "tests" / SOURCE_JSON).read_text())["git"] is False
    done = run_dspark("report", str(run), "--out", str(tmp_path / "out"))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    section = done.stdout.split("## Source Revision")[1].split("\n## ")[0]
    assert f"`{src}` is not a git work tree (not a git work tree (git rev-parse: fatal: " \
        "not a git repository" in section
    assert "no branch, head or base to state" in section
    assert done.stdout.count("| skipped | - | no changed Python files to check") == 2


def test_no_upstream_ref_gives_head_without_base(tmp_path: Path) -> None:
    src = repo(tmp_path)
    run, _ = run_stage(tmp_path, src, "validate.tests.upstream=origin/nowhere")
    _, text = write_report([run], tmp_path / "out")
    section = text.split("## Source Revision")[1].split("\n## ")[0]
    assert f"- Head: `{git(src, 'rev-parse', 'HEAD')}`" in section
    assert "Base (merge-base with `origin/nowhere`): `none`" in section
    assert "- Changed files: unknown" in section and "Total diff" not in section
    assert "no merge-base with origin/nowhere" in section


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The focused stage's records, made once for the module (a real pytest and two ruff runs)."""
    tmp = tmp_path_factory.mktemp("recorded")
    run, _ = run_stage(tmp, repo(tmp), lint_overrides())
    return run


@pytest.fixture
def recorded(recorded_once: Path, tmp_path: Path) -> Path:
    """A copy of the records of this test's own, to edit."""
    return Path(shutil.copytree(recorded_once, tmp_path / "run"))


def _edit(run: Path, name: str, change: dict[str, object]) -> None:
    path = run / "tests" / name
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


@pytest.mark.parametrize("change", [{"head": "[x](http://evil.example)"}, {"git": "yes"},
                                    {"files": [{"path": "a.py", "kind": "<b>evil</b>"}]},
                                    {"insertions": -3}])
def test_an_edited_revision_record_is_refused(recorded: Path, tmp_path: Path,
                                              change: dict[str, object]) -> None:
    _edit(recorded, SOURCE_JSON, change)
    done = run_dspark("report", str(recorded), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "source.json" in done.stderr
    assert not (tmp_path / "out").exists()


def test_hostile_strings_are_neutralized(recorded: Path, tmp_path: Path) -> None:
    _edit(recorded, SOURCE_JSON, {
        "branch": "x`](javascript:alert(1))\n## Injected",
        "upstream": "https://user:hunter2pass@git.example.com/vllm.git",
        "files": [{"path": "../../../etc/passwd | <img src=x>", "kind": "other",
                   "insertions": 1, "deletions": 0}]})
    command = "ruff --api-key=sekrit-value x HF_TOKEN=sekrit-value"
    _edit(recorded, LINT_JSON, {"results": [{"command": command, "status": "passed", "exit_code": 0,
                                             "summary": "**bold** <script>"}]})
    done = run_dspark("report", str(recorded), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "hunter2pass" not in out and "sekrit-value" not in out
    assert "\n## Injected" not in out and "<script>" not in out
    assert "- Branch: ``x`](javascript:alert(1)) ## Injected``\n" in out  # one code span, one line
    assert r"\*\*bold\*\* &lt;script&gt;" in out
    # a path is only named, in a code span (HTML inert there) whose pipe cannot split the row
    assert r"| `../../../etc/passwd \| <img src=x>` | other | 1 | 0 |" in out
