"""Documents longer than the model reads: overlapping windows, and one prediction per document.

BERT reads at most ``max_length`` tokens, so a sequence classifier sees only the head of a long text. Here a text
becomes windows of ``max_length`` tokens that share ``stride`` tokens with their neighbours (the `tokenizers`
meaning of stride, as in the QA and NER windows), every window carries its document's label for training, and at
prediction a document's windows are combined by the mean of their logits (for regression, the mean of the
predicted values). The mean of logits weighs every window alike and treats each as independent evidence: for
single-label classification it is the normalised geometric mean of the windows' class probabilities, so a document
is read as a whole rather than by its most confident window.

For a pair task only the first text is windowed; the second is repeated whole in every window and must leave room
for more than ``stride`` tokens of the first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["check_stride", "combine_windows", "document_labels", "window_texts"]


def check_stride(stride: int, max_length: int, name: str = "stride") -> None:
    """Raise ValueError unless ``0 <= stride < max_length - 2`` (the text tokens of a window: [CLS] and [SEP] aside);
    ``name``: the setting's name in the message."""
    if stride < 0 or stride >= max_length - 2:
        raise ValueError(f"{name} ({stride}) must be at least 0 and smaller than the {max_length - 2} text "
                         f"tokens of a {max_length}-token window")


def window_texts(
    batch: Mapping[str, Sequence],
    indices: Sequence[int],
    tokenizer,
    max_length: int,
    stride: int,
    text_column: str,
    text_pair_column: str | None = None,
    labels: Sequence | None = None,
) -> dict[str, list]:
    """Batched ``Dataset.map(..., with_indices=True)`` function: texts -> windows.

    Every window keeps ``document``, the row it came from (``indices``: the rows of the batch), and, when ``labels``
    (one per row) are given, its row's label as ``labels``. Windows come in row order, a row's windows from its
    start to its end; a text that fits is one window.
    """
    check_stride(stride, max_length)
    texts = [list(batch[text_column])]
    truncation = True
    if text_pair_column is not None:
        pairs = list(batch[text_pair_column])
        lengths = [len(ids) for ids in tokenizer(pairs, add_special_tokens=False)["input_ids"]]
        longest = max(lengths, default=0)
        if max_length - longest - 3 <= stride:  # [CLS] text [SEP] pair [SEP]
            row = indices[lengths.index(longest)]
            raise ValueError(f"row {row}: its {text_pair_column!r} text has {longest} tokens, which leaves "
                             f"{max_length - longest - 3} tokens of a {max_length}-token window for "
                             f"{text_column!r}; the stride ({stride}) must be smaller than that")
        texts.append(pairs)
        truncation = "only_first"
    enc = tokenizer(*texts, truncation=truncation, max_length=max_length, stride=stride,
                    return_overflowing_tokens=True)
    sample_map = enc.pop("overflow_to_sample_mapping")
    out = dict(enc)
    out["document"] = [indices[i] for i in sample_map]
    if labels is not None:
        out["labels"] = [labels[i] for i in sample_map]
    return out


def _groups(documents: Sequence[int], num_windows: int) -> tuple[np.ndarray, int]:
    documents = np.asarray(documents, dtype=np.int64)
    if len(documents) != num_windows:
        raise ValueError(f"{num_windows} window predictions but {len(documents)} window documents")
    if len(documents) and (documents.min() != 0 or np.any(np.diff(documents) < 0)
                           or len(np.unique(documents)) != documents.max() + 1):
        raise ValueError("window documents must run 0, 1, 2, ... in order, every document with a window")
    return documents, (int(documents.max()) + 1 if len(documents) else 0)


def combine_windows(logits: np.ndarray, documents: Sequence[int]) -> np.ndarray:
    """Per-window outputs ``(W, C)`` (or ``(W,)``) -> per-document means ``(D, C)``, documents in order."""
    logits = np.asarray(logits, dtype=np.float64)
    documents, count = _groups(documents, len(logits))
    flat = logits.reshape(len(logits), -1)                                  # (W, C)
    sums = np.zeros((count, flat.shape[1]))
    np.add.at(sums, documents, flat)
    means = sums / np.bincount(documents, minlength=count)[:, None]         # (D, C)
    return means.reshape((count, *logits.shape[1:]))


def document_labels(label_ids: np.ndarray, documents: Sequence[int]) -> np.ndarray:
    """Per-window labels -> each document's label (its first window's; a document's windows share it)."""
    label_ids = np.asarray(label_ids)
    documents, _ = _groups(documents, len(label_ids))
    first = np.flatnonzero(np.r_[True, np.diff(documents) != 0])
    return label_ids[first]
