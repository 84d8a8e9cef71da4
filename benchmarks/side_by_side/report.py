"""The report of the bench: the machine it ran on, the contenders' labels, and the report as Markdown tables
(:func:`render`, the same text as on the terminal).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch
import transformers

from hfbert import __version__
from .contenders import ContenderSpec


def machine() -> dict:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hfbert": __version__, "nproc": os.cpu_count(), "cpu": model, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def _fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec) + suffix


PEER_LABELS = {"hfbert": "hfbert", "transformers": "transformers", "hfbert+compile": "hfbert + torch.compile",
               "transformers+compile": "transformers + torch.compile", "hfbert padding_free": "hfbert, padding_free"}


def label(name: str, row: dict | None = None) -> str:
    """A contender's name in the tables: "hfbert eager padding_free" reads "hfbert eager, padding_free"; a row
    that ran without attention dropout says so."""
    text = PEER_LABELS.get(name) or name.replace(" padding_free", ", padding_free")
    if row is not None and row.get("attention_dropout") == 0.0:
        text += " (no attention dropout)"
    return text


def _first_steps(row: dict) -> str:
    """The compile column: compile s of torch.compile, the first steps' extra time of FlexAttention, else '-'."""
    if not ContenderSpec.of_row(row).compiles_first:
        return "-"
    return _fmt(row.get("compile_s", row.get("first_steps_s")), ".0f")


def _speedup(row: dict) -> str:
    """The speed-up column: the row's, 1.00x for the baseline itself."""
    return _fmt(row.get("speedup", 1.0 if ContenderSpec.of_row(row).baseline else None), suffix="x")


def render(report: dict) -> str:
    """The report as Markdown tables (the same text goes to the terminal)."""
    inputs = "one batch repeated" if report.get("settings", {}).get("repeated_inputs") else "a new batch every step"
    lines = []
    if report.get("pretraining"):
        lines += [f"Pretraining step (forward + backward + AdamW), {inputs}; speed-up = transformers' step time over "
                  "the contender's, median of per-round ratios; work ratio = transformers' model FLOPs per step over "
                  "the contender's (the speed-up at equal FLOP efficiency)", "",
                  "| preset | length | batch | real tokens | contender | tokens/s | speed-up | work ratio "
                  "| compile s | peak MiB | RSS growth MiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        not_run: dict[str, str] = {}
        for r in report["pretraining"]:
            for name in r["contenders"]:
                c = r[name]
                lines.append(
                    f"| {r['preset']} | {r['length']} | {r['batch_size']} | {_fmt(r['tokens_per_batch'], '.0f')} "
                    f"| {label(name, c)} | {_fmt(c['tokens_per_s'], '.0f')} "
                    f"| {_speedup(c)} "
                    f"| {_fmt(c.get('work_ratio'), suffix='x')} | {_first_steps(c)} "
                    f"| {_fmt(c['peak_memory_mb'], '.0f')} | {_fmt(c['rss_growth_mb'], '+.0f')} |")
            not_run.update(r.get("not_run", {}))
        lines += [f"Not run: {label(name)} ({reason})." for name, reason in not_run.items()]
        lines.append("")
    if report.get("inference"):
        lines += [f"Inference (bare encoder), {inputs}", "",
                  "| preset | lengths | max len | padding | contender | tokens/s | speed-up |",
                  "|---|---|---|---|---|---|---|"]
        for r in report["inference"]:
            for name in r["contenders"]:
                c = r[name]
                lines.append(f"| {r['preset']} | {r['lengths']} | {r['max_length']} "
                             f"| {_fmt(100 * r['padding_fraction'], '.0f')}% | {label(name, c)} "
                             f"| {_fmt(c['tokens_per_s'], '.0f')} "
                             f"| {_speedup(c)} |")
        lines.append("")
    if report.get("data_pipeline"):
        lines += ["Data pipeline (tokenize + NSP pairs + masking)", "",
                  "| processes | tokens/s (wall) | tokens/s per CPU second | scaling |", "|---|---|---|---|"]
        for r in report["data_pipeline"]:
            if not r.get("available"):
                lines.append(f"| {r.get('num_proc', '-')} | not available: {r['reason'][:120]} | | |")
                continue
            lines.append(f"| {r['num_proc']} | {_fmt(r['tokens_per_s'], '.0f')} | {_fmt(r['tokens_per_cpu_s'], '.0f')} "
                         f"| {_fmt(r.get('scaling_vs_1_proc'), suffix='x')} |")
        lines.append("")
    if report.get("wordpiece"):
        w = report["wordpiece"]
        lines += ["WordPiece training", "",
                  f"{_fmt(w['mb_per_s'])} MB/s ({_fmt(w['megabytes'])} MB, vocabulary {w['vocab_size']}, "
                  f"median of {len(w['times_s'])})", ""]
    return "\n".join(lines).rstrip() + "\n"


def speedups(row: dict) -> str:
    """One line of progress: every contender's speed-up over the baseline (transformers)."""
    return ", ".join(f"{label(n, row[n])} {_fmt(row[n].get('speedup'), suffix='x')}" for n in row["contenders"]
                     if not ContenderSpec.of_row(row[n]).baseline)
