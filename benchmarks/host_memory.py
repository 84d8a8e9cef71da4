"""Where a pretraining run's host memory goes, step by step (docs/pretraining.md, Memory).

    python benchmarks/host_memory.py OUT --steps 600 [--mmap_threshold BYTES] [--settings '{"prepared": [...]}']

Runs ``hfbert pretrain`` (the default job's settings, ``--max_steps STEPS``, plus ``--settings``) with a callback
that writes, after every optimizer step, one JSON line to ``OUT.memory.jsonl``: RssAnon from /proc/self/status,
glibc's ``mallinfo2`` (the heap it took from the system, its blocks in use, its free gaps, its mapped blocks) and
the process's CPU seconds. ``--mmap_threshold`` replaces the threshold ``hfbert pretrain`` sets (0: glibc's own,
raised as it goes). Linux with glibc only.
"""

import argparse
import ctypes
import json
import time

from hfbert.pretrain import host_memory, loop
from hfbert.pretrain.callbacks import PretrainCallback
from hfbert.pretrain.config import PretrainConfig


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


LIBC = ctypes.CDLL(None)
LIBC.mallinfo2.restype = MallInfo2
MIB = 2**20


def anonymous_mib() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("RssAnon"))


class MemoryLog(PretrainCallback):
    def __init__(self, path: str):
        self.out = open(path, "w")

    def on_step_end(self, step, model, control, **kwargs):
        info = LIBC.mallinfo2()
        self.out.write(json.dumps({
            "step": step, "cpu_seconds": time.process_time(), "anon_mib": anonymous_mib(),
            "heap_mib": info.arena / MIB, "in_use_mib": info.uordblks / MIB, "heap_gaps_mib": info.fordblks / MIB,
            "mapped_mib": info.hblkhd / MIB}) + "\n")
        self.out.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--mmap_threshold", type=int, default=None)
    parser.add_argument("--settings", type=json.loads, default={})
    args = parser.parse_args()
    # the threshold hfbert pretrain sets before its job (pretrain() itself leaves the allocator alone); 0: glibc's own
    threshold = host_memory.LARGE_BLOCK if args.mmap_threshold is None else args.mmap_threshold
    if threshold > 0:
        host_memory.return_large_blocks(threshold)
    config = PretrainConfig(output_dir=args.output_dir, max_steps=args.steps, progress_bar=False, **args.settings)
    loop.pretrain(config, callbacks=[MemoryLog(args.output_dir + ".memory.jsonl")])


if __name__ == "__main__":
    main()
