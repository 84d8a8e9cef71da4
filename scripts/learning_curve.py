"""Does hfbert pretraining learn? The mini preset on the built-in Austen corpus, within 30 minutes on a CPU.

Runs ``hfbert pretrain`` with ``configs/learning_curve.json`` (held-out evaluation every 50 steps, a 28-minute
training budget), then writes ``docs/learning_curve.png`` and ``docs/learning_curve.json``: held-out MLM and NSP
accuracy against wall-clock time and step, next to the trivial baselines (always the most frequent masked token;
always the majority NSP class), the first time MLM accuracy reached the target, and the speed.

    OMP_NUM_THREADS=1 python scripts/learning_curve.py [--config configs/learning_curve.json] [--docs docs]

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


def _plot(points: list[dict], baselines: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.5), layout="constrained")
    axes = figure.subplots()
    minutes = [p["minutes"] for p in points]
    axes.plot(minutes, [p["eval_mlm_accuracy"] for p in points], marker="o", label="held-out MLM accuracy")
    axes.plot(minutes, [p["eval_nsp_accuracy"] for p in points], marker="s", label="held-out NSP accuracy")
    axes.axhline(baselines["mlm"], color="tab:blue", linestyle=":", label=f"MLM baseline {baselines['mlm']:.3f}")
    axes.axhline(baselines["nsp"], color="tab:orange", linestyle=":", label=f"NSP baseline {baselines['nsp']:.3f}")
    axes.axhline(TARGET_MLM_ACCURACY, color="grey", linestyle="--", label=f"target {TARGET_MLM_ACCURACY}")
    axes.set(xlabel="training minutes (2 CPU cores)", ylabel="accuracy", ylim=(0, 1),
             title="hfbert pretrain: BERT-Mini on the built-in Austen corpus")
    axes.legend(loc="center right")
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    import torch

    from hfbert.pretrain import LOG_FILE, pretrain
    from hfbert.pretrain_config import load_config, parse_overrides
    from hfbert.tracking import read_jsonl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "learning_curve.json"))
    parser.add_argument("--docs", default=str(REPO / "docs"))
    args, rest = parser.parse_known_args(argv)
    config = load_config(args.config, {"overwrite_output_dir": True, **parse_overrides(rest)})
    load_before = os.getloadavg()[0]
    wall = time.monotonic()
    result = pretrain(config)
    wall = time.monotonic() - wall
    records = read_jsonl(Path(config.output_dir) / LOG_FILE)
    timeline = _timeline(records)
    points = [{"step": r["step"], "minutes": round(timeline.get(r["step"], 0.0) / 60, 2),
               **{k: round(r[k], 4) for k in ("eval_mlm_accuracy", "eval_nsp_accuracy", "eval_mlm_loss")}}
              for r in records if "eval_mlm_accuracy" in r]
    metrics = result.metrics
    baselines = {"mlm": metrics["eval_mlm_baseline_most_frequent_token"],
                 "nsp": metrics["eval_nsp_baseline_majority_class"]}
    reached = next((p for p in points if p["eval_mlm_accuracy"] >= TARGET_MLM_ACCURACY), None)
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    _plot(points, baselines, docs / "learning_curve.png")
    summary = {
        "config": config.to_dict(),
        "final": {k: metrics[k] for k in ("step", "stopped_by", "train_seconds", "tokens_seen", "eval_mlm_accuracy",
                                          "eval_nsp_accuracy", "eval_mlm_loss", "eval_nsp_loss")},
        "baselines": {"mlm_most_frequent_token": baselines["mlm"], "nsp_majority_class": baselines["nsp"]},
        "target_mlm_accuracy": TARGET_MLM_ACCURACY,
        "reached_target_at": reached,
        "seconds_per_step": round(metrics["train_seconds"] / max(metrics["step"], 1), 3),
        "job_wall_seconds": round(wall, 1),
        "machine": {"cpu_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average_before": round(load_before, 2), "load_average_after": round(os.getloadavg()[0], 2)},
        "curve": points,
        "fill_mask": result.fill_mask,
    }
    (docs / "learning_curve.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: summary[k] for k in ("final", "baselines", "reached_target_at", "seconds_per_step")},
                     indent=1))
    return 0 if reached else 1


if __name__ == "__main__":
    raise SystemExit(main())
