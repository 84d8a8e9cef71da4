"""The settings of the bench: :class:`BenchArguments`, the full-run and ``--quick`` values of the options a
user leaves unset (:data:`DEFAULTS`, :data:`QUICK`), and the parser that reads them (:class:`BenchParser`).

List options take their values separated by spaces (``--presets mini small``), as ``hfbert pretrain``'s do; the
comma-separated form of earlier versions (``--presets mini,small``) is read too, and ``none`` alone gives no value
(``--compile_presets none``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from hfbert.arguments import CommandParser, UsageError
from hfbert.data import LINE_LAYOUTS
from hfbert.unpadding_hfbert import ATTENTION_BACKENDS

from .contenders import BASELINE_ATTENTION, PEERS

# Batch sizes at length 128 that keep one base step within seconds on a small CPU; longer lengths keep the number of
# tokens per batch (batch * length) about the same.
DEFAULT_BATCH = {"tiny": 32, "mini": 32, "small": 16, "medium": 16, "base": 8, "large": 4}
PROG = "python benchmarks/bench.py"  # how its messages name it
SECTIONS = ("a", "b", "c", "d")
# Attention backends hfbert can be timed with (--attn_implementations): those of the model's table whose kernel torch
# itself provides.
ATTN_IMPLEMENTATIONS = tuple(name for name, backend in ATTENTION_BACKENDS.items() if backend.kernel is None)

# What an option left unset means: the full run's value, or with --quick the value that runs in seconds (tiny models
# on a slice of the corpus, no compiled contenders). batch_size None: per preset (DEFAULT_BATCH).
DEFAULTS = {"presets": ["mini", "small", "base"], "lengths": [128, 512], "compile_presets": ["mini", "small"],
            "repeats": 5, "min_seconds": 3.0, "vocab_size": 30522, "batch_size": None, "inference_batch_size": 32}
QUICK = {"presets": ["mini"], "lengths": [16, 32], "compile_presets": [], "repeats": 3, "min_seconds": 0.0,
         "vocab_size": 500, "batch_size": 4, "inference_batch_size": 8}


def _unset(option: str, text: str) -> str:
    """The help of an option whose unset value comes from DEFAULTS / QUICK."""
    def show(value) -> str:
        if value is None:
            return "per preset"
        return (" ".join(map(str, value)) or "none") if isinstance(value, list) else str(value)

    return f"{text} (default: {show(DEFAULTS[option])}; with --quick: {show(QUICK[option])})"


def words(values) -> list[str]:
    """The values of a list option: each word also split at commas (the earlier form, ``mini,small``),
    ``none`` dropped (so that ``--compile_presets none`` gives no value)."""
    if isinstance(values, str):
        values = [values]
    return [part for value in values for part in (p.strip() for p in str(value).split(",")) if part and part != "none"]


def integers(values, option: str) -> list[int]:
    """The values of list option ``--option`` as integers (see :func:`words`)."""
    values = [values] if isinstance(values, (str, int)) else values
    try:
        return [int(word) for word in words(values)]
    except ValueError:
        raise UsageError(f"--{option}: expected integers, got {' '.join(map(str, values))!r}") from None


def _cuda_available() -> bool:
    import torch  # only when the settings ask for a GPU

    return torch.cuda.is_available()


class BenchParser(CommandParser):
    """:class:`~hfbert.arguments.CommandParser` that hands lists of integers to the dataclass as words, so that
    ``--lengths 128,512`` is read as ``--lengths 128 512`` and a bad value names its option."""

    def _parse_dataclass_field(self, parser, field):
        super()._parse_dataclass_field(parser, field)
        action = parser._option_string_actions.get(f"--{field.name}")
        if action is not None and action.nargs == "+" and action.type is int:
            action.type = str


def _list(default, help: str):
    """A list option with a fixed default."""
    return field(default_factory=lambda: list(default), metadata={"help": f"{help} (default: {' '.join(default)})"})


@dataclass
class BenchArguments:
    """Settings of the bench (``benchmarks/bench.py``)."""

    presets: list[str] | None = field(default=None, metadata={"help": _unset("presets", "model presets")})
    lengths: list[int] | None = field(default=None, metadata={"help": _unset("lengths", "sequence lengths")})
    long_presets: list[str] | None = field(
        default=None, metadata={"help": "presets also run at lengths above 128 (default: all of --presets)"})
    compile_presets: list[str] | None = field(
        default=None,
        metadata={"help": _unset("compile_presets", "presets whose pretraining step at lengths up to 128 is also "
                                                    "timed under torch.compile, for hfbert and for transformers "
                                                    "('none': none)")})
    contenders: list[str] = _list(
        PEERS, "section a: which of hfbert, transformers, hfbert+compile, transformers+compile run (the compiled ones "
               "only for --compile_presets; one alone in a process shows its own memory growth; speed-ups need "
               "transformers)")
    attn_implementations: list[str] = _list(
        [BASELINE_ATTENTION],
        f"sections a and b: attention backends hfbert is timed with, a row each (some of "
        f"{', '.join(ATTN_IMPLEMENTATIONS)}; transformers and the compiled rows stay on {BASELINE_ATTENTION})")
    batch_size: int | None = field(
        default=None, metadata={"help": _unset("batch_size", "batch size at every size (per preset: fewer rows at "
                                                             "longer lengths)")})
    repeats: int | None = field(
        default=None, metadata={"help": _unset("repeats", "timed rounds per comparison (medians reported)")})
    min_seconds: float | None = field(
        default=None,
        metadata={"help": _unset("min_seconds", "sections a and b: more rounds (up to 4x --repeats) until each "
                                                "contender ran this long")})
    sections: list[str] = _list(SECTIONS, "a pretraining, b inference, c data, d wordpiece")
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
    vocab_size: int | None = field(
        default=None,
        metadata={"help": _unset("vocab_size", "model vocabulary size (a learned vocabulary is filled to it with "
                                               "[unused])")})
    short_seq_prob: float = field(
        default=0.1, metadata={"help": "share of NSP pairs built shorter than the length, as the original"})
    masked_lm_prob: float = field(default=0.15, metadata={"help": "share of the tokens of a row that are masked"})
    max_predictions_per_seq: int | None = field(
        default=None, metadata={"help": "most masked tokens per row (default: 20 per 128 tokens of length)"})
    inference_batches: int = field(default=2, metadata={"help": "mixed-length batches per inference run"})
    inference_batch_size: int | None = field(
        default=None, metadata={"help": _unset("inference_batch_size", "rows per mixed-length batch")})
    output: str = field(default="bench.json", metadata={"help": "where to write the JSON report"})
    markdown: str | None = field(default=None, metadata={"help": "also write the tables as Markdown to this file"})
    quick: bool = field(
        default=False, metadata={"help": "tiny sizes that run in seconds (for tests): the --quick values above"})
    threads: int | None = field(default=None, metadata={"help": "torch intra-op threads (default: torch's)"})
    device: str = field(default="cpu", metadata={"help": "cpu or cuda (bf16 autocast on cuda)"})
    peak_tflops: float | None = field(default=None, metadata={"help": "device peak, for model FLOPs utilisation"})
    seed: int = field(default=0, metadata={"help": "seed of the weights, the batch order and the masks"})

    def __post_init__(self):
        for option, value in (QUICK if self.quick else DEFAULTS).items():
            if getattr(self, option) is None:
                setattr(self, option, value)
        for option in ("presets", "long_presets", "compile_presets", "contenders", "attn_implementations",
                       "sections"):
            if getattr(self, option) is not None:
                setattr(self, option, words(getattr(self, option)))
        self.lengths = integers(self.lengths, "lengths")
        self._check_names("sections", SECTIONS, "section")
        for option in ("presets", "long_presets", "compile_presets"):
            self._check_names(option, DEFAULT_BATCH, "preset", empty=option != "presets")
        self._check_names("contenders", PEERS, "contender")
        self._check_names("attn_implementations", ATTN_IMPLEMENTATIONS, "backend")
        if not self.lengths or any(not 8 <= n <= 512 for n in self.lengths):
            raise UsageError(f"--lengths: every length must be between 8 and 512, got {self.lengths}")
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
        if self.input_layout not in (None, *LINE_LAYOUTS):
            raise UsageError(f"--input_layout must be one of {LINE_LAYOUTS}, got {self.input_layout!r}")
        if self.corpus is not None and not Path(self.corpus).is_file():
            raise UsageError(f"--corpus: file not found: {self.corpus}")
        if self.document_boundary not in (None, "chapter"):
            try:
                re.compile(self.document_boundary)
            except re.error as error:
                raise UsageError(f"--document_boundary: not a regular expression ({error})") from None
        if self.device.split(":")[0] not in ("cpu", "cuda"):
            raise UsageError(f"--device must be cpu or cuda, got {self.device!r}")
        if self.device.startswith("cuda") and not _cuda_available():
            raise UsageError("--device cuda: no CUDA device is available")

    def _check_names(self, option: str, known, kind: str, empty: bool = False) -> None:
        """Every value of list option ``option`` is one of ``known`` (and there is one, unless ``empty``)."""
        values = getattr(self, option)
        if values is None:
            return
        bad = [v for v in values if v not in known]
        if bad or not (values or empty):
            raise UsageError(f"--{option}: unknown or no {kind}(s) {bad}; expected some of {list(known)}")

    def backends(self) -> list[str]:
        """The attention backends hfbert runs with, in the order given, each once."""
        return list(dict.fromkeys(self.attn_implementations))

    def grid(self) -> list[tuple[str, int]]:
        """(preset, length) pairs: every preset at lengths up to 128, the long presets also above."""
        long_presets = self.presets if self.long_presets is None else self.long_presets
        return [(p, n) for p in self.presets for n in self.lengths if n <= 128 or p in long_presets]

    def batch_size_for(self, preset: str, length: int) -> int:
        return self.batch_size or max(1, DEFAULT_BATCH[preset] * 128 // length)

    def predictions_for(self, length: int) -> int:
        return self.max_predictions_per_seq or max(1, 20 * length // 128)


def command_parser() -> BenchParser:
    """The bench's parser."""
    return BenchParser(PROG, BenchArguments,
                       description="hfbert against transformers' BERT, side by side, in one process.")
