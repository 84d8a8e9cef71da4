"""The timing harness of the bench: a :class:`Contender` times one step on the stream's next batch and
records what happened (batch, process memory before and after, graphs compiled); :func:`alternate` runs the
contenders round by round in alternating order; :func:`paired_speedup` pairs their times; :func:`peak_memory` is a
step's peak tensor memory.
"""

from __future__ import annotations

import os
import platform
import resource
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext

import torch

from .inputs import BatchStream, digest

WARMUP_STEPS = 2  # the first compiles, the second meets a new shape (dynamic shapes); eager runs the same two


def alternate(runs: dict[str, Callable[[], float]], repeats: int, warmup: int = 1,
              min_seconds: float = 0.0) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run every contender ``warmup`` times, then rounds in alternating order (A B, B A, ...).

    At least ``repeats`` rounds, and more (at most 4x) until every contender has run for ``min_seconds`` in
    total: a run of a tenth of a second gets more than 5 samples, so a slow spell of the machine lasting a second
    or two cannot decide the median. Returns the seconds of the timed runs and of the warm-up runs per contender.
    """
    warmups = {name: [run() for _ in range(warmup)] for name, run in runs.items()}
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    round_ = 0
    while round_ < repeats or (round_ < 4 * repeats and min(map(sum, times.values())) < min_seconds):
        for name in names if round_ % 2 == 0 else reversed(names):
            times[name].append(runs[name]())
        round_ += 1
    return times, warmups


def paired_speedup(theirs: list[float], ours: list[float]) -> float | None:
    """Median over rounds of ``theirs / ours``: the two runs of a round are adjacent in time, so a slow or fast
    spell of a shared machine affects both and cancels in the ratio (the ratio of the two medians does not pair
    them; both are in the JSON)."""
    ratios = [t / o for t, o in zip(theirs, ours) if o > 0]
    return statistics.median(ratios) if ratios else None


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA), so that a clock reading covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def resident_set_bytes() -> int | None:
    """The process's resident set size now (Linux ``/proc``; None elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def peak_resident_bytes() -> int:
    """The process's largest resident set size so far (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if platform.system() == "Darwin" else peak * 1024


def resident_bytes(*objects) -> int:
    """Bytes of the distinct tensor storages reachable from modules, optimizers and tensors (tied weights once)."""
    seen: dict[int, int] = {}

    def add(tensor):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()

    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for tensor in (*obj.parameters(), *obj.buffers()):
                add(tensor)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for tensor in state.values():
                    add(tensor)
    return sum(seen.values())


def peak_memory(step: Callable[[], object], device: torch.device, *resident) -> int | None:
    """Peak bytes of tensor memory during one call of ``step`` (see the module docstring)."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    try:
        records = sorted(
            (event.start_ns(), event.nbytes())
            for event in prof.profiler.kineto_results.events()
            if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU
        )
    except AttributeError:  # the profiler's raw records moved: say "unknown" rather than guess
        return None
    live = peak = 0
    for _, delta in records:
        live += delta
        peak = max(peak, live)
    return resident_bytes(*resident) + peak


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``, None where either is missing or zero."""
    if not numerator or not denominator:
        return None
    return numerator / denominator


def mb(value: int | None) -> float | None:
    """Bytes in MiB (None stays None)."""
    return None if value is None else value / 2**20


def autocast(device: torch.device):
    """bf16 autocast on CUDA, nothing on CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def _compile_counter() -> int | None:
    """Graphs dynamo has compiled so far in this process (None if torch no longer exposes the counter)."""
    try:
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])
    except (AttributeError, KeyError, TypeError):
        return None


class Contender:
    """One side of a comparison: a step function on the stream's batches, and what happened on each step."""

    def __init__(self, name: str, step: Callable[[object], object], stream: BatchStream, device: torch.device,
                 describe: Callable[[object], dict] | None = None):
        self.name, self.step, self.stream, self.device, self.describe = name, step, stream, device, describe
        self.calls: list[dict] = []  # per step: batch index and digest, RSS before and after, graphs compiled

    def __call__(self) -> float:
        index, batch = self.stream.next(self.name)
        batch = to_device(batch, self.device)
        graphs, before = _compile_counter(), resident_set_bytes()
        synchronize(self.device)
        start = time.perf_counter()
        self.step(batch)
        synchronize(self.device)
        seconds = time.perf_counter() - start
        after, graphs_after = resident_set_bytes(), _compile_counter()
        call = {"index": index, "digest": digest(batch), "rss_before": before, "rss_after": after,
                "graphs": None if graphs is None or graphs_after is None else graphs_after - graphs}
        if self.describe is not None:
            call.update(self.describe(batch))
        self.calls.append(call)
        return seconds

    def timed(self, warmup: int) -> list[dict]:
        return self.calls[warmup:]

    def memory(self, warmup: int) -> dict:
        """Process memory over the timed steps (the calls after ``warmup``)."""
        timed = self.timed(warmup)
        before, after = [c["rss_before"] for c in timed], [c["rss_after"] for c in timed]
        if not timed or None in before or None in after:
            return {"rss_start_mb": None, "rss_end_mb": None, "rss_growth_mb": None}
        return {"rss_start_mb": mb(before[0]), "rss_end_mb": mb(after[-1]),
                "rss_growth_mb": mb(sum(a - b for a, b in zip(after, before)))}

    def graphs(self, warmup: int) -> tuple[int | None, int | None]:
        """Graphs torch.compile built during the warm-up steps and during the timed steps."""
        counts = [c["graphs"] for c in self.calls]
        if None in counts:
            return None, None
        return sum(counts[:warmup]), sum(counts[warmup:])


def to_device(batch, device):
    """A batch (or a list of batches) on ``device``."""
    if isinstance(batch, list):
        return [to_device(b, device) for b in batch]
    return {k: v.to(device) for k, v in batch.items()}
