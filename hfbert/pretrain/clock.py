"""The run's clock, and the schedule of a run given a time budget instead of a step count (``--budget_minutes``).

A step-counted run plans its steps: the warm-up, the decay and the phases of the length schedule fall on fixed
steps, and the same settings give the same weights. A budget run (Cramming, Geiping & Goldstein 2023) plans its
time: its schedule's progress is the training time spent over the budget, so the learning rate reaches the end of
its decay, and the last phase its end, exactly when the budget runs out, whatever the machine's speed. The price is
repeatability: where the steps fall depends on how fast each one ran.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import time

from .config import Phase

__all__ = ["BUDGET_UNITS", "Budget", "Clock"]

#: A budget run's learning-rate schedule counts progress in these units of its budget, as a step-counted one counts
#: steps: the same warm-up-then-decay multiplier, and ``--resume_with_changes`` changes it the same way.
BUDGET_UNITS = 10_000


class Clock:
    """Training seconds: this invocation's, and the run's total over every resumption."""

    def __init__(self, earlier_seconds: float):
        self.earlier, self.started = earlier_seconds, time.monotonic()

    def this_run(self) -> float:
        return time.monotonic() - self.started

    def total(self) -> float:
        return self.earlier + self.this_run()

    @contextlib.contextmanager
    def paused(self):
        """Time spent inside is not counted (a downstream evaluation during a budget run)."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.started += time.monotonic() - started


class Budget:
    """The schedule of a budget run of ``minutes``: after each step, with the clock that every process agreed on,
    :meth:`follow` sets the next step's learning rate at that share of the budget and begins the next phase once
    the clock reaches its share (the phases' step counts, from ``--phases`` fractions, give the shares).
    ``phase_starts``: the first step of each phase begun so far, kept in the run's checkpoints."""

    def __init__(self, minutes: float, phases: list[Phase], scheduler, phase_starts: list[int]):
        self.seconds, self.phases, self.scheduler, self.starts = minutes * 60, phases, scheduler, phase_starts
        total = sum(p.steps for p in phases)
        self.ends = [sum(p.steps for p in phases[: i + 1]) / total for i in range(len(phases) - 1)] + [float("inf")]

    def follow(self, seconds: float, step: int) -> bool:
        """After ``step`` steps at ``seconds`` of training; True once the budget is spent."""
        progress = min(seconds / self.seconds, 1.0)
        self.scheduler.last_epoch = int(progress * BUDGET_UNITS) - 1
        self.scheduler.step()  # to int(progress * BUDGET_UNITS)
        while progress >= self.ends[len(self.starts) - 1]:
            self.starts.append(step)
        return progress >= 1.0

    def phase_at(self, step: int) -> Phase:
        """The phase of ``step``; a step not taken yet is counted in the latest phase begun."""
        index = bisect.bisect_right(self.starts, step) - 1
        return dataclasses.replace(self.phases[index], first_step=self.starts[index])

    def phases_run(self, steps_done: int) -> list[Phase]:
        """The phases as the clock cut them: the steps each one took."""
        starts = self.starts + [steps_done]
        return [dataclasses.replace(self.phases[i], first_step=starts[i], steps=starts[i + 1] - starts[i])
                for i in range(len(starts) - 1)]
