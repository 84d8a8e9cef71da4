"""Accuracy, F1 and Matthews correlation of predicted class ids; micro/macro F1 and subset accuracy of
multi-label predictions (scikit-learn).

These are the scores hfbert's classification recipe reports: GLUE reports binary F1 for MRPC/QQP and MCC for
CoLA. Predictions are class ids, as ``evaluate.evaluator("text-classification")`` passes them (with
``label_mapping=model.config.label2id``).
"""

import datasets
import evaluate
from sklearn.metrics import accuracy_score
from sklearn.metrics import f1_score
from sklearn.metrics import matthews_corrcoef

_DESCRIPTION = """Single-label: accuracy, F1 and MCC of predicted class ids. Multi-label (config "multilabel"):
micro and macro F1 and subset accuracy of 0/1 label vectors."""

_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted class ids (config "multilabel": one 0/1 vector per example).
    references: gold class ids (config "multilabel": one 0/1 vector per example).
    average: single-label only; "binary" (the F1 of class 1), "macro", "micro" or "weighted". Default: "binary"
        when every id is 0 or 1, else "macro" -- what the recipe chooses for two and for more classes.
Returns:
    single-label: accuracy, f1, mcc. Multi-label: f1_micro, f1_macro, subset_accuracy.
Examples:
    >>> metric = evaluate.load(hfbert.metrics.path("classification"))
    >>> metric.compute(predictions=[0, 1, 1, 0], references=[0, 1, 0, 0])
    {'accuracy': 0.75, 'f1': 0.6666666666666666, 'mcc': 0.5773502691896258}
"""

AVERAGES = ("binary", "macro", "micro", "weighted")


class Classification(evaluate.Metric):
    def _info(self):
        if self.config_name not in ("default", "multilabel"):
            raise ValueError(f"config_name must be 'default' or 'multilabel', got {self.config_name!r}")
        label = datasets.Value("int64")
        if self.config_name == "multilabel":
            label = datasets.Sequence(label)
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": label, "references": label}),
        )

    def _compute(self, predictions, references, average=None):
        if self.config_name == "multilabel":
            if average is not None:
                raise ValueError("average applies to single-label predictions; multi-label reports micro and macro F1")
            widths = {len(row) for row in (*predictions, *references)}
            if len(widths) > 1:
                raise ValueError(f"multi-label vectors must all have the same length, got lengths {sorted(widths)}")
            return {
                "f1_micro": float(f1_score(references, predictions, average="micro", zero_division=0)),
                "f1_macro": float(f1_score(references, predictions, average="macro", zero_division=0)),
                "subset_accuracy": float(accuracy_score(references, predictions)),
            }
        if average is None:
            average = "binary" if set(predictions) | set(references) <= {0, 1} else "macro"
        if average not in AVERAGES:
            raise ValueError(f"average must be one of {AVERAGES}, got {average!r}")
        return {
            "accuracy": float(accuracy_score(references, predictions)),
            "f1": float(f1_score(references, predictions, average=average, zero_division=0)),
            "mcc": float(matthews_corrcoef(references, predictions)),
        }
