"""The fine-tuning protocol of the field, for ``hfbert evaluate``: what a pretrained model is worth, measured the way
the BERT paper, Turc et al. and Dodge et al. measure it.

For every task of a suite:

* **a selection split** is carved from the training rows (``selection_rows``, drawn once with the task's split
  seed); the learning rate is chosen on it, and the best checkpoint too under the ``stable`` preset. Scores are
  reported on the task's held-out rows (its validation split), which choose nothing;
* **label budgets** (``train_sizes``): each size draws its training rows from the rest, afresh for every seed, and
  every size trains for the same number of optimizer steps (``max_steps``), so a small size is not also a short run;
* **a learning-rate grid** (``learning_rates``): every rate runs with the first ``selection_seeds`` seeds; the rate
  with the best mean score on the selection split is kept, and the remaining seeds run at that rate only;
* **a random-weights baseline** (``baseline``): the same architecture and tokenizer with fresh weights, drawn with
  each fine-tuning seed, under the same protocol. The difference to it is reported with a 95% paired bootstrap
  interval: rows of the held-out split and seeds are both resampled, the model and the baseline with the same draw.

Per setting, the held-out score's mean, standard deviation, median, and the count of failed runs: runs at or below
a constant predictor (the training rows' majority class for accuracy, 0 for a correlation, MCC or entity F1).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..settings import UsageError
from ..tasks.registry import lower_is_better
from .suites import SuiteTask
from .task_files import TaskFiles

__all__ = ["ARMS", "PRESETS", "Protocol", "bootstrap_difference", "chosen_rate", "constant_score", "held_out_rows",
           "spread", "write_protocol_files"]

ARMS = ("model", "baseline")  # the pretrained model, and its architecture and tokenizer from random weights
FULL = "full"

#: Named fine-tuning presets. ``suite``: the suite's own settings (epochs, rate). ``stable``: in the spirit of
#: Mosbach et al. 2021 -- AdamW with bias correction (torch's, which Trainer uses), a step budget instead of a number
#: of epochs, warm-up over the first 10% of the steps, a small grid of rates, and the checkpoint that scores best on
#: the selection split, evaluated ten times along the run.
PRESETS = {
    "suite": {},
    "stable": {"learning_rates": (1e-4, 3e-4, 1e-3), "warmup_steps": 0.1, "evaluations": 10},
}

@dataclass(frozen=True)
class Protocol:
    """How every task is fine-tuned and scored (see the module docstring)."""

    learning_rates: tuple[float, ...] | None = None  # None: each task's own rate
    train_sizes: tuple[int | str, ...] = (FULL,)
    max_steps: int | None = None  # None: the suite's epochs over the full training rows, for every size
    selection_rows: int | None = None  # None: 10% of the training rows, at most 1,000
    selection_seeds: int | None = None  # None: every seed runs every rate
    baseline: bool = False
    preset: str = "suite"
    reinit_pooler: bool = False
    reinit_layers: int = 0
    bootstrap_samples: int = 2000

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise UsageError(f"--preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        rates = self.rates
        if rates is not None and (not rates or any(not r > 0 for r in rates)):
            raise UsageError(f"--learning_rates must be positive numbers, got {list(rates)}")
        if rates is not None and len(set(rates)) != len(rates):
            raise UsageError(f"--learning_rates {list(rates)} repeats a rate")
        for size in self.train_sizes:
            if size != FULL and not (isinstance(size, int) and size >= 1):
                raise UsageError(f"--train_sizes takes row counts >= 1 or 'full', got {size!r}")
        if len(set(self.train_sizes)) != len(self.train_sizes):
            raise UsageError(f"--train_sizes {list(self.train_sizes)} repeats a size")
        for name in ("max_steps", "selection_rows", "selection_seeds"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UsageError(f"--{name} must be >= 1, got {value}")
        if self.reinit_layers < 0:
            raise UsageError(f"--reinit_layers must be >= 0, got {self.reinit_layers}")

    @property
    def rates(self) -> tuple[float, ...] | None:
        return self.learning_rates or PRESETS[self.preset].get("learning_rates")

    @property
    def active(self) -> bool:
        """Whether anything beyond the suite's plain runs is asked for (otherwise ``hfbert evaluate`` trains on all
        the training rows and scores on the validation rows, once per seed, as it always did)."""
        return (self.rates is not None and len(self.rates) > 1) or self.train_sizes != (FULL,) or self.baseline \
            or self.preset != "suite" or self.max_steps is not None or self.selection_rows is not None \
            or self.reinit_pooler or self.reinit_layers > 0

    def settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse_sizes(values: Sequence[str | int]) -> tuple[int | str, ...]:
    """``--train_sizes 200 1000 full`` as a tuple of ints and ``"full"``."""
    sizes = []
    for value in values:
        text = str(value).strip().lower()
        if text in (FULL, "all"):
            sizes.append(FULL)
            continue
        try:
            sizes.append(int(text.replace(",", "").replace("_", "")))
        except ValueError:
            raise UsageError(f"--train_sizes takes row counts or 'full', got {value!r}") from None
    return tuple(sizes)


# ----------------------------------------------------------------------------------------------------------------
# The rows: a selection split, a pool to draw the label budgets from, and the held-out rows


@dataclass(frozen=True)
class ProtocolFiles:
    """A task's rows under the protocol: ``selection.jsonl`` (carved from the training rows), ``pool.jsonl`` (the
    rest of them) and the held-out file (the task's validation rows)."""

    selection_file: Path
    pool_file: Path
    held_out_file: Path
    selection_rows: int
    pool_rows: int
    held_out_rows: int

    def size(self, size: int | str) -> int:
        return self.pool_rows if size == FULL else min(int(size), self.pool_rows)


def write_protocol_files(files: TaskFiles, selection_rows: int | None, seed: int, folder: Path) -> ProtocolFiles:
    """Carve the selection split out of ``files``' training rows (shuffled with ``seed``); the rest is the pool."""
    rows = files.train_file.read_text(encoding="utf-8").splitlines()
    wanted = selection_rows if selection_rows is not None else min(1000, max(1, len(rows) // 10))
    if wanted >= len(rows):
        raise UsageError(f"{files.train_file}: a selection split of {wanted} rows leaves no training rows "
                         f"({len(rows)} rows); lower --selection_rows")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    chosen = set(order[:wanted])
    folder.mkdir(parents=True, exist_ok=True)
    selection, pool = folder / "selection.jsonl", folder / "pool.jsonl"
    selection.write_text("".join(rows[i] + "\n" for i in sorted(chosen)), encoding="utf-8")
    pool.write_text("".join(rows[i] + "\n" for i in range(len(rows)) if i not in chosen), encoding="utf-8")
    return ProtocolFiles(selection, pool, files.validation_file, wanted, len(rows) - wanted, files.validation_rows)


def budget_file(files: ProtocolFiles, size: int | str, seed: int, folder: Path) -> Path:
    """The training rows of one label budget and seed: ``size`` rows of the pool drawn with ``seed`` (the model and
    the baseline read the same file)."""
    if size == FULL or int(size) >= files.pool_rows:
        return files.pool_file
    rows = files.pool_file.read_text(encoding="utf-8").splitlines()
    picked = sorted(random.Random(f"{seed}-{size}").sample(range(len(rows)), int(size)))
    path = folder / f"train-{size}-seed-{seed}.jsonl"
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(rows[i] + "\n" for i in picked), encoding="utf-8")
    return path


def held_out_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# ----------------------------------------------------------------------------------------------------------------
# Choosing, and what is reported


def better(metric: str) -> Callable[[float, float], bool]:
    """``better(metric)(a, b)``: whether score ``a`` beats ``b`` (NaN never does)."""
    lower = lower_is_better(metric)
    return lambda a, b: math.isfinite(a) and (not math.isfinite(b) or (a < b if lower else a > b))


def chosen_rate(selection_scores: Mapping[float, Sequence[float]], metric: str) -> float:
    """The learning rate whose mean score on the selection split is best (ties: the first in the grid)."""
    beats = better(metric)
    best, best_score = None, math.nan
    for rate, scores in selection_scores.items():
        finite = [s for s in scores if math.isfinite(s)]
        score = statistics.fmean(finite) if finite and len(finite) == len(scores) else math.nan
        if best is None or beats(score, best_score):
            best, best_score = rate, score
    return best


def constant_score(task: SuiteTask, train_rows: Sequence[Mapping], held_out: Sequence[Mapping]) -> float | None:
    """What a constant predictor scores on the held-out rows, for the task's first metric, as its kind says
    (:attr:`~hfbert.tasks.registry.TaskKind.floors`): the training rows' majority class for accuracy; 0 for a
    correlation, MCC or entity F1. None where there is no such floor."""
    floor = task.kind.floors.get(task.metric.removeprefix("eval_"))
    if floor != "majority":
        return floor
    column = task.columns["label"]
    counts: dict[str, int] = {}
    for row in train_rows:
        counts[str(row[column])] = counts.get(str(row[column]), 0) + 1
    if not counts or not held_out:
        return None
    majority = max(counts, key=counts.get)
    return sum(str(row[column]) == majority for row in held_out) / len(held_out)


def spread(values: Mapping[int, float], floor: float | None = None) -> dict[str, Any]:
    """Mean, sample standard deviation, median, min and max of a score over seeds, the values by seed, and the count
    of failed runs (at or below ``floor``, or not finite)."""
    numbers = list(values.values())
    finite = [v for v in numbers if math.isfinite(v)]
    whole = len(finite) == len(numbers)
    failed = sum(not math.isfinite(v) or (floor is not None and v <= floor + 1e-12) for v in numbers)
    return {"mean": statistics.fmean(numbers) if whole else math.nan,
            "std": (statistics.stdev(numbers) if len(numbers) > 1 else 0.0) if whole else math.nan,
            "median": statistics.median(finite) if finite else math.nan,
            "failed": failed if floor is not None or not whole else None,
            "floor": floor, "values": {str(seed): value for seed, value in values.items()}}


def _pearson_rows(x, y):
    """Pearson correlation of each row of x with the same row of y: x, y of shape (draws, rows)."""
    import numpy as np

    x = x - x.mean(axis=-1, keepdims=True)
    y = y - y.mean(axis=-1, keepdims=True)
    denominator = np.sqrt((x * x).sum(-1) * (y * y).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (x * y).sum(-1) / denominator, 0.0)


def bootstrap_difference(model: Mapping[int, float], baseline: Mapping[int, float], *,
                         rows: tuple[str, Mapping[int, Any], Mapping[int, Any], Any] | None = None,
                         samples: int = 2000, seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """The difference ``model - baseline`` of the mean score over seeds, with a paired bootstrap interval.

    ``model`` and ``baseline`` map each seed to its score. With ``rows = (kind, model_predictions,
    baseline_predictions, gold)`` (``kind`` ``"accuracy"`` or ``"pearson"``; predictions by seed, one per held-out
    row), each draw resamples the seeds and the held-out rows, the same draw for both; otherwise the seeds only.
    Returns ``difference``, ``low``, ``high``, ``level``, ``resampled`` ("seeds and rows" or "seeds") and
    ``pairs`` (the seeds both have)."""
    import numpy as np

    seeds = [s for s in model if s in baseline]
    if not seeds:
        raise ValueError("no seed has both a model and a baseline score")
    point = statistics.fmean(model[s] - baseline[s] for s in seeds)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(seeds), size=(samples, len(seeds)))
    if rows is None:
        differences = np.array([model[s] - baseline[s] for s in seeds])[picks].mean(axis=1)
        resampled = "seeds"
    else:
        kind, model_rows, baseline_rows, gold = rows
        gold = np.asarray(gold)
        m = np.stack([np.asarray(model_rows[s]) for s in seeds])  # (seeds, rows)
        b = np.stack([np.asarray(baseline_rows[s]) for s in seeds])
        n = gold.shape[0]
        differences = np.empty(samples)
        for start in range(0, samples, 100):  # draws in blocks, to bound memory
            stop = min(samples, start + 100)
            index = rng.integers(0, n, size=(stop - start, n))  # (draws, rows)
            total = np.zeros(stop - start)
            for column in range(len(seeds)):
                chosen = picks[start:stop, column]
                m_rows = np.take_along_axis(m[chosen], index, axis=1)
                b_rows = np.take_along_axis(b[chosen], index, axis=1)
                g_rows = gold[index]
                if kind == "accuracy":
                    total += (m_rows == g_rows).mean(1) - (b_rows == g_rows).mean(1)
                elif kind == "pearson":
                    total += _pearson_rows(m_rows.astype(float), g_rows.astype(float)) - _pearson_rows(
                        b_rows.astype(float), g_rows.astype(float))
                else:
                    raise ValueError(f"no row-level bootstrap for {kind!r}")
            differences[start:stop] = total / len(seeds)
        resampled = "seeds and rows"
    tail = (1 - level) / 2
    low, high = np.quantile(differences, [tail, 1 - tail])
    return {"difference": point, "low": float(low), "high": float(high), "level": level, "resampled": resampled,
            "pairs": len(seeds)}
