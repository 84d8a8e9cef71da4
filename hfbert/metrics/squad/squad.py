"""SQuAD v1.1 exact match and F1, in percent, following the official evaluation script (answers normalised:
lower case, punctuation and a/an/the removed; the best of the gold answers counts).

Inputs are the SQuAD datasets' format, as ``evaluate.evaluator("question-answering")`` passes them. Text with
CJK characters is scored per character (see :mod:`hfbert.metrics.squad_scoring`), so Chinese F1 is not EM.
"""

import evaluate
from hfbert.metrics.squad_scoring import questions_by_id
from hfbert.metrics.squad_scoring import score_question
from hfbert.metrics.squad_scoring import squad_features

_KWARGS_DESCRIPTION = """
Args:
    predictions: dicts with "id" and "prediction_text".
    references: dicts with "id" and "answers" ({"text": [...], "answer_start": [...]}); one per prediction.
Returns:
    exact_match, f1 (percent).
Examples:
    >>> metric = evaluate.load(hfbert.metrics.path("squad"))
    >>> metric.compute(predictions=[{"id": "q", "prediction_text": "the Eiffel tower"}],
    ...                references=[{"id": "q", "answers": {"text": ["Eiffel Tower"], "answer_start": [0]}}])
    {'exact_match': 100.0, 'f1': 100.0}
"""


class Squad(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="SQuAD v1.1 exact match and F1 (official rules).",
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=squad_features(),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("references is empty: nothing to score")
        preds, golds = questions_by_id(predictions, references)
        scores = [score_question(preds[qid]["prediction_text"], answers) for qid, answers in golds.items()]
        return {
            "exact_match": 100.0 * sum(em for em, _ in scores) / len(scores),
            "f1": 100.0 * sum(f1 for _, f1 in scores) / len(scores),
        }
