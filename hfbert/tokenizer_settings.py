"""The settings of WordPiece training, in a module without transformers or datasets: the vocabulary's special tokens
(:data:`SPECIAL_TOKENS`), the checks of :func:`hfbert.train_wordpiece`'s arguments (:func:`check_train_args`) and
``hfbert train-tokenizer``'s :class:`TrainTokenizerArguments`, so that its ``--help`` and a bad setting answer before
those libraries are loaded. The training itself is :mod:`hfbert.tokenization`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .arguments import CommandParser, UsageError
from .wordpiece import GOOGLE_MAX_INPUT_CHARS_PER_WORD

__all__ = ["SPECIAL_TOKENS", "TrainTokenizerArguments", "check_train_args", "command_parser"]

#: The special tokens, in id order: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4.
SPECIAL_TOKENS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def check_train_args(
    vocab_size: int, min_frequency: int, num_unused: int, limit_alphabet: int | None, max_input_chars_per_word: int
) -> None:
    """The arguments of :func:`hfbert.train_wordpiece` that no corpus can satisfy (``TypeError`` or ``ValueError``,
    the message starting with the argument's name)."""
    for name, value in (
        ("vocab_size", vocab_size),
        ("min_frequency", min_frequency),
        ("num_unused", num_unused),
        ("max_input_chars_per_word", max_input_chars_per_word),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r}")
    if num_unused < 0:
        raise ValueError(f"num_unused must be >= 0, got {num_unused}")
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
    if vocab_size <= len(SPECIAL_TOKENS) + num_unused:
        raise ValueError(
            f"vocab_size ({vocab_size}) must exceed the {len(SPECIAL_TOKENS)} special tokens + {num_unused} "
            "[unused*] slots"
        )
    if max_input_chars_per_word < 1:
        raise ValueError(f"max_input_chars_per_word must be >= 1, got {max_input_chars_per_word}")
    if limit_alphabet is not None and limit_alphabet < 1:
        raise ValueError(f"limit_alphabet must be >= 1 or None, got {limit_alphabet}")


@dataclass
class TrainTokenizerArguments:
    """The settings of ``hfbert train-tokenizer``: the keyword arguments of :func:`hfbert.train_wordpiece`, or with
    ``--extend`` of :func:`hfbert.vocabulary.extend_wordpiece`."""

    input: list[str] = field(metadata={"help": "UTF-8 text files, one text per line (with --extend: the domain text)"})
    output_dir: str = field(metadata={"help": "folder to write the tokenizer to (created if missing)",
                                      "aliases": ["--output"]})
    vocab_size: int | None = field(default=None, metadata={
        "help": "total vocabulary size, special tokens and [unused*] slots included (not with --extend)"})
    extend: str | None = field(default=None, metadata={
        "metavar": "MODEL",
        "help": "extend this pretrained BERT's vocabulary instead of training one: a Hub model id, or an hfbert, "
                "transformers or Google BERT folder; entries learned from --input are appended to its vocab.txt, "
                "and its casing is kept"})
    add: int | None = field(default=None, metadata={
        "metavar": "N", "help": "with --extend: the most entries to add (those that save the most tokens on --input)"})
    lowercase: bool = field(default=True, metadata={
        "help": "lower-case the text (--no_lowercase keeps case and, unless --strip_accents true, accents)"})
    strip_accents: bool | None = field(default=None, metadata={
        "help": "remove accents (default: exactly when lower-casing, as the original BERT)"})
    handle_chinese_chars: bool = field(default=True, metadata={"help": "split CJK ideographs into single tokens"})
    min_frequency: int = field(default=2, metadata={"help": "a pair must occur this often to become a sub-word"})
    num_unused: int = field(default=0, metadata={"help": "[unused*] slots reserved after the special tokens"})
    limit_alphabet: int | None = field(default=None, metadata={
        "help": "keep only this many most frequent characters (default: every character)"})
    max_input_chars_per_word: int = field(default=GOOGLE_MAX_INPUT_CHARS_PER_WORD, metadata={
        "help": "longer words become one [UNK]"})
    on_decode_error: Literal["raise", "replace"] = field(default="raise", metadata={
        "help": "'raise' stops at a file that is not UTF-8; 'replace' replaces undecodable bytes with U+FFFD"})
    progress_bar: bool = field(default=True, metadata={"help": "draw a progress bar while training"})

    def __post_init__(self):
        self._check_mode()
        size = len(SPECIAL_TOKENS) + self.num_unused + 1 if self.vocab_size is None else self.vocab_size
        try:
            check_train_args(size, self.min_frequency, self.num_unused, self.limit_alphabet,
                             self.max_input_chars_per_word)
        except (TypeError, ValueError) as err:
            raise UsageError(f"--{err}") from None  # the messages start with the setting's name
        for path in self.input:
            if not Path(path).is_file():
                raise UsageError(f"--input: corpus file not found: {path}")
        if Path(self.output_dir).exists() and not Path(self.output_dir).is_dir():
            raise UsageError(f"--output_dir: {self.output_dir} exists and is not a folder")

    def _check_mode(self) -> None:
        """A new vocabulary needs its size; an extension takes the model's size and text pipeline, plus --add."""
        if self.extend is None:
            if self.vocab_size is None:
                raise UsageError("--vocab_size is required (or --extend MODEL --add N to extend a model's vocabulary)")
            if self.add is not None:
                raise UsageError("--add is the number of entries --extend adds; give --extend MODEL too")
            return
        if self.vocab_size is not None:
            raise UsageError(f"--vocab_size: the extended vocabulary is {self.extend}'s plus at most --add entries; "
                             "drop --vocab_size")
        if isinstance(self.add, bool) or not isinstance(self.add, int) or self.add < 1:
            raise UsageError(f"--add must be an int >= 1 with --extend, got {self.add}")
        own = {"lowercase": True, "strip_accents": None, "handle_chinese_chars": True, "num_unused": 0,
               "max_input_chars_per_word": GOOGLE_MAX_INPUT_CHARS_PER_WORD}
        changed = [name for name, default in own.items() if getattr(self, name) != default]
        if changed:
            raise UsageError(f"--{changed[0]}: --extend keeps {self.extend}'s text pipeline and ids (its casing, "
                             "accents, CJK handling, word-length limit and [unused*] slots); drop it")


def command_parser() -> CommandParser:
    """The ``hfbert train-tokenizer`` parser."""
    return CommandParser("hfbert train-tokenizer", TrainTokenizerArguments,
                         description="Learn a WordPiece vocabulary from text files, or extend a pretrained BERT's "
                                     "with entries learned from domain text (--extend), and save a BERT tokenizer "
                                     "in Hub format.")
