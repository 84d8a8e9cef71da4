"""Pearson and Spearman correlation and mean squared error of real-valued predictions (scipy), the scores
hfbert's classification recipe reports for regression tasks (STS-B)."""

import datasets
import evaluate
import numpy as np
from scipy.stats import pearsonr
from scipy.stats import spearmanr

_KWARGS_DESCRIPTION = """
Args:
    predictions: predicted values (the model's single output per example).
    references: gold values.
Returns:
    pearson, spearman, mse.
Examples:
    >>> metric = evaluate.load(hfbert.metrics.path("regression"))
    >>> metric.compute(predictions=[1.0, 2.0, 4.0], references=[1.0, 3.0, 4.0])["spearman"]
    1.0
"""


class Regression(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Pearson and Spearman correlation and MSE of real-valued predictions.",
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("float64"),
                                        "references": datasets.Value("float64")}),
        )

    def _compute(self, predictions, references):
        if len(predictions) < 2:
            raise ValueError(f"correlations need at least 2 examples, got {len(predictions)}")
        pred, gold = np.asarray(predictions, dtype=np.float64), np.asarray(references, dtype=np.float64)
        return {
            "pearson": float(pearsonr(pred, gold)[0]),
            "spearman": float(spearmanr(pred, gold)[0]),
            "mse": float(np.mean((pred - gold) ** 2)),
        }
