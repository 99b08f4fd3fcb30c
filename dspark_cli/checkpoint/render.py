"""The people's view of a CheckpointResult: a rich summary of each check and a table of every
problem with its hint, on stdout."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from dspark_cli.checkpoint.result import Check, CheckpointResult


def _detail(result: CheckpointResult, check: Check) -> str:
    if check is Check.structure:
        return (f"{result.num_shards} shards, {result.num_tensors:,} tensors, "
                f"{result.total_bytes:,} bytes")
    if check is Check.pins:
        return "model.expected.* compared with the files"
    if check is Check.head and result.draft_kind == "qwen3_dspark":
        return ("Qwen3 DSpark draft: keys, Markov head and every tensor's shape verified"
                if result.head_verified else "Qwen3 DSpark draft NOT verified")
    if check is Check.head:
        return ("DSpark confidence and Markov heads verified" if result.head_verified
                else "DSpark heads NOT verified")
    c = result.content
    if c is None:
        return ""
    parts = [f"{c.hashed_files} files, {c.hashed_bytes:,} bytes in {c.seconds:.1f} s"]
    if c.against_blob_name:
        parts.append(f"{c.against_blob_name} blobs vs their names")
    if c.against_manifest:
        parts.append(f"{c.against_manifest} vs the manifest")
    return "; ".join(parts)


def render(result: CheckpointResult, console: Console | None = None) -> None:
    if console is None:
        from dspark_cli.console import output

        console = output()
    summary = Table(title=f"dspark verify-checkpoint {result.path}", title_justify="left")
    summary.add_column("check")
    summary.add_column("result")
    summary.add_column("detail")
    for check in result.checks:
        bad = result.problems_of(check)
        shown = f"[red]FAILED ({result.count_of(bad):,})[/red]" if bad else "[green]passed[/green]"
        summary.add_row(check.value, shown, _detail(result, check))
    if not result.dspark:
        summary.add_row("head", "not checked", "config.json declares no DSpark draft")
    if Check.content not in result.checks:
        summary.add_row("content", "not hashed", "--hash, --manifest FILE or --write-manifest")
    console.print(summary)
    if result.problems:
        problems = Table(title="problems", title_justify="left", show_lines=True)
        for column in ("code", "subject", "expected", "actual", "what to do"):
            problems.add_column(column, overflow="fold")
        for p in result.problems:
            problems.add_row(p.code, p.subject, p.expected, p.actual, p.hint)
        console.print(problems)
        console.print(f"[red]FAILED[/red]: {result.count_of(result.problems):,} problem(s).")
    else:
        console.print("[green]OK[/green]: every check passed.")
