"""A vLLM helper's quick exit (dspark_cli/vllm/quick_exit.py): the exit status asked for, what
was written but still buffered, and the atexit handlers (vLLM's cleanups, logging's) all kept;
only the interpreter's teardown is skipped. A real interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

HELPER = """
import atexit, sys
from pathlib import Path
from dspark_cli.vllm.quick_exit import quick_exit
atexit.register(lambda: Path(sys.argv[1]).write_text("cleaned up"))
class Finalized:
    def __del__(self):
        print("torn down", file=sys.stderr)
kept = Finalized()
sys.stdout.write('{"ok": true}')  # no newline: still in the buffer
sys.stderr.write("last words")
quick_exit(3)
"""


def test_the_answer_status_and_atexit_handlers_survive_the_skipped_teardown(
        tmp_path: Path) -> None:
    marker = tmp_path / "atexit"
    done = subprocess.run([sys.executable, "-c", HELPER, str(marker)], capture_output=True,
                          text=True, cwd=REPO, timeout=60)
    assert done.returncode == 3
    assert done.stdout == '{"ok": true}'
    assert done.stderr == "last words"  # the teardown (a module global's __del__) never ran
    assert marker.read_text() == "cleaned up"
