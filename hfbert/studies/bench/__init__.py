"""``hfbert bench``: hfbert against transformers' BERT, side by side, in one process.

Sections (``--sections a,b,c,d``):

a. pretraining step (forward + backward + AdamW step): tokens/s, peak tensor memory and process memory growth of
   ``HfBertForPreTraining`` vs ``transformers.BertForPreTraining`` (SDPA), same weights, same batches; for the
   presets in ``--compile_presets`` also both under ``torch.compile``, with the compile time reported apart;
b. inference tokens/s, ``HfBertModel`` vs ``transformers.BertModel`` (SDPA), on full-length batches and on
   batches of real sentences padded to the longest in the batch (as ``DataCollatorWithPadding`` does);
c. data pipeline tokens/s (tokenize + build NSP pairs + mask) for 1 and 2 processes, and for two independent
   1-process builds started together (what the machine gives two processes; ``hfbert.studies.data_bench``);
d. WordPiece training MB/s (``hfbert.tokenization.train_wordpiece``).

In a and b hfbert runs once per attention backend of ``--attn_implementations`` (default sdpa, the row "hfbert";
the others are "hfbert eager", "hfbert flex_attention"), each a copy with the same weights and its own optimizer;
transformers and the compiled rows stay on sdpa.

Inputs. Every timed step gets a new batch, as in training: NSP pairs built from the corpus (the shipped Austen
novels, or ``--corpus``) by ``hfbert.data.build_pretraining_dataset``, drawn in a seeded random order and masked
afresh by ``DataCollatorForBertPretraining``, so row lengths, padding width and the masked positions change from
step to step. A code path whose speed depends on seeing the same shapes again (kernels compiled or cached per
shape) is measured as it runs in training. ``--repeated_inputs`` times one batch again and again instead (the
figure such caches give at best). The text is tokenized with ``--tokenizer``, or with a WordPiece vocabulary
learned from the corpus and filled with ``[unused]`` entries up to ``--vocab_size`` (default 30522, the size of
bert-base-uncased's, so the output layer costs what BERT's does).

Method. The machine this runs on may be shared, so absolute figures drift. Every comparison therefore runs in one
process, all contenders on the same sequence of batches (batch k of every contender is the same batch), alternating
the contenders round by round (A B C, C B A, ...) after two warm-up steps each, at least ``--repeats`` rounds and
more for short runs (``--min_seconds``). Reported: the medians, and as the speed-up the median of the per-round
ratios against transformers without compilation: the runs of a round are adjacent in time and on the same batch,
so a slow spell of the machine affects both (the ratio of the medians is in the JSON too). Tokens are real
(non-padding) tokens.

Work ratio. Each pretraining row also carries transformers' model FLOPs per step over the contender's on the same
batches (``contender_flops``: transformers runs the encoder on every padded position and computes vocabulary logits
at every position; hfbert runs the encoder on the real tokens, the padded ones when compiled, and the logits at the
supervised positions only). It is the speed-up the contender would have at equal FLOP efficiency, so beside the
measured speed-up it shows how much of a lead is less work and how much is faster work.

Memory. Peak tensor memory is the largest amount of tensor memory live at any moment of one training step: the
bytes held before the step (parameters and AdamW state, identical on both sides) plus the peak of the running sum
of every allocation and free recorded by ``torch.profiler`` (``profile_memory=True``) during that step (on CUDA:
``torch.cuda.max_memory_allocated``). Process memory (resident set size, Linux) is read right before and right
after every timed step; a contender's growth is the sum over its own timed steps, so memory a path keeps between
steps (kernels cached per shape, allocator pools) shows there, while a peak it frees again does not.

torch.compile. Compiled contenders compile on their first step and again when a shape first changes (dynamic
shapes); ``compile_s`` is the wall time of the two warm-up steps minus two median steps. Compiling takes minutes
for the larger presets on a small CPU, which is why ``--compile_presets`` defaults to the two smallest.

flex_attention. FlexAttention compiles its kernel on the first calls too; ``first_steps_s`` is the same difference
for its rows. torch's FlexAttention has no backward on CPU, so there its pretraining row is not run (the report's
``not_run`` says so); on CUDA it trains with attention-probability dropout off, as transformers' flex backend takes
no dropout (the row's ``attention_dropout`` is 0).

On CUDA (``--device cuda``) the step runs under bf16 autocast; the JSON then also carries the model FLOPs
utilisation of each run when ``--peak_tflops`` is given.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import os
import platform
import re
import resource
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer

from ... import __version__
from ...arguments import CommandParser, UsageError, run_command
from ...configuration_hfbert import HfBertConfig
from ...data import (CHAPTER_HEADING, DataCollatorForBertPretraining, build_pretraining_dataset, split_sentences)
from ...data.sources import BUILTIN_CORPUS
from ...modeling_hfbert import HfBertForPreTraining, HfBertModel, HfBertSelfAttention
from ...tokenization import train_wordpiece
from ...unpadding_hfbert import ATTENTION_BACKENDS, attention_backend
from .. import data_bench

# WordPieces learned from the corpus; the rest of --vocab_size is [unused] entries. The Austen novels give about
# 14,000 pieces at the trainer's default frequency cut, so a larger learned vocabulary would fail on them.
LEARNED_VOCAB_SIZE = 8000
# Batch sizes at length 128 that keep one base step within seconds on a small CPU; longer lengths keep the number of
# tokens per batch (batch * length) about the same.
DEFAULT_BATCH = {"tiny": 32, "mini": 32, "small": 16, "medium": 16, "base": 8, "large": 4}
SECTIONS = ("a", "b", "c", "d")
DEFAULT_COMPILE_PRESETS = "mini,small"
WARMUP_STEPS = 2  # the first compiles, the second meets a new shape (dynamic shapes); eager runs the same two
PEERS = ("hfbert", "transformers", "hfbert+compile", "transformers+compile")
BASELINE = "transformers"
# Attention backends hfbert can be timed with (--attn_implementations): those torch itself provides. transformers
# runs with BASELINE_ATTENTION.
ATTN_IMPLEMENTATIONS = tuple(name for name, backend in ATTENTION_BACKENDS.items() if backend.kernel is None)
BASELINE_ATTENTION = "sdpa"
QUICK_CONFIG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                    max_position_embeddings=512)


# ----------------------------------------------------------------------------------------------- settings


def _names(text: str | None) -> list[str]:
    return [] if text is None else [part.strip() for part in text.split(",") if part.strip() and part.strip() != "none"]


@dataclass
class BenchArguments:
    """Settings of ``hfbert bench``."""

    presets: str = field(default="mini,small,base", metadata={"help": "comma-separated model presets"})
    lengths: str = field(default="128,512", metadata={"help": "comma-separated sequence lengths"})
    long_presets: str | None = field(
        default=None, metadata={"help": "presets also run at lengths above 128 (default: all of --presets)"})
    compile_presets: str | None = field(
        default=None,
        metadata={"help": "presets whose pretraining step at lengths up to 128 is also timed under torch.compile, "
                          "for hfbert and for transformers (default: mini,small; with --quick none; 'none': none)"})
    contenders: str = field(
        default=",".join(PEERS),
        metadata={"help": "section a: which of hfbert, transformers, hfbert+compile, transformers+compile run (the "
                          "compiled ones only for --compile_presets; one alone in a process shows its own memory "
                          "growth; speed-ups need transformers)"})
    attn_implementations: str = field(
        default=BASELINE_ATTENTION,
        metadata={"help": "sections a and b: comma-separated attention backends hfbert is timed with, a row each "
                          f"(some of {', '.join(ATTN_IMPLEMENTATIONS)}; transformers and the compiled rows stay on "
                          f"{BASELINE_ATTENTION})"})
    batch_size: int | None = field(
        default=None, metadata={"help": "batch size at every size (default: per preset, fewer rows at longer lengths)"})
    repeats: int = field(default=5, metadata={"help": "timed rounds per comparison (medians reported)"})
    min_seconds: float = field(
        default=3.0,
        metadata={"help": "sections a and b: more rounds (up to 4x --repeats) until each contender ran this long"})
    sections: str = field(default="a,b,c,d", metadata={"help": "a pretraining, b inference, c data, d wordpiece"})
    repeated_inputs: bool = field(
        default=False,
        metadata={"help": "time one batch again and again instead of a new batch every step (the figure that "
                          "caches keyed by shape give at best)"})
    corpus: str | None = field(
        default=None, metadata={"help": "text file to draw batches from (default: the shipped Austen novels)"})
    input_layout: str | None = field(
        default=None,
        metadata={"help": "'sentences' (one per line) or 'paragraphs' (default: paragraphs for the shipped corpus, "
                          "sentences for --corpus)"})
    document_boundary: str | None = field(
        default=None,
        metadata={"help": "regular expression for lines that end a document, or 'chapter' (default: chapter "
                          "headings for the shipped corpus, blank lines only for --corpus)"})
    tokenizer: str | None = field(
        default=None, metadata={"help": "tokenizer folder or Hub id (default: WordPiece learned from the corpus)"})
    vocab_size: int = field(
        default=30522, metadata={"help": "model vocabulary size (a learned vocabulary is filled to it with [unused])"})
    short_seq_prob: float = field(
        default=0.1, metadata={"help": "share of NSP pairs built shorter than the length, as the original"})
    masked_lm_prob: float = field(default=0.15, metadata={"help": "share of the tokens of a row that are masked"})
    max_predictions_per_seq: int | None = field(
        default=None, metadata={"help": "most masked tokens per row (default: 20 per 128 tokens of length)"})
    inference_batches: int = field(default=2, metadata={"help": "mixed-length batches per inference run"})
    inference_batch_size: int = field(default=32, metadata={"help": "rows per mixed-length batch"})
    output: str = field(default="bench.json", metadata={"help": "where to write the JSON report"})
    markdown: str | None = field(default=None, metadata={"help": "also write the tables as Markdown to this file"})
    quick: bool = field(default=False, metadata={"help": "tiny sizes that run in seconds (for tests)"})
    threads: int | None = field(default=None, metadata={"help": "torch intra-op threads (default: torch's)"})
    device: str = field(default="cpu", metadata={"help": "cpu or cuda (bf16 autocast on cuda)"})
    peak_tflops: float | None = field(default=None, metadata={"help": "device peak, for model FLOPs utilisation"})
    seed: int = field(default=0, metadata={"help": "seed of the weights, the batch order and the masks"})

    def __post_init__(self):
        unknown = sorted(set(_names(self.sections)) - set(SECTIONS))
        if unknown or not _names(self.sections):
            raise UsageError(f"--sections: unknown or no section(s) {unknown}; expected some of {list(SECTIONS)}")
        for option in ("presets", "long_presets", "compile_presets"):
            bad = [p for p in _names(getattr(self, option)) if p not in DEFAULT_BATCH]
            if bad:
                raise UsageError(f"--{option}: unknown preset(s) {bad}; expected some of {list(DEFAULT_BATCH)}")
        bad = [c for c in _names(self.contenders) if c not in PEERS]
        if bad or not _names(self.contenders):
            raise UsageError(f"--contenders: unknown or no contender(s) {bad}; expected some of {list(PEERS)}")
        bad = [a for a in _names(self.attn_implementations) if a not in ATTN_IMPLEMENTATIONS]
        if bad or not _names(self.attn_implementations):
            raise UsageError(f"--attn_implementations: unknown or no backend(s) {bad}; expected some of "
                             f"{list(ATTN_IMPLEMENTATIONS)}")
        if not _names(self.presets):
            raise UsageError("--presets: give at least one preset")
        try:
            lengths = [int(n) for n in _names(self.lengths)]
        except ValueError:
            raise UsageError(f"--lengths: expected comma-separated integers, got {self.lengths!r}") from None
        if not lengths or any(not 8 <= n <= 512 for n in lengths):
            raise UsageError(f"--lengths: every length must be between 8 and 512, got {self.lengths!r}")
        for option in ("repeats", "inference_batches", "inference_batch_size", "vocab_size"):
            if getattr(self, option) < 1:
                raise UsageError(f"--{option} must be at least 1, got {getattr(self, option)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise UsageError(f"--batch_size must be at least 1, got {self.batch_size}")
        if self.max_predictions_per_seq is not None and self.max_predictions_per_seq < 1:
            raise UsageError(f"--max_predictions_per_seq must be at least 1, got {self.max_predictions_per_seq}")
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise UsageError(f"--masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UsageError(f"--short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.input_layout not in (None, "sentences", "paragraphs"):
            raise UsageError(f"--input_layout must be 'sentences' or 'paragraphs', got {self.input_layout!r}")
        if self.corpus is not None and not Path(self.corpus).is_file():
            raise UsageError(f"--corpus: file not found: {self.corpus}")
        if self.document_boundary not in (None, "chapter"):
            try:
                re.compile(self.document_boundary)
            except re.error as error:
                raise UsageError(f"--document_boundary: not a regular expression ({error})") from None
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise UsageError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is available")
        if self.quick:  # tiny models on a slice of the corpus; compiled contenders only when asked for
            short = [n for n in lengths if n <= 32]  # lengths asked for that suit a tiny model, else 16 and 32
            self.lengths = ",".join(map(str, short)) if short else "16,32"
            self.presets, self.repeats, self.min_seconds = "mini", min(self.repeats, 3), 0.0
            self.long_presets = None
            self.vocab_size = min(self.vocab_size, 500)
        if self.compile_presets is None:
            self.compile_presets = "none" if self.quick else DEFAULT_COMPILE_PRESETS

    def length_list(self) -> list[int]:
        return [int(n) for n in _names(self.lengths)]

    def backends(self) -> list[str]:
        """The attention backends hfbert runs with, in the order given, each once."""
        return list(dict.fromkeys(_names(self.attn_implementations)))

    def grid(self) -> list[tuple[str, int]]:
        """(preset, length) pairs: every preset at lengths up to 128, the long presets also above."""
        presets = _names(self.presets)
        long_presets = presets if self.long_presets is None else _names(self.long_presets)
        return [(p, n) for p in presets for n in self.length_list() if n <= 128 or p in long_presets]

    def batch_size_for(self, preset: str, length: int) -> int:
        if self.batch_size:
            return self.batch_size
        if self.quick:
            return 4
        return max(1, DEFAULT_BATCH[preset] * 128 // length)

    def predictions_for(self, length: int) -> int:
        return self.max_predictions_per_seq or max(1, 20 * length // 128)


# ----------------------------------------------------------------------------------------------- measuring


def alternate(runs: dict[str, Callable[[], float]], repeats: int, warmup: int = 1,
              min_seconds: float = 0.0) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run every contender ``warmup`` times, then rounds in alternating order (A B, B A, ...).

    At least ``repeats`` rounds, and more (at most 4x) until every contender has run for ``min_seconds`` in
    total: a run of a tenth of a second gets more than 5 samples, so a slow spell of the machine lasting a second
    or two cannot decide the median. Returns the seconds of the timed runs and of the warm-up runs per contender.
    """
    warmups = {name: [run() for _ in range(warmup)] for name, run in runs.items()}
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    round_ = 0
    while round_ < repeats or (round_ < 4 * repeats and min(map(sum, times.values())) < min_seconds):
        for name in names if round_ % 2 == 0 else reversed(names):
            times[name].append(runs[name]())
        round_ += 1
    return times, warmups


def paired_speedup(theirs: list[float], ours: list[float]) -> float | None:
    """Median over rounds of ``theirs / ours``: the two runs of a round are adjacent in time, so a slow or fast
    spell of a shared machine affects both and cancels in the ratio (the ratio of the two medians does not pair
    them; both are in the JSON)."""
    ratios = [t / o for t, o in zip(theirs, ours) if o > 0]
    return statistics.median(ratios) if ratios else None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def resident_set_bytes() -> int | None:
    """The process's resident set size now (Linux ``/proc``; None elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def peak_resident_bytes() -> int:
    """The process's largest resident set size so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if platform.system() == "Darwin" else peak * 1024


def resident_bytes(*objects) -> int:
    """Bytes of the distinct tensor storages reachable from modules, optimizers and tensors (tied weights once)."""
    seen: dict[int, int] = {}

    def add(tensor):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()

    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for tensor in (*obj.parameters(), *obj.buffers()):
                add(tensor)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for tensor in state.values():
                    add(tensor)
    return sum(seen.values())


def peak_memory(step: Callable[[], object], device: torch.device, *resident) -> int | None:
    """Peak bytes of tensor memory during one call of ``step`` (see the module docstring)."""
    if device.type == "cuda":
        _synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        _synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    try:
        records = sorted(
            (event.start_ns(), event.nbytes())
            for event in prof.profiler.kineto_results.events()
            if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU
        )
    except AttributeError:  # the profiler's raw records moved: say "unknown" rather than guess
        return None
    live = peak = 0
    for _, delta in records:
        live += delta
        peak = max(peak, live)
    return resident_bytes(*resident) + peak


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator


def _mb(value: int | None) -> float | None:
    return None if value is None else value / 2**20


# ----------------------------------------------------------------------------------------------- inputs


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


def digest(batch: dict) -> str:
    """A short fingerprint of a batch's inputs and labels (to show which batches a contender saw)."""
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
        return collator([dict(zip(columns, values)) for values in zip(*columns.values())])

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


# ----------------------------------------------------------------------------------------------- models


def model_config(preset: str, vocab_size: int, quick: bool) -> HfBertConfig:
    if quick:
        return HfBertConfig(vocab_size=vocab_size, **QUICK_CONFIG)
    return HfBertConfig.from_preset(preset, vocab_size=vocab_size)


def twins(hfbert_class, transformers_class, config, device, seed: int = 0):
    """The hfbert model and the transformers model of the same head, holding the same weights (SDPA both)."""
    torch.manual_seed(seed)
    ours = hfbert_class(config)
    bert_config = config.to_bert_config()
    bert_config._attn_implementation = BASELINE_ATTENTION
    theirs = transformers_class(bert_config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    if unexpected or any("decoder" not in key for key in missing):
        raise RuntimeError(f"weights do not line up: missing {missing}, unexpected {unexpected}")
    return ours.to(device), theirs.to(device)


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def train_flops(config, tokens: int, width: int, rows: int, supervised: int, vocab_logits_everywhere: bool) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward, 2 FLOPs per multiply-add)."""
    d, layers, inner = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    per_token = layers * (4 * d * d + 2 * d * inner + 2 * width * d)  # projections, FFN, attention scores + mix
    head_rows = rows * width if vocab_logits_everywhere else supervised
    return 3 * 2 * (tokens * per_token + head_rows * (d * d + d * config.vocab_size))


def contender_flops(config, name: str, call: dict) -> float:
    """Model FLOPs of one training step of contender ``name`` on the batch ``call`` describes, counted as that side
    computes it: transformers runs the encoder on every padded position and the vocabulary logits at every
    position; hfbert runs the encoder on the real tokens and the logits at the supervised positions only, and
    compiled it runs the padded encoder (see ``hfbert.modeling_hfbert``)."""
    ours = name.startswith("hfbert")
    encoder = call["tokens"] if ours and not name.endswith("+compile") else call["rows"] * call["width"]
    return train_flops(config, encoder, call["width"], call["rows"], call["supervised"],
                       vocab_logits_everywhere=not ours)


def work_ratio(config, name: str, calls: list[dict]) -> float | None:
    """transformers' model FLOPs over the contender's on the same batches: the speed-up the contender would have
    if both sides turned FLOPs into time equally well."""
    ours = sum(contender_flops(config, name, c) for c in calls)
    return _ratio(sum(contender_flops(config, BASELINE, c) for c in calls), ours)


def backend_contender(backend: str) -> str:
    """The name of hfbert's row with attention ``backend``: plain "hfbert" for the backend transformers runs with
    (sdpa), so that one keeps the name it has without --attn_implementations."""
    return "hfbert" if backend == BASELINE_ATTENTION else f"hfbert {backend}"


def with_attention(model, backend: str):
    """``model`` itself for sdpa, else a copy of it (the same weights) running attention with ``backend``."""
    if backend == BASELINE_ATTENTION:
        return model
    model = copy.deepcopy(model)
    model.set_attn_implementation(backend)
    return model


def _without_attention_dropout(model) -> None:
    """Attention-probability dropout off, for a backend that takes none when training (transformers'
    flex_attention)."""
    for module in model.modules():
        if isinstance(module, HfBertSelfAttention):
            module.dropout.p = 0.0


def _compiles_first(name: str, backend: str) -> bool:
    """Whether the contender compiles kernels on its first steps (torch.compile; FlexAttention per shape)."""
    return name.endswith("+compile") or attention_backend(backend).compiles_per_shape


def _compile_counter() -> int | None:
    """Graphs dynamo has compiled so far in this process (None if torch no longer exposes the counter)."""
    try:
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    except (AttributeError, KeyError, TypeError):
        return None


# ----------------------------------------------------------------------------------------------- sections


class Contender:
    """One side of a comparison: a step function on the stream's batches, and what happened on each step."""

    def __init__(self, name: str, step: Callable[[object], object], stream: BatchStream, device: torch.device,
                 describe: Callable[[object], dict] | None = None):
        self.name, self.step, self.stream, self.device, self.describe = name, step, stream, device, describe
        self.calls: list[dict] = []  # per step: batch index and digest, RSS before and after, graphs compiled

    def __call__(self) -> float:
        index, batch = self.stream.next(self.name)
        batch = _to(batch, self.device)
        graphs, before = _compile_counter(), resident_set_bytes()
        _synchronize(self.device)
        start = time.perf_counter()
        self.step(batch)
        _synchronize(self.device)
        seconds = time.perf_counter() - start
        after, graphs_after = resident_set_bytes(), _compile_counter()
        call = {"index": index, "digest": _digest_of(batch), "rss_before": before, "rss_after": after,
                "graphs": None if graphs is None or graphs_after is None else graphs_after - graphs}
        if self.describe is not None:
            call.update(self.describe(batch))
        self.calls.append(call)
        return seconds

    def timed(self, warmup: int) -> list[dict]:
        return self.calls[warmup:]

    def memory(self, warmup: int) -> dict:
        """Process memory over the timed steps (the calls after ``warmup``)."""
        timed = self.timed(warmup)
        before, after = [c["rss_before"] for c in timed], [c["rss_after"] for c in timed]
        if not timed or None in before or None in after:
            return {"rss_start_mb": None, "rss_end_mb": None, "rss_growth_mb": None}
        return {"rss_start_mb": _mb(before[0]), "rss_end_mb": _mb(after[-1]),
                "rss_growth_mb": _mb(sum(a - b for a, b in zip(after, before)))}

    def graphs(self, warmup: int) -> tuple[int | None, int | None]:
        """Graphs torch.compile built during the warm-up steps and during the timed steps."""
        counts = [c["graphs"] for c in self.calls]
        if None in counts:
            return None, None
        return sum(counts[:warmup]), sum(counts[warmup:])


def _to(batch, device):
    if isinstance(batch, list):
        return [_to(b, device) for b in batch]
    return {k: v.to(device) for k, v in batch.items()}


def _digest_of(batch) -> str:
    return "+".join(map(digest, batch)) if isinstance(batch, list) else digest(batch)


def _pretraining_stats(batch: dict) -> dict:
    rows, width = batch["input_ids"].shape
    return {"tokens": int(batch["attention_mask"].sum()), "rows": rows, "width": width,
            "supervised": int((batch["labels"] != -100).sum())}


def _inference_stats(batches: list[dict]) -> dict:
    return {"batches": len(batches), "rows": batches[0]["input_ids"].shape[0],
            "tokens": sum(int(b["attention_mask"].sum()) for b in batches),
            "padded": sum(b["input_ids"].numel() for b in batches),
            "width": max(b["input_ids"].shape[1] for b in batches)}


def _contender_row(contender: Contender, backend: str, times: list[float], warmups: list[float],
                   baseline: list[float] | None) -> dict:
    calls = contender.timed(WARMUP_STEPS)
    seconds = statistics.median(times)
    row = {"step_s": seconds, "tokens_per_s": statistics.median(c["tokens"] / t for c, t in zip(calls, times)),
           "times_s": times, "warmup_s": warmups, "batch_digests": [c["digest"] for c in calls],
           **contender.memory(WARMUP_STEPS)}
    if contender.name.endswith("+compile"):
        row["compile_s"] = max(0.0, sum(warmups) - len(warmups) * seconds)
    elif _compiles_first(contender.name, backend):  # FlexAttention compiles its kernel for the first shapes it meets
        row["first_steps_s"] = max(0.0, sum(warmups) - len(warmups) * seconds)
    if _compiles_first(contender.name, backend):
        row["graphs_compiled_warmup"], row["graphs_compiled_timed"] = contender.graphs(WARMUP_STEPS)
    if contender.name != BASELINE and baseline is not None:
        row["speedup"] = paired_speedup(baseline, times)
        row["speedup_of_medians"] = _ratio(statistics.median(baseline), seconds)
    row["attn_implementation"] = backend
    return row


def bench_pretraining(preset: str, length: int, batch_size: int, corpus: BenchCorpus, args: BenchArguments,
                      device: torch.device, compiled: bool) -> dict:
    config = model_config(preset, args.vocab_size, args.quick)
    hf, tf = twins(HfBertForPreTraining, transformers.BertForPreTraining, config, device, args.seed)
    wanted = _names(args.contenders)
    models, backends, not_run = {}, {}, {}
    if "hfbert" in wanted:  # a row per attention backend, each model a copy with the same weights
        for backend in args.backends():
            name = backend_contender(backend)
            if device.type == "cpu" and not ATTENTION_BACKENDS[backend].backward_on_cpu:
                not_run[name] = f"torch's {backend} has no backward on CPU"
                continue
            models[name], backends[name] = with_attention(hf, backend), backend
            if not ATTENTION_BACKENDS[backend].dropout_in_training:
                _without_attention_dropout(models[name])
    if "transformers" in wanted:
        models["transformers"] = tf
    if compiled:  # their own copies (same initial weights), so each optimizer moves only its contender's weights
        # As `hfbert pretrain --torch_compile` does: counts read from the data (the supervised rows) are traced as
        # symbols instead of breaking the graph, for both contenders.
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        torch._dynamo.config.capture_scalar_outputs = True
        for name, model in (("hfbert+compile", hf), ("transformers+compile", tf)):
            if name in wanted:
                models[name] = torch.compile(copy.deepcopy(model))
    del hf, tf
    if not models:
        raise UsageError(f"--contenders {args.contenders}: none of them runs for {preset} (compiled contenders "
                         f"run only for --compile_presets){''.join(f'; {n}: {r}' for n, r in not_run.items())}")
    # The same optimizer on every side; the fused kernel is the fastest torch offers on CPU and CUDA alike.
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True) for name, model in models.items()}

    def step(name: str, batch: dict) -> None:
        model, optimizer = models[name], optimizers[name]
        model.train()
        with _autocast(device):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    stream = BatchStream(pretraining_draw(corpus, length, batch_size, args), models, args.repeated_inputs)
    contenders = {name: Contender(name, partial(step, name), stream, device, _pretraining_stats) for name in models}
    times, warmups = alternate(contenders, args.repeats, warmup=WARMUP_STEPS, min_seconds=args.min_seconds)
    calls = next(iter(contenders.values())).timed(WARMUP_STEPS)
    result = {"preset": preset, "length": length, "batch_size": batch_size,
              "inputs": "repeated" if args.repeated_inputs else "changing", "steps": len(calls),
              "tokens_per_batch": statistics.mean(c["tokens"] for c in calls),
              "padded_tokens_per_batch": statistics.mean(c["rows"] * c["width"] for c in calls),
              "supervised_per_batch": statistics.mean(c["supervised"] for c in calls),
              "widths": sorted({c["width"] for c in calls}), "contenders": list(models)}
    for name, contender in contenders.items():
        backend = backends.get(name, BASELINE_ATTENTION)
        result[name] = _contender_row(contender, backend, times[name], warmups[name], times.get(BASELINE))
        if not ATTENTION_BACKENDS[backend].dropout_in_training:
            result[name]["attention_dropout"] = 0.0
        result[name]["work_ratio"] = work_ratio(config, name, contender.timed(WARMUP_STEPS))
        if device.type == "cuda" and args.peak_tflops:
            flops = sum(train_flops(config, c["tokens"], c["width"], c["rows"], c["supervised"],
                                    vocab_logits_everywhere=name.startswith("transformers"))
                        for c in contender.timed(WARMUP_STEPS))
            result[name]["mfu"] = flops / sum(times[name]) / (args.peak_tflops * 1e12)
    for name, model in models.items():  # one untimed step each, on the same next batch
        _, batch = stream.next(name)
        resident = (getattr(model, "_orig_mod", model), optimizers[name])
        result[name]["peak_memory_mb"] = _mb(peak_memory(partial(step, name, _to(batch, device)), device, *resident))
    if "hfbert" in models and BASELINE in models:
        result["speedup"] = result["hfbert"]["speedup"]
        result["memory_ratio"] = _ratio(result["hfbert"]["peak_memory_mb"], result[BASELINE]["peak_memory_mb"])
    if not_run:
        result["not_run"] = not_run
    result["process_peak_rss_mb"] = _mb(peak_resident_bytes())
    del models, optimizers, contenders, stream
    return result


def bench_inference(preset: str, draw: Callable[[], list[dict]], kind: str, args: BenchArguments,
                    device: torch.device, padding_free: bool) -> dict:
    """tokens/s of the bare encoder, a new set of batches every run; hfbert runs once per attention backend of
    ``--attn_implementations`` as configured by default and, with ``padding_free``, each also with
    ``config.padding_free = True`` (padding positions skipped)."""
    config = model_config(preset, args.vocab_size, args.quick)
    ours, theirs = twins(HfBertModel, transformers.BertModel, config, device, args.seed)
    ours.eval(), theirs.eval()
    backends = {backend_contender(b): b for b in args.backends()}
    hfbert_models = {name: with_attention(ours, backend) for name, backend in backends.items()}

    def forward(model, skip_padding: bool, batches: list[dict]) -> None:
        if model is not theirs:
            model.config.padding_free = skip_padding
        with torch.inference_mode(), _autocast(device):
            for batch in batches:
                model(**batch)

    runs = {name: partial(forward, model, False) for name, model in hfbert_models.items()}
    runs["transformers"] = partial(forward, theirs, False)
    if padding_free:
        for name, model in hfbert_models.items():
            runs[f"{name} padding_free"] = partial(forward, model, True)
            backends[f"{name} padding_free"] = backends[name]
    stream = BatchStream(draw, runs, args.repeated_inputs)
    contenders = {name: Contender(name, run, stream, device, _inference_stats) for name, run in runs.items()}
    times, warmups = alternate(contenders, args.repeats, warmup=WARMUP_STEPS, min_seconds=args.min_seconds)
    for model in hfbert_models.values():
        model.config.padding_free = False
    calls = contenders[BASELINE].timed(WARMUP_STEPS)
    tokens, padded_tokens = sum(c["tokens"] for c in calls), sum(c["padded"] for c in calls)
    result = {"preset": preset, "lengths": kind, "batches_per_run": calls[0]["batches"],
              "inputs": "repeated" if args.repeated_inputs else "changing", "runs": len(calls),
              "batch_size": calls[0]["rows"], "max_length": max(c["width"] for c in calls),
              "tokens_per_run": tokens / len(calls), "padding_fraction": 1 - tokens / padded_tokens,
              "contenders": list(runs)}
    for name, contender in contenders.items():
        result[name] = _contender_row(contender, backends.get(name, BASELINE_ATTENTION), times[name], warmups[name],
                                      times[BASELINE])
    if "hfbert" in result:
        result["speedup"] = result["hfbert"]["speedup"]
        if padding_free:
            result["speedup_padding_free"] = result["hfbert padding_free"]["speedup"]
    return result


def bench_pipeline(corpus: BenchCorpus, args: BenchArguments) -> list[dict]:
    """1 process, 2 processes, and two independent 1-process builds started together ("1+1": what this machine
    gives two busy processes that share nothing), ``args.repeats`` rounds in alternating order, each build in a
    fresh interpreter.  Each row is the run with the median wall time (``wall_s_by_round``: all of them);
    ``scaling_vs_1_proc`` is the median over rounds of the 1-process wall time over the other's (the runs of a
    round are adjacent in time), ``scaling_of_medians`` the ratio of the two medians."""
    boundary = "chapter" if corpus.boundary == CHAPTER_HEADING else corpus.boundary
    settings = {"layout": corpus.layout, "boundary": boundary}
    contenders = {1: partial(data_bench.measure_pipeline, 1, corpus.path, corpus.tokenizer_dir, **settings),
                  2: partial(data_bench.measure_pipeline, 2, corpus.path, corpus.tokenizer_dir, **settings),
                  "1+1": lambda: _together(data_bench.measure_concurrent(2, corpus.path, corpus.tokenizer_dir,
                                                                         **settings))}
    runs: dict = {name: [] for name in contenders}
    failures: dict = {}
    for round_ in range(args.repeats):
        for name in list(contenders) if round_ % 2 == 0 else reversed(list(contenders)):
            if name in failures:
                continue
            try:
                runs[name].append(contenders[name]())
            except Exception as error:  # noqa: BLE001 - reported, not hidden: the other sections still run
                failures[name] = f"{type(error).__name__}: {error}"[:500]
    rows = []
    for name, measured in runs.items():
        if name in failures:
            rows.append({"available": False, "num_proc": name, "reason": failures[name]})
            continue
        median = sorted(measured, key=lambda m: m["wall_s"])[(len(measured) - 1) // 2]
        rows.append({"available": True, "corpus": corpus.name, **median,
                     "wall_s_by_round": [m["wall_s"] for m in measured]})
    if rows[0].get("available"):
        one = rows[0]
        for row in rows[1:]:
            if row.get("available"):  # tokens per second: a "1+1" round builds the corpus twice
                row["scaling_vs_1_proc"] = paired_speedup(
                    [w * row["tokens"] / one["tokens"] for w in one["wall_s_by_round"]], row["wall_s_by_round"])
                row["scaling_of_medians"] = row["tokens_per_s"] / one["tokens_per_s"]
    return rows


def _together(results: list[dict]) -> dict:
    """Independent builds started at the same instant, as one run: all their tokens over the longest wall time."""
    wall, cpu = max(r["wall_s"] for r in results), sum(r["cpu_s"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    return {"num_proc": "1+1", "wall_s": wall, "cpu_s": round(cpu, 3), "tokens": tokens,
            "instances": sum(r["instances"] for r in results), "tokens_per_s": round(tokens / wall),
            "tokens_per_cpu_s": round(tokens / cpu), "walls_s": [r["wall_s"] for r in results]}


def bench_wordpiece(corpus: BenchCorpus, args: BenchArguments) -> dict:
    vocab_size = 400 if args.quick else LEARNED_VOCAB_SIZE
    size = corpus.path.stat().st_size
    times = []
    for _ in range(max(1, min(args.repeats, 3))):
        start = time.perf_counter()
        train_wordpiece([corpus.path], vocab_size=vocab_size, min_frequency=1 if args.quick else 2)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"corpus": corpus.name, "megabytes": size / 1e6, "vocab_size": vocab_size, "train_s": seconds,
            "mb_per_s": size / 1e6 / seconds, "times_s": times}


# ----------------------------------------------------------------------------------------------- report


def machine() -> dict:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hfbert": __version__, "nproc": os.cpu_count(), "cpu": model, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def _fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec) + suffix


PEER_LABELS = {"hfbert": "hfbert", "transformers": "transformers", "hfbert+compile": "hfbert + torch.compile",
               "transformers+compile": "transformers + torch.compile", "hfbert padding_free": "hfbert, padding_free"}


def label(name: str, row: dict | None = None) -> str:
    """A contender's name in the tables: "hfbert eager padding_free" reads "hfbert eager, padding_free"; a row
    that ran without attention dropout says so."""
    text = PEER_LABELS.get(name) or name.replace(" padding_free", ", padding_free")
    if row is not None and row.get("attention_dropout") == 0.0:
        text += " (no attention dropout)"
    return text


def _first_steps(name: str, row: dict) -> str:
    """The compile column: compile s of torch.compile, the first steps' extra time of FlexAttention, else '-'."""
    if not _compiles_first(name, row.get("attn_implementation", BASELINE_ATTENTION)):
        return "-"
    return _fmt(row.get("compile_s", row.get("first_steps_s")), ".0f")


def render(report: dict) -> str:
    """The report as Markdown tables (the same text goes to the terminal)."""
    inputs = "one batch repeated" if report.get("settings", {}).get("repeated_inputs") else "a new batch every step"
    lines = []
    if report.get("pretraining"):
        lines += [f"Pretraining step (forward + backward + AdamW), {inputs}; speed-up = transformers' step time over "
                  "the contender's, median of per-round ratios; work ratio = transformers' model FLOPs per step over "
                  "the contender's (the speed-up at equal FLOP efficiency)", "",
                  "| preset | length | batch | real tokens | contender | tokens/s | speed-up | work ratio "
                  "| compile s | peak MiB | RSS growth MiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        not_run: dict[str, str] = {}
        for r in report["pretraining"]:
            for name in r["contenders"]:
                c = r[name]
                lines.append(
                    f"| {r['preset']} | {r['length']} | {r['batch_size']} | {_fmt(r['tokens_per_batch'], '.0f')} "
                    f"| {label(name, c)} | {_fmt(c['tokens_per_s'], '.0f')} "
                    f"| {_fmt(c.get('speedup', 1.0 if name == BASELINE else None), suffix='x')} "
                    f"| {_fmt(c.get('work_ratio'), suffix='x')} | {_first_steps(name, c)} "
                    f"| {_fmt(c['peak_memory_mb'], '.0f')} | {_fmt(c['rss_growth_mb'], '+.0f')} |")
            not_run.update(r.get("not_run", {}))
        lines += [f"Not run: {label(name)} ({reason})." for name, reason in not_run.items()]
        lines.append("")
    if report.get("inference"):
        lines += [f"Inference (bare encoder), {inputs}", "",
                  "| preset | lengths | max len | padding | contender | tokens/s | speed-up |",
                  "|---|---|---|---|---|---|---|"]
        for r in report["inference"]:
            for name in r["contenders"]:
                c = r[name]
                lines.append(f"| {r['preset']} | {r['lengths']} | {r['max_length']} "
                             f"| {_fmt(100 * r['padding_fraction'], '.0f')}% | {label(name, c)} "
                             f"| {_fmt(c['tokens_per_s'], '.0f')} "
                             f"| {_fmt(c.get('speedup', 1.0 if name == BASELINE else None), suffix='x')} |")
        lines.append("")
    if report.get("data_pipeline"):
        lines += ["Data pipeline (tokenize + NSP pairs + masking)", "",
                  "| processes | tokens/s (wall) | tokens/s per CPU second | scaling |", "|---|---|---|---|"]
        for r in report["data_pipeline"]:
            if not r.get("available"):
                lines.append(f"| {r.get('num_proc', '-')} | not available: {r['reason'][:120]} | | |")
                continue
            lines.append(f"| {r['num_proc']} | {_fmt(r['tokens_per_s'], '.0f')} | {_fmt(r['tokens_per_cpu_s'], '.0f')} "
                         f"| {_fmt(r.get('scaling_vs_1_proc'), suffix='x')} |")
        lines.append("")
    if report.get("wordpiece"):
        w = report["wordpiece"]
        lines += ["WordPiece training", "",
                  f"{_fmt(w['mb_per_s'])} MB/s ({_fmt(w['megabytes'])} MB, vocabulary {w['vocab_size']}, "
                  f"median of {len(w['times_s'])})", ""]
    return "\n".join(lines).rstrip() + "\n"


# ----------------------------------------------------------------------------------------------- command


def _speedups(row: dict) -> str:
    """One line of progress: every contender's speed-up over transformers."""
    return ", ".join(f"{label(n, row[n])} {_fmt(row[n].get('speedup'), suffix='x')}" for n in row["contenders"]
                     if n != BASELINE)


def run(args: BenchArguments) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sections = _names(args.sections)
    report: dict = {"machine": machine(), "settings": asdict(args)}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hfbert-bench-") as scratch:
        corpus = load_corpus(args, Path(scratch))
        report["corpus"] = {"name": corpus.name, "layout": corpus.layout, "boundary": corpus.boundary,
                            "megabytes": corpus.path.stat().st_size / 1e6,
                            "tokenizer": args.tokenizer or f"WordPiece learned from the corpus "
                                         f"({min(args.vocab_size, LEARNED_VOCAB_SIZE)} entries, filled with "
                                         f"[unused] to {args.vocab_size})"}
        compile_presets = set(_names(args.compile_presets))
        if "a" in sections:
            report["pretraining"] = []
            for preset, length in args.grid():
                compiled = preset in compile_presets and length <= 128
                row = bench_pretraining(preset, length, args.batch_size_for(preset, length), corpus, args, device,
                                        compiled)
                report["pretraining"].append(row)
                print(f"[a] {preset} @{length}: " + _speedups(row), flush=True)
        if "b" in sections:
            report["inference"] = []
            sentences = corpus.sentences(max(args.length_list()))
            batch_size = 8 if args.quick else args.inference_batch_size
            for preset in _names(args.presets):
                for length in sorted({n for p, n in args.grid() if p == preset}):
                    draw = uniform_draw(sentences, args.batch_size_for(preset, length), length, corpus.tokenizer,
                                        args.seed)
                    row = bench_inference(preset, draw, f"uniform {length}", args, device, padding_free=False)
                    report["inference"].append(row)
                    print(f"[b] {preset} uniform @{length}: " + _speedups(row), flush=True)
                draw = sentence_draw(sentences, batch_size, args.inference_batches, corpus.tokenizer.pad_token_id,
                                     args.seed)
                row = bench_inference(preset, draw, "mixed", args, device, padding_free=True)
                report["inference"].append(row)
                print(f"[b] {preset} mixed: " + _speedups(row), flush=True)
        if "c" in sections:
            report["data_pipeline"] = bench_pipeline(corpus, args)
            print("[c] data pipeline done", flush=True)
        if "d" in sections:
            report["wordpiece"] = bench_wordpiece(corpus, args)
            print("[d] wordpiece done", flush=True)
    report["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["wall_s"] = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    args = CommandParser("hfbert bench", BenchArguments, description=__doc__.split("\n\n")[0]).parse(argv)

    def body() -> int:
        report = run(args)
        report["command"] = " ".join(["hfbert bench", *(sys.argv[1:] if argv is None else argv)])
        text = render(report)
        print(text)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if args.markdown:
            Path(args.markdown).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
        return 0

    return run_command("hfbert bench", body)


if __name__ == "__main__":
    raise SystemExit(main())
