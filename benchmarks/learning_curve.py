"""Does hfbert pretraining learn? The mini preset on the built-in Austen corpus, within 30 minutes on a CPU.

Runs ``hfbert pretrain`` with ``configs/learning_curve.json`` (sequence length 32, then 64, then 128; held-out
evaluation every 250 steps at the current phase's length; a 28-minute training budget), then writes
``results/learning_curve.png`` and ``results/learning_curve.json`` (under benchmarks/): held-out MLM and NSP
accuracy against wall-clock time and step, next to the trivial baselines at the final length (always the most
frequent masked token; always the majority NSP class), the first evaluation at the final length that reached the target, and the speed.
``--replot`` rebuilds both files from a finished run without training again.

    OMP_NUM_THREADS=1 python benchmarks/learning_curve.py [--config FILE.json] [--docs FOLDER]

On a machine shared with other jobs, one thread per process is faster than torch's default (its threads spin while
waiting for each other). Extra ``--key value`` pairs override the config (e.g. ``--max_time_minutes 5``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_MLM_ACCURACY = 0.20


def _timeline(records: list[dict]) -> dict[int, float]:
    """Wall-clock seconds of the training loop (evaluations included) at each logged step."""
    return {r["step"]: r["train_seconds"] for r in records if "train_seconds" in r and "step" in r}


def _plot(points: list[dict], baselines: dict, phases: list, timeline: dict[int, float], path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    axes = figure.subplots()
    minutes = [p["minutes"] for p in points]
    axes.plot(minutes, [p["eval_mlm_accuracy"] for p in points], marker="o", label="held-out MLM accuracy")
    axes.plot(minutes, [p["eval_nsp_accuracy"] for p in points], marker="s", label="held-out NSP accuracy")
    final = phases[-1].max_seq_length
    axes.axhline(baselines["mlm"], color="tab:blue", linestyle=":",
                 label=f"MLM baseline {baselines['mlm']:.3f} (length {final})")
    axes.axhline(baselines["nsp"], color="tab:orange", linestyle=":", label=f"NSP baseline {baselines['nsp']:.3f}")
    axes.axhline(TARGET_MLM_ACCURACY, color="grey", linestyle="--", label=f"target {TARGET_MLM_ACCURACY}")
    for phase in phases:  # where each sequence length starts (evaluation is at the current phase's length)
        logged = [step for step in timeline if step >= phase.first_step]
        if len(phases) > 1 and logged:
            at = 0.0 if phase.first_step == 0 else timeline[min(logged)] / 60
            axes.axvline(at, color="lightgrey", linewidth=0.8)
            axes.text(at, 0.97, f" length {phase.max_seq_length}", fontsize=8, va="top", color="dimgrey")
    axes.set(xlabel="training minutes (2 CPU cores)", ylabel="accuracy", ylim=(0, 1),
             title="hfbert pretrain: BERT-Mini on the built-in Austen corpus")
    axes.legend(loc="center right", fontsize=8)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    import torch

    from hfbert.pretrain import LOG_FILE, METRICS_FILE, fill_mask_example, pretrain
    from hfbert.pretrain.config import parse_args, resolve_phases
    from hfbert.pretrain.tracking import read_jsonl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "benchmarks" / "configs" / "learning_curve.json"))
    parser.add_argument("--docs", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--replot", action="store_true",
                        help="do not train: rebuild the docs from the finished run in the config's output_dir")
    args, rest = parser.parse_known_args(argv)
    config = parse_args(["--config", args.config, "--overwrite_output_dir", "true", *rest])
    docs = Path(args.docs)
    output_dir = Path(config.output_dir)
    if args.replot:
        metrics = json.loads((output_dir / METRICS_FILE).read_text(encoding="utf-8"))
        earlier = docs / "learning_curve.json"
        earlier = json.loads(earlier.read_text(encoding="utf-8")) if earlier.is_file() else {}
        wall, machine = earlier.get("job_wall_seconds"), earlier.get("machine")
        fill_mask = fill_mask_example(output_dir, config.fill_mask_text)
    else:
        load_before = os.getloadavg()[0]
        wall = time.monotonic()
        result = pretrain(config)
        wall = round(time.monotonic() - wall, 1)
        metrics, fill_mask = result.metrics, result.fill_mask
        machine = {"cpu_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "platform": platform.platform(),
                   "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)}
    phases = resolve_phases(config)
    final_length = phases[-1].max_seq_length
    # The run's trivial baselines: top-level ones are at the final length, per length when the schedule has phases.
    by_length = {int(k): v for k, v in metrics.get("baselines_by_length", {}).items()} or {
        final_length: {k: metrics[k] for k in ("eval_mlm_baseline_most_frequent_token",
                                                "eval_nsp_baseline_majority_class")}}

    def length_at(step: int) -> int:
        return next(p for p in phases if p.first_step <= step - 1 < p.first_step + p.steps).max_seq_length

    records = read_jsonl(output_dir / LOG_FILE)
    timeline = _timeline(records)
    points = [{"step": r["step"], "minutes": round(timeline.get(r["step"], 0.0) / 60, 2),
               "max_seq_length": length_at(r["step"]),
               **{k: round(r[k], 4) for k in ("eval_mlm_accuracy", "eval_nsp_accuracy", "eval_mlm_loss")}}
              for r in records if "eval_mlm_accuracy" in r]
    final_baselines = by_length[final_length]
    baselines = {"mlm": final_baselines["eval_mlm_baseline_most_frequent_token"],
                 "nsp": final_baselines["eval_nsp_baseline_majority_class"]}
    # Only evaluations at the final length count: a shorter context is a different (easier or harder) test.
    reached = next((p for p in points if p["max_seq_length"] == final_length
                    and p["eval_mlm_accuracy"] >= TARGET_MLM_ACCURACY), None)
    docs.mkdir(parents=True, exist_ok=True)
    _plot(points, baselines, phases, timeline, docs / "learning_curve.png")
    summary = {
        "config": config.to_dict(),
        "phases": [{"max_seq_length": p.max_seq_length, "batch_size": p.batch_size, "first_step": p.first_step,
                    "steps": p.steps} for p in phases],
        "final": {k: metrics[k] for k in ("step", "stopped_by", "train_seconds", "tokens_seen", "eval_mlm_accuracy",
                                          "eval_nsp_accuracy", "eval_mlm_loss", "eval_nsp_loss")},
        "final_max_seq_length": final_length,
        "baselines": {"mlm_most_frequent_token": baselines["mlm"], "nsp_majority_class": baselines["nsp"]},
        "baselines_by_length": {str(k): v for k, v in by_length.items()},
        "target_mlm_accuracy": TARGET_MLM_ACCURACY,
        "reached_target_at": reached,
        "seconds_per_step": round(metrics["train_seconds"] / max(metrics["step"], 1), 3),
        "job_wall_seconds": wall,
        "machine": machine,
        "curve": points,
        "fill_mask": fill_mask,
    }
    (docs / "learning_curve.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: summary[k] for k in ("final", "baselines", "reached_target_at", "seconds_per_step")},
                     indent=1))
    return 0 if reached else 1


if __name__ == "__main__":
    raise SystemExit(main())
