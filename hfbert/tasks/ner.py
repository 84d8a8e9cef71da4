"""Token classification (NER): label alignment to sub-tokens, long-input windows, entity-level scores.

Alignment: a word split into several WordPiece sub-tokens is supervised either on
its first sub-token only (Google's choice; the rest get -100), or on every sub-token, in which case a
``B-X`` label is turned into ``I-X`` on the continuation pieces -- copying ``B-X`` would claim that every
piece starts a new entity. [CLS]/[SEP]/padding always get -100.

Long inputs are never cut: they become overlapping windows (``stride`` shared tokens), and at prediction
time each word takes its label from the window where its first sub-token has the most context on both
sides (the same max-context rule as extractive QA). Scores are entity-level (seqeval, conlleval rules:
an ``I-X`` without a preceding ``B-X`` starts an entity).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..metrics import shared


def build_label_list(tag_sequences: Sequence[Sequence[str]]) -> list[str]:
    """Sorted label inventory with "O" first, so ids are stable across runs and machines."""
    labels = {t for tags in tag_sequences for t in tags}
    return sorted(labels, key=lambda t: (t != "O", t[2:], t))


def encode_tags(tags: Sequence[str], label2id: Mapping[str, int], where: str = "") -> list[int]:
    """Tag strings -> ids; an unknown tag raises ValueError listing the known labels."""
    try:
        return [label2id[t] for t in tags]
    except KeyError as err:
        raise ValueError(
            f"unknown label {err.args[0]!r}{' in ' + where if where else ''}; known labels: {sorted(label2id)}"
        ) from None


def b_to_i_map(label_list: Sequence[str]) -> dict[int, int]:
    """id of ``B-X`` -> id of ``I-X`` (labels without an ``I-`` partner map to themselves)."""
    index = {label: i for i, label in enumerate(label_list)}
    return {i: index.get("I-" + label[2:], i) for i, label in enumerate(label_list) if label.startswith("B-")}


def align_labels(
    word_ids: Sequence[int | None],
    is_first_piece: Sequence[bool],
    word_label_ids: Sequence[int],
    label_all_subtokens: bool = False,
    b_to_i: Mapping[int, int] | None = None,
) -> list[int]:
    """Labels for one window of sub-tokens given the label of every word (-100 = not supervised)."""
    out = []
    for wid, first in zip(word_ids, is_first_piece):
        if wid is None:
            out.append(-100)
        elif first:
            out.append(word_label_ids[wid])
        elif label_all_subtokens:
            label = word_label_ids[wid]
            out.append((b_to_i or {}).get(label, label))
        else:
            out.append(-100)
    return out


def tokenize_and_align_labels(
    examples: Mapping[str, Sequence],
    tokenizer,
    label2id: Mapping[str, int] | None = None,
    max_length: int = 128,
    stride: int = 32,
    label_all_subtokens: bool = False,
    tokens_column: str = "tokens",
    tags_column: str = "ner_tags",
) -> dict[str, list]:
    """Batched ``Dataset.map`` function: pre-split words (+ tags) -> windows of sub-tokens (+ labels).

    Each window keeps ``example_index`` (its row in the batch's source, offset by the caller if needed) and
    ``word_index``: the word id at a word's first sub-token, -1 elsewhere -- what
    :func:`merge_word_predictions` needs. Without ``label2id`` no labels are made (inference).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("NER preprocessing needs a fast tokenizer (word ids); got a slow one")
    if stride >= max_length - 2:
        raise ValueError(f"stride ({stride}) must be smaller than max_length - 2 ({max_length - 2})")
    words = [list(w) for w in examples[tokens_column]]
    enc = tokenizer(
        words, is_split_into_words=True, truncation=True, max_length=max_length, stride=stride,
        return_overflowing_tokens=True, return_offsets_mapping=True,
    )
    sample_map = enc.pop("overflow_to_sample_mapping")
    offsets = enc.pop("offset_mapping")
    b_to_i = None
    if label2id is not None:
        label_list = sorted(label2id, key=label2id.get)
        b_to_i = b_to_i_map(label_list)
        enc["labels"] = []
    enc["example_index"], enc["word_index"] = list(sample_map), []
    for w, ex in enumerate(sample_map):
        word_ids = enc.word_ids(w)
        # Within a pre-split word the offsets restart at 0, so offset 0 marks its first piece even when the
        # window starts in the middle of a word.
        first = [wid is not None and off[0] == 0 for wid, off in zip(word_ids, offsets[w])]
        enc["word_index"].append([wid if f else -1 for wid, f in zip(word_ids, first)])
        if label2id is not None:
            tags = examples[tags_column][ex]
            if len(tags) != len(words[ex]):
                raise ValueError(f"row {ex}: {len(words[ex])} tokens but {len(tags)} tags")
            ids = encode_tags(tags, label2id, where=f"column {tags_column!r}")
            enc["labels"].append(align_labels(word_ids, first, ids, label_all_subtokens, b_to_i))
    return dict(enc)


def merge_word_predictions(
    example_index: Sequence[int],
    word_index: Sequence[Sequence[int]],
    logits: np.ndarray,
    num_words: Sequence[int],
    default_label: int = 0,
) -> tuple[list[list[int]], int]:
    """Per-word label ids for every example, each word read from its max-context window.

    ``logits``: ``(num_windows, T, C)`` (padding beyond a window's length is ignored). A word that the
    tokenizer turned into nothing (e.g. only control characters) gets ``default_label``; how many did is
    returned as the second value so the caller can report it.
    """
    best: list[list[tuple[float, int] | None]] = [[None] * n for n in num_words]
    for w, (ex, wids) in enumerate(zip(example_index, word_index)):
        content = [i for i, wid in enumerate(wids) if wid >= 0]
        if not content:
            continue
        first, last = content[0], content[-1]
        for i in content:
            score = min(i - first, last - i) + 0.01 * len(content)
            slot = best[ex][wids[i]]
            if slot is None or score > slot[0]:
                best[ex][wids[i]] = (score, int(np.argmax(logits[w][i])))
    missing = sum(slot is None for row in best for slot in row)
    return [[default_label if s is None else s[1] for s in row] for row in best], missing


def entity_scores(
    true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]], metric=None
) -> dict[str, float]:
    """Entity-level micro precision/recall/F1 (seqeval), token accuracy and per-type F1.

    Scored by the ``hfbert.metrics`` module ``entities``, or by ``metric``: a name or path for ``evaluate.load``
    (e.g. the Hub's ``seqeval``) or a loaded module, whose result is returned as it is.
    """
    if len(true_tags) != len(pred_tags) or any(len(a) != len(b) for a, b in zip(true_tags, pred_tags)):
        raise ValueError("true and predicted tag sequences differ in number or length")
    if metric is None:
        metric = shared("entities")
    elif isinstance(metric, str):
        import evaluate

        metric = evaluate.load(metric)
    return metric.compute(predictions=[list(p) for p in pred_tags], references=[list(t) for t in true_tags])


# ------------------------------------------------------------------------ People's Daily (Chinese NER)
_PD_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}


def load_peoples_daily(path: str | Path, max_sentences: int | None = None) -> list[dict]:
    """Character-level BIO NER from the People's Daily 1998-01 corpus (``word/tag`` per token).

    ``nr`` -> PER, ``ns`` -> LOC, ``nt`` -> ORG. The corpus writes a Chinese name as surname and given name
    (``江/nr 泽民/nr``), so consecutive ``nr`` words form one person; consecutive ``ns``/``nt`` words stay
    separate entities (``北京/ns 天津/ns`` are two places).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"People's Daily file not found: {path}")
    records = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            pairs = [item.rsplit("/", 1) for item in line.split()]
            if not pairs:
                continue
            chars, tags, prev = [], [], None
            for pair in pairs:
                if len(pair) != 2 or not pair[0]:
                    raise ValueError(f"{path}: malformed token {'/'.join(pair)!r} in line {line[:40]!r}")
                word, pos = pair
                typ = _PD_TYPES.get(pos)
                for k, ch in enumerate(word):
                    if typ is None:
                        tags.append("O")
                    elif k == 0 and not (typ == "PER" and prev == "nr"):
                        tags.append("B-" + typ)
                    else:
                        tags.append("I-" + typ)
                    chars.append(ch)
                prev = pos
            records.append({"tokens": chars, "ner_tags": tags})
            if max_sentences is not None and len(records) >= max_sentences:
                break
    return records
