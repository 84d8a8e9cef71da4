"""``hfbert prepare``: build a prepared pretraining corpus (Parquet shards, manifest, tokenizer, health report).

    hfbert prepare --input 'corpus/*.txt' --tokenizer TOKENIZER_DIR --output_dir DIR --max_seq_length 128 \
        --num_shards 64 --num_proc 8 [--engine dask --scheduler tcp://HOST:8786] [--push_to_hub user/name]

Without ``--input`` the built-in Austen corpus is used; without ``--tokenizer`` a WordPiece vocabulary of
``--vocab_size`` is trained on the input.  Read the result with ``hfbert.data.PreparedCorpus.open(DIR)``,
``datasets.load_dataset(DIR)`` or ``hfbert pretrain --prepared DIR``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..arguments import CommandParser, UsageError, run_command
from ..hub import HubDownloadError, HubPushError
from .engines import ENGINES
from .pipeline import DEFAULT_POOL_SIZE
from .documents import open_binary
from .prepared import MANIFEST, prepare_corpus, push_prepared
from .report import render_report
from .sources import LAYOUTS, boundary_pattern, load_dataset_split

__all__ = ["PrepareArguments", "main"]

PROG = "hfbert prepare"


@dataclass
class PrepareArguments:
    """The settings of ``hfbert prepare`` (the keyword arguments of :func:`~hfbert.data.prepare_corpus`); the
    names are those of ``hfbert pretrain`` wherever a setting means the same."""

    output_dir: str = field(metadata={"help": "folder (or fsspec URL) to write the prepared corpus to",
                                      "aliases": ["--output"]})
    input: list[str] | None = field(default=None, metadata={
        "help": "text files, globs or fsspec URLs (.gz too); default: the built-in Austen corpus"})
    dataset: str | None = field(default=None, metadata={
        "help": "a datasets folder (save_to_disk) or load_dataset name instead of --input"})
    dataset_split: str = field(default="train", metadata={"help": "split of --dataset"})
    text_column: str | None = field(default=None, metadata={
        "help": "column of --dataset: 'sentences' (list of str per document) or 'text' (one document per row)"})
    input_layout: Literal["sentences", "paragraphs", "people-daily"] | None = field(default=None, metadata={
        "help": "sentences: one sentence per line, a blank line between documents (the original format); "
                "paragraphs: one paragraph per line; people-daily: segmented, POS-tagged Chinese"})
    document_boundary: str | None = field(default=None, metadata={
        "help": "regex for heading lines that start a document; 'chapter' = CHAPTER I / Chapter 9"})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace what output_dir holds"})
    tokenizer: str | None = field(default=None, metadata={
        "help": "folder of a fast BERT tokenizer; default: train a WordPiece vocabulary on the input"})
    vocab_size: int = field(default=8000, metadata={"help": "vocabulary size when training one"})
    lowercase: bool = field(default=True, metadata={"help": "lower-case when training a vocabulary"})
    max_seq_length: int = field(default=128, metadata={"help": "tokens per example, [CLS] and [SEP] included"})
    masking: Literal["static", "dynamic"] = field(default="static", metadata={
        "help": "static: masks drawn here, dupe_factor copies (the original); dynamic: the collator masks"})
    dupe_factor: int | None = field(default=None, metadata={
        "help": "passes over the corpus with different masks (default: 10 static, 1 dynamic)"})
    masked_lm_prob: float = field(default=0.15, metadata={"help": "share of tokens selected for masked LM"})
    max_predictions_per_seq: int = field(default=20, metadata={"help": "at most this many masked positions"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "probability of a shorter target length"})
    whole_word_mask: bool = field(default=False, metadata={"help": "mask whole words (## pieces together)"})
    selection: Literal["fixed", "bernoulli"] = field(default="fixed", metadata={
        "help": "fixed: exactly round(length x masked_lm_prob) positions (the original); bernoulli: independent"})
    random_token_ids: Literal["non_special", "any"] = field(default="non_special", metadata={
        "help": "random replacements: never special tokens (non_special) or the whole vocabulary (any)"})
    segmenter: Literal["presegmented", "jieba"] | None = field(default=None, metadata={
        "help": "Chinese word boundaries for whole-word masking (people-daily implies presegmented)"})
    pool_size: int = field(default=DEFAULT_POOL_SIZE, metadata={"help": "documents per random-next pool"})
    num_shards: int | None = field(default=None, metadata={
        "help": "shards per split (default: one per 32 MiB of input per duplication pass)"})
    eval_fraction: float = field(default=0.05, metadata={"help": "share of documents held out for validation"})
    seed: int = field(default=12345, metadata={"help": "seed of every random draw (the original's default)"})
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
        checks = [
            (self.max_seq_length >= 5, "--max_seq_length must be >= 5 ([CLS] a [SEP] b [SEP])"),
            (self.dupe_factor is None or self.dupe_factor >= 1, "--dupe_factor must be >= 1"),
            (0.0 < self.masked_lm_prob < 1.0, "--masked_lm_prob must be in (0, 1)"),
            (self.max_predictions_per_seq >= 1, "--max_predictions_per_seq must be >= 1"),
            (0.0 <= self.short_seq_prob <= 1.0, "--short_seq_prob must be in [0, 1]"),
            (0.0 <= self.eval_fraction < 1.0, "--eval_fraction must be in [0, 1)"),
            (self.num_shards is None or self.num_shards >= 1, "--num_shards must be >= 1"),
            (self.num_proc >= 1, "--num_proc must be >= 1"),
            (self.pool_size >= 2, "--pool_size must be >= 2 (random-next needs another document)"),
            (self.seed >= 0, "--seed must be >= 0"),
            (self.vocab_size >= 1, "--vocab_size must be >= 1"),
            (not (self.input and self.dataset), "give --input or --dataset, not both"),
            (self.scheduler is None or self.engine == "dask", "--scheduler needs --engine dask"),
            (self.input_layout in (None, *LAYOUTS), f"--input_layout must be one of {LAYOUTS}"),
            (self.engine in ENGINES, f"--engine must be one of {ENGINES}"),
        ]
        for ok, message in checks:
            if not ok:
                raise UsageError(message)
        try:
            boundary_pattern(self.document_boundary)
        except ValueError as err:
            raise UsageError(f"--{err}") from None


def _source(args: PrepareArguments):
    return args.input if args.dataset is None else load_dataset_split(args.dataset, args.dataset_split)


def main(argv: Sequence[str] | None = None) -> int:
    args = CommandParser(PROG, PrepareArguments, description=__doc__.split("\n\n")[0]).parse(argv)

    def run() -> int:
        with warnings.catch_warnings(record=True):  # the report lists them; printed below
            warnings.simplefilter("always")
            folder = prepare_corpus(
                _source(args), args.output_dir, tokenizer=args.tokenizer, vocab_size=args.vocab_size,
                lowercase=args.lowercase, max_seq_length=args.max_seq_length, num_shards=args.num_shards,
                eval_fraction=args.eval_fraction, masking=args.masking, dupe_factor=args.dupe_factor,
                masked_lm_prob=args.masked_lm_prob, max_predictions_per_seq=args.max_predictions_per_seq,
                short_seq_prob=args.short_seq_prob, whole_word_mask=args.whole_word_mask, selection=args.selection,
                random_token_ids=args.random_token_ids, segmenter=args.segmenter, pool_size=args.pool_size,
                input_layout=args.input_layout, document_boundary=args.document_boundary,
                text_column=args.text_column, seed=args.seed, num_proc=args.num_proc, engine=args.engine,
                scheduler=args.scheduler, overwrite=args.overwrite_output_dir)
        with open_binary(f"{folder}/{MANIFEST}") as handle:
            manifest = json.load(handle)
        report = manifest["report"]
        print(render_report(report), end="")
        for message in report["warnings"]:
            print(f"warning: {message}")
        rows = ", ".join(f"{info['rows']} {split}" for split, info in manifest["splits"].items())
        print(f"wrote {rows} examples in {manifest['settings']['num_shards']} shard(s) per split to {folder}")
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
