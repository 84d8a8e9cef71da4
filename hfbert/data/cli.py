"""``hfbert prepare``: build a prepared pretraining corpus (Parquet shards, manifest, tokenizer, health report).

    hfbert prepare --input 'corpus/*.txt' --tokenizer TOKENIZER_DIR --output_dir DIR --max_seq_length 128 \
        --num_shards 64 --num_proc 8 [--engine dask --scheduler tcp://HOST:8786] [--push_to_hub user/name]

Without ``--input`` the built-in Austen corpus is used; without ``--tokenizer`` a WordPiece vocabulary of
``--vocab_size`` is trained on the input.  Read the result with ``hfbert.data.PreparedCorpus.open(DIR)``,
``datasets.load_dataset(DIR)`` or ``hfbert pretrain --prepared DIR``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..arguments import CommandParser, UsageError, run_command
from .engines import ENGINES
from .settings import ExampleSettings

__all__ = ["PrepareArguments", "command_parser", "main"]

PROG = "hfbert prepare"


@dataclass(kw_only=True)
class PrepareArguments(ExampleSettings):
    """The settings of ``hfbert prepare``: every :class:`~hfbert.data.ExampleSettings` field, then where the input
    comes from, where the corpus goes and who builds it; the names are those of ``hfbert pretrain`` wherever a
    setting means the same."""

    output_dir: str = field(metadata={"help": "folder (or fsspec URL) to write the prepared corpus to",
                                      "aliases": ["--output"]})
    input: list[str] | None = field(default=None, metadata={
        "help": "text files, globs or fsspec URLs (.gz too); default: the built-in Austen corpus"})
    dataset: str | None = field(default=None, metadata={
        "help": "a datasets folder (save_to_disk) or load_dataset name instead of --input"})
    dataset_split: str = field(default="train", metadata={"help": "split of --dataset"})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace what output_dir holds"})
    tokenizer: str | None = field(default=None, metadata={
        "help": "a fast BERT tokenizer's folder, or a pretrained BERT's tokenizer: a Hub model id, an hfbert or "
                "transformers folder, a Google BERT folder (its vocab.txt); default: train a WordPiece vocabulary on "
                "the input"})
    num_proc: int = field(default=1, metadata={"help": "worker processes (Dask: workers of the local cluster)"})
    engine: Literal["local", "dask"] = field(default="local", metadata={
        "help": "local: this machine's processes; dask: Dask workers (pip install 'hfbert[distributed]')"})
    scheduler: str | None = field(default=None, metadata={
        "help": "address of a running Dask scheduler (default with --engine dask: a local cluster)"})
    push_to_hub: str | None = field(default=None, metadata={"help": "upload the folder as this Hub dataset repo"})
    hub_revision: str | None = field(default=None, metadata={"help": "branch to push to (created when missing)"})
    hub_private: bool = field(default=False, metadata={"help": "create the Hub repo as private"})
    hub_timeout: float | None = field(default=None, metadata={
        "help": "seconds without an answer before a Hub call gives up (default: $HFBERT_HUB_TIMEOUT or 60)"})

    def __post_init__(self):
        try:
            super().__post_init__()
        except UsageError as err:
            raise UsageError(f"--{err}") from None  # the messages start with the setting's name
        checks = [
            (self.num_proc >= 1, "--num_proc must be >= 1"),
            (not (self.input and self.dataset), "give --input or --dataset, not both"),
            (self.scheduler is None or self.engine == "dask", "--scheduler needs --engine dask"),
            (self.engine in ENGINES, f"--engine must be one of {ENGINES}"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)


def _source(args: PrepareArguments):
    from .sources import load_dataset_split

    return args.input if args.dataset is None else load_dataset_split(args.dataset, args.dataset_split)


def command_parser() -> CommandParser:
    """The ``hfbert prepare`` parser (this module loads neither transformers nor datasets: ``--help`` is quick)."""
    return CommandParser(PROG, PrepareArguments, description=__doc__.split("\n\n")[0])


def main(argv: Sequence[str] | None = None) -> int:
    args = command_parser().parse(argv)
    # Here, not above: `hfbert prepare --help` and a bad setting need neither the builder (transformers, datasets)
    # nor huggingface_hub and pyarrow.
    from ..hub import HubDownloadError, HubPushError
    from ..inputs import open_binary
    from .manifest import MANIFEST, Manifest
    from .writer import prepare_corpus, push_prepared
    from .report import render_report

    def run() -> int:
        with warnings.catch_warnings(record=True):  # the report lists them; printed below
            warnings.simplefilter("always")
            folder = prepare_corpus(_source(args), args.output_dir, args.example_settings(), tokenizer=args.tokenizer,
                                    num_proc=args.num_proc, engine=args.engine, scheduler=args.scheduler,
                                    overwrite=args.overwrite_output_dir)
        with open_binary(f"{folder}/{MANIFEST}") as handle:
            manifest = Manifest.read(handle.read(), str(folder))
        report = manifest.report
        print(render_report(report), end="")
        for message in report["warnings"]:
            print(f"warning: {message}")
        rows = ", ".join(f"{info.rows} {split}" for split, info in manifest.splits.items())
        print(f"wrote {rows} examples in {manifest.settings['num_shards']} shard(s) per split to {folder}")
        if args.push_to_hub:
            commit = push_prepared(folder, args.push_to_hub, revision=args.hub_revision, private=args.hub_private,
                                   timeout=args.hub_timeout)
            print(f"pushed to {commit.commit_url}")
        return 0 if all(report["checks"].values()) else 1

    # ValueError: what the input cannot give (a line that is not UTF-8, no documents), naming the file and line;
    # OSError: a missing file or folder; ImportError: --engine dask without the optional dependencies; the Hub
    # errors name the endpoint and what to do.
    return run_command(PROG, run, errors=(ValueError, OSError, ImportError, HubPushError, HubDownloadError))


if __name__ == "__main__":
    raise SystemExit(main())
