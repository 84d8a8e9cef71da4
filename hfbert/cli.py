"""The ``hfbert`` command. Thin: each subcommand is a ``main(argv)`` in the library module that owns the job,
imported only when that subcommand runs (so ``hfbert --help`` stays fast)."""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module:function, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "pretrain": ("hfbert.pretrain:main", "pretrain a BERT (corpus -> vocabulary -> examples -> Hub-format folder)"),
    "train-tokenizer": ("hfbert.tokenization:main", "train a WordPiece vocabulary and save a BERT tokenizer"),
    "prepare": ("hfbert.data.cli:main", "build NSP/MLM pretraining examples as an Arrow dataset"),
    "push": ("hfbert.hub:main", "push a saved model folder to the Hub (branch and tag supported)"),
    "convert": ("hfbert.convert:main", "convert between hfbert and stock transformers BERT folders"),
    "bench": ("hfbert.bench:main", "benchmark hfbert against transformers side by side"),
    "robustness": ("hfbert.robustness:main", "evaluate a fine-tuned model under bit-flip fault injection"),
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
        from hfbert import __version__

        print(__version__)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"hfbert: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, function = COMMANDS[name][0].split(":")
    return int(getattr(importlib.import_module(module_name), function)(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
