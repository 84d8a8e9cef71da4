"""The inputs of the bench: the corpus and its tokenizer (:class:`BenchCorpus`), the draws that give a new
batch every step (NSP pairs masked afresh, sentences padded to the longest, full-length windows), the stream that
hands every contender the same sequence of batches (:class:`BatchStream`), and what the harness records of a batch.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from transformers import AutoTokenizer

from hfbert import train_wordpiece
from hfbert.arguments import UsageError
from hfbert.data import (
    CHAPTER_HEADING,
    DataCollatorForBertPretraining,
    build_pretraining_dataset,
    split_sentences,
)
from hfbert.data.sources import BUILTIN_CORPUS
from hfbert.pretrain.batches import HostLayout

if TYPE_CHECKING:
    from .arguments import BenchArguments

# WordPieces learned from the corpus; the rest of --vocab_size is [unused] entries. The Austen novels give about
# 14,000 pieces at the trainer's default frequency cut, so a larger learned vocabulary would fail on them.
LEARNED_VOCAB_SIZE = 8000


class BatchStream:
    """The sequence of batches of one comparison, the same for every contender: batch k of each contender is the
    k-th batch ``draw()`` returned. Batches are drawn in order, so a seeded ``draw`` gives the same sequence in
    every run, and dropped once every contender has had them. With ``repeated=True`` every call returns the first
    batch."""

    def __init__(self, draw: Callable[[], dict], contenders, repeated: bool = False):
        self._draw = draw
        self._drawn: dict[int, dict] = {}
        self._count = 0
        self._position = {name: 0 for name in contenders}
        self.repeated = repeated

    def next(self, contender: str) -> tuple[int, dict]:
        """(index, batch) of the contender's next step."""
        index = 0 if self.repeated else self._position[contender]
        self._position[contender] += 1
        while self._count <= index:
            self._drawn[self._count] = self._draw()
            self._count += 1
        batch = self._drawn[index]
        if not self.repeated:
            done = min(self._position.values())
            for old in [k for k in self._drawn if k < done]:
                del self._drawn[old]
        return index, batch

    @property
    def held(self) -> list[int]:
        """The numbers of the batches kept because some contender has not had them yet."""
        return sorted(self._drawn)


def digest(batch) -> str:
    """A short fingerprint of a batch's inputs and labels (to show which batches a contender saw); of a list of
    batches, theirs joined by "+"."""
    if isinstance(batch, list):
        return "+".join(map(digest, batch))
    crc = 0
    for name in ("input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label"):
        if name in batch:
            crc = zlib.crc32(batch[name].cpu().numpy().tobytes(), crc)
    return f"{crc:08x}"


@dataclass
class BenchCorpus:
    """The text batches are drawn from and the tokenizer that reads it."""

    path: Path
    name: str
    tokenizer: object
    tokenizer_dir: Path
    layout: str
    boundary: str | None

    def pairs(self, length: int, args: BenchArguments):
        """NSP pairs of at most ``length`` tokens (unmasked: the collator masks each batch afresh)."""
        return build_pretraining_dataset(
            str(self.path), self.tokenizer, max_seq_length=length, short_seq_prob=args.short_seq_prob,
            dupe_factor=1, masking="dynamic", input_layout=self.layout, document_boundary=self.boundary,
            seed=args.seed)

    def sentences(self, max_length: int, limit: int = 20000) -> list[list[int]]:
        """Token ids of the corpus's sentences (``[CLS] ... [SEP]``), in corpus order."""
        texts = []
        with self.path.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line and not (self.boundary and re.match(self.boundary, line)):
                    texts.extend(split_sentences(line) if self.layout == "paragraphs" else [line])
                if len(texts) >= limit:
                    break
        return self.tokenizer(texts[:limit], truncation=True, max_length=max_length)["input_ids"]


def _shipped_corpus_text(quick: bool) -> str:
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as f:
        lines = f.readlines()
    return "".join(lines[:1200] if quick else lines)


def load_corpus(args: BenchArguments, scratch: Path) -> BenchCorpus:
    """The corpus (``--corpus`` or the shipped one, written out as text for the pipeline) and its tokenizer."""
    if args.corpus:
        path, name = Path(args.corpus), args.corpus
        layout, boundary = args.input_layout or "sentences", args.document_boundary
    else:
        path = scratch / BUILTIN_CORPUS.stem  # the text, without .gz
        path.write_text(_shipped_corpus_text(args.quick), encoding="utf-8")
        name = f"{BUILTIN_CORPUS.name} (shipped with hfbert{', first 1200 lines' if args.quick else ''})"
        layout, boundary = args.input_layout or "paragraphs", args.document_boundary or "chapter"
    boundary = CHAPTER_HEADING if boundary == "chapter" else boundary
    tokenizer_dir = scratch / "tokenizer"
    if args.tokenizer:
        try:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
        except (OSError, ValueError) as error:
            raise UsageError(f"--tokenizer: cannot load {args.tokenizer!r}: {error}") from None
        if not getattr(tokenizer, "is_fast", False):
            raise UsageError(f"--tokenizer: {args.tokenizer!r} is not a fast tokenizer (tokenizer.json)")
        if len(tokenizer) > args.vocab_size:
            raise UsageError(f"--vocab_size ({args.vocab_size}) is smaller than the tokenizer's {len(tokenizer)} "
                             "entries; give at least that many")
    else:
        learned = min(args.vocab_size, LEARNED_VOCAB_SIZE)
        tokenizer = train_wordpiece([path], vocab_size=args.vocab_size, num_unused=args.vocab_size - learned,
                                    min_frequency=1 if args.quick else 2)
    tokenizer.save_pretrained(tokenizer_dir)
    return BenchCorpus(path, name, tokenizer, tokenizer_dir, layout, boundary)


def pretraining_draw(corpus: BenchCorpus, length: int, batch_size: int, args: BenchArguments) -> Callable[[], dict]:
    """``draw()`` -> the next batch: NSP pairs in a seeded random order (a new order each pass), masked afresh."""
    pairs = corpus.pairs(length, args)
    if len(pairs) < batch_size:
        raise UsageError(f"the corpus gives {len(pairs)} NSP pairs of length {length}, fewer than a batch "
                         f"({batch_size}); give a larger --corpus or a smaller --batch_size")
    collator = DataCollatorForBertPretraining(corpus.tokenizer, args.masked_lm_prob,
                                              max_predictions_per_seq=args.predictions_for(length), seed=args.seed)
    rng = np.random.default_rng([args.seed, length])
    order: list[int] = []

    def draw() -> dict:
        nonlocal order
        if len(order) < batch_size:
            order = rng.permutation(len(pairs)).tolist()
        chosen, order = order[:batch_size], order[batch_size:]
        columns = pairs[chosen]
        batch = collator([dict(zip(columns, values)) for values in zip(*columns.values())])
        # What hfbert pretrain finds on the host when it reads a batch (off the step), for the contenders that take it.
        return {**batch, **HostLayout.of(batch["labels"], batch["attention_mask"].sum(1)).model_inputs()}

    return draw


def padded(rows: list[list[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Rows padded to the longest, as ``DataCollatorWithPadding`` does."""
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def sentence_draw(sentences: list[list[int]], batch_size: int, batches: int, pad_id: int, seed: int):
    """``draw()`` -> the next run's ``batches`` batches of randomly drawn sentences, each padded to its longest."""
    rng = np.random.default_rng([seed, 1])

    def draw() -> list[dict]:
        return [padded([sentences[i] for i in rng.integers(0, len(sentences), batch_size)], pad_id)
                for _ in range(batches)]

    return draw


def uniform_draw(sentences: list[list[int]], batch_size: int, length: int, tokenizer, seed: int):
    """``draw()`` -> the next run's batch of full-length rows: ``[CLS]`` + consecutive corpus tokens + ``[SEP]``."""
    stream = np.fromiter((t for s in sentences for t in s[1:-1]), dtype=np.int64)
    if len(stream) < batch_size * (length - 2):
        raise UsageError(f"the corpus has {len(stream)} tokens, fewer than one batch of {batch_size} x {length}")
    rng = np.random.default_rng([seed, 2])
    cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id

    def draw() -> list[dict]:
        starts = rng.integers(0, len(stream) - length + 2, batch_size)
        rows = [[cls, *stream[s : s + length - 2].tolist(), sep] for s in starts]
        return [padded(rows, tokenizer.pad_token_id)]

    return draw


def pretraining_stats(batch: dict) -> dict:
    """What the harness records of a pretraining batch: real tokens (in all and per row), rows, padded width,
    supervised positions."""
    rows, width = batch["input_ids"].shape
    lengths = batch["attention_mask"].sum(1).tolist()
    return {"tokens": sum(lengths), "lengths": lengths, "rows": rows, "width": width,
            "supervised": int((batch["labels"] != -100).sum())}


def inference_stats(batches: list[dict]) -> dict:
    """What the harness records of one inference run's batches."""
    return {"batches": len(batches), "rows": batches[0]["input_ids"].shape[0],
            "tokens": sum(int(b["attention_mask"].sum()) for b in batches),
            "padded": sum(b["input_ids"].numel() for b in batches),
            "width": max(b["input_ids"].shape[1] for b in batches)}
