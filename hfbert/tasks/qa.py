"""Extractive question answering: SQuAD loading, sliding-window features and span decoding.

The steps follow Google's ``run_squad.py``:

* a long context is cut into overlapping windows; every window repeats the question;
* a training window whose context does not contain the whole answer is labelled with the [CLS] position
  (as Google does), so no window carries a span it cannot see;
* decoding picks n-best spans over *context* tokens only, with ``end >= start`` and a maximum length,
  instead of taking two independent arg-maxes;
* a token seen in several windows is only used as a span start in the window where it has the most
  context (``min(left, right) + 0.01 * window length``, Google's ``_check_is_max_context``);
* SQuAD 2.0: the null score is the minimum over windows of ``start[CLS] + end[CLS]``; the question is
  answered only when ``null - best_span <= threshold``, the threshold being searched on dev
  (:func:`hfbert.tasks.squad_metrics.best_null_threshold`).

Deviation: ``doc_stride`` here has the `tokenizers` meaning -- the number of context tokens shared by
consecutive windows -- not Google's step between window starts. Candidate starts and ends are masked to
legal positions *before* the top-n is taken, so question tokens with large logits cannot crowd legal spans
out of the n-best list (Google filters after taking the top-n).
"""

from __future__ import annotations

import json
import random
import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


# --------------------------------------------------------------------------------------------- loading
def load_squad_json(path: str | Path) -> list[dict]:
    """Flatten a SQuAD v1.1/v2.0 JSON file into one dict per question.

    Each record has ``id, title, context, question, answers={"text": [...], "answer_start": [...]}``;
    an ``is_impossible`` question (v2.0) gets empty answer lists.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD file not found: {path}")
    with path.open(encoding="utf-8") as f:
        raw = json.load(f)
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise ValueError(f"{path} is not in SQuAD layout: expected a top-level object with a 'data' list")
    records = []
    for article in raw["data"]:
        for paragraph in article.get("paragraphs", []):
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                answers = [] if qa.get("is_impossible", False) else qa.get("answers", [])
                records.append({
                    "id": str(qa["id"]),
                    "title": article.get("title", ""),
                    "context": context,
                    "question": qa["question"],
                    "answers": {
                        "text": [a["text"] for a in answers],
                        "answer_start": [int(a["answer_start"]) for a in answers],
                    },
                })
    if not records:
        raise ValueError(f"{path} holds no questions")
    return records


@dataclass
class AnswerCheck:
    """What :func:`check_answer_offsets` found: answers whose text is not at their ``answer_start``."""

    checked: int = 0
    relocated: list[str] = field(default_factory=list)  # text found elsewhere in the context; moved
    unfound: list[str] = field(default_factory=list)  # text nowhere in the context; answer dropped

    def summary(self) -> str:
        return (
            f"{self.checked} answers checked: {len(self.relocated)} not at their offset and moved to the nearest "
            f"occurrence (e.g. {self.relocated[:3]}), {len(self.unfound)} not in the context at all and "
            f"left out of training (e.g. {self.unfound[:3]})"
        )


def check_answer_offsets(records: Sequence[Mapping]) -> tuple[list[dict], AnswerCheck]:
    """Verify ``context[start:start + len(text)] == text`` for every answer; repair or report.

    Annotators' offsets are sometimes off by a few characters. A misplaced answer is moved to the nearest
    occurrence of its text; one whose text is not in the context is removed, and a question left without
    any answer although it had some is dropped (training it as "no answer" would teach the wrong label).
    Nothing is silent: every case is listed in the returned :class:`AnswerCheck`.
    """
    report, fixed = AnswerCheck(), []
    for rec in records:
        context, texts, starts = rec["context"], rec["answers"]["text"], rec["answers"]["answer_start"]
        if len(texts) != len(starts):
            raise ValueError(f"question {rec['id']}: {len(texts)} answer texts but {len(starts)} answer_start values")
        kept_texts, kept_starts = [], []
        for text, start in zip(texts, starts):
            report.checked += 1
            if context[start:start + len(text)] == text:
                kept_texts.append(text)
                kept_starts.append(start)
                continue
            found = [i for i in range(len(context)) if context.startswith(text, i)] if text else []
            if found:
                report.relocated.append(str(rec["id"]))
                kept_texts.append(text)
                kept_starts.append(min(found, key=lambda i: abs(i - start)))
            else:
                report.unfound.append(str(rec["id"]))
        if texts and not kept_texts:
            continue
        fixed.append({**rec, "answers": {"text": kept_texts, "answer_start": kept_starts}})
    return fixed, report


# ---------------------------------------------------------------------------------------- preprocessing
def _cut_questions(questions: Sequence[str], tokenizer, max_query_length: int) -> tuple[list[str], int, int]:
    """Strip questions and cut those longer than ``max_query_length`` tokens (Google's rule).

    Returns the questions, how many were cut, and the longest question length in tokens afterwards.
    """
    questions = [q.strip() for q in questions]
    enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True)
    out, cut, longest = [], 0, 0
    for q, offsets in zip(questions, enc["offset_mapping"]):
        if len(offsets) > max_query_length:
            q = q[: offsets[max_query_length - 1][1]]
            cut += 1
        out.append(q)
        longest = max(longest, min(len(offsets), max_query_length))
    return out, cut, longest


def _max_context_flags(windows: list[list[tuple[int, int] | None]]) -> list[list[int]]:
    """For the windows of one example: 1 where a context token has its maximum context in that window."""
    best: dict[tuple[int, int], tuple[float, int]] = {}
    for w, offsets in enumerate(windows):
        positions = [i for i, o in enumerate(offsets) if o is not None]
        for i in positions:
            first, last = positions[0], positions[-1]
            score = min(i - first, last - i) + 0.01 * len(positions)
            key = tuple(offsets[i])
            if key not in best or score > best[key][0]:
                best[key] = (score, w)
    return [
        [int(o is not None and best[tuple(o)][1] == w) for o in offsets] for w, offsets in enumerate(windows)
    ]


def prepare_qa_features(
    examples: Mapping[str, Sequence],
    tokenizer,
    max_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    training: bool = False,
) -> dict[str, list]:
    """Batched ``Dataset.map`` function: question/context records -> padded sliding windows.

    Every window keeps ``example_id``, ``offset_mapping`` (character span per token, ``None`` outside the
    context) and ``max_context`` (see module docstring). With ``training=True`` it adds
    ``start_positions``/``end_positions`` (the [CLS] index when the window does not hold the whole answer,
    or the question has none). Questions longer than ``max_query_length`` tokens are cut with a warning.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("QA preprocessing needs a fast tokenizer (character offsets); got a slow one")
    if tokenizer.padding_side != "right":
        raise ValueError("QA preprocessing expects right padding (question first, context second)")
    if max_query_length < 1:
        raise ValueError(f"max_query_length must be >= 1, got {max_query_length}")
    questions, n_cut, longest = _cut_questions(examples["question"], tokenizer, max_query_length)
    if n_cut:
        warnings.warn(f"{n_cut} questions were longer than max_query_length={max_query_length} tokens and were cut")
    if doc_stride >= max_length - longest - 3:
        raise ValueError(
            f"doc_stride ({doc_stride}) must be smaller than the context room of a window: max_length "
            f"{max_length} - longest question {longest} - 3 special tokens = {max_length - longest - 3}"
        )
    enc = tokenizer(
        questions, list(examples["context"]), truncation="only_second", max_length=max_length,
        stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length",
    )
    sample_map = enc.pop("overflow_to_sample_mapping")
    windows = []
    for w in range(len(enc["input_ids"])):
        seq_ids = enc.sequence_ids(w)
        windows.append([o if s == 1 else None for o, s in zip(enc["offset_mapping"][w], seq_ids)])
    by_example = defaultdict(list)
    for w, ex in enumerate(sample_map):
        by_example[ex].append(w)
    max_context = [None] * len(windows)
    for ws in by_example.values():
        for w, flags in zip(ws, _max_context_flags([windows[w] for w in ws])):
            max_context[w] = flags
    enc["example_id"] = [examples["id"][ex] for ex in sample_map]
    enc["offset_mapping"] = windows
    enc["max_context"] = max_context
    if training:
        enc["start_positions"], enc["end_positions"] = [], []
        for w, ex in enumerate(sample_map):
            start, end = _window_labels(examples["answers"][ex], windows[w], enc["input_ids"][w], tokenizer)
            enc["start_positions"].append(start)
            enc["end_positions"].append(end)
    return dict(enc)


def _window_labels(answers: Mapping, offsets: list, input_ids: list[int], tokenizer) -> tuple[int, int]:
    """Token start/end of the first answer inside this window, or the [CLS] index for both."""
    cls_index = input_ids.index(tokenizer.cls_token_id)
    if not answers["text"]:
        return cls_index, cls_index
    start_char = answers["answer_start"][0]
    end_char = start_char + len(answers["text"][0])
    positions = [i for i, o in enumerate(offsets) if o is not None]
    if not positions or offsets[positions[0]][0] > start_char or offsets[positions[-1]][1] < end_char:
        return cls_index, cls_index  # the answer is (partly) outside this window
    start = next(i for i in positions if offsets[i][1] > start_char)
    end = next(i for i in reversed(positions) if offsets[i][0] < end_char)
    return start, end


def count_windows(features_example_ids: Sequence[str]) -> dict[str, int]:
    """How many examples were split over several windows (for the "windowed, not cut" note)."""
    counts = defaultdict(int)
    for ex in features_example_ids:
        counts[ex] += 1
    return {"examples": len(counts), "windows": sum(counts.values()),
            "windowed_examples": sum(1 for c in counts.values() if c > 1)}


# -------------------------------------------------------------------------------------------- decoding
def best_spans(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    context_mask: np.ndarray,
    start_mask: np.ndarray | None = None,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> list[tuple[float, int, int]]:
    """Top ``n_best_size`` legal spans of one window as ``(start_logit + end_logit, start, end)``.

    Legal: both ends in ``context_mask``, the start also in ``start_mask`` (max-context), ``end >= start``
    and ``end - start + 1 <= max_answer_length``.
    """
    start_logits, end_logits = np.asarray(start_logits, dtype=float), np.asarray(end_logits, dtype=float)
    context_mask = np.asarray(context_mask, dtype=bool)
    start_ok = context_mask if start_mask is None else context_mask & np.asarray(start_mask, dtype=bool)
    if max_answer_length < 1 or n_best_size < 1:
        raise ValueError(f"max_answer_length ({max_answer_length}) and n_best_size ({n_best_size}) must be >= 1")
    starts = [i for i in np.argsort(-np.where(start_ok, start_logits, -np.inf)) if start_ok[i]][:n_best_size]
    ends = [i for i in np.argsort(-np.where(context_mask, end_logits, -np.inf)) if context_mask[i]][:n_best_size]
    spans = [
        (float(start_logits[s] + end_logits[e]), int(s), int(e))
        for s in starts for e in ends if s <= e < s + max_answer_length
    ]
    spans.sort(key=lambda t: -t[0])
    return spans[:n_best_size]


@dataclass
class QAPredictions:
    """Decoded answers: the final ``predictions``, the ``best_answers`` ignoring the null option, the
    per-question ``null_score_diffs`` (null - best span; ``-inf`` when null handling is off) and ``nbest``."""

    predictions: dict[str, str]
    best_answers: dict[str, str]
    null_score_diffs: dict[str, float]
    nbest: dict[str, list[dict]]

    def with_threshold(self, threshold: float) -> dict[str, str]:
        """SQuAD 2.0 answers for another threshold: abstain where ``null - best > threshold``."""
        return {q: ("" if self.null_score_diffs[q] > threshold else a) for q, a in self.best_answers.items()}


def _softmax(scores: list[float]) -> np.ndarray:
    x = np.asarray(scores, dtype=float)
    x = np.exp(x - x.max())
    return x / x.sum()


def postprocess_qa_predictions(
    examples: Sequence[Mapping],
    features: Sequence[Mapping],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> QAPredictions:
    """Merge the windows of every example into one answer (see the module docstring for the rules).

    ``examples`` need ``id`` and ``context``; ``features`` need ``example_id``, ``offset_mapping`` and
    ``max_context`` as made by :func:`prepare_qa_features`; logits are ``(num_features, T)``.
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    if len(features) != len(start_logits) or start_logits.shape != end_logits.shape:
        raise ValueError(
            f"{len(features)} features but start/end logits of shapes {start_logits.shape}/{end_logits.shape}"
        )
    windows = defaultdict(list)
    for i, feat in enumerate(features):
        windows[feat["example_id"]].append(i)
    out = QAPredictions({}, {}, {}, {})
    for ex in examples:
        qid, context = ex["id"], ex["context"]
        if qid not in windows:
            raise ValueError(f"example {qid!r} has no features")
        candidates, null_score = [], np.inf
        for i in windows[qid]:
            offsets = features[i]["offset_mapping"]
            context_mask = np.array([o is not None for o in offsets] + [False] * (len(start_logits[i]) - len(offsets)))
            max_ctx = list(features[i]["max_context"]) + [0] * (len(start_logits[i]) - len(offsets))
            null_score = min(null_score, float(start_logits[i][0] + end_logits[i][0]))
            for score, s, e in best_spans(start_logits[i], end_logits[i], context_mask, np.array(max_ctx, bool),
                                          n_best_size, max_answer_length):
                a, b = offsets[s][0], offsets[e][1]
                candidates.append({"text": context[a:b], "score": score, "start": a, "end": b})
        candidates.sort(key=lambda c: -c["score"])
        candidates = candidates[:n_best_size]
        best = candidates[0] if candidates else {"text": "", "score": -np.inf, "start": 0, "end": 0}
        if version_2_with_negative:
            candidates.append({"text": "", "score": null_score, "start": 0, "end": 0})
            candidates.sort(key=lambda c: -c["score"])
            diff = null_score - best["score"]
        else:
            diff = -np.inf
        if candidates:
            for c, p in zip(candidates, _softmax([c["score"] for c in candidates])):
                c["probability"] = float(p)
        out.nbest[qid] = candidates
        out.best_answers[qid] = best["text"]
        out.null_score_diffs[qid] = float(diff)
        out.predictions[qid] = "" if diff > null_score_diff_threshold else best["text"]
    return out


# ----------------------------------------------------------------------------------- synthetic data
def synthetic_squad_from_entities(
    records: Sequence[Mapping], seed: int = 0, joiner: str = " ", unanswerable_rate: float = 0.0
) -> list[dict]:
    """A SYNTHETIC extractive-QA set built mechanically from real NER-tagged text.

    Each sentence (``tokens`` + BIO ``ner_tags``) with exactly one entity of some type yields the question
    "Which <type> is mentioned?" whose answer is that entity's text at its true offset. With
    ``unanswerable_rate`` a share of questions ask for a type the sentence does not contain (SQuAD 2.0
    style, empty answers). It tests span extraction on real contexts; it is not a reading-comprehension
    benchmark. ``joiner`` is " " for English, "" for Chinese characters.
    """
    rng = random.Random(seed)
    all_types = sorted({t[2:] for r in records for t in r["ner_tags"] if t != "O"})
    out = []
    for n, rec in enumerate(records):
        spans = _bio_spans(rec["ner_tags"])
        starts = np.cumsum([0] + [len(t) + len(joiner) for t in rec["tokens"]])
        context = joiner.join(rec["tokens"])
        by_type = defaultdict(list)
        for typ, a, b in spans:
            by_type[typ].append((a, b))
        single = [(t, s[0]) for t, s in by_type.items() if len(s) == 1]
        absent = [t for t in all_types if t not in by_type]
        if absent and rng.random() < unanswerable_rate:
            out.append({"id": f"syn-{n}", "title": "synthetic", "context": context,
                        "question": f"Which {rng.choice(absent)} is mentioned?",
                        "answers": {"text": [], "answer_start": []}})
        elif single:
            typ, (a, b) = rng.choice(sorted(single))
            text = joiner.join(rec["tokens"][a:b])
            out.append({"id": f"syn-{n}", "title": "synthetic", "context": context,
                        "question": f"Which {typ} is mentioned?",
                        "answers": {"text": [text], "answer_start": [int(starts[a])]}})
    return out


def _bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, start, end-exclusive) of every entity in a BIO sequence; a stray I- starts a new entity."""
    spans, current = [], None
    for i, tag in enumerate(list(tags) + ["O"]):
        inside = tag.startswith("I-") and current is not None and current[0] == tag[2:]
        if current is not None and not inside:
            spans.append((current[0], current[1], i))
            current = None
        if tag != "O" and not inside:
            current = (tag[2:], i)
    return spans


def load_qa_file(path: str | Path) -> list[dict]:
    """SQuAD records from a nested SQuAD JSON file or a flat JSON/JSONL file with the same columns
    (``id, question, context, answers={"text", "answer_start"}``, as in the Hub's ``squad`` datasets)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"QA file not found: {path}")
    if path.suffix == ".json":
        with path.open(encoding="utf-8") as f:
            head = json.load(f)
        if isinstance(head, dict) and "data" in head:
            return load_squad_json(path)
        rows = head if isinstance(head, list) else None
    else:
        with path.open(encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    required = {"id", "question", "context", "answers"}
    if not rows or not isinstance(rows[0], dict) or not required <= set(rows[0]):
        found = sorted(rows[0]) if rows and isinstance(rows[0], dict) else type(rows).__name__
        raise ValueError(f"{path}: expected SQuAD layout or rows with columns {sorted(required)}; found {found}")
    for row in rows:
        answers = row["answers"]
        if not isinstance(answers, dict) or set(answers) != {"text", "answer_start"}:
            raise ValueError(f"{path}: row {row.get('id')!r}: answers must be {{'text': [...], 'answer_start': [...]}}")
    return [{**row, "id": str(row["id"])} for row in rows]
