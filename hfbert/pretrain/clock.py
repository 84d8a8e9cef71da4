"""The run's training clock: this invocation's seconds and the run's total over every resumption, paused while a
downstream evaluation runs. A budget run's schedule (:class:`~hfbert.pretrain.schedule.BudgetSchedule`) follows it.
"""

from __future__ import annotations

import contextlib
import time

__all__ = ["Clock"]


class Clock:
    """Training seconds: this invocation's, and the run's total over every resumption.

    Args:
        earlier_seconds (`float`): the training seconds of the run's earlier invocations (0 for a fresh run).
    """

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
