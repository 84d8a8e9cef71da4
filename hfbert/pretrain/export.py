"""What a pretraining run leaves for its users: the Hub-format folder (weights, tokenizer, metrics, loss curve,
fill-mask example, model card), written so that a full disk never leaves half of it, and the push to the Hub."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from huggingface_hub.utils import logging as hf_logging
from transformers import pipeline

from ..hub import DEFAULT_IGNORE_PATTERNS, push_to_hub
from ..modelcard import write_pretrained_card
from .checkpointing import DiskFullError, out_of_space, staged_folder
from .config import PretrainConfig
from .corpora import PREPARED_DIR, TrainingData
from .tracking import read_jsonl

__all__ = ["CURVE_FILE", "DOWNSTREAM_CURVE_FILE", "LOG_FILE", "METRICS_FILE", "downstream_records", "export",
           "fill_mask_example", "plot_curve", "plot_downstream", "push"]

LOG_FILE = Path("runs") / "metrics.jsonl"
METRICS_FILE = "metrics.json"
CURVE_FILE = "loss_curve.png"
DOWNSTREAM_CURVE_FILE = "downstream_curve.png"


def export(config: PretrainConfig, model, data: TrainingData, metrics: dict, phases, origin: dict | None = None,
           ) -> list[dict]:
    """Write the Hub-format folder: model, tokenizer, metrics, loss curve, fill-mask example, model card.

    The files are written beside the folder and moved in once all are written, config.json last
    (:func:`~hfbert.pretrain.checkpointing.staged_folder`): a full disk leaves no half-written model that
    ``from_pretrained`` would load, and the error names the folder and the space the export needs."""
    output_dir = Path(config.output_dir)
    try:
        with staged_folder(output_dir, last="config.json") as folder:
            model.save_pretrained(folder)
            data.tokenizer.save_pretrained(folder)
            (folder / METRICS_FILE).write_text(json.dumps(metrics, indent=1) + "\n", encoding="utf-8")
            records = read_jsonl(output_dir / LOG_FILE)
            curve = plot_curve(records, folder / CURVE_FILE, baselines=data.stats)
            downstream = downstream_records(records)
            downstream_curve = plot_downstream(records, folder / DOWNSTREAM_CURVE_FILE) if downstream else None
            fill_mask = fill_mask_example(folder, config.fill_mask_text)
            write_pretrained_card(folder, config=config, model_config=model.config, stats=data.stats,
                                  metrics=metrics, phases=phases, curve=curve, fill_mask=fill_mask, origin=origin,
                                  downstream=downstream, downstream_curve=downstream_curve)
    except Exception as err:
        if not out_of_space(err, output_dir):
            raise
        needed = sum(t.numel() * t.element_size() for t in model.state_dict().values())
        raise DiskFullError(
            f"could not write the exported model to {output_dir}: No space left on device (the weights alone take "
            f"about {needed / 2**20:,.1f} MB, {shutil.disk_usage(output_dir).free / 2**20:,.1f} MB are free). The "
            "folder holds no half-written model and the last checkpoint is complete; free some space and run the "
            "same command with --resume to export it.") from err
    return fill_mask


def fill_mask_example(model_dir: str | Path, texts: str | list[str], top_k: int = 5) -> list[dict]:
    """``pipeline("fill-mask")`` on the exported folder: for each of ``texts``, ``{"text", "answers"}`` with the
    top tokens for its [MASK] (``{"token", "score"}``)."""
    fill = pipeline("fill-mask", model=str(model_dir), tokenizer=str(model_dir), device="cpu")
    return [{"text": text, "answers": [{"token": r["token_str"], "score": round(float(r["score"]), 4)}
                                       for r in fill(text, top_k=top_k)]}
            for text in ([texts] if isinstance(texts, str) else texts)]


def plot_curve(records: list[dict], path: Path, baselines: dict | None = None) -> Path | None:
    """Training loss and held-out MLM/NSP accuracy against the step; None when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # the object API needs no global backend
    except ImportError:
        return None
    train = [(r["step"], r["loss"]) for r in records if "loss" in r and isinstance(r.get("loss"), float)]
    held = [(r["step"], r["eval_mlm_accuracy"], r["eval_nsp_accuracy"]) for r in records if "eval_mlm_accuracy" in r]
    figure = Figure(figsize=(10, 4), layout="constrained")
    loss_axes, accuracy_axes = figure.subplots(1, 2)
    if train:
        loss_axes.plot(*zip(*train), label="training loss (MLM + NSP)")
    loss_axes.set(xlabel="optimizer step", ylabel="loss", title="training loss")
    loss_axes.legend()
    if held:
        steps, mlm, nsp = zip(*held)
        accuracy_axes.plot(steps, mlm, marker="o", label="held-out MLM accuracy")
        accuracy_axes.plot(steps, nsp, marker="s", label="held-out NSP accuracy")
    for key, style, label in (("eval_mlm_baseline_most_frequent_token", ":", "MLM: most frequent token"),
                              ("eval_nsp_baseline_majority_class", "--", "NSP: majority class")):
        if baselines and key in baselines:
            accuracy_axes.axhline(baselines[key], linestyle=style, color="grey", label=label)
    accuracy_axes.set(xlabel="optimizer step", ylabel="accuracy", ylim=(0, 1), title="held-out accuracy")
    accuracy_axes.legend()
    figure.savefig(path, dpi=100)
    return path


def downstream_records(records: list[dict]) -> list[dict]:
    """The downstream evaluations of a run's log (``--evaluate_suite_steps``), in step order: ``step``, ``minutes``
    (training minutes), ``average`` and each task's score by name."""
    rows = []
    for r in records:
        if "downstream_average" in r:
            tasks = {k[len("downstream_"):]: v for k, v in r.items()
                     if k.startswith("downstream_") and k not in ("downstream_average", "downstream_minutes")}
            rows.append({"step": r["step"], "minutes": r.get("downstream_minutes"), "average": r["downstream_average"],
                         **tasks})
    return sorted(rows, key=lambda row: row["step"])


def plot_downstream(records: list[dict], path: Path) -> Path | None:
    """The downstream score (the suite's average and each task's first metric) beside the held-out MLM accuracy,
    against the optimizer step and against the training minutes; None when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    rows = downstream_records(records)
    seconds = {r["step"]: r["train_seconds"] for r in records if "train_seconds" in r and "loss" in r}
    held = [(r["step"], r["eval_mlm_accuracy"]) for r in records if "eval_mlm_accuracy" in r]
    tasks = [k for k in rows[0] if k not in ("step", "minutes", "average")] if rows else []
    figure = Figure(figsize=(10, 4), layout="constrained")
    for axes, by_minute in zip(figure.subplots(1, 2), (False, True)):
        x = [row["minutes"] if by_minute else row["step"] for row in rows]
        axes.plot(x, [row["average"] for row in rows], marker="o", linewidth=2, label="downstream average")
        for task in tasks:
            axes.plot(x, [row[task] for row in rows], marker=".", linestyle="--", label=task)
        axes.set(xlabel="training minutes" if by_minute else "optimizer step", ylabel="downstream score",
                 title="downstream score by " + ("minute" if by_minute else "step"))
        mlm = axes.twinx()
        points = held
        if by_minute:  # the log line nearest each evaluation gives its minute
            known = sorted(seconds)
            points = [(seconds[min(known, key=lambda k: abs(k - step))] / 60, acc) for step, acc in held if known]
        if points:
            mlm.plot(*zip(*points), color="grey", marker="s", markersize=3, label="held-out MLM accuracy")
        mlm.set(ylabel="held-out MLM accuracy")
        lines = axes.get_legend_handles_labels()
        extra = mlm.get_legend_handles_labels()
        axes.legend(lines[0] + extra[0], lines[1] + extra[1], fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def push(config: PretrainConfig) -> None:
    """Upload the exported folder (not the checkpoints, logs or prepared data) to ``config.push_to_hub``; a
    failure raises HubPushError, whose one line says what went wrong (huggingface_hub's warnings before each
    retry are kept off stderr)."""
    hf_logging.set_verbosity_error()
    result = push_to_hub(config.output_dir, config.push_to_hub, revision=config.hub_revision,
                         commit_message="hfbert pretrain: model, tokenizer, card and metrics",
                         ignore_patterns=(*DEFAULT_IGNORE_PATTERNS, f"{PREPARED_DIR}/**"),
                         timeout=config.hub_timeout)
    print(f"pushed to {result.repo_id}@{result.revision}: {result.commit_url}")
