"""SQuAD exact-match / F1 and the SQuAD 2.0 null-threshold search, for the question-answering recipe.

transformers 5 no longer ships the SQuAD metric and ``evaluate.load("squad")`` needs the Hub, so hfbert has
its own: the per-answer scoring (the official SQuAD v1.1 / v2.0 rules, with CJK text scored per character) lives
in :mod:`hfbert.metrics.squad_scoring`, the totals and the threshold search in the ``hfbert.metrics`` modules
``squad`` and ``squad_v2``, which :func:`squad_evaluate` and :func:`best_null_threshold` call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..metrics import shared
from ..metrics.squad_scoring import exact_match, f1, normalize_answer, score_question

__all__ = ["best_null_threshold", "exact_match", "f1", "normalize_answer", "score_question", "squad_evaluate"]

_MISSING = "\0missing"  # a prediction text that matches no answer, not even the empty one


def _squad_v2_inputs(
    texts: Mapping[str, str], no_answer: Mapping[str, float], references: Mapping[str, Sequence[str] | str]
) -> dict[str, list[dict]]:
    preds, refs = [], []
    for qid, answers in references.items():
        golds = [answers] if isinstance(answers, str) else list(answers)
        refs.append({"id": qid, "answers": {"text": golds, "answer_start": [-1] * len(golds)}})
        preds.append({"id": qid, "prediction_text": texts[qid], "no_answer_probability": float(no_answer[qid])})
    return {"predictions": preds, "references": refs}


def squad_evaluate(
    predictions: Mapping[str, str], references: Mapping[str, Sequence[str] | str]
) -> dict[str, float]:
    """Official-style SQuAD scores in percent, split into HasAns/NoAns when both kinds occur.

    ``references`` maps question id -> list of gold answer texts (empty list = unanswerable). A question
    without a prediction scores 0 and is counted in ``missing`` rather than raising, as the official
    script does, so a partial run is still scored honestly. Scored by the ``hfbert.metrics`` module ``squad_v2``.
    """
    if not references:
        raise ValueError("references is empty: nothing to score")
    unknown = sorted(set(predictions) - set(references))
    if unknown:
        raise ValueError(f"{len(unknown)} predictions have ids that are not in the references, e.g. {unknown[:3]}")
    texts = {qid: predictions.get(qid, _MISSING) for qid in references}
    result = shared("squad_v2").compute(**_squad_v2_inputs(texts, dict.fromkeys(references, 0.0), references))
    result = {k: v for k, v in result.items() if not k.startswith("best_")}
    result["missing"] = float(len(set(references) - set(predictions)))
    return result


def best_null_threshold(
    null_score_diffs: Mapping[str, float],
    best_answers: Mapping[str, str],
    references: Mapping[str, Sequence[str] | str],
    metric: str = "f1",
) -> tuple[float, float]:
    """Search the SQuAD 2.0 threshold on a dev set: answer iff ``null_score - best_span_score <= threshold``.

    Every distinct score difference is a candidate (plus "never answer"); the one that maximises the total
    ``metric`` ("f1" or "exact_match") wins. Returns ``(threshold, score_in_percent)``. The search is the
    ``hfbert.metrics`` module ``squad_v2``'s, given the best non-null answers and the differences.
    """
    if metric not in ("f1", "exact_match"):
        raise ValueError(f"metric must be 'f1' or 'exact_match', got {metric!r}")
    if not references:
        raise ValueError("references is empty: nothing to score")
    missing = sorted(set(references) - set(null_score_diffs))
    if missing:
        raise ValueError(f"{len(missing)} reference ids have no null-score difference, e.g. {missing[:3]}")
    texts = {qid: best_answers.get(qid, "") for qid in references}
    result = shared("squad_v2").compute(**_squad_v2_inputs(texts, null_score_diffs, references))
    return result[f"best_{metric}_thresh"], result[f"best_{metric}"]
