"""The downstream scoreboard of docs/downstream.md from ``hfbert evaluate`` outputs run under the protocol
(``--train_sizes``, ``--baseline``): one Markdown row per model, a column per task and label budget, each cell the
held-out mean ± sd over the seeds, the failed runs, the chosen rate, and the difference to the model's own
random-weights baseline with its 95% interval; with ``--baseline_row``, the random-weights row of the first model.

    python benchmarks/scoreboard.py NAME=OUT_DIR [NAME=OUT_DIR ...] [--baseline_row "random weights"]

Answered in docs/downstream.md's scoreboard.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cell(arm: dict, difference: dict | None) -> str:
    score = arm["held_out"]
    text = f"{score['mean']:.3f} ± {score['std']:.3f}"
    if score.get("failed"):
        text += f", {score['failed']} failed"
    text += f" (lr {arm['learning_rate']:g})"
    if difference is not None:
        text += f"<br>{difference['difference']:+.3f} [{difference['low']:+.3f}, {difference['high']:+.3f}]"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="NAME=OUT_DIR: a row's name and its hfbert evaluate output folder")
    parser.add_argument("--baseline_row", help="add the first run's random-weights arm as a row of this name")
    args = parser.parse_args()
    rows = []
    for spec in args.runs:
        name, _, folder = spec.partition("=")
        rows.append((name, json.loads((Path(folder) / "results.json").read_text(encoding="utf-8"))))
    columns = []
    for _, summary in rows:
        for task, entry in summary["protocol"]["tasks"].items():
            for size in entry["sizes"]:
                if (task, size) not in columns:
                    columns.append((task, size))
    print("| model | " + " | ".join(f"{t} ({s} rows)" for t, s in columns) + " |")
    print("|---|" + "---|" * len(columns))
    if args.baseline_row:
        summary = rows[0][1]
        cells = [cell(summary["protocol"]["tasks"][t]["sizes"][s]["baseline"], None)
                 if t in summary["protocol"]["tasks"] and s in summary["protocol"]["tasks"][t]["sizes"] else "-"
                 for t, s in columns]
        print(f"| {args.baseline_row} | " + " | ".join(cells) + " |")
    for name, summary in rows:
        tasks = summary["protocol"]["tasks"]
        cells = []
        for task, size in columns:
            entry = tasks.get(task, {}).get("sizes", {}).get(size)
            cells.append("-" if entry is None else cell(entry["model"], entry.get("difference")))
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
