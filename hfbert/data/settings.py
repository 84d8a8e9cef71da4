"""How pretraining examples are built: one dataclass that every builder takes and the commands parse.

After transformers' ``TrainingArguments``: :class:`ExampleSettings` holds every setting that decides the rows -- how
the input is laid out, the vocabulary trained when no tokenizer is given, the NSP pairs, the masks, and how a
prepared corpus is cut into shards and a held-out split -- each field with its default, its ``--help`` text and its
check. :func:`~hfbert.data.prepare_corpus`, :func:`~hfbert.data.build_pretraining_dataset` and
:func:`~hfbert.data.pipeline.make_builder` take it; ``hfbert prepare`` (:class:`~hfbert.data.cli.PrepareArguments`)
and ``hfbert pretrain`` (:class:`~hfbert.pretrain.config.PretrainConfig`) extend it, so every field is an option of
both commands with one name, one help text and one check. Adding a setting is adding a field here and reading it
where the examples are built.

Who builds (``num_proc``, ``engine``, ``scheduler``) is not here: it never changes the rows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from ..settings import UsageError, check_types, setting
from .segmenters import JiebaSegmenter, PreSegmented
from .sources import LAYOUTS, boundary_pattern

__all__ = ["DEFAULT_POOL_SIZE", "SEGMENTERS", "ExampleSettings"]

# Documents per pool. 32, not more: the pools are also the unit of work of ``num_proc`` processes, and on a
# corpus of a few hundred documents (Austen: ~280 chapters) 64 left 4 pools of unequal size, so 2 processes could
# not split the work evenly (1.32x vs 1.63x from 1 to 2 processes at dupe factor 10, benchmarks/bench.py section c).
DEFAULT_POOL_SIZE = 32
#: Word segmenters for Chinese whole-word masking, by name.
SEGMENTERS = {"presegmented": PreSegmented, "jieba": JiebaSegmenter}


@dataclass
class ExampleSettings:
    """Every setting of building BERT pretraining examples (see the module docstring)."""

    # -- the input
    input_layout: Literal[LAYOUTS] | None = setting(
        None, "sentences: one sentence per line, a blank line between documents (the original format); paragraphs: "
              "one paragraph per line; people-daily: segmented, POS-tagged Chinese (default: sentences; for the "
              "built-in corpus paragraphs)", recorded=False)
    document_boundary: str | None = setting(
        None, "regex for heading lines that start a document; 'chapter' = CHAPTER I / Chapter 9", recorded=False)
    text_column: str | None = setting(
        None, "column of a dataset: 'sentences' (list of str per document) or 'text' (one document per row); "
              "default: whichever it has", recorded=False)
    # -- the vocabulary, when no tokenizer is given
    vocab_size: int = setting(8000, "WordPiece vocabulary size when training one", recorded=False)
    lowercase: bool = setting(True, "lower-case and strip accents when training a vocabulary", recorded=False)
    do_lower_case: bool | None = setting(
        None, "casing of a pretrained model's vocabulary (--tokenizer or --init_from a model): true lower-cases and "
              "strips accents; default: the model's own tokenizer, or for a bare vocab.txt cased exactly when it "
              "holds upper-case tokens", recorded=False)
    # -- NSP pairs
    max_seq_length: int = setting(128, "tokens per example, [CLS] and [SEP] included", dataset_card=True)
    short_seq_prob: float = setting(0.1, "probability of a shorter target length", card=True, dataset_card=True)
    dupe_factor: int | None = setting(
        None, "passes over the corpus with different masks (default: 10 static, 1 dynamic)", dataset_card=True)
    pool_size: int = setting(DEFAULT_POOL_SIZE, "documents per random-next pool")
    distinct_random_document: bool = setting(
        True, "a random-next segment never comes from the same document (the original could pick it again)")
    random_next_prob: float = setting(
        0.5, "probability that segment B is drawn from another document (NSP label 1; the original: 0.5); a chunk "
             "of one sentence always takes a random B")
    # -- masks
    masking: Literal["static", "dynamic"] = setting(
        "static", "static: masks drawn when the examples are built, dupe_factor copies (the original); dynamic: "
                  "the collator draws new masks for every batch", dataset_card=True)
    masked_lm_prob: float = setting(0.15, "share of tokens selected for masked LM", card=True, dataset_card=True)
    max_predictions_per_seq: int = setting(20, "at most this many masked positions per example", card=True,
                                           dataset_card=True)
    selection: Literal["fixed", "bernoulli"] = setting(
        "fixed", "fixed: exactly round(length x masked_lm_prob) positions (the original); bernoulli: independent")
    whole_word_mask: bool = setting(False, "mask whole words (every WordPiece of a chosen word)", card=True,
                                    dataset_card=True)
    wwm_per_word_decision: bool = setting(
        True, "whole-word masking: one [MASK]/random/keep decision per word (false: per token, as the original)")
    random_token_ids: Literal["non_special", "any"] = setting(
        "non_special", "random replacements: never special tokens (non_special) or the whole vocabulary (any)")
    segmenter: Literal["presegmented", "jieba"] | None = setting(
        None, "Chinese word boundaries for whole-word masking (people-daily implies presegmented)")
    # -- a prepared corpus: shards and the held-out split
    num_shards: int | None = setting(
        None, "shards per split (default: one per 32 MiB of input per duplication pass)", dataset_card=True,
        folder=True)
    eval_fraction: float = setting(0.05, "share of documents held out for validation (whole documents)",
                                   dataset_card=True, folder=True)
    seed: int = setting(12345, "seed of every random draw of the examples (the original's default)", dataset_card=True)

    def __post_init__(self) -> None:
        check_types(self)
        checks = [
            # None only where a subclass allows it (hfbert pretrain: the length schedule decides)
            (self.max_seq_length is None or self.max_seq_length >= 5,
             f"max_seq_length must be >= 5 ([CLS] a [SEP] b [SEP]), got {self.max_seq_length}"),
            (0.0 <= self.short_seq_prob <= 1.0, f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}"),
            (0.0 <= self.random_next_prob <= 1.0, f"random_next_prob must be in [0, 1], got {self.random_next_prob}"),
            (self.dupe_factor is None or self.dupe_factor >= 1, f"dupe_factor must be >= 1, got {self.dupe_factor}"),
            (self.pool_size >= 2, f"pool_size must be >= 2 (random-next needs another document), got {self.pool_size}"),
            (0.0 < self.masked_lm_prob < 1.0, f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}"),
            (self.max_predictions_per_seq >= 1,
             f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}"),
            (self.num_shards is None or self.num_shards >= 1, f"num_shards must be >= 1, got {self.num_shards}"),
            (0.0 <= self.eval_fraction < 1.0, f"eval_fraction must be in [0, 1), got {self.eval_fraction}"),
            (self.seed >= 0, f"seed must be >= 0, got {self.seed}"),
            (self.vocab_size >= 16, f"vocab_size must be at least 16, got {self.vocab_size}"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        try:
            boundary_pattern(self.document_boundary)
        except ValueError as err:
            raise UsageError(str(err)) from None

    # -- views
    def example_settings(self, **changes) -> ExampleSettings:
        """These settings as a plain :class:`ExampleSettings` (from a command's arguments, which extend it), with
        ``changes`` applied; an unknown name is a ``TypeError`` naming it."""
        names = [f.name for f in dataclasses.fields(ExampleSettings)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"unknown example setting(s) {unknown}; the settings are the fields of "
                            "hfbert.data.ExampleSettings")
        return ExampleSettings(**{name: changes.get(name, getattr(self, name)) for name in names})

    @property
    def passes(self) -> int:
        """``dupe_factor``, or its default: 10 copies for static masking (the original), 1 for dynamic."""
        return self.dupe_factor if self.dupe_factor is not None else (10 if self.masking == "static" else 1)

    @property
    def segmenter_name(self) -> str | None:
        """``segmenter``, or ``presegmented`` for whole-word masking of People's Daily (segmented with spaces)."""
        if self.segmenter is None and self.input_layout == "people-daily" and self.whole_word_mask:
            return "presegmented"
        return self.segmenter

    def word_segmenter(self):
        """The word segmenter object that :attr:`segmenter_name` names, or None."""
        return SEGMENTERS[self.segmenter_name]() if self.segmenter_name else None

    def masking_options(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~hfbert.data.MaskingSpec` and of the collator's masking."""
        return {"masked_lm_prob": self.masked_lm_prob, "max_predictions_per_seq": self.max_predictions_per_seq,
                "selection": self.selection, "whole_word_mask": self.whole_word_mask,
                "wwm_per_word_decision": self.wwm_per_word_decision, "random_token_ids": self.random_token_ids}

    def recorded(self) -> dict[str, Any]:
        """The settings a prepared folder's manifest and a build report record, defaults resolved."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(ExampleSettings)
                  if f.metadata.get("recorded", True)}
        return {**values, "dupe_factor": self.passes, "segmenter": self.segmenter_name}

    @classmethod
    def from_recorded(cls, recorded: dict[str, Any]) -> ExampleSettings:
        """The settings a prepared folder was built with, from its manifest (older manifests lack some fields:
        their defaults)."""
        names = {f.name for f in dataclasses.fields(cls) if f.metadata.get("recorded", True)}
        return cls(**{key: value for key, value in recorded.items() if key in names})
