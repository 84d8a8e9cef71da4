"""Data for ``hfbert pretrain``: corpus -> documents -> held-out split -> vocabulary -> NSP/MLM examples -> batches.

The example builder itself is :func:`hfbert.data.build_pretraining_dataset` (Google's ``create_pretraining_data``
semantics); this module decides *which* documents go where and *which* rows form each batch:

* The held-out split is by whole documents (a random ``eval_fraction`` of them), so no NSP pair or sentence of an
  evaluation example was seen in training. Held-out examples are masked once (static masking, a fixed seed), so
  every evaluation scores the same positions and numbers compare across steps.
* :class:`BatchPlan` maps an optimizer step to dataset rows by arithmetic alone: each epoch is a permutation
  seeded by ``(seed, phase, epoch)``, and micro-batch ``k`` takes rows ``[k*B*W, (k+1)*B*W)`` of it, process ``r``
  the ``r``-th slice of ``B``. Resuming at step ``s`` therefore jumps straight to its rows (nothing is replayed),
  and the rows do not depend on how often the job was interrupted.
* Dynamic masks are drawn by the collator from a generator seeded by ``(seed, phase, micro-batch, process)``,
  so they too depend only on the position in the schedule.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import torch
from transformers import AutoTokenizer

from ..data import CHAPTER_HEADING, build_pretraining_dataset, read_documents, split_sentences
from ..data.pipeline import DEFAULT_POOL_SIZE
from ..tokenization import train_wordpiece
from .config import ConfigError, PretrainConfig

__all__ = [
    "BUILTIN_CORPUS", "BatchPlan", "PretrainingData", "baselines", "check_sources", "collate", "examples_at",
    "iterate_eval_batches", "load_documents", "load_tokenizer", "prepare_data", "split_documents", "train_tokenizer",
]

#: Jane Austen's six novels (public domain), one paragraph per line, "CHAPTER ..." lines between chapters.
BUILTIN_CORPUS = Path(__file__).resolve().parents[1] / "corpora" / "en_austen_6novels.txt.gz"
BUILTIN_CORPUS_NAME = "Jane Austen's six novels (public domain, shipped with hfbert)"


def check_sources(config: PretrainConfig) -> None:
    """Fail before any work when an input named in the config does not exist."""
    for path in config.corpus or []:
        if not Path(path).is_file():
            raise ConfigError(f"corpus file not found: {path}")
    if config.corpus is None and config.dataset is None and not BUILTIN_CORPUS.is_file():
        raise ConfigError(f"the built-in corpus is missing from the installation: {BUILTIN_CORPUS}")
    if config.dataset is not None and Path(config.dataset).exists() and not Path(config.dataset).is_dir():
        raise ConfigError(f"dataset must be a save_to_disk folder or a dataset name, got the file {config.dataset}")
    if config.tokenizer is not None and not Path(config.tokenizer).is_dir():
        raise ConfigError(f"tokenizer folder not found: {config.tokenizer}")


# ----------------------------------------------------------------------------------------------------------------
# Documents


def _layout(config: PretrainConfig) -> tuple[str, str | None]:
    """The input layout and the document-boundary regex (``chapter`` is the chapter-heading rule, as in
    ``hfbert prepare``)."""
    boundary = CHAPTER_HEADING if config.document_boundary == "chapter" else config.document_boundary
    if config.corpus is None:  # the built-in corpus: paragraphs, chapters are documents
        return config.input_layout or "paragraphs", boundary or CHAPTER_HEADING
    return config.input_layout or "sentences", boundary


def _read_files(paths: list[Path], layout: str, boundary: str | None) -> list[list[str]]:
    """Documents (lists of sentences) from text files; ``.gz`` files are decompressed into a temporary folder
    first.  With ``layout="paragraphs"`` every paragraph is split into sentences here: NSP needs sentence units
    (a chunk of one over-long unit is always given a random next segment, and A/B splits only fall between units)."""
    with tempfile.TemporaryDirectory(prefix="hfbert-corpus-") as scratch:
        plain = []
        for number, path in enumerate(paths):
            if path.suffix == ".gz":
                target = Path(scratch) / f"{number}-{path.stem}"
                with gzip.open(path, "rb") as source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink)
                path = target
            plain.append(path)
        documents = [doc for doc in read_documents(plain, layout=layout, boundary=boundary) if doc]
    if layout == "paragraphs":
        documents = [[sentence for paragraph in doc for sentence in split_sentences(paragraph)] for doc in documents]
    return [doc for doc in documents if doc]


def _dataset_documents(config: PretrainConfig) -> list[list[str]]:
    """Documents from a ``datasets`` dataset: a ``sentences`` column (list of str) or one raw text per row."""
    if Path(config.dataset).is_dir():
        loaded = datasets.load_from_disk(config.dataset)
    else:
        loaded = datasets.load_dataset(config.dataset)
    if isinstance(loaded, datasets.DatasetDict):
        if config.dataset_split not in loaded:
            raise ConfigError(f"dataset {config.dataset} has no split {config.dataset_split!r}: {list(loaded)}")
        loaded = loaded[config.dataset_split]
    columns = loaded.column_names
    column = config.text_column or next((c for c in ("sentences", "text") if c in columns), None)
    if column not in columns:
        raise ConfigError(f"dataset {config.dataset} has no column {column or 'sentences/text'!r} (columns {columns})")
    values = loaded[column]
    if values and isinstance(values[0], str):
        return [doc for doc in (split_sentences(text) for text in values) if doc]
    return [list(doc) for doc in values if doc]


def load_documents(config: PretrainConfig) -> tuple[list[list[str]], str]:
    """All documents (lists of sentences) of the configured corpus, and a human-readable name for it."""
    layout, boundary = _layout(config)
    if config.dataset is not None:
        documents, name = _dataset_documents(config), config.dataset
    elif config.corpus is None:
        documents, name = _read_files([BUILTIN_CORPUS], layout, boundary), BUILTIN_CORPUS_NAME
    else:
        documents, name = _read_files([Path(p) for p in config.corpus], layout, boundary), ", ".join(config.corpus)
    if len(documents) < 4:
        raise ValueError(
            f"the corpus ({name}) has {len(documents)} non-empty document(s); pretraining needs at least 4 "
            "(two to train on and two held out, as next-sentence prediction draws from other documents)"
        )
    return documents, name


def split_documents(documents: list, eval_fraction: float, seed: int) -> tuple[list, list]:
    """A seeded split by whole documents: at least 2 held out and at least 2 kept for training."""
    count = len(documents)
    held_out = min(max(2, int(round(eval_fraction * count))), count - 2)
    order = np.random.default_rng([seed, 0x5EED]).permutation(count)
    eval_ids = set(order[:held_out].tolist())
    train = [doc for i, doc in enumerate(documents) if i not in eval_ids]
    evaluation = [doc for i, doc in enumerate(documents) if i in eval_ids]
    return train, evaluation


# ----------------------------------------------------------------------------------------------------------------
# Vocabulary


def train_tokenizer(config: PretrainConfig, documents: list[list[str]]):
    """A WordPiece tokenizer learned from the training documents (one sentence per text)."""
    sentences = [sentence for document in documents for sentence in document]
    return train_wordpiece(sentences, vocab_size=config.vocab_size, lowercase=config.lowercase)


def load_tokenizer(path: str | Path):
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if not getattr(tokenizer, "is_fast", False):
        raise ConfigError(f"the tokenizer in {path} is not a fast tokenizer (tokenizer.json); hfbert needs one")
    required = ("cls_token", "sep_token", "mask_token", "pad_token")
    missing = [name for name in required if getattr(tokenizer, name) is None]
    if missing:
        raise ConfigError(f"the tokenizer in {path} lacks {missing}; pretraining needs [CLS], [SEP], [MASK], [PAD]")
    return tokenizer


# ----------------------------------------------------------------------------------------------------------------
# Examples


@dataclass
class PretrainingData:
    """Training and held-out examples for each distinct sequence length of the schedule, plus statistics."""

    train: dict[int, Any]  # max_seq_length -> datasets.Dataset
    evaluation: dict[int, Any]
    stats: dict[str, Any]


def _build(documents, tokenizer, config: PretrainConfig, length: int, *, masking: str, dupe_factor, seed: int):
    return build_pretraining_dataset(
        documents, tokenizer, max_seq_length=length, short_seq_prob=config.short_seq_prob, dupe_factor=dupe_factor,
        masking=masking, masked_lm_prob=config.masked_lm_prob, max_predictions_per_seq=config.max_predictions_per_seq,
        whole_word_mask=config.whole_word_mask, num_proc=config.num_proc, seed=seed,
        pool_size=max(2, min(DEFAULT_POOL_SIZE, len(documents))),
    )


def prepare_data(config: PretrainConfig, tokenizer, train_docs: list, eval_docs: list, lengths: list[int],
                 corpus_name: str) -> PretrainingData:
    """Build the examples of every phase length: training ones as configured, held-out ones statically masked
    once with a fixed seed (the same positions at every evaluation) and capped at ``max_eval_examples``."""
    train, evaluation = {}, {}
    for length in sorted(set(lengths)):
        train[length] = _build(train_docs, tokenizer, config, length, masking=config.masking,
                               dupe_factor=config.dupe_factor, seed=config.seed)
        held_out = _build(eval_docs, tokenizer, config, length, masking="static", dupe_factor=1, seed=config.seed + 1)
        evaluation[length] = held_out.select(range(min(len(held_out), config.max_eval_examples)))
    first, last = min(train), lengths[-1]
    stats = {
        "corpus": corpus_name,
        "documents": len(train_docs) + len(eval_docs),
        "train_documents": len(train_docs),
        "eval_documents": len(eval_docs),
        "sentences": sum(map(len, train_docs)) + sum(map(len, eval_docs)),
        "vocab_size": len(tokenizer),
        "train_examples": {length: len(ds) for length, ds in train.items()},
        "eval_examples": {length: len(ds) for length, ds in evaluation.items()},
        "train_tokens": int(sum(len(ids) for ids in train[first]["input_ids"])),
        "masking": config.masking,
    }
    by_length = {length: baselines(ds) for length, ds in evaluation.items()}
    # The final evaluation is at the last phase's length, so its baselines are the ones reported next to it.
    stats.update(by_length[last])
    if len(by_length) > 1:
        stats["baselines_by_length"] = by_length
    return PretrainingData(train, evaluation, stats)


def baselines(held_out) -> dict[str, float]:
    """Trivial predictors on the held-out set: the most frequent masked token, and the majority NSP class."""
    targets = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in held_out["masked_lm_ids"]])
    nsp = np.asarray(held_out["next_sentence_label"], dtype=np.int64)
    top = np.bincount(targets).max() if len(targets) else 0
    return {
        "eval_mlm_baseline_most_frequent_token": float(top / max(len(targets), 1)),
        "eval_nsp_baseline_majority_class": float(max(nsp.mean(), 1 - nsp.mean())) if len(nsp) else 0.0,
    }


# ----------------------------------------------------------------------------------------------------------------
# Batches


class BatchPlan:
    """Which rows of a phase's dataset each process reads at each micro-batch, by arithmetic only.

    ``micro`` counts micro-batches from the start of the phase (optimizer step x accumulation + micro step). Each
    epoch is a fresh permutation seeded by ``(seed, phase, epoch)``; the tail that does not fill a global batch
    is skipped in that epoch (and lands elsewhere in the next permutation).
    """

    def __init__(self, num_examples: int, batch_size: int, world_size: int, seed: int, phase: int):
        global_batch = batch_size * world_size
        if num_examples < global_batch:
            raise ValueError(
                f"the training set has {num_examples} examples, fewer than one global batch "
                f"({batch_size} x {world_size} processes); use a larger corpus or a smaller batch_size"
            )
        self.num_examples, self.batch_size, self.world_size = num_examples, batch_size, world_size
        self.seed, self.phase = seed, phase
        self.batches_per_epoch = num_examples // global_batch
        self._epoch, self._order = -1, None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            self._order = np.random.default_rng([self.seed, self.phase, epoch]).permutation(self.num_examples)
            self._epoch = epoch
        return self._order

    def rows(self, micro: int, rank: int) -> list[int]:
        epoch, index = divmod(micro, self.batches_per_epoch)
        start = (index * self.world_size + rank) * self.batch_size
        return self._permutation(epoch)[start : start + self.batch_size].tolist()

    def mask_seed(self, micro: int, rank: int) -> int:
        """The seed of the dynamic masks of one micro-batch on one process."""
        return int(np.random.SeedSequence([self.seed, self.phase, micro, rank]).generate_state(1)[0])


def examples_at(dataset, rows: list[int]) -> list[dict]:
    """Rows of a datasets table as a list of example dicts (one Arrow read for the whole batch)."""
    columns = dataset[rows]
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*(columns[n] for n in names))]


def collate(collator, examples: list[dict], mask_seed: int) -> dict[str, torch.Tensor]:
    """Run the collator with its masking randomness fixed by ``mask_seed`` and the global RNG left untouched.

    The collator (``seed=None``) draws its generator from torch's global RNG; forking the RNG around the call keeps
    dropout's random stream independent of the data.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(mask_seed)
        return collator(examples)


def iterate_eval_batches(dataset, batch_size: int, rank: int, world_size: int) -> Iterator[list[dict]]:
    """This process's share of the held-out set, in fixed order (process ``r`` takes every ``W``-th batch)."""
    for number, start in enumerate(range(0, len(dataset), batch_size)):
        if number % world_size == rank:
            yield examples_at(dataset, list(range(start, min(start + batch_size, len(dataset)))))
