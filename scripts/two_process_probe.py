"""What does this machine give two busy processes? One copy of a workload alone vs two copies started together.

    python scripts/two_process_probe.py [--rounds 4] [arith dict_heavy cache_sized memory_stream gemm]

Each workload runs single-threaded in fresh spawned processes that start at a barrier. The figure is the
throughput of two copies over one copy alone (2.0 = two cores do twice the work), the median over rounds of
adjacent (1 alone, 2 together) pairs. The data-pipeline scaling of ``hfbert bench`` section c is bounded by what
the machine gives its kind of work; this separates the kinds: pure interpreter work, dictionary-heavy Python,
arithmetic on a cache-sized array (8 MB, shares the L3), a memory stream (128 MB), and a float32 GEMM.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import time

for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_variable] = "1"  # before numpy is imported, here and in every spawned child

import numpy as np  # noqa: E402


def arith(n: int = 6_000_000) -> None:
    total = 0
    for i in range(n):
        total += i * i % 7


def dict_heavy(n: int = 3_000_000) -> None:
    rng = random.Random(0)
    keys = [f"w{rng.randrange(2_000_000)}" for _ in range(200_000)]
    counts: dict[str, int] = {}
    for i in range(n):
        key = keys[i % 200_000]
        counts[key] = counts.get(key, 0) + 1


def cache_sized(n: int = 4000) -> None:
    array = np.ones(1_000_000)  # 8 MB
    for _ in range(n):
        array *= 1.0000001


def memory_stream(n: int = 40) -> None:
    array = np.ones(16_000_000)  # 128 MB
    for _ in range(n):
        array *= 1.0000001


def gemm(n: int = 60) -> None:
    matrix = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
    for _ in range(n):
        matrix @ matrix


WORKLOADS = {f.__name__: f for f in (arith, dict_heavy, cache_sized, memory_stream, gemm)}


def _timed(name: str, barrier, results) -> None:
    barrier.wait()
    start = time.perf_counter()
    WORKLOADS[name]()
    results.put(time.perf_counter() - start)


def _wall(name: str, copies: int) -> float:
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(copies), context.Queue()
    processes = [context.Process(target=_timed, args=(name, barrier, results)) for _ in range(copies)]
    for process in processes:
        process.start()
    times = [results.get() for _ in processes]
    for process in processes:
        process.join()
    return max(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="*", help=f"any of {', '.join(WORKLOADS)} (default: all)")
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {unknown}; choose from {', '.join(WORKLOADS)}")
    for name in args.workloads or list(WORKLOADS):
        ratios = [2 * _wall(name, 1) / _wall(name, 2) for _ in range(args.rounds)]
        rounds = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"{name}: two copies together give {statistics.median(ratios):.2f}x one alone (rounds: {rounds})",
              flush=True)


if __name__ == "__main__":
    main()
