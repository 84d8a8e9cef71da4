"""Batches for ``HfBertForPreTraining``: padding, attention masks, and fresh masks per batch (dynamic masking).

transformers 5 has no collator that keeps NSP labels and segment ids *and* masks the original way (fixed count,
80/10/10 under whole-word masking, words from a Chinese segmenter); this one shares :func:`mask_sequence` with
the static path, so a dynamic batch and a static example are corrupted by exactly the same rules.

Examples with ``masked_lm_positions``/``masked_lm_ids`` (static masking) are only padded: their ``labels`` are
rebuilt from the stored positions.  Other examples are masked here, with candidates = every non-special token
(padding is added afterwards and is never a candidate).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from .masking import MaskingSpec, RowStreams, continuation_table, mask_batch

__all__ = ["DataCollatorForBertPretraining"]

IGNORE_INDEX = -100


class DataCollatorForBertPretraining:
    """Collate BERT pretraining examples into ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels``
    (-100 = not supervised) and ``next_sentence_label`` (when the examples have it).

    Randomness: with ``seed=None`` every batch draws its generator seed from torch's global RNG, so
    ``transformers.set_seed`` and the DataLoader's per-worker seeding apply (workers do not repeat each other's
    masks).  With an integer ``seed`` the collator owns a generator: reproducible in one process, but each
    DataLoader worker would get a copy of it -- use ``seed=None`` with ``num_workers > 0``.

    Examples that carry a static mask (``masked_lm_positions`` / ``masked_lm_ids``) keep it; others are masked
    dynamically with the rules of :mod:`hfbert.data.masking`.

    Args:
        tokenizer (`PreTrainedTokenizerBase`):
            The tokenizer the ids come from; it must have a pad token and a mask token.
        masked_lm_prob (`float`, *optional*, defaults to 0.15):
            The share of tokens to predict; in (0, 1).
        max_predictions_per_seq (`int`, *optional*, defaults to 20):
            The cap of the fixed selection.
        selection (`str`, *optional*, defaults to `"fixed"`):
            ``"fixed"`` (the original's count) or ``"bernoulli"`` (RoBERTa / transformers).
        whole_word_mask (`bool`, *optional*, defaults to `False`):
            Mask whole words (from the examples' ``word_starts``, else from the ``##`` continuations).
        wwm_per_word_decision (`bool`, *optional*, defaults to `True`):
            One 80/10/10 decision per word under whole-word masking; `False` draws per token as the original did.
        random_token_ids (`str`, *optional*, defaults to `"non_special"`):
            ``"non_special"`` or ``"any"`` (the whole vocabulary, as in the original): what a random replacement may
            draw (:func:`~hfbert.data.masking.replacement_pool`).
        pad_to_multiple_of (`int`, *optional*):
            Pad every batch's length up to a multiple of this.
        seed (`int`, *optional*):
            See "Randomness" above.
        return_tensors (`str`, *optional*, defaults to `"pt"`):
            ``"pt"`` (torch tensors) or ``"np"`` (numpy arrays).
        mlm_probability (`float`, *optional*):
            Deprecated: transformers' name for ``masked_lm_prob``, which it replaces (with a ``DeprecationWarning``).

    Raises:
        `ValueError`: the tokenizer has no pad or mask token, or an option is out of range.
    """

    def __init__(
        self,
        tokenizer,
        masked_lm_prob: float = 0.15,
        *,
        max_predictions_per_seq: int = 20,
        selection: str = "fixed",
        whole_word_mask: bool = False,
        wwm_per_word_decision: bool = True,
        random_token_ids: str = "non_special",
        pad_to_multiple_of: int | None = None,
        seed: int | None = None,
        return_tensors: str = "pt",
        mlm_probability: float | None = None,
    ):
        if mlm_probability is not None:  # transformers' name for the same knob
            warnings.warn("mlm_probability is deprecated: pass masked_lm_prob (the name used everywhere in hfbert)",
                          DeprecationWarning, stacklevel=2)
            masked_lm_prob = mlm_probability
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token; batches cannot be padded")
        if pad_to_multiple_of is not None and pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {pad_to_multiple_of}")
        if return_tensors not in ("pt", "np"):
            raise ValueError(f"return_tensors must be 'pt' or 'np', got {return_tensors!r}")
        self.spec = MaskingSpec.from_tokenizer(
            tokenizer, masked_lm_prob=masked_lm_prob, max_predictions_per_seq=max_predictions_per_seq,
            selection=selection, whole_word_mask=whole_word_mask, wwm_per_word_decision=wwm_per_word_decision,
            random_token_ids=random_token_ids)
        self.pad_token_id = int(tokenizer.pad_token_id)
        self.continuation = continuation_table(tokenizer) if whole_word_mask else None
        self.pad_to_multiple_of = pad_to_multiple_of
        self.return_tensors = return_tensors
        self._rng = np.random.default_rng(seed) if seed is not None else None

    def _generator(self) -> np.random.Generator:
        if self._rng is not None:
            return self._rng
        return np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))

    def __call__(self, examples: Sequence[Mapping]) -> dict:
        """Collate one batch.

        Args:
            examples (`Sequence[Mapping]`):
                Rows with ``input_ids`` and, optionally, ``token_type_ids``, ``word_starts``,
                ``next_sentence_label``, or a static mask (``masked_lm_positions`` and ``masked_lm_ids``: all rows of a
                batch or none).

        Returns:
            `dict`: ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels`` (-100 = not supervised) and
            ``next_sentence_label`` when the examples have it, each (rows, length) (``next_sentence_label`` (rows,)),
            as torch tensors or numpy arrays (``return_tensors``).

        Raises:
            `ValueError`: an empty list, a batch mixing static and dynamic masks, a row without ``input_ids``, columns
                of different lengths, or a masked position outside its sequence.
        """
        if not examples:
            raise ValueError("cannot collate an empty list of examples")
        rng = self._generator()
        static = ["masked_lm_positions" in example for example in examples]
        if any(static) and not all(static):
            raise ValueError("a batch mixes examples with static masks (masked_lm_positions) and examples without")
        if not any(static):
            # Dynamic masks: padded first, then the masks of all rows drawn together, as collate_arrays does.
            arrays = {name: [np.asarray(e[name]) for e in examples] for name in ("input_ids", "token_type_ids",
                                                                                 "word_starts") if name in examples[0]}
            if "input_ids" not in arrays:
                raise ValueError(f"an example has no input_ids (keys: {sorted(examples[0])})")
            lengths = np.asarray([len(ids) for ids in arrays["input_ids"]], dtype=np.int64)
            padded = {"input_ids_length": lengths}
            for name, values in arrays.items():
                for value, length in zip(values, lengths):
                    if len(value) != length:
                        raise ValueError(f"{name} has length {len(value)} but input_ids has length {length}")
                padded[name] = _pad(values, int(lengths.max()))
            if "next_sentence_label" in examples[0]:
                padded["next_sentence_label"] = np.asarray([e["next_sentence_label"] for e in examples])
            return self.collate_arrays(padded, rng)
        rows = [self._static_example(example) for example in examples]
        width = max(len(ids) for ids, _, _ in rows)
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        batch = {
            "input_ids": np.full((len(rows), width), self.pad_token_id, dtype=np.int64),
            "token_type_ids": np.zeros((len(rows), width), dtype=np.int64),
            "attention_mask": np.zeros((len(rows), width), dtype=np.int64),
            "labels": np.full((len(rows), width), IGNORE_INDEX, dtype=np.int64),
        }
        for row, (ids, types, labels) in enumerate(rows):
            batch["input_ids"][row, : len(ids)] = ids
            batch["token_type_ids"][row, : len(ids)] = types
            batch["attention_mask"][row, : len(ids)] = 1
            batch["labels"][row, : len(ids)] = labels
        if "next_sentence_label" in examples[0]:
            batch["next_sentence_label"] = np.asarray([e["next_sentence_label"] for e in examples], dtype=np.int64)
        if self.return_tensors == "pt":
            return {name: torch.from_numpy(value) for name, value in batch.items()}
        return batch

    def collate_arrays(self, arrays: Mapping[str, np.ndarray],
                       rng: np.random.Generator | RowStreams | None = None) -> dict:
        """The same batch as ``self(examples)`` from rows already gathered into padded arrays, as
        :meth:`hfbert.data.PreparedCorpus.read_arrays` gives them (a list column ``name`` as a ``(rows, longest)``
        array and its lengths ``name + "_length"``).  Static masks are scattered into ``labels`` in one step;
        dynamic masks are drawn for all rows at once with the original's rules.

        Args:
            arrays (`Mapping[str, np.ndarray]`):
                ``input_ids`` and ``input_ids_length``, and optionally ``token_type_ids``, ``word_starts``,
                ``next_sentence_label``, or a static mask (``masked_lm_positions`` with its lengths and
                ``masked_lm_ids``).
            rng (`np.random.Generator` or `RowStreams`, *optional*):
                For dynamic masks: a generator owned by the caller, so batches can be collated in another thread
                without touching torch's RNG, or :class:`~hfbert.data.masking.RowStreams`, one key per row, so each
                row's mask depends on its key alone. By default the collator's own (see the class docstring).

        Returns:
            `dict`: the batch, as ``self(examples)`` returns it.

        Raises:
            `ValueError`: an empty batch, or a masked position outside its sequence.
        """
        lengths = np.asarray(arrays["input_ids_length"], dtype=np.int64)
        count = len(lengths)
        if count == 0:
            raise ValueError("cannot collate an empty batch")
        width = int(lengths.max())
        if self.pad_to_multiple_of:
            width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
        inside = np.arange(width) < lengths[:, None]  # (B, T): real tokens
        batch = {
            "input_ids": np.full((count, width), self.pad_token_id, dtype=np.int64),
            "token_type_ids": np.zeros((count, width), dtype=np.int64),
            "attention_mask": inside.astype(np.int64),
            "labels": np.full((count, width), IGNORE_INDEX, dtype=np.int64),
        }
        given = arrays["input_ids"].shape[1]
        batch["input_ids"][:, :given] = np.where(inside[:, :given], arrays["input_ids"], self.pad_token_id)
        if "token_type_ids" in arrays:
            batch["token_type_ids"][:, :given] = np.where(inside[:, :given], arrays["token_type_ids"], 0)
        if "masked_lm_positions" in arrays:
            positions, counts = arrays["masked_lm_positions"], arrays["masked_lm_positions_length"]
            valid = np.arange(positions.shape[1]) < counts[:, None]
            rows = np.broadcast_to(np.arange(count)[:, None], positions.shape)[valid]
            columns = positions[valid].astype(np.int64)
            outside = (columns < 0) | (columns >= lengths[rows])
            if outside.any():
                row = int(rows[outside][0])
                raise ValueError(f"masked_lm_positions {positions[row, :counts[row]].tolist()} outside a sequence "
                                 f"of length {lengths[row]}")
            batch["labels"][rows, columns] = arrays["masked_lm_ids"][valid]
        else:
            word_starts = arrays["word_starts"][:, :given] if "word_starts" in arrays else None
            self._mask_rows(batch, inside, word_starts, self._generator() if rng is None else rng)
        if "next_sentence_label" in arrays:
            batch["next_sentence_label"] = np.asarray(arrays["next_sentence_label"], dtype=np.int64)
        if self.return_tensors == "pt":
            return {name: torch.from_numpy(value) for name, value in batch.items()}
        return batch

    def _mask_rows(self, batch: dict, inside: np.ndarray, word_starts: np.ndarray | None,
                   rng: np.random.Generator | RowStreams) -> None:
        """Draw the dynamic masks of every row of ``batch`` at once (:func:`~hfbert.data.masking.mask_batch`, the
        original's rules): ``input_ids`` corrupted in place, ``labels`` set at the selected positions."""
        lengths = inside.sum(axis=1)
        ids = batch["input_ids"][inside]  # the real tokens, row after row
        offsets = np.concatenate(([0], np.cumsum(lengths)))
        starts = None
        if self.spec.whole_word_mask:
            starts = (word_starts[inside[:, : word_starts.shape[1]]] if word_starts is not None
                      else ~self.continuation[ids])
        corrupted, positions, original, counts = mask_batch(ids, offsets, ~np.isin(ids, self.spec.special_ids),
                                                            self.spec, rng, starts)
        batch["input_ids"][inside] = corrupted
        rows = np.repeat(np.arange(len(lengths)), counts)
        batch["labels"][rows, positions] = original

    def _static_example(self, example: Mapping):
        if "input_ids" not in example:
            raise ValueError(f"an example has no input_ids (keys: {sorted(example)})")
        ids = np.asarray(example["input_ids"], dtype=np.int64)
        types = np.asarray(example.get("token_type_ids", np.zeros(len(ids))), dtype=np.int64)
        if len(types) != len(ids):
            raise ValueError(f"token_type_ids has length {len(types)} but input_ids has length {len(ids)}")
        labels = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)
        positions = np.asarray(example["masked_lm_positions"], dtype=np.int64)
        if len(positions) and (positions.min() < 0 or positions.max() >= len(ids)):
            raise ValueError(f"masked_lm_positions {positions.tolist()} outside a sequence of length {len(ids)}")
        labels[positions] = np.asarray(example["masked_lm_ids"], dtype=np.int64)
        return ids, types, labels


def _pad(values: Sequence[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(values), width), dtype=np.int64)
    for row, value in enumerate(values):
        out[row, : len(value)] = value
    return out
