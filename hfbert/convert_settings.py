"""The settings of ``hfbert convert`` (:class:`ConvertArguments`) and the heads a conversion handles (:data:`HEADS`),
in a module without torch or transformers: ``hfbert convert --help`` and a bad setting answer before they are
loaded. The conversion itself is :mod:`hfbert.convert`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .arguments import CommandParser, UsageError
from .heads_hfbert import HEADS as HEAD_AUTO_CLASSES

__all__ = ["HEADS", "ConvertArguments", "command_parser"]

# The heads both sides provide, by class-name suffix ("Model" is the bare encoder: BertModel / HfBertModel).
HEADS = tuple(HEAD_AUTO_CLASSES)


@dataclass
class ConvertArguments:
    """The settings of ``hfbert convert``."""

    src: str = field(metadata={"positional": True,
                               "help": "source model folder (config.json + weights, optionally a tokenizer)"})
    dst: str = field(metadata={"positional": True,
                               "help": "destination folder (must be new or empty unless --overwrite)"})
    to: Literal["transformers", "hfbert", "google"] | None = field(default=None, metadata={
        "help": "target format: transformers, hfbert or google (Google's original checkpoint folder); default: the "
                "other side of the source's model_type, hfbert for a Google folder"})
    head: str | None = field(default=None, metadata={
        "help": f"head to convert, one of {', '.join(HEADS)} (default: the config's architectures)"})
    overwrite: bool = field(default=False, metadata={"help": "replace a non-empty destination"})
    do_lower_case: bool | None = field(default=None, metadata={
        "help": "casing of a Google folder's vocab.txt (default: cased exactly when it holds upper-case tokens)"})
    google_gelu: Literal["tanh"] | None = field(default=None, metadata={
        "help": "with --to google, a model with the exact (erf) GELU: tanh writes it under Google's 'gelu', the tanh "
                "approximation, and prints how far its outputs move (default: refuse)"})

    def __post_init__(self):
        if self.head is not None and self.head.removeprefix("HfBert").removeprefix("Bert") not in HEADS:
            raise UsageError(f"--head must be one of {', '.join(HEADS)}, got {self.head!r}")
        if not Path(self.src).is_dir():
            raise UsageError(f"source folder {self.src} does not exist")


def command_parser() -> CommandParser:
    """The ``hfbert convert`` parser."""
    return CommandParser("hfbert convert", ConvertArguments,
                         description="Convert a model folder between hfbert and stock transformers BERT (the "
                                     "direction is read from the source's config.json unless --to is given).")
