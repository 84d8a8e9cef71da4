"""SQuAD 2.0 exact match and F1 in percent, split into HasAns/NoAns, and the best no-answer threshold.

An unanswerable question has no gold text: predicting ``""`` scores 1 on it, anything else 0. ``exact_match``
and ``f1`` score ``prediction_text`` as given. The threshold search then answers a question with its
``prediction_text`` iff ``no_answer_probability <= threshold`` (abstains otherwise) and tries every distinct
``no_answer_probability`` (equal ones flip together) plus "never answer"; ``best_f1`` / ``best_exact_match``
are the best totals and ``best_*_thresh`` the thresholds reaching them. To search the threshold of a span
model, pass its best non-null span as ``prediction_text`` and ``null score - best span score`` as
``no_answer_probability`` (what :func:`hfbert.tasks.best_null_threshold` does).

Differences from the Hub's ``squad_v2``: keys say ``exact_match`` (not ``exact``), as hfbert's recipes report;
``no_answer_probability`` is float64, so a searched threshold is exactly one of the given scores; the HasAns/NoAns
split is reported only when both kinds of question occur. Text with CJK characters is scored per character.
"""

import evaluate
from hfbert.metrics.squad_scoring import questions_by_id
from hfbert.metrics.squad_scoring import score_question
from hfbert.metrics.squad_scoring import squad_features

_KWARGS_DESCRIPTION = """
Args:
    predictions: dicts with "id", "prediction_text" ("" = unanswerable) and "no_answer_probability" (any score
        that grows with the belief that the question has no answer).
    references: dicts with "id" and "answers" ({"text": [...], "answer_start": [...]}; no text = unanswerable).
Returns:
    exact_match, f1, total; HasAns_exact_match, HasAns_f1, HasAns_total and the same for NoAns when both kinds
    occur; best_exact_match, best_exact_match_thresh, best_f1, best_f1_thresh.
Examples:
    >>> metric = evaluate.load(hfbert.metrics.path("squad_v2"))
    >>> metric.compute(
    ...     predictions=[{"id": "q", "prediction_text": "Paris", "no_answer_probability": 0.3}],
    ...     references=[{"id": "q", "answers": {"text": [], "answer_start": []}}])["best_f1"]
    100.0
"""


class SquadV2(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="SQuAD 2.0 exact match and F1, HasAns/NoAns, and the best no-answer threshold.",
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=squad_features(no_answer_probability=True),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("references is empty: nothing to score")
        preds, golds = questions_by_id(predictions, references)
        ids = list(golds)
        scores = {qid: score_question(preds[qid]["prediction_text"], golds[qid]) for qid in ids}
        null_scores = {qid: score_question("", golds[qid]) for qid in ids}
        has_answer = {qid: null_scores[qid][0] == 0.0 for qid in ids}  # abstaining is right only without answers
        result = _aggregate(scores, ids)
        for name, wanted in (("HasAns", True), ("NoAns", False)):
            part = [qid for qid in ids if has_answer[qid] == wanted]
            if part and len(part) < len(ids):
                result.update({f"{name}_{key}": value for key, value in _aggregate(scores, part).items()})
        no_answer = {qid: preds[qid]["no_answer_probability"] for qid in ids}
        for index, metric in enumerate(("exact_match", "f1")):
            threshold, best = _best_threshold(scores, null_scores, no_answer, index)
            result[f"best_{metric}"], result[f"best_{metric}_thresh"] = best, threshold
        return result


def _aggregate(scores, ids):
    return {
        "exact_match": 100.0 * sum(scores[qid][0] for qid in ids) / len(ids),
        "f1": 100.0 * sum(scores[qid][1] for qid in ids) / len(ids),
        "total": float(len(ids)),
    }


def _best_threshold(scores, null_scores, no_answer, index):
    """Sweep the thresholds in increasing order: each one switches its question from abstaining to answering.

    Sorting once keeps this O(n log n). Returns ``(threshold, score_in_percent)``.
    """
    score = sum(null[index] for null in null_scores.values())
    ordered = sorted(no_answer, key=no_answer.get)
    best_score, best_threshold = score, no_answer[ordered[0]] - 1.0
    for i, qid in enumerate(ordered):
        score += scores[qid][index] - null_scores[qid][index]
        tied_with_next = i + 1 < len(ordered) and no_answer[ordered[i + 1]] == no_answer[qid]
        if not tied_with_next and score > best_score:
            best_score, best_threshold = score, no_answer[qid]
    return float(best_threshold), 100.0 * best_score / len(ordered)
