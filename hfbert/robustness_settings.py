"""The settings of ``hfbert robustness`` (:class:`RobustnessArguments`) and its parser, in a module without torch or
transformers: ``hfbert robustness --help`` and a bad setting answer before they are loaded. The command itself is
:mod:`hfbert.robustness`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .arguments import CommandParser, UsageError

__all__ = ["SITES", "RobustnessArguments", "RobustnessParser", "command_parser", "split_commas", "words"]

SITES = ("embeddings", "encoder", "attention", "feed_forward", "layernorm", "pooler", "head")


_LIST_OPTIONS = ("--ber", "--sites", "--bits")


def words(values: list[str]) -> list[str]:
    """``a,b c`` -> [a, b, c]: lists are given comma- or space-separated."""
    return [item.strip() for value in values for item in str(value).split(",") if item.strip()]


def split_commas(argv: list[str]) -> list[str]:
    """``--ber 1e-6,1e-5`` as ``--ber 1e-6 1e-5``: the settings parser reads lists as separate words, and the
    comma form is the one the study's documentation and scripts use."""
    out, in_list = [], False
    for token in argv:
        if token.startswith("--"):
            name, equals, value = token.partition("=")
            in_list = name in _LIST_OPTIONS
            out += [name, *words([value])] if in_list and equals else [token]
        else:
            out += words([token]) if in_list else [token]
    return out


@dataclass
class RobustnessArguments:
    """The settings of ``hfbert robustness``."""

    model: str = field(metadata={"help": "folder of a fine-tuned sequence classifier"})
    data: str = field(metadata={"help": "JSON-lines evaluation file"})
    output: str = field(metadata={"help": "output folder"})
    text_column: str = field(default="text", metadata={"help": "column of the text"})
    text_pair_column: str | None = field(default=None, metadata={"help": "column of the second text of a pair"})
    label_column: str = field(default="label", metadata={"help": "column of the label (an id or a label name)"})
    ber: list[float] = field(default_factory=lambda: [1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4], metadata={
        "help": "bit error rates (per eligible bit), comma- or space-separated, each in (0, 1]"})
    trials: int = field(default=3, metadata={"help": "seeded fault draws per (site, bits, rate)"})
    sites: list[str] = field(default_factory=lambda: ["embeddings", "encoder", "head"], metadata={
        "help": f"weight sites ({', '.join(SITES)}) or, with --target activations, embeddings, attention_probs, "
                "layer_outputs, logits"})
    bits: list[str] = field(default_factory=lambda: ["exponent", "mantissa"], metadata={
        "help": "bit classes, one curve panel each: sign, exponent, mantissa, all, an index, or a '+'-joined "
                "combination such as sign+exponent"})
    target: Literal["weights", "activations"] = field(default="weights", metadata={"help": "what the faults hit"})
    dtype: str | None = field(default=None, metadata={"help": "cast the model to fp32, bf16 or fp16 first"})
    metric: Literal["accuracy", "macro_f1"] = field(default="accuracy", metadata={"help": "the plotted metric"})
    max_examples: int | None = field(default=None, metadata={"help": "evaluate on the first N examples only"})
    batch_size: int = field(default=64, metadata={"help": "examples per evaluation batch"})
    max_length: int = field(default=128, metadata={"help": "tokens per example (longer ones are truncated)"})
    seed: int = field(default=0, metadata={"help": "seed of the fault draws"})

    def __post_init__(self) -> None:
        self.sites, self.bits = words(self.sites), words(self.bits)
        if not self.ber or not all(0.0 < b <= 1.0 for b in self.ber):
            raise UsageError(f"--ber values must be in (0, 1] (the clean model is always evaluated), got {self.ber}")
        for name in ("sites", "bits"):
            if not getattr(self, name):
                raise UsageError(f"--{name} is empty")
        for name, least in (("trials", 1), ("batch_size", 1), ("max_length", 2), ("max_examples", 1)):
            value = getattr(self, name)
            if value is not None and value < least:
                raise UsageError(f"--{name} must be >= {least}, got {value}")
        model = Path(self.model)
        if not model.is_dir():
            raise UsageError(f"--model {self.model}: no such folder")
        if not (model / "config.json").is_file():
            raise UsageError(f"--model {self.model} has no config.json: it is not a saved model folder")
        if not Path(self.data).is_file():
            raise UsageError(f"--data {self.data}: no such file")
        if self.dtype is not None:
            from .faults import resolve_dtype  # torch: only for a --dtype given

            try:
                resolve_dtype(self.dtype)
            except (TypeError, ValueError) as err:
                raise UsageError(f"--dtype: {err}") from None


class RobustnessParser(CommandParser):
    """:class:`~hfbert.arguments.CommandParser` that reads ``--ber 1e-6,1e-5`` as ``--ber 1e-6 1e-5``."""

    def parse_values(self, argv: Sequence[str]):
        return super().parse_values(split_commas(list(argv)))


def command_parser() -> RobustnessParser:
    """The ``hfbert robustness`` parser."""
    return RobustnessParser("hfbert robustness", RobustnessArguments, description=(
        "Evaluate a fine-tuned sequence classifier under increasing bit error rates."))
