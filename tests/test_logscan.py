"""logscan: pattern compilation, one-shot scans, and the live watcher on a real growing file."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dspark_cli.server.logscan import LogWatcher, compile_patterns, scan_lines
from tests.conftest import wait_until

FATAL = compile_patterns(
    {
        "rocm_memory_fault": r"Memory access fault by GPU",
        "traceback": r"Traceback \(most recent call last\)",
    }
)
WATCH = compile_patterns(
    {
        "startup_complete": r"Application startup complete",
        "draft_loaded": r"DSpark draft model loaded: (?P<params>\d+) params",
    }
)


def test_bad_regex_names_the_pattern() -> None:
    with pytest.raises(ValueError, match="'broken'"):
        compile_patterns({"ok": "a+", "broken": "(unclosed"})


def test_scan_keeps_context_and_first_watch_match() -> None:
    lines = [f"line {i}" for i in range(20)]
    lines[12] = "(EngineCore pid=1) Traceback (most recent call last):"
    lines[3] = "DSpark draft model loaded: 97 params"
    lines[5] = "DSpark draft model loaded: 96 params"
    snap = scan_lines(lines, FATAL, WATCH, context=2)
    assert snap.lines_read == 20
    assert [e.pattern for e in snap.fatal] == ["traceback"]
    event = snap.fatal[0]
    assert event.line_no == 13
    assert event.context == ("line 10", "line 11", lines[12], "line 13", "line 14")
    assert snap.found["draft_loaded"].groups == {"params": "97"}
    assert snap.found["draft_loaded"].line_no == 4
    assert "startup_complete" not in snap.found


def test_one_event_per_line_and_events_are_capped() -> None:
    line = "Memory access fault by GPU node-2; Traceback (most recent call last):"
    snap = scan_lines([line] * 5, FATAL, max_events=3)
    assert [e.pattern for e in snap.fatal] == ["rocm_memory_fault"] * 3


def test_clean_log_has_no_events() -> None:
    snap = scan_lines(["INFO:     Application startup complete."], FATAL, WATCH)
    assert snap.fatal == ()
    assert snap.found["startup_complete"].line_no == 1


def test_watcher_follows_a_file_created_later(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with LogWatcher(log, FATAL, WATCH, context=3) as watcher:
        assert not watcher.wait_fatal(0.1)
        with log.open("w") as f:
            f.write("INFO: booting\nINFO:     Application startup complete.\n")
            f.flush()
            wait_until(lambda: "startup_complete" in watcher.snapshot().found, 5,
                       "the watcher's thread to read the startup line")
            assert not watcher.fired.is_set()
            f.write("Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x2.\n")
            f.flush()
            assert watcher.wait_fatal(5)
            f.write("after 1\nafter 2\n")
    snap = watcher.snapshot()
    assert [e.pattern for e in snap.fatal] == ["rocm_memory_fault"]
    assert snap.fatal[0].context[:2] == ("INFO: booting", "INFO:     Application startup complete.")
    assert snap.fatal[0].context[-2:] == ("after 1", "after 2")


def test_watcher_joins_split_writes_and_flushes_last_line(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    watcher = LogWatcher(log, FATAL, WATCH).start()
    with log.open("ab") as f:
        f.write(b"Memory access fa")
        f.flush()
        # catch_up() returns once the half line has been read (by it or by the watcher's
        # thread): a half line is no line yet, so it neither counts nor matches...
        assert watcher.catch_up().lines_read == 0
        assert not watcher.fired.is_set()
        # ...and is not dropped: the rest of it completes it.
        f.write(b"ult by GPU node-0\r\nDSpark draft model loaded: 97 params")
    snap = watcher.stop()
    assert watcher.fired.is_set()
    assert snap.fatal[0].line == "Memory access fault by GPU node-0"
    assert snap.found["draft_loaded"].groups == {"params": "97"}


def test_fired_wakes_a_waiting_thread(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    woke = threading.Event()
    with LogWatcher(log, FATAL) as watcher:
        waiter = threading.Thread(target=lambda: watcher.wait_fatal(10) and woke.set())
        waiter.start()
        log.write_text("Traceback (most recent call last):\n")
        waiter.join(10)
    assert woke.is_set()


def test_undecodable_bytes_do_not_stop_the_watcher(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_bytes(b"\xff\xfe garbage\nTraceback (most recent call last):\n")
    with LogWatcher(log, FATAL) as watcher:
        assert watcher.wait_fatal(5)
    assert watcher.snapshot().fatal[0].context[0].endswith("garbage")


def test_upto_keeps_the_verdict_moment_but_later_context() -> None:
    lines = ["Application startup complete", "Memory access fault by GPU node-1", "after",
             "Traceback (most recent call last):"]
    final = scan_lines(lines, FATAL, WATCH, context=2)
    at_verdict = final.upto(3)  # the traceback came during teardown
    assert [e.pattern for e in at_verdict.fatal] == ["rocm_memory_fault"]
    assert at_verdict.fatal[0].context[-2:] == ("after", lines[3])
    assert at_verdict.lines_read == 3 and "startup_complete" in at_verdict.found
    assert final.upto(0).found == {}
