"""Throughput of hfbert.tokenize_dataset (batched Dataset.map) on the Austen corpus, for 1 and 2 processes.

Usage: python scripts/bench_tokenization.py [--corpus ../shared/data/en_austen_6novels.txt] [--vocab-size 8000]
Prints MB/s of UTF-8 input per num_proc (best of --repeats runs).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import datasets
import torch

from hfbert.tokenization import tokenize_dataset, train_wordpiece


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    default_corpus = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "en_austen_6novels.txt"
    parser.add_argument("--corpus", default=str(default_corpus))
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    datasets.disable_progress_bars()
    lines = Path(args.corpus).read_text(encoding="utf-8").splitlines()
    megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    tokenizer = train_wordpiece(iter(lines), args.vocab_size)
    ds = datasets.Dataset.from_dict({"text": lines})
    for num_proc in (1, 2):
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            tokenize_dataset(ds, tokenizer, num_proc=None if num_proc == 1 else num_proc, batch_size=args.batch_size)
            best = min(best, time.perf_counter() - start)
        print(f"num_proc={num_proc}: {megabytes:.2f} MB in {best:.2f} s = {megabytes / best:.2f} MB/s")


if __name__ == "__main__":
    main()
