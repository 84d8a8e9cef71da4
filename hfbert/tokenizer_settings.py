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
    """The settings of ``hfbert train-tokenizer`` (the keyword arguments of :func:`train_wordpiece`)."""

    input: list[str] = field(metadata={"help": "UTF-8 text files, one text per line"})
    vocab_size: int = field(metadata={"help": "total vocabulary size, special tokens and [unused*] slots included"})
    output_dir: str = field(metadata={"help": "folder to write the tokenizer to (created if missing)",
                                      "aliases": ["--output"]})
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
        try:
            check_train_args(self.vocab_size, self.min_frequency, self.num_unused, self.limit_alphabet,
                              self.max_input_chars_per_word)
        except (TypeError, ValueError) as err:
            raise UsageError(f"--{err}") from None  # the messages start with the setting's name
        for path in self.input:
            if not Path(path).is_file():
                raise UsageError(f"--input: corpus file not found: {path}")
        if Path(self.output_dir).exists() and not Path(self.output_dir).is_dir():
            raise UsageError(f"--output_dir: {self.output_dir} exists and is not a folder")


def command_parser() -> CommandParser:
    """The ``hfbert train-tokenizer`` parser."""
    return CommandParser("hfbert train-tokenizer", TrainTokenizerArguments,
                         description="Learn a WordPiece vocabulary from text files and save a BERT tokenizer in Hub "
                                     "format.")
