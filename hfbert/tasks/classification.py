"""Sequence classification: label maps, input checks and metrics.

Three problem types, as in transformers' ``BertForSequenceClassification``: ``single_label_classification``
(cross-entropy over the [CLS] pooled output), ``regression`` (``num_labels == 1``, MSE) and
``multi_label_classification`` (one sigmoid per label, BCE). The downstream head is new and needs its own
label map: ``id2label``/``label2id`` are built here, stored in the config, and every label the
data uses is checked against them up front.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..metrics import shared
from .windows import combine_windows, document_labels

PROBLEM_TYPES = ("single_label_classification", "regression", "multi_label_classification")


def check_columns(available: Sequence[str], required: Iterable[str | None], split: str = "data") -> None:
    """Raise ValueError naming a missing column and listing the columns that exist."""
    for column in required:
        if column is not None and column not in available:
            raise ValueError(f"column {column!r} not found in the {split}; available columns: {list(available)}")


def build_label_maps(labels: Iterable, multi_label: bool = False) -> tuple[dict[str, int], dict[int, str]]:
    """``label2id``/``id2label`` over the sorted distinct labels (flattening lists when ``multi_label``).

    Labels are keyed as strings because ``config.json`` stores them as JSON object keys.
    """
    values = set()
    for label in labels:
        if multi_label:
            if not isinstance(label, (list, tuple)):
                raise TypeError(f"multi-label rows must hold a list of labels, got {label!r}")
            values.update(str(v) for v in label)
        else:
            values.add(str(label))
    if not values:
        raise ValueError("no labels found: the label column is empty")
    ordered = sorted(values, key=lambda v: (not _is_number(v), float(v) if _is_number(v) else 0.0, v))
    label2id = {v: i for i, v in enumerate(ordered)}
    return label2id, {i: v for v, i in label2id.items()}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def encode_labels(
    labels: Sequence, label2id: Mapping[str, int] | None, problem_type: str
) -> list[int] | list[float] | list[list[float]]:
    """Label column -> model targets; an unknown label raises ValueError listing the known labels."""
    if problem_type not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
    if problem_type == "regression":
        try:
            return [float(v) for v in labels]
        except (TypeError, ValueError):
            raise ValueError(f"regression targets must be numbers; got e.g. {labels[:3]!r}") from None
    assert label2id is not None
    unknown = sorted({str(v) for row in labels for v in (row if problem_type.startswith("multi") else [row])}
                     - set(label2id))
    if unknown:
        raise ValueError(f"unknown label(s) {unknown[:5]}; known labels: {sorted(label2id, key=label2id.get)}")
    if problem_type == "single_label_classification":
        return [label2id[str(v)] for v in labels]
    out = []
    for row in labels:
        vec = [0.0] * len(label2id)
        for v in row:
            vec[label2id[str(v)]] = 1.0
        out.append(vec)
    return out


def metric_inputs(predictions: np.ndarray, labels: np.ndarray, problem_type: str) -> dict:
    """Logits and labels -> a metric's ``predictions``/``references``: class ids (argmax), 0/1 label vectors
    (sigmoid > 0.5) or values (regression)."""
    if problem_type not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    if problem_type == "regression":
        return {"predictions": predictions.reshape(-1), "references": labels.reshape(-1).astype(float)}
    if problem_type == "multi_label_classification":
        return {"predictions": (predictions > 0).astype(int), "references": labels.astype(int)}
    return {"predictions": predictions.argmax(-1), "references": labels}


def classification_metrics(predictions: np.ndarray, labels: np.ndarray, problem_type: str) -> dict[str, float]:
    """Accuracy, F1, MCC (classification); Pearson, Spearman, MSE (regression); micro-F1 (multi-label).

    ``predictions`` are the model's logits. Binary F1 is the F1 of class 1; with more classes it is the
    macro average (GLUE reports binary F1 for MRPC/QQP and MCC for CoLA). Scored by the ``hfbert.metrics``
    modules ``classification`` (config ``multilabel`` for multi-label) and ``regression``.
    """
    inputs = metric_inputs(predictions, labels, problem_type)
    if problem_type == "regression":
        return shared("regression").compute(**inputs)
    if problem_type == "multi_label_classification":
        return shared("classification", "multilabel").compute(**inputs)
    average = "binary" if np.asarray(predictions).shape[-1] == 2 else "macro"
    return shared("classification").compute(**inputs, average=average)


def metrics_for_trainer(problem_type: str, metric=None, documents: Sequence[int] | None = None):
    """A ``compute_metrics`` callable for ``transformers.Trainer``.

    ``metric``: by default hfbert's own modules (:func:`classification_metrics`). Otherwise a metric name or
    path for ``evaluate.load`` (e.g. a Hub metric), or a loaded module or ``evaluate.combine(...)``; it is given
    the :func:`metric_inputs` of the evaluation (class ids, 0/1 vectors or values).

    ``documents``: when the evaluated rows are windows of longer texts, each window's document
    (:func:`~hfbert.tasks.windows.window_texts`); the windows' logits are then averaged per document
    (:func:`~hfbert.tasks.windows.combine_windows`) and every document is scored once.
    """
    if problem_type not in PROBLEM_TYPES:
        raise ValueError(f"problem_type must be one of {PROBLEM_TYPES}, got {problem_type!r}")
    if isinstance(metric, str):
        import evaluate

        metric = evaluate.load(metric)
    if metric is not None and not callable(getattr(metric, "compute", None)):
        raise TypeError(f"metric must be a name or an evaluate module with .compute, got {type(metric).__name__}")

    def compute_metrics(eval_pred) -> dict[str, float]:
        logits = eval_pred.predictions[0] if isinstance(eval_pred.predictions, tuple) else eval_pred.predictions
        labels = eval_pred.label_ids
        if documents is not None:
            logits, labels = combine_windows(logits, documents), document_labels(labels, documents)
        if metric is None:
            return classification_metrics(logits, labels, problem_type)
        return metric.compute(**metric_inputs(logits, labels, problem_type))

    return compute_metrics
