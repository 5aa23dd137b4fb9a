"""Presenting a run: a human summary with a verdict (rich), and the JSON report."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mere.verify.checker import ANOMALIES, DESCRIPTIONS, forbidden
from mere.verify.runner import RunResult, rate

#: Examples shown per anomaly class in the human summary.
SHOWN_EXAMPLES = 3


def write_json(result: RunResult, path: str | Path) -> None:
    """Write the full JSON report: configuration, faults, counts, anomalies, and the history."""
    text = json.dumps(result.to_json(history=True), indent=1)
    Path(path).write_text(text + "\n", encoding="utf-8")


def summary(result: RunResult) -> RenderableType:
    """The human summary: what ran, what fired, what was found, and the verdict."""
    check = result.result
    config = result.config
    outcomes = check.outcomes
    run = Table.grid(padding=(0, 2))
    run.add_column(style="bold")
    run.add_column()
    workload = config.make_workload()
    keys = f"{config.tables} tables x {config.keys} keys"
    if workload.generation_versions:
        keys += f", fresh keys every {workload.generation_versions} versions"
    run.add_row("workload", f"{config.workload} ({keys})")
    run.add_row("isolation", config.isolation)
    run.add_row("clients", str(config.processes))
    if config.unsafe_disable_conflict_detection:
        run.add_row(
            Text("BROKEN BUILD", style="bold red"),
            Text(
                "conflict detection was disabled (MERE_UNSAFE_DISABLE_CONFLICT_DETECTION=1): "
                "this run tests the checker, not mere",
                style="bold red",
            ),
        )
    total = len(result.history.txns)
    run.add_row(
        "transactions",
        f"{total} in {result.elapsed:.1f} s ({rate(total, result.elapsed)}): "
        f"{outcomes.get('ok', 0)} ok, {outcomes.get('fail', 0)} failed, "
        f"{outcomes.get('info', 0)} indeterminate "
        f"({outcomes.get('info-committed', 0)} committed, "
        f"{outcomes.get('info-aborted', 0)} aborted per the log)",
    )
    log = f"{check.latest_version + 1} versions"
    if config.inline_limit:
        log += (
            f"; data files up to {config.inline_limit} bytes inlined, "
            f"{len(result.rearranged_versions)} flushes of inlined files"
        )
    run.add_row("log", log)
    graph = check.graph
    run.add_row(
        "dependencies",
        f"{graph['transactions']} transactions, {graph['ww']} ww, {graph['wr']} wr, "
        f"{graph['rw']} rw edges",
    )
    fired = ", ".join(f"{k} x{v}" for k, v in result.faults.items() if v) or "none"
    run.add_row("faults fired", fired if config.faults else "none requested")
    for note in result.notes:
        run.add_row("note", Text(note, style="yellow"))
    if check.errors:
        run.add_row("errors", ", ".join(f"{k} x{v}" for k, v in sorted(check.errors.items())))
    banned = forbidden(config.isolation)
    found = Table(title="anomalies", expand=False)
    found.add_column("class")
    found.add_column("count", justify="right")
    found.add_column(f"forbidden at {config.isolation}")
    found.add_column("meaning")
    for kind in ANOMALIES:
        count = check.counts.get(kind, 0)
        style = "bold red" if count and kind in banned else ("yellow" if count else "dim")
        found.add_row(
            Text(kind, style=style),
            Text(str(count), style=style),
            "yes" if kind in banned else "no",
            Text(DESCRIPTIONS[kind], style="dim"),
        )
    parts: list[RenderableType] = [run, found]
    for kind, instances in check.anomalies.items():
        for anomaly in instances[:SHOWN_EXAMPLES]:
            parts.append(Text(f"{kind}: {anomaly.explanation}", style="yellow"))
    for crash in result.client_crashes:
        parts.append(Text(crash, style="bold red"))
    if result.valid:
        verdict = Text(
            f"VALID: no anomaly forbidden at {config.isolation}; the history is consistent "
            f"with {check.strongest}",
            style="bold green",
        )
    else:
        what = ", ".join(check.forbidden_found) or "client processes crashed"
        verdict = Text(
            f"INVALID at {config.isolation}: {what}; the strongest level the history is "
            f"consistent with is {check.strongest}",
            style="bold red",
        )
    parts.append(verdict)
    return Panel(Group(*parts), title=f"mere verify {config.uri}", expand=False)


def print_summary(result: RunResult, console: Console | None = None) -> None:
    (console or Console()).print(summary(result))
