"""SQuAD answer scoring, the official SQuAD v1.1 / v2.0 evaluation scripts' rules, for the metric modules ``squad``
and ``squad_v2`` (and :mod:`hfbert.tasks`, which scores through them):

* answers are normalised (lower case, punctuation and the articles a/an/the removed, whitespace collapsed);
* EM is 1 when the normalised prediction equals any normalised gold answer, F1 is the bag-of-tokens F1
  against the best gold answer;
* an unanswerable question has the gold answer ``""``: predicting ``""`` scores 1, anything else 0.

Deviation (on purpose): text containing CJK characters is scored per character, because Chinese has no
spaces and whole-sentence "tokens" would make F1 collapse into EM (the CMRC 2018 evaluation does the same).
Non-CJK runs inside such text stay whole words.

Pure functions of strings and lists: the metric modules import them, so this module imports nothing of hfbert.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

__all__ = ["answer_tokens", "exact_match", "f1", "is_cjk_char", "normalize_answer", "questions_by_id",
           "score_question", "squad_features"]

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
# CJK punctuation is not in string.punctuation; treat every Unicode "P*" character as punctuation.
_CJK_RANGES = (
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F),
)


def is_cjk_char(char: str) -> bool:
    """True for a CJK ideograph (the same 8 ranges as BERT's BasicTokenizer)."""
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def _is_punctuation(char: str) -> bool:
    return char in string.punctuation or unicodedata.category(char).startswith("P")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and English articles, collapse whitespace (official SQuAD rules)."""
    if not isinstance(text, str):
        raise TypeError(f"an answer must be a str, got {type(text).__name__}")
    text = text.lower()
    text = "".join(ch for ch in text if not _is_punctuation(ch))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    """Tokens that F1 counts: whitespace words, except that every CJK character is its own token."""
    tokens: list[str] = []
    for word in normalize_answer(text).split():
        run = ""
        for ch in word:
            if is_cjk_char(ch):
                if run:
                    tokens.append(run)
                    run = ""
                tokens.append(ch)
            else:
                run += ch
        if run:
            tokens.append(run)
    return tokens


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = answer_tokens(prediction), answer_tokens(gold)
    if not pred_tokens or not gold_tokens:
        # SQuAD 2.0 rule: two empty answers agree, an empty and a non-empty one do not.
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _gold_list(answers: Sequence[str] | str) -> list[str]:
    if isinstance(answers, str):
        answers = [answers]
    # An unanswerable question (no gold text at all) is scored against the empty answer.
    golds = [a for a in answers if normalize_answer(a)]
    return golds or [""]


def score_question(prediction: str, answers: Sequence[str] | str) -> tuple[float, float]:
    """(EM, F1) of one prediction against the best of its gold answers."""
    golds = _gold_list(answers)
    return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


def squad_features(no_answer_probability: bool = False):
    """The ``evaluate`` features of SQuAD predictions (``id``, ``prediction_text`` and, for SQuAD 2.0, a float64
    ``no_answer_probability``) and references (``id``, ``answers``), the SQuAD datasets' format."""
    import datasets

    prediction = {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")}
    if no_answer_probability:
        prediction["no_answer_probability"] = datasets.Value("float64")
    answers = datasets.Sequence({"text": datasets.Value("string"), "answer_start": datasets.Value("int32")})
    reference = {"id": datasets.Value("string"), "answers": answers}
    return datasets.Features({"predictions": prediction, "references": reference})


def questions_by_id(
    predictions: Sequence[Mapping], references: Sequence[Mapping]
) -> tuple[dict[str, Mapping], dict[str, list[str]]]:
    """Pair ``evaluate``-style SQuAD inputs by question id: ``(prediction per id, gold texts per id)``.

    ``predictions`` hold ``id`` and ``prediction_text``; ``references`` hold ``id`` and
    ``answers={"text": [...], ...}``, as in the SQuAD datasets. Every reference needs exactly one prediction.
    """
    golds: dict[str, list[str]] = {}
    for ref in references:
        if ref["id"] in golds:
            raise ValueError(f"question id {ref['id']!r} appears twice in the references")
        golds[ref["id"]] = list(ref["answers"]["text"])
    preds: dict[str, Mapping] = {}
    for pred in predictions:
        if pred["id"] in preds:
            raise ValueError(f"question id {pred['id']!r} appears twice in the predictions")
        preds[pred["id"]] = pred
    unknown = sorted(set(preds) - set(golds))
    if unknown:
        raise ValueError(f"{len(unknown)} predictions have ids that are not in the references, e.g. {unknown[:3]}")
    return preds, golds
