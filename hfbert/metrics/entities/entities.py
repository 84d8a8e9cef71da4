"""Entity-level precision, recall and F1 (micro average), token accuracy and per-type F1 of tag sequences
(seqeval, conlleval rules: an ``I-X`` without a preceding ``B-X`` starts an entity).

The scores are one flat dict of floats (``f1``, ``PER_f1``, ...) rather than the Hub ``seqeval``'s nested
per-type dicts, the keys hfbert's recipes report. ``evaluate.evaluator("token-classification")`` takes the module
as ``metric=``: it passes one list of tags per sentence, as this module expects.
"""

import datasets
import evaluate
from seqeval.metrics import accuracy_score
from seqeval.metrics import classification_report

_KWARGS_DESCRIPTION = """
Args:
    predictions: one list of predicted tags (e.g. "B-PER", "I-PER", "O") per sentence.
    references: one list of gold tags per sentence, as long as its prediction.
Returns:
    precision, recall, f1 (entity-level, micro average), accuracy (per token) and <TYPE>_f1 for every entity
    type seen in the references or predictions.
Examples:
    >>> metric = evaluate.load(hfbert.metrics.path("entities"))
    >>> metric.compute(predictions=[["B-PER", "O", "B-LOC"]], references=[["B-PER", "O", "O"]])["f1"]
    0.6666666666666666
"""


class Entities(evaluate.Metric):
    def _info(self):
        tags = datasets.Sequence(datasets.Value("string"))
        return evaluate.MetricInfo(
            description="Entity-level micro precision/recall/F1, token accuracy and per-type F1 (seqeval).",
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": tags, "references": tags}),
        )

    def _compute(self, predictions, references):
        for i, (pred, gold) in enumerate(zip(predictions, references)):
            if len(pred) != len(gold):
                raise ValueError(f"sentence {i}: {len(gold)} reference tags but {len(pred)} predicted tags")
        report = classification_report(references, predictions, output_dict=True, zero_division=0)
        scores = {
            "precision": report["micro avg"]["precision"],
            "recall": report["micro avg"]["recall"],
            "f1": report["micro avg"]["f1-score"],
            "accuracy": accuracy_score(references, predictions),
        }
        for name, row in report.items():
            if name not in ("micro avg", "macro avg", "weighted avg"):
                scores[f"{name}_f1"] = row["f1-score"]
        return {k: float(v) for k, v in scores.items()}
