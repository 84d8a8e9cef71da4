"""``hfbert robustness``: accuracy of a fine-tuned sequence classifier under increasing bit error rates.

For every injection site (embeddings, encoder, head, ...), every bit class (exponent, mantissa, ...) and every
bit error rate, the model is evaluated ``trials`` times, each time under a fresh seeded set of bit flips
(:mod:`hfbert.faults`), and restored bitwise in between. The output folder gets

* ``robustness.csv`` -- one row per (site, bits, ber): mean and std over trials of accuracy and macro-F1, and
  the mean number of flipped bits;
* ``robustness.json`` -- the settings, the clean (fault-free) scores, that summary and every single trial;
* ``robustness.png`` -- metric vs. bit error rate, one panel per bit class, one line per site.

A prediction whose logits are not all finite (an exponent flip easily produces inf/NaN) counts as wrong: a
classifier that outputs NaN has failed, whatever ``argmax`` would pick.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from .arguments import UsageError, run_command
from .faults import activation_faults, resolve_bits, resolve_dtype, weight_faults
from .robustness_settings import RobustnessArguments, command_parser

__all__ = [
    "RobustnessArguments",
    "clipped_error_bars",
    "encode_batches",
    "load_examples",
    "main",
    "plot_curves",
    "predict",
    "run_study",
    "score",
    "summarise",
    "write_results",
]

Batch = tuple[np.ndarray, dict[str, torch.Tensor]]


# ----------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------


def load_examples(
    path: str | Path,
    text_column: str,
    label_column: str,
    *,
    text_pair_column: str | None = None,
    label2id: dict[str, int] | None = None,
    max_examples: int | None = None,
) -> tuple[list[str], list[str] | None, np.ndarray]:
    """Read a JSON-lines file into (texts, text pairs or None, integer labels).

    String labels are mapped through ``label2id`` (the model config's); integer and boolean labels are used
    as they are. Bad input raises :class:`~hfbert.arguments.UsageError` (a ``ValueError``) naming the file and line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    texts, pairs, labels = [], [], []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise UsageError(f"{path}:{line_no} is not a JSON line: {err}") from None
            if not isinstance(row, dict):
                raise UsageError(f"{path}:{line_no} is not a JSON object (got {type(row).__name__})")
            for column in (text_column, label_column, text_pair_column):
                if column is not None and column not in row:
                    raise UsageError(f"{path}:{line_no} has no column {column!r} (columns: {sorted(row)})")
            texts.append(str(row[text_column]))
            if text_pair_column is not None:
                pairs.append(str(row[text_pair_column]))
            labels.append(_label_id(row[label_column], label2id, f"{path}:{line_no}"))
            if max_examples is not None and len(texts) >= max_examples:
                break
    if not texts:
        raise UsageError(f"{path} holds no examples")
    return texts, (pairs if text_pair_column is not None else None), np.asarray(labels, dtype=np.int64)


def _label_id(value: Any, label2id: dict[str, int] | None, where: str) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and label2id and value in label2id:
        return int(label2id[value])
    raise UsageError(f"{where}: label {value!r} is neither an integer nor one of the model's labels {label2id}")


def encode_batches(
    tokenizer: Any, texts: Sequence[str], pairs: Sequence[str] | None, *, batch_size: int, max_length: int
) -> list[Batch]:
    """Tokenise once and group examples of similar length (less padding, faster CPU evaluation).

    Each batch carries the original positions of its examples, so predictions come back in input order.
    """
    if batch_size < 1 or max_length < 2:
        raise ValueError(f"batch_size must be >= 1 and max_length >= 2, got {batch_size} and {max_length}")
    encoded = tokenizer(list(texts), list(pairs) if pairs is not None else None, truncation=True,
                        max_length=max_length)
    lengths = np.asarray([len(ids) for ids in encoded["input_ids"]])
    order = np.argsort(lengths, kind="stable")
    batches = []
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        features = [{key: encoded[key][i] for key in encoded} for i in idx]
        batches.append((idx, dict(tokenizer.pad(features, return_tensors="pt"))))
    return batches


# ----------------------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------------------


@torch.no_grad()
def predict(model: nn.Module, batches: Sequence[Batch]) -> np.ndarray:
    """Predicted class per example, in input order; -1 where the logits are not all finite."""
    n = sum(len(idx) for idx, _ in batches)
    predictions = np.full(n, -1, dtype=np.int64)
    for idx, inputs in batches:
        logits = model(**inputs).logits.float()  # (B, num_labels)
        finite = torch.isfinite(logits).all(dim=-1)
        predicted = logits.argmax(dim=-1).masked_fill(~finite, -1)
        predictions[idx] = predicted.numpy()
    return predictions


def score(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Accuracy, macro-F1 over the classes present in ``labels``, and the fraction of non-finite outputs."""
    accuracy = float(np.mean(predictions == labels))
    f1s = []
    for cls in np.unique(labels):
        tp = np.sum((predictions == cls) & (labels == cls))
        denominator = np.sum(predictions == cls) + np.sum(labels == cls)
        f1s.append(2.0 * tp / denominator if denominator else 0.0)
    return {"accuracy": accuracy, "macro_f1": float(np.mean(f1s)), "nonfinite": float(np.mean(predictions == -1))}


def _trial_seed(seed: int, *coordinates: int) -> int:
    """An independent, reproducible seed per (site, bits, ber, trial): SeedSequence mixes the coordinates."""
    return int(np.random.SeedSequence([seed, *coordinates]).generate_state(1)[0])


def run_study(
    model: nn.Module,
    batches: Sequence[Batch],
    labels: np.ndarray,
    *,
    bers: Sequence[float],
    sites: Sequence[str],
    bit_classes: Sequence[str],
    trials: int,
    seed: int = 0,
    target: str = "weights",
    progress: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Clean scores and one row per (site, bits, ber, trial).

    With weight faults, a trial that draws no flip (likely at tiny rates) reuses the clean predictions: the
    model is bitwise the clean model, so evaluating it again would only cost time.
    """
    if target not in ("weights", "activations"):
        raise ValueError(f"target must be 'weights' or 'activations', got {target!r}")
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    bad = [b for b in bers if not 0.0 < b <= 1.0]
    if bad:
        raise ValueError(f"bit error rates must be in (0, 1] (0 is the clean baseline), got {bad}")
    dtype = next(p.dtype for p in model.parameters() if p.is_floating_point())
    for bits in bit_classes:  # fail before the first evaluation, not after an hour
        resolve_bits(bits.replace("+", ","), dtype)
    model.eval()
    clean_predictions = predict(model, batches)
    clean = score(clean_predictions, labels)
    inject = weight_faults if target == "weights" else activation_faults
    rows = []
    for si, site in enumerate(sites):
        for bi, bits in enumerate(bit_classes):
            for ri, ber in enumerate(bers):
                for trial in range(trials):
                    trial_seed = _trial_seed(seed, si, bi, ri, trial)
                    with inject(model, ber, sites=site, bits=bits.replace("+", ","), seed=trial_seed) as record:
                        lazy = target == "weights" and record.n_flips == 0
                        predictions = clean_predictions if lazy else predict(model, batches)
                    row = {"site": site, "bits": bits, "ber": ber, "trial": trial, "seed": trial_seed,
                           "n_flips": record.n_flips, **score(predictions, labels)}
                    rows.append(row)
                    if progress is not None:
                        progress(row)
    return clean, rows


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample std (ddof=1; 0 for a single trial) over trials per (site, bits, ber)."""
    groups: dict[tuple[str, str, float], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["site"], row["bits"], row["ber"]), []).append(row)
    summary = []
    for (site, bits, ber), group in groups.items():
        entry: dict[str, Any] = {"site": site, "bits": bits, "ber": ber, "trials": len(group)}
        for key in ("accuracy", "macro_f1", "nonfinite", "n_flips"):
            values = np.asarray([r[key] for r in group], dtype=np.float64)
            entry[f"{key}_mean"] = float(values.mean())
            entry[f"{key}_std"] = float(values.std(ddof=1)) if len(values) > 1 else 0.0
        summary.append(entry)
    return summary


# ----------------------------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------------------------


def write_results(
    output_dir: str | Path,
    *,
    clean: dict[str, float],
    rows: Sequence[dict[str, Any]],
    summary: Sequence[dict[str, Any]],
    settings: dict[str, Any],
) -> dict[str, Path]:
    """Write robustness.csv (the summary) and robustness.json (settings, clean, summary, trials)."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = output_dir / "robustness.csv", output_dir / "robustness.json"
    with csv_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    payload = {"settings": settings, "clean": clean, "summary": list(summary), "trials": list(rows)}
    json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return {"csv": csv_path, "json": json_path}


def clipped_error_bars(mean: np.ndarray, std: np.ndarray, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """``(2, N)`` lower and upper error-bar lengths: one std either side, cut at the metric's range ``[low, high]``
    (an accuracy of 0.95 +- 0.1 is drawn up to 1, not to 1.05)."""
    mean, std = np.asarray(mean, dtype=np.float64), np.asarray(std, dtype=np.float64)
    return np.stack([np.minimum(std, mean - low), np.minimum(std, high - mean)]).clip(min=0.0)


def plot_curves(
    summary: Sequence[dict[str, Any]],
    clean: dict[str, float],
    path: str | Path,
    *,
    metric: str = "accuracy",
    chance: float | None = None,
    title: str | None = None,
) -> Path:
    """Metric vs. bit error rate (log x), one panel per bit class, one line (mean +- std, within [0, 1]) per site.

    Uses matplotlib's object API with the Agg canvas, so no global backend is switched.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    bit_classes = list(dict.fromkeys(e["bits"] for e in summary))
    sites = list(dict.fromkeys(e["site"] for e in summary))
    figure = Figure(figsize=(4.5 * len(bit_classes), 3.6), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(bit_classes), sharey=True, squeeze=False)[0]
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-")]  # overlapping curves stay visible
    for ax, bits in zip(axes, bit_classes, strict=True):
        for i, site in enumerate(sites):
            marker, linestyle = styles[i % len(styles)]
            points = sorted((e["ber"], e[f"{metric}_mean"], e[f"{metric}_std"]) for e in summary
                            if e["bits"] == bits and e["site"] == site)
            if points:
                x, y, err = map(np.asarray, zip(*points, strict=True))
                ax.errorbar(x, y, yerr=clipped_error_bars(y, err), marker=marker, linestyle=linestyle, capsize=3, alpha=0.85, label=site)
        ax.axhline(clean[metric], color="black", linestyle="--", linewidth=1, label="no faults")
        if chance is not None:
            ax.axhline(chance, color="grey", linestyle=":", linewidth=1, label="majority class")
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("bit error rate (per eligible bit)")
        ax.set_title(f"{bits} bits")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(metric)
    axes[-1].legend(loc="lower left", fontsize="small")
    if title:
        figure.suptitle(title)
    path = Path(path)
    figure.savefig(path, dpi=120)
    return path


# ----------------------------------------------------------------------------------------------------------
# CLI (the settings: hfbert.robustness_settings)
# ----------------------------------------------------------------------------------------------------------


def _load_model(model_dir: str, dtype: str | None, eager: bool) -> tuple[nn.Module, Any]:
    """Any sequence-classification folder the Auto classes know (``hfbert`` folders are registered on import)."""
    kwargs: dict[str, Any] = {"attn_implementation": "eager"} if eager else {}
    try:
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except (OSError, ValueError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UsageError(f"--model {model_dir}: cannot load a sequence classifier and its tokenizer ({first})") \
            from None
    if dtype is not None:
        model = model.to(resolve_dtype(dtype))
    return model.eval(), tokenizer


def _report_trial(row: dict[str, Any]) -> None:
    print(f"  {row['site']} {row['bits']} ber={row['ber']:.0e} trial {row['trial']}: accuracy {row['accuracy']:.4f} "
          f"({row['n_flips']} flips)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """``hfbert robustness``; bad settings or input: one line on stderr, exit status 2."""
    args = command_parser().parse(argv)
    return run_command("hfbert robustness", lambda: _study(args))


def _study(args: RobustnessArguments) -> int:
    model, tokenizer = _load_model(args.model, args.dtype, eager="attention_probs" in args.sites)
    texts, pairs, labels = load_examples(args.data, args.text_column, args.label_column,
                                         text_pair_column=args.text_pair_column,
                                         label2id=getattr(model.config, "label2id", None),
                                         max_examples=args.max_examples)
    batches = encode_batches(tokenizer, texts, pairs, batch_size=args.batch_size, max_length=args.max_length)
    try:
        clean, rows = run_study(model, batches, labels, bers=args.ber, sites=args.sites, bit_classes=args.bits,
                                trials=args.trials, seed=args.seed, target=args.target, progress=_report_trial)
    except ValueError as err:  # an unknown site or bit class, named by the fault injector
        raise UsageError(str(err)) from None
    summary = summarise(rows)
    settings = dataclasses.asdict(args)
    settings["n_examples"] = len(labels)
    settings["model_class"] = type(model).__name__
    settings["dtype_used"] = str(next(model.parameters()).dtype).removeprefix("torch.")
    paths = write_results(args.output, clean=clean, rows=rows, summary=summary, settings=settings)
    majority = float(np.bincount(labels).max() / len(labels))
    plot_curves(summary, clean, Path(args.output) / "robustness.png", metric=args.metric, chance=majority,
                title=f"{type(model).__name__}: {args.target.removesuffix('s')} bit flips, {len(labels)} examples")
    print(f"clean: accuracy {clean['accuracy']:.4f}  macro-F1 {clean['macro_f1']:.4f}")
    for entry in summary:
        print(f"{entry['site']:>12} {entry['bits']:>10} ber={entry['ber']:.0e}  "
              f"{args.metric} {entry[args.metric + '_mean']:.4f} +- {entry[args.metric + '_std']:.4f}  "
              f"flips {entry['n_flips_mean']:.1f}")
    print(f"wrote {paths['csv']}, {paths['json']} and {Path(args.output) / 'robustness.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
