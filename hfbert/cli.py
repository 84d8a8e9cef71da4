"""The ``hfbert`` command. Thin: each subcommand is a ``main(argv)`` in the library module that owns the job,
imported only when that subcommand runs, so one command never loads what only another one needs.

The command starts in about a second: the package is imported without registering the Auto classes (registering
loads torch and transformers' modeling, see :mod:`hfbert`), and a command that works on models first reads its
settings with its parser (:data:`PARSERS`), which lives in a module without torch, transformers or datasets. So
``--help`` and a bad setting answer before any of them is loaded; then the Auto classes are registered and the
command runs, reading its settings again (milliseconds). ``hfbert push`` uploads with huggingface_hub alone.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

from .arguments import run_command

# subcommand -> (module:function, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("hfbert.pretrain:main", "pretrain a BERT (corpus -> vocabulary -> examples -> Hub-format folder)"),
    "train-tokenizer": ("hfbert.vocabulary:main", "train a WordPiece vocabulary, or extend a pretrained BERT's, "
                                                  "and save a BERT tokenizer"),
    "prepare": ("hfbert.data.cli:main", "build NSP/MLM pretraining examples into Parquet shards (a prepared corpus)"),
    "push": ("hfbert.hub:main", "push a saved model folder to the Hub (branch and tag supported)"),
    "convert": ("hfbert.convert:main", "convert between hfbert and stock transformers BERT folders"),
    "evaluate": ("hfbert.evaluation:main", "fine-tune a model on a suite of downstream tasks over several seeds "
                                           "and report the scores"),
    "robustness": ("hfbert.robustness:main", "evaluate a fine-tuned model under bit-flip fault injection"),
}

# subcommand -> module:function returning its settings parser (a CommandParser), for every command that works on
# models. These modules import no torch, transformers or datasets; a command without one here (push) runs at once.
PARSERS: dict[str, str] = {
    "pretrain": "hfbert.pretrain.config:command_parser",
    "train-tokenizer": "hfbert.tokenizer_settings:command_parser",
    "prepare": "hfbert.data.cli:command_parser",
    "convert": "hfbert.convert_settings:command_parser",
    "evaluate": "hfbert.evaluation.run:command_parser",
    "robustness": "hfbert.robustness_settings:command_parser",
}


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: hfbert <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `hfbert <command> --help` for the options of a command."]
    return "\n".join(lines)


def _function(reference: str):
    module_name, function = reference.split(":")
    return getattr(importlib.import_module(module_name), function)


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
    prog = f"hfbert {name}"
    if name in PARSERS:
        parser = _function(PARSERS[name])()

        def check() -> None:  # --help exits in here (status 0), a malformed command line too (status 2)
            parser.parse_values(rest)

        if run_command(prog, check) != 0:  # a bad value: one line, status 2
            return 2
        from .auto import register_auto_classes  # loads torch and the model code

        register_auto_classes()
    command = _function(COMMANDS[name][0])
    # A command reports its own bad input; this catches what one lets through as a usage error, in the same form.
    return run_command(prog, lambda: command(rest))


def _version() -> str:
    """The installed distribution's version, read without importing the package's model code (which loads torch)."""
    try:
        return version("hfbert")
    except PackageNotFoundError:  # a source tree on sys.path, not installed
        return "unknown (not installed)"


if __name__ == "__main__":
    sys.exit(main())
