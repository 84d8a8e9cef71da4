"""The ``hfbert`` command. Thin: each subcommand is a ``main(argv)`` in the library module that owns the job,
imported only when that subcommand runs, so one command never loads what only another one needs."""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

from .arguments import run_command

# subcommand -> (module:function, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("hfbert.pretrain:main", "pretrain a BERT (corpus -> vocabulary -> examples -> Hub-format folder)"),
    "train-tokenizer": ("hfbert.tokenization:main", "train a WordPiece vocabulary and save a BERT tokenizer"),
    "prepare": ("hfbert.data.cli:main", "build NSP/MLM pretraining examples into Parquet shards (a prepared corpus)"),
    "push": ("hfbert.hub:main", "push a saved model folder to the Hub (branch and tag supported)"),
    "convert": ("hfbert.convert:main", "convert between hfbert and stock transformers BERT folders"),
    "evaluate": ("hfbert.evaluation:main", "fine-tune a model on a suite of downstream tasks over several seeds "
                                           "and report the scores"),
    "bench": ("hfbert.studies.bench:main", "benchmark hfbert against transformers side by side"),
    "robustness": ("hfbert.studies.robustness:main", "evaluate a fine-tuned model under bit-flip fault injection"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: hfbert <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `hfbert <command> --help` for the options of a command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if argv[0] == "--version":
        print(_version())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"hfbert: error: unknown command {name!r}; choose from {', '.join(COMMANDS)} (hfbert --help)",
              file=sys.stderr)
        return 2
    module_name, function = COMMANDS[name][0].split(":")
    command = getattr(importlib.import_module(module_name), function)
    # A command reports its own bad input; this catches what one lets through as a usage error, in the same form.
    return run_command(f"hfbert {name}", lambda: command(rest))


def _version() -> str:
    """The installed distribution's version, read without importing the package (which loads torch)."""
    try:
        return version("hfbert")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
