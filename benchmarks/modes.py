"""What the pipeline benchmarks that compare modes share: their common flags, the side-by-side
table, and the files they write (benchmarks/conflicts.py, benchmarks/scopes.py).

    add_workload_arguments(parser, duration_s=180, compact_every_s=8, out=Path("var/x"), modes=...)
    markdown = side_by_side("# Title", command, modes, rows)
    compare("x", args, argv, MODES, run, render_markdown, render_timeline)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from demo.options import PipelineOptions
from demo.pipeline import Pipeline
from demo.result import PipelineResult

__all__ = [
    "add_workload_arguments",
    "compare",
    "run_pipeline",
    "side_by_side",
]

ModeFigures = dict[str, Any]
_MESSAGES = ("failed_batch_messages", "failed_compaction_messages")


def add_workload_arguments(
    parser: argparse.ArgumentParser,
    *,
    duration_s: float,
    compact_every_s: float,
    out: Path,
    modes: Sequence[str],
) -> None:
    """The flags of the demo pipeline's workload, and `--modes` (comma-separated, in run order)."""
    parser.add_argument("--duration-s", type=float, default=duration_s, help="per mode")
    parser.add_argument("--rate", type=float, default=200.0, help="events per second")
    parser.add_argument("--trigger-interval-s", type=float, default=1.0)
    parser.add_argument("--compact-every-s", type=float, default=compact_every_s)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--out", type=Path, default=out)
    parser.add_argument("--modes", default=",".join(modes), help="comma-separated, in run order")
    parser.add_argument(
        "--events",
        type=int,
        help="run each mode by counts instead of --duration-s: this many events, all ingested",
    )
    parser.add_argument(
        "--compactions", type=int, default=0, help="with --events: compactions to wait for"
    )


def run_pipeline(args: argparse.Namespace, mode: str, **options: Any) -> PipelineResult:
    """One mode's run of the demo pipeline on the workload of `args`, in `args.out / mode`;
    `options` sets the rest of PipelineOptions."""
    events = getattr(args, "events", None)
    length = f"{events} events" if events is not None else f"{args.duration_s:g}s"
    print(f"== {mode}: {length}", flush=True)
    workload = PipelineOptions(
        duration_s=args.duration_s,
        events=events,
        compactions=getattr(args, "compactions", 0),
        workdir=args.out / mode,
        rate=args.rate,
        trigger_interval_s=args.trigger_interval_s,
        compact_every_s=args.compact_every_s,
        seed=args.seed,
        max_hold_s=300.0,
        **options,
    )
    return Pipeline(workload, on_progress=lambda line: print("  " + line, flush=True)).run()


def run_modes(
    asked: str, known: Sequence[str], run: Callable[[str], ModeFigures]
) -> list[ModeFigures]:
    """`run(mode)` for each mode of the comma-separated `asked`, in order.

    Raises:
        SystemExit: a mode not in `known`.
    """
    modes = asked.split(",")
    unknown = [mode for mode in modes if mode not in known]
    if unknown:
        raise SystemExit(f"unknown mode {unknown[0]!r}: use {' and/or '.join(known)}")
    return [run(mode) for mode in modes]


def side_by_side(
    title: str, command: str, modes: list[ModeFigures], rows: Sequence[tuple[str, str]]
) -> str:
    """A markdown table, a column per mode and a row per (label, key), then each mode's
    failure messages."""
    lines = [
        title,
        "",
        f"`{command}`",
        "",
        "| | " + " | ".join(m["mode"] for m in modes) + " |",
        "| --- |" + " ---: |" * len(modes),
    ]
    for label, key in rows:
        values = ["n/a" if m[key] is None else str(m[key]) for m in modes]
        lines.append(f"| {label} | " + " | ".join(values) + " |")
    for mode in modes:
        for what in _MESSAGES:
            if mode.get(what):
                lines += ["", f"{mode['mode']}, {what.replace('_', ' ')}:", ""]
                lines += [f"- `{m}`" for m in mode[what]]
    return "\n".join(lines) + "\n"


def compare(
    name: str,
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    known: Sequence[str],
    run: Callable[[str], ModeFigures],
    report: Callable[..., str],
    render: Callable[[list[ModeFigures], Path], None],
) -> int:
    """Run the asked modes of benchmark `name`, then write results.json, report.md (from
    `report(modes, command=...)`) and `<name>.png` (from `render`) into `args.out`, and print
    the report. The exit code of the benchmark's main."""
    args.out.mkdir(parents=True, exist_ok=True)
    modes = run_modes(args.modes, known, run)
    command = f"python -m benchmarks.{name} " + " ".join(sys.argv[1:] if argv is None else argv)
    markdown = report(modes, command=command.strip())
    picture = args.out / f"{name}.png"
    (args.out / "results.json").write_text(json.dumps(modes, indent=2) + "\n")
    (args.out / "report.md").write_text(markdown)
    render(modes, picture)
    print(markdown)
    print(f"timeline: {picture}")
    return 0
