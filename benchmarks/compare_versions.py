"""Run one benchmark script against two source trees, alternately, and compare them.

The benchmark scripts compare mere with a baseline in one run; this driver
compares two versions of mere (say, before and after a change) with the
same script, on the same machine, in one session. Each round runs the script
once per tree, and the order alternates from round to round (before, after;
after, before; ...) so that a machine getting busier or quieter does not
favour one side. Each run is a fresh interpreter with ``PYTHONPATH`` set to
the tree's ``src/`` (so it imports that tree's ``mere``; this is checked
before the first round) and the script's JSON output option pointed at a
file of the driver's. Every numeric value in that JSON becomes a metric; the
table gives each metric's median over the rounds for both trees and the
ratio second / first (>1: the second tree's value is larger -- slower, for
a time). The load average at the start and end of every run, its wall time
and its CPU time (user + system of the whole process tree) are reported too:
on a shared machine, read the ratios next to them.

By default both trees run the *same* script file (the one given, with the
``_common.py`` next to it), so only the package differs. ``--script-from-tree``
runs each tree's own copy of the script instead.

Example: the transaction-core rebuild, with worktrees of the two commits::

    git worktree add /tmp/bench-before d9ce3e4
    git worktree add /tmp/bench-after e6b61dd
    .venv/bin/python benchmarks/compare_versions.py /tmp/bench-before /tmp/bench-after \\
        --rounds 3 --metric 'latency/mere append (1 row)/*' --metric 'commits_per_second' \\
        -- benchmarks/commit_latency.py --commits 1000

Metric names are the JSON paths joined by ``/``. A list of objects is keyed
by each item's ``group`` and ``name`` (or ``phase``, ``label``, ``series``),
else by its string fields, else by its index; lists of numbers are left out.
``--metric`` takes shell-style patterns (repeatable); without it every
metric but ``machine/*`` and ``parameters/*`` is shown. ``--list-metrics``
prints the names after the runs. A metric only one tree has (a phase a
change added, say) is shown with "-" for the other.

The script gets ``--output FILE`` appended; for a script whose JSON option
has another name, say ``--output-flag=--report``. A script must take a
fresh scratch location per run itself (the benchmark scripts wipe their
``--workdir``); for a command that refuses an existing target, such as
``mere verify``, wrap it in a small script that makes a temporary directory.
Per-run logs, each run's JSON and ``comparison.json`` go to ``--log-dir``
(default ``/tmp/compare-versions/<script>-<time>/``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

EXCLUDED_BY_DEFAULT = ("machine/*", "parameters/*", "benchmark")
_LABEL_KEYS = ("name", "phase", "label", "series")


def source_dir(tree: Path) -> Path:
    """The directory to put on ``PYTHONPATH``: ``TREE/src`` when it exists, else ``TREE``."""
    src = tree / "src"
    return src if src.is_dir() else tree


def tree_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    parts = [str(source_dir(tree))]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def check_import(python: str, tree: Path, package: str) -> str:
    """Where ``package`` is imported from under ``tree``'s environment; exits if not from it."""
    out = subprocess.run(
        [python, "-c", f"import {package}; print({package}.__file__)"],
        env=tree_env(tree),
        capture_output=True,
        text=True,
        cwd=tree,
    )
    where = out.stdout.strip()
    root = source_dir(tree).resolve()
    if out.returncode != 0 or not Path(where).resolve().is_relative_to(root):
        sys.exit(f"{package} does not import from {root} (got {where!r}; {out.stderr.strip()})")
    return where


def git_describe(tree: Path) -> str:
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%h %s"], cwd=tree, capture_output=True, text=True
        )
    except OSError:
        return ""
    return out.stdout.strip()[:80]


def _item_label(item: dict[str, Any], index: int) -> str:
    for key in _LABEL_KEYS:
        if isinstance(item.get(key), str):
            group = item.get("group")
            return f"{group}: {item[key]}" if isinstance(group, str) else item[key]
    strings = [v for v in item.values() if isinstance(v, str)]
    return " ".join(strings) if strings else str(index)


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Every numeric leaf of a JSON value, keyed by its path (see the module docstring)."""
    out: dict[str, float] = {}
    if isinstance(value, bool):
        return out
    if isinstance(value, int | float):
        out[prefix] = float(value)
    elif isinstance(value, dict):
        for key, sub in value.items():
            out.update(flatten(sub, f"{prefix}/{key}" if prefix else str(key)))
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for i, item in enumerate(value):
            label = _item_label(item, i)
            out.update(flatten(item, f"{prefix}/{label}" if prefix else label))
    return out


def select(names: list[str], patterns: list[str]) -> list[str]:
    if patterns:
        return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return [n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in EXCLUDED_BY_DEFAULT)]


def run_once(
    python: str,
    tree: Path,
    script: Path,
    script_args: list[str],
    output_flag: str,
    log_dir: Path,
    tag: str,
) -> dict[str, Any]:
    """One run of the script under ``tree``; its timings, load and metrics."""
    json_path = log_dir / f"{tag}.json"
    cmd = [python, str(script), *script_args]
    if output_flag:
        cmd += [output_flag, str(json_path)]
    load_start = os.getloadavg()
    started = datetime.now(UTC)
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log_dir / f"{tag}.log", "w") as log:
        proc = subprocess.run(cmd, env=tree_env(tree), stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_end = os.getloadavg()
    run: dict[str, Any] = {
        "tag": tag,
        "tree": str(tree),
        "command": cmd,
        "started_utc": started.isoformat(timespec="seconds"),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in load_end],
        "wall_s": wall,
        "cpu_s": (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime),
        "returncode": proc.returncode,
        "log": str(log_dir / f"{tag}.log"),
    }
    metrics = {"run/wall_s": wall, "run/cpu_s": run["cpu_s"]}
    if proc.returncode == 0 and output_flag and json_path.exists():
        metrics.update(flatten(json.loads(json_path.read_text())))
    run["metrics"] = metrics
    return run


def fmt(v: float) -> str:
    if v != v:
        return "-"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 10:
        return f"{v:.2f}"
    if a >= 1:
        return f"{v:.3f}"
    return f"{v:.4f}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s BEFORE AFTER [options] -- SCRIPT [SCRIPT ARGS...]",
    )
    parser.add_argument("before", type=Path, help="first source tree (its src/ is imported)")
    parser.add_argument("after", type=Path, help="second source tree")
    parser.add_argument("--names", default="before,after", help="labels of the two trees")
    parser.add_argument("--rounds", type=int, default=3, help="runs per tree (default 3)")
    parser.add_argument(
        "--first",
        choices=("before", "after"),
        default="before",
        help="which tree runs first in round 1; the order alternates after that",
    )
    parser.add_argument("--metric", action="append", default=[], help="metric pattern")
    parser.add_argument("--list-metrics", action="store_true", help="print every metric name")
    parser.add_argument(
        "--output-flag",
        default="--output",
        help="the script's option for its JSON output, default --output; give it as "
        "--output-flag=--report (the value starts with dashes), or '' if the script has "
        "none (then only wall and CPU time are compared)",
    )
    parser.add_argument(
        "--script-from-tree",
        action="store_true",
        help="run each tree's own copy of SCRIPT (a path relative to the trees)",
    )
    parser.add_argument("--package", default="mere", help="package whose origin is checked")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the runs")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between runs")
    parser.add_argument("--log-dir", type=Path, help="run logs and JSON (default under /tmp)")
    parser.add_argument("--json", type=Path, help="write the comparison as JSON here too")
    argv = sys.argv[1:] if argv is None else argv
    if "--" not in argv:
        parser.parse_args(argv)  # --help, or a usage error
        parser.error("give the benchmark script after '--'")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    rest = argv[split + 1 :]
    if not rest:
        parser.error("give the benchmark script after '--'")
    script, script_args = rest[0], rest[1:]
    names = args.names.split(",")
    if len(names) != 2:
        parser.error("--names takes two labels")
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    label = dict(zip(("before", "after"), names, strict=True))
    scripts = {
        key: (tree / script if args.script_from_tree else Path(script).resolve())
        for key, tree in trees.items()
    }
    for key, path in scripts.items():
        if not path.is_file():
            parser.error(f"no script {path} for {label[key]}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    log_dir = args.log_dir or Path("/tmp/compare-versions") / f"{Path(script).stem}-{stamp}"
    log_dir.mkdir(parents=True, exist_ok=True)

    print(f"script: {script} {' '.join(script_args)}")
    for key, tree in trees.items():
        where = check_import(args.python, tree, args.package)
        print(f"{label[key]}: {tree} ({git_describe(tree)}); {args.package} from {where}")
    print(f"logs: {log_dir}", flush=True)

    runs: list[dict[str, Any]] = []
    order = ["before", "after"] if args.first == "before" else ["after", "before"]
    for rnd in range(1, args.rounds + 1):
        for key in order:
            if runs and args.pause:
                time.sleep(args.pause)
            tag = f"r{rnd}-{label[key]}"
            print(f"round {rnd}: {label[key]} ...", end=" ", flush=True)
            run = run_once(
                args.python, trees[key], scripts[key], script_args, args.output_flag, log_dir, tag
            )
            run.update(round=rnd, version=key)
            runs.append(run)
            print(
                f"{run['wall_s']:.1f} s wall, {run['cpu_s']:.1f} s CPU, "
                f"load {run['loadavg_start'][0]:.2f} -> {run['loadavg_end'][0]:.2f}",
                flush=True,
            )
            if run["returncode"] != 0:
                tail = Path(run["log"]).read_text().splitlines()[-20:]
                print("\n".join(tail))
                sys.exit(f"the run {tag} failed (exit {run['returncode']}); log {run['log']}")
        order.reverse()

    per_version: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    for run in runs:
        for name, value in run["metrics"].items():
            per_version[run["version"]].setdefault(name, []).append(value)
    # Metrics of both versions first, in the order of the runs' JSON; then those only
    # one version has (a phase that a change added or removed), with "-" for the other.
    names_all = list(per_version["before"])
    names_all += [n for n in per_version["after"] if n not in per_version["before"]]
    if args.list_metrics:
        print("\nmetrics:\n  " + "\n  ".join(names_all))
    chosen = select(names_all, args.metric)
    if "run/wall_s" not in chosen:
        chosen += ["run/wall_s", "run/cpu_s"]

    comparison = []
    rows = []
    for name in chosen:
        b = per_version["before"].get(name, [])
        a = per_version["after"].get(name, [])
        mb = statistics.median(b) if b else float("nan")
        ma = statistics.median(a) if a else float("nan")
        ratio = ma / mb if mb and b and a else float("nan")
        comparison.append(
            {
                "metric": name,
                "before": b,
                "after": a,
                "median_before": mb,
                "median_after": ma,
                "ratio": ratio,
            }
        )
        rows.append(
            [
                name,
                fmt(mb),
                fmt(ma),
                f"{ratio:.3f}" if ratio == ratio else "-",
                " ".join(fmt(x) for x in b),
                " ".join(fmt(x) for x in a),
            ]
        )
    nb, na = label["before"], label["after"]
    print(f"\nmedians of {args.rounds} rounds; ratio = {na} / {nb}")
    print(table(["metric", nb, na, "ratio", f"{nb} runs", f"{na} runs"], rows))
    print("\nruns")
    print(
        table(
            ["run", "started (UTC)", "load 1/5/15 at start", "load at end", "wall s", "CPU s"],
            [
                [
                    r["tag"],
                    r["started_utc"][11:19],
                    " ".join(f"{x:.2f}" for x in r["loadavg_start"]),
                    " ".join(f"{x:.2f}" for x in r["loadavg_end"]),
                    f"{r['wall_s']:.1f}",
                    f"{r['cpu_s']:.1f}",
                ]
                for r in runs
            ],
        )
    )
    summary = {
        "script": script,
        "script_args": script_args,
        "trees": {label[k]: {"path": str(t), "commit": git_describe(t)} for k, t in trees.items()},
        "rounds": args.rounds,
        "runs": runs,
        "comparison": comparison,
    }
    out = args.json or log_dir / "comparison.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\ncomparison: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
