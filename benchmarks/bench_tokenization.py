"""Throughput of hfbert.tokenize_dataset (batched Dataset.map) on a corpus, for 1 and 2 processes.

Answered in docs/tokenization.md.

Usage: python benchmarks/bench_tokenization.py [--corpus FILE.txt] [--vocab_size 8000] [--repeats 2]
The corpus defaults to the Austen novels shipped with hfbert. Prints MB/s of UTF-8 input per num_proc (best of
--repeats runs), for the exact `tokenizers` pipeline (special tokens on) and for the word-cache fast path that
tokenize_dataset takes for plain ids.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch

from hfbert.arguments import CommandParser
from hfbert.data.sources import BUILTIN_CORPUS
from hfbert.tokenization import tokenize_dataset, train_wordpiece


def read_lines(path: str | None) -> list[str]:
    if path is None:
        with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as handle:
            return handle.read().splitlines()
    return Path(path).read_text(encoding="utf-8").splitlines()


@dataclass
class BenchSettings:
    corpus: str | None = field(default=None, metadata={"help": "UTF-8 text, one text per line (default: the shipped one)"})
    vocab_size: int = field(default=8000, metadata={"help": "WordPiece vocabulary trained on the corpus"})
    repeats: int = field(default=2, metadata={"help": "timed runs per configuration; the best counts"})
    batch_size: int = field(default=1000, metadata={"help": "texts per Dataset.map batch"})


def main() -> None:
    args = CommandParser("python benchmarks/bench_tokenization.py", BenchSettings, description=__doc__).parse()
    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    lines = read_lines(args.corpus)
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    tokenizer = train_wordpiece(iter(lines), args.vocab_size)
    ds = datasets.Dataset.from_dict({"text": lines})
    for path, special in (("exact pipeline", True), ("word cache", False)):
        for num_proc in (1, 2):
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                tokenize_dataset(ds, tokenizer, num_proc=None if num_proc == 1 else num_proc,
                                 batch_size=args.batch_size, add_special_tokens=special)
                best = min(best, time.perf_counter() - start)
            print(f"{path}, num_proc={num_proc}: {megabytes:.2f} MB in {best:.2f} s = {megabytes / best:.2f} MB/s")


if __name__ == "__main__":
    main()
