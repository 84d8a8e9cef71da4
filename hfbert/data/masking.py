"""Masked-LM corruption of one sequence, shared by static masking (in the map step) and the collator (dynamic).

The original (google-research/bert ``create_masked_lm_predictions``):

* candidates are all positions except [CLS]/[SEP] (and, in a padded batch, padding);
* *fixed* selection picks exactly ``min(max_predictions_per_seq, max(1, round(len(tokens) * masked_lm_prob)))``
  positions (``len(tokens)`` counts the specials, as in the original), in a random order of candidates;
* each selected position becomes [MASK] with probability 0.8, a random token with 0.1, stays unchanged with
  0.1, and is supervised with its original token whatever happened to it;
* under whole-word masking candidates are words; a word that would overshoot the count is skipped, so a word
  is always masked completely or not at all.

Options beyond the original, each a documented switch:

* ``selection="bernoulli"`` (RoBERTa / transformers): every candidate (word) is selected independently with
  probability ``masked_lm_prob``; no minimum of one and no ``max_predictions_per_seq`` cap.
* ``random_token_ids="non_special"`` (default): random replacements never draw [PAD]/[CLS]/[SEP]/[MASK]/[UNK]
  or the ``[unusedN]`` slots, which the original could (its draw was over the whole vocabulary; ``"any"``
  restores that).
* ``wwm_per_word_decision=True`` (default): one 80/10/10 decision per word, so a word is never half [MASK]
  half original (google-research/bert#910); ``False`` draws per token as the original did.
* a ``##`` token right after a special token starts a new word (the original glued it onto the word before
  the [SEP]).

Masks are drawn for many sequences at once (:func:`mask_batch`, one sort per batch instead of a Python loop per
token); the selection rule and the probabilities are the original's, the order of random draws is not.  The random
numbers come either from one generator for the whole batch, or from :class:`RowStreams`: each row's own key, so
that a row's mask depends on that key and the row's tokens, not on which other rows share its batch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

__all__ = ["MaskingSpec", "RowStreams", "continuation_table", "mask_batch", "mask_sequence", "num_to_predict",
           "replacement_pool", "splitmix64"]

_BRACKETED = re.compile(r"^\[[^\[\]]+\]$")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64's increment

# The three uses of randomness in a mask, numbered so that each row has an independent stream for each.
_SELECTION, _DECISION, _REPLACEMENT = 0, 1, 2


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: a fast, well-mixed 64-bit hash of each value (uint64 arithmetic wraps by design)."""
    x = np.asarray(x, dtype=np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class RowStreams:
    """Counter-based random numbers keyed by row: draw ``i`` of stream ``s`` of row ``r`` is a hash of
    ``(keys[r], s, i)``, where ``i`` is a position within the row.

    A batch masked with these gives each row the mask its key and tokens determine, however the rows are grouped
    into batches, micro-batches or processes (a generator shared by the batch would make each row's mask depend on
    the rows drawn before it).
    """

    def __init__(self, keys):
        self.keys = np.asarray(keys, dtype=np.uint64).reshape(-1)

    @classmethod
    def for_rows(cls, rows, seed: Sequence[int]) -> RowStreams:
        """Streams for rows numbered ``rows`` (non-negative integers) under ``seed``: key = a hash of both."""
        base = np.random.SeedSequence(list(seed)).generate_state(1, np.uint64)[0]
        return cls(splitmix64(base + (np.asarray(rows, dtype=np.uint64) + np.uint64(1)) * _GOLDEN))

    def uniform(self, stream: int, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Uniform floats in ``[0, 1)``, one per ``(rows[j], index[j])``."""
        counter = np.asarray(index, dtype=np.uint64) + np.uint64(stream << 32)
        bits = splitmix64(self.keys[np.asarray(rows, dtype=np.int64)] ^ splitmix64(counter * _GOLDEN))
        return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))

    def integers(self, stream: int, rows: np.ndarray, index: np.ndarray, high: int) -> np.ndarray:
        """Integers in ``[0, high)``, one per ``(rows[j], index[j])``."""
        return np.minimum((self.uniform(stream, rows, index) * high).astype(np.int64), high - 1)


class _SharedStream:
    """One generator's numbers in the order they are asked for, whatever the rows (a batch's single stream)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def uniform(self, stream: int, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
        return self.rng.random(len(rows))

    def integers(self, stream: int, rows: np.ndarray, index: np.ndarray, high: int) -> np.ndarray:
        return self.rng.integers(0, high, len(rows))


def num_to_predict(length: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
    """The original's fixed count: ``min(max_predictions_per_seq, max(1, round(length * masked_lm_prob)))``.

    Args:
        length (`int`):
            The sequence's length, specials included, as in the original.
        masked_lm_prob (`float`):
            The share of tokens to predict.
        max_predictions_per_seq (`int`):
            The cap.

    Returns:
        `int`: how many positions the fixed selection picks.
    """
    return min(max_predictions_per_seq, max(1, int(round(length * masked_lm_prob))))


def replacement_pool(tokenizer, mode: str = "non_special", vocab: dict | None = None) -> np.ndarray:
    """Token ids a "random token" replacement may draw.

    ``"non_special"`` excludes the tokenizer's special tokens and bracketed placeholders such as ``[unused7]``;
    ``"any"`` is the whole vocabulary, as in the original.  ``vocab``: ``tokenizer.get_vocab()`` when the caller
    has it already.
    """
    vocab = tokenizer.get_vocab() if vocab is None else vocab
    size = max(vocab.values()) + 1
    if mode == "any":
        return np.arange(size, dtype=np.int32)
    if mode != "non_special":
        raise ValueError(f"random_token_ids must be 'non_special' or 'any', got {mode!r}")
    keep = np.ones(size, dtype=bool)
    keep[list(tokenizer.all_special_ids)] = False
    for token, index in vocab.items():
        if token[:1] == "[" and _BRACKETED.match(token):  # the prefix test spares the regex ~99% of the tokens
            keep[index] = False
    return np.flatnonzero(keep).astype(np.int32)


def continuation_table(tokenizer, vocab: dict | None = None) -> np.ndarray:
    """Boolean table over the vocabulary: True for WordPiece continuations (``##...``)."""
    vocab = tokenizer.get_vocab() if vocab is None else vocab
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, index in vocab.items():
        if token.startswith("##"):
            table[index] = True
    return table


@dataclass(eq=False)
class MaskingSpec:
    """Everything :func:`mask_sequence` needs; validated once, picklable for worker processes.

    Args:
        mask_token_id (`int`):
            The id of [MASK].
        replacement_ids (`np.ndarray`):
            The ids a "random token" replacement may draw (:func:`replacement_pool`); not empty.
        masked_lm_prob (`float`, *optional*, defaults to 0.15):
            The share of tokens to predict; in (0, 1).
        max_predictions_per_seq (`int`, *optional*, defaults to 20):
            The cap of the fixed selection; >= 1.
        selection (`str`, *optional*, defaults to `"fixed"`):
            ``"fixed"`` (the original's count, :func:`num_to_predict`) or ``"bernoulli"`` (RoBERTa / transformers:
            every candidate selected independently with probability ``masked_lm_prob``).
        whole_word_mask (`bool`, *optional*, defaults to `False`):
            Select whole words: a word is always masked completely or not at all.
        wwm_per_word_decision (`bool`, *optional*, defaults to `True`):
            Under whole-word masking, one 80/10/10 decision per word; `False` draws per token as the original did.
        special_ids (`np.ndarray`, *optional*):
            The special tokens' ids, never selected by the collator; by default none.

    Raises:
        `ValueError`: a value out of range, or no replacement ids.
    """

    mask_token_id: int
    replacement_ids: np.ndarray
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    selection: Literal["fixed", "bernoulli"] = "fixed"
    whole_word_mask: bool = False
    wwm_per_word_decision: bool = True
    special_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))

    def __post_init__(self):
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise ValueError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if self.max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}")
        if self.selection not in ("fixed", "bernoulli"):
            raise ValueError(f"selection must be 'fixed' or 'bernoulli', got {self.selection!r}")
        if len(self.replacement_ids) == 0:
            raise ValueError("the tokenizer has no token ids left to draw random replacements from")

    @classmethod
    def from_tokenizer(cls, tokenizer, *, random_token_ids: str = "non_special", vocab: dict | None = None,
                       **options) -> MaskingSpec:
        """The spec for ``tokenizer``: its [MASK] id, special ids and the ids a random replacement may draw.

        Args:
            tokenizer (`PreTrainedTokenizerBase`):
                The tokenizer the ids come from; it must have a [MASK] token.
            random_token_ids (`str`, *optional*, defaults to `"non_special"`):
                ``"non_special"`` or ``"any"``, see :func:`replacement_pool`.
            vocab (`dict`, *optional*):
                Its vocabulary, when the caller has it.
            **options:
                The other fields (``masked_lm_prob``, ``selection``, ...), else their defaults.

        Returns:
            [`MaskingSpec`]: the spec.

        Raises:
            `ValueError`: the tokenizer has no mask token, ``random_token_ids`` is neither value, or an option is out
                of range.
        """
        if tokenizer.mask_token_id is None:
            raise ValueError("the tokenizer has no mask token ([MASK]); masked-LM examples cannot be built")
        return cls(mask_token_id=int(tokenizer.mask_token_id),
                   replacement_ids=replacement_pool(tokenizer, random_token_ids, vocab),
                   special_ids=np.asarray(sorted(tokenizer.all_special_ids), dtype=np.int32), **options)


def mask_sequence(
    input_ids: np.ndarray,
    candidates: np.ndarray,
    spec: MaskingSpec,
    rng: np.random.Generator,
    word_starts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Corrupt one sequence (see :func:`mask_batch`).

    Args:
        input_ids (`np.ndarray`):
            The sequence's token ids.
        candidates (`np.ndarray`):
            Bool, same shape as ``input_ids``: the positions that may be selected (never specials or padding).
        spec ([`MaskingSpec`]):
            What to mask and how.
        rng (`np.random.Generator`):
            The random numbers.
        word_starts (`np.ndarray`, *optional*):
            1 where a token begins a word; required under whole-word masking.

    Returns:
        `tuple[np.ndarray, np.ndarray, np.ndarray]`: ``(corrupted_ids, positions, labels)``: the corrupted copy, the
        selected positions (sorted) and the original ids there.
    """
    offsets = np.array([0, len(input_ids)])
    corrupted, positions, labels, _ = mask_batch(input_ids, offsets, candidates, spec, rng, word_starts)
    return corrupted, positions, labels


def mask_batch(
    ids: np.ndarray,
    offsets: np.ndarray,
    candidates: np.ndarray,
    spec: MaskingSpec,
    rng: np.random.Generator | RowStreams,
    word_starts: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Corrupt many sequences stored back to back; row ``r`` is ``ids[offsets[r]:offsets[r + 1]]``.

    ``rng``: a generator drawn from in turn for the whole batch, or :class:`RowStreams` (one key per row).

    ``candidates`` (bool, same shape as ``ids``) marks the positions that may be selected: never specials or
    padding.  ``word_starts`` (1 = token begins a word) is required under whole-word masking.  The fixed count
    uses the row length, specials included, as the original does.

    Returns ``(corrupted_ids, positions, labels, counts)``: ``positions`` are within-row indices, sorted per
    row, rows concatenated; ``labels`` the original ids there; ``counts`` the number selected per row.
    """
    ids = np.asarray(ids)
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    row_of = np.repeat(np.arange(len(lengths)), lengths)
    unit_start = _unit_starts(candidates, offsets, word_starts if spec.whole_word_mask else None)
    cand_pos = np.flatnonzero(candidates)  # flat positions of candidates, ascending
    unit_of = np.cumsum(unit_start[cand_pos]) - 1  # unit (word or token) of each candidate
    n_units = int(unit_of[-1]) + 1 if len(unit_of) else 0
    unit_first = cand_pos[np.flatnonzero(unit_start[cand_pos])]
    unit_row = row_of[unit_first]
    unit_len = np.bincount(unit_of, minlength=n_units)
    source = rng if isinstance(rng, RowStreams) else _SharedStream(rng)
    unit_index = unit_first - offsets[unit_row]  # where each unit starts in its row: its draws' counter
    order_keys = source.uniform(_SELECTION, unit_row, unit_index)
    if spec.selection == "bernoulli":
        chosen_unit = order_keys < spec.masked_lm_prob
    else:
        quota = np.minimum(spec.max_predictions_per_seq,
                           np.maximum(1, np.rint(lengths * spec.masked_lm_prob).astype(np.int64)))
        chosen_unit = _fixed_selection(unit_row, unit_len, quota, len(lengths), order_keys)
    selected = cand_pos[chosen_unit[unit_of]]
    selected_row = row_of[selected]
    per_word = spec.whole_word_mask and spec.wwm_per_word_decision
    # One uniform per decision (a word, or a token): < 0.8 -> [MASK], < 0.9 -> unchanged, else a random token.
    if per_word:
        draws = source.uniform(_DECISION, unit_row, unit_index)[unit_of[chosen_unit[unit_of]]]
    else:
        draws = source.uniform(_DECISION, selected_row, selected - offsets[selected_row])
    corrupted = ids.copy()
    corrupted[selected[draws < 0.8]] = spec.mask_token_id
    replace = draws >= 0.9
    replace_row = selected_row[replace]
    picks = source.integers(_REPLACEMENT, replace_row, selected[replace] - offsets[replace_row],
                            len(spec.replacement_ids))
    corrupted[selected[replace]] = spec.replacement_ids[picks]
    counts = np.bincount(selected_row, minlength=len(lengths))
    return corrupted, selected - offsets[selected_row], ids[selected], counts


def _unit_starts(candidates: np.ndarray, offsets: np.ndarray, word_starts: np.ndarray | None) -> np.ndarray:
    """True at the first candidate of every selection unit: every candidate, or every word's first token.

    A candidate that does not follow another candidate (row start, after [CLS]/[SEP]) always starts a word.
    """
    candidates = np.asarray(candidates, dtype=bool)
    if word_starts is None:
        return candidates
    if len(word_starts) != len(candidates):
        raise ValueError(f"word_starts has length {len(word_starts)} but the ids have length {len(candidates)}")
    starts = np.asarray(word_starts, dtype=bool) & candidates
    after_gap = np.ones(len(candidates), dtype=bool)
    after_gap[1:] = ~candidates[:-1]
    after_gap[offsets[:-1][offsets[:-1] < len(candidates)]] = True
    return starts | (candidates & after_gap)


def _fixed_selection(unit_row, unit_len, quota, n_rows, order_keys) -> np.ndarray:
    """The original's selection: visit units in random order, skip one that would overshoot the row's quota,
    stop when the quota is met.  Single-token units never overshoot, so without whole-word masking this is just
    "the first ``quota`` units of a random order", done with one sort for all rows."""
    # Units are in row order already; adding a uniform in [0, 1) to the row number shuffles within rows only.
    order = np.argsort(unit_row + order_keys)
    chosen = np.zeros(len(unit_row), dtype=bool)
    row_first = np.searchsorted(unit_row[order], np.arange(n_rows))
    if np.all(unit_len == 1):
        rank = np.arange(len(order)) - row_first[unit_row[order]]
        chosen[order[rank < quota[unit_row[order]]]] = True
        return chosen
    bounds = np.append(row_first, len(order)).tolist()
    lengths = unit_len[order].tolist()
    for row in range(n_rows):
        total, want = 0, int(quota[row])
        for i in range(bounds[row], bounds[row + 1]):
            if total >= want:
                break
            if total + lengths[i] <= want:
                chosen[order[i]] = True
                total += lengths[i]
    return chosen
