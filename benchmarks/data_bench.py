"""Throughput of the pipeline (tokenize + build + mask), for the bench's section c.

Each measurement runs in a fresh interpreter so that the numbers are not polluted by the caller: the Rust
tokenizer is pinned to one thread (``RAYON_NUM_THREADS=1``), so ``num_proc`` is the number of cores used.
Reported: wall time, CPU time of the process and its workers, corpus tokens, and tokens/s per wall second and
per CPU second.  On a shared machine the CPU-time figure is the stable one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from datasets.utils.logging import disable_progress_bar
from transformers import AutoTokenizer

from hfbert.data import CHAPTER_HEADING, build_pretraining_dataset

__all__ = ["measure_concurrent", "measure_pipeline"]

_DEFAULTS = {"layout": "paragraphs", "boundary": "chapter", "dupe_factor": 1, "masking": "static",
             "max_seq_length": 128}


def measure_pipeline(num_proc: int, corpus: str | Path, tokenizer_dir: str | Path, **settings) -> dict:
    """Build examples from ``corpus`` in a subprocess and return its timings (see module docstring).  ``settings``
    override :data:`_DEFAULTS` (layout, boundary, dupe_factor, masking, max_seq_length)."""
    done = subprocess.run(_command(num_proc, corpus, tokenizer_dir, **{**_DEFAULTS, **settings}), env=_env(),
                          capture_output=True, text=True, check=False)
    return _result(done.returncode, done.stdout, done.stderr)


def measure_concurrent(copies: int, corpus: str | Path, tokenizer_dir: str | Path, **settings) -> list[dict]:
    """``copies`` independent 1-process builds that start at the same instant (each waits for the others to finish
    importing), one result per build.

    What the machine itself gives two busy processes that share nothing: when two independent builds at once each
    take longer than one alone, a build split over 2 processes cannot be expected to scale better than that (the
    two are measured in the same rounds, so their spread is comparable).
    """
    with tempfile.TemporaryDirectory(prefix="hfbert-barrier-") as barrier:
        command = _command(1, corpus, tokenizer_dir, **{**_DEFAULTS, **settings})
        command += ["--barrier", barrier, "--parties", str(copies)]
        processes = [subprocess.Popen(command, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for _ in range(copies)]
        outputs = [process.communicate() for process in processes]
    return [_result(process.returncode, out, err) for process, (out, err) in zip(processes, outputs)]


def _env() -> dict:
    return dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")


def _command(num_proc, corpus, tokenizer_dir, layout, boundary, dupe_factor, masking, max_seq_length) -> list[str]:
    if not Path(corpus).is_file():
        raise FileNotFoundError(f"corpus not found: {corpus}")
    if not Path(tokenizer_dir).is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {tokenizer_dir}")
    return [sys.executable, __file__, "--num-proc", str(num_proc), "--corpus", str(corpus),
            "--tokenizer", str(tokenizer_dir), "--layout", layout, "--boundary", boundary or "",
            "--dupe-factor", str(dupe_factor), "--masking", masking, "--max-seq-length", str(max_seq_length)]


def _result(returncode: int, stdout: str, stderr: str) -> dict:
    if returncode != 0:
        raise RuntimeError(f"benchmark subprocess failed:\n{stderr[-2000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def wait_for_parties(folder: Path, parties: int, timeout: float = 120.0) -> None:
    """Barrier between benchmark processes: say ready, then wait until ``parties`` have said so."""
    (folder / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + timeout
    while sum(1 for _ in folder.glob("ready-*")) < parties:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only some of {parties} benchmark processes became ready within {timeout:.0f} s")
        time.sleep(0.0005)


def _measure_here(args: argparse.Namespace) -> dict:
    disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    boundary = CHAPTER_HEADING if args.boundary == "chapter" else (args.boundary or None)
    if args.barrier:
        wait_for_parties(Path(args.barrier), args.parties)
    cpu_before = _cpu_seconds()
    start = time.perf_counter()
    dataset, report = build_pretraining_dataset(
        args.corpus, tokenizer, input_layout=args.layout, document_boundary=boundary, dupe_factor=args.dupe_factor,
        masking=args.masking, max_seq_length=args.max_seq_length, num_proc=args.num_proc, return_report=True)
    wall = time.perf_counter() - start
    cpu = _cpu_seconds() - cpu_before
    tokens = report["sentences"]["tokens"]
    return {"num_proc": args.num_proc, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "tokens": tokens,
            "instances": len(dataset), "tokens_per_s": round(tokens / wall), "tokens_per_cpu_s": round(tokens / cpu)}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/data_bench.py")
    parser.add_argument("--num-proc", type=int, default=1)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--layout", default="paragraphs")
    parser.add_argument("--boundary", default="chapter")
    parser.add_argument("--dupe-factor", type=int, default=1)
    parser.add_argument("--masking", default="static")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--barrier", default=None, help="folder: start only once --parties processes are ready")
    parser.add_argument("--parties", type=int, default=1)
    print(json.dumps(_measure_here(parser.parse_args(argv))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
