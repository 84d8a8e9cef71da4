"""The run's schedule: which phase each step is in and when the run ends, counted in steps or in time.

A step-counted run (:class:`StepSchedule`) plans its steps: the warm-up, the decay and the phases of the length
schedule fall on fixed steps, and the same settings give the same weights. A budget run (:class:`BudgetSchedule`,
``--budget_minutes``; Cramming, Geiping & Goldstein 2023) plans its time: its schedule's progress is the training
time spent over the budget, so the learning rate reaches the end of its decay, and the last phase its end, exactly
when the budget runs out, whatever the machine's speed. The price is repeatability: where the steps fall depends on
how fast each one ran.

The loop (:mod:`~hfbert.pretrain.loop`) asks either one the same questions (:class:`Schedule`); the plan
(:mod:`~hfbert.pretrain.plan`) picks which one once.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import statistics

from .clock import Clock
from .config import Phase

__all__ = ["BUDGET_UNITS", "BudgetSchedule", "Schedule", "StepSchedule"]

#: A budget run's learning-rate schedule counts progress in these units of its budget, as a step-counted one counts
#: steps: the same warm-up-then-decay multiplier, and ``--resume_with_changes`` changes it the same way.
BUDGET_UNITS = 10_000


class Schedule:
    """What the training loop asks of the run's schedule, step-counted or budgeted alike.

    After each optimizer step the loop gives :meth:`after_step` the step's agreed clock (the mean over processes of
    what :meth:`step_clock` said before the step), then asks :meth:`time_up` and :meth:`done`.

    Attributes:
        phases (`list[Phase]`): the length schedule as planned (a budget run's in units of its budget).
        total_steps (`int` or `None`): the steps of the whole run, where they are known in advance (a progress
            bar's total).
        stopped_by (`str`): why a run that runs its course stops: ``"max_steps"`` or ``"budget"``.
    """

    phases: list[Phase]
    total_steps: int | None = None
    stopped_by: str

    @staticmethod
    def units(config) -> int:
        """The length of the learning-rate schedule, and what ``--phases`` fractions cut, in this schedule's units.

        Args:
            config (`PretrainConfig`): the run's settings.
        """
        raise NotImplementedError

    @classmethod
    def from_config(cls, config, phases: list[Phase], scheduler, state) -> Schedule:
        """The schedule of a run.

        Args:
            config (`PretrainConfig`): the run's settings.
            phases (`list[Phase]`): the phases as :func:`~hfbert.pretrain.config.resolve_phases` cut
                :meth:`units`.
            scheduler (`torch.optim.lr_scheduler.LRScheduler`): the learning-rate schedule, :meth:`units` long.
            state (`LoopState`): the loop's state, fresh or resumed (a budget run keeps its phases' first steps there).
        """
        raise NotImplementedError

    def step_clock(self, clock: Clock) -> float:
        """The seconds this process offers for the step about to run; their mean over the processes is the step's
        agreed clock, so that every process decides alike.

        Args:
            clock (`Clock`): the run's training clock on this process.
        """
        raise NotImplementedError

    def after_step(self, step: int, seconds: float, step_seconds: float) -> None:
        """Moves the schedule on after an optimizer step.

        Args:
            step (`int`): the optimizer steps done, this one included.
            seconds (`float`): the step's agreed clock.
            step_seconds (`float`): how long the step took on this process.
        """

    def time_up(self, seconds: float) -> bool:
        """Whether the agreed clock ``seconds`` has reached the run's deadline (``--max_time_minutes`` or the
        budget)."""
        raise NotImplementedError

    def done(self, step: int) -> bool:
        """Whether the run has run its course after ``step`` steps (then it stops, :attr:`stopped_by`)."""
        raise NotImplementedError

    def phase_at(self, step: int) -> Phase:
        """The phase that trains step ``step`` (counted from 0)."""
        raise NotImplementedError

    def phases_run(self, steps_done: int) -> list[Phase]:
        """The phases as trained after ``steps_done`` steps (the model card's)."""
        raise NotImplementedError

    def share_of_phase(self, phase: Phase, step: int) -> float:
        """How much of ``phase`` is done after ``step`` steps, from 0 to 1 (1: none of it remains)."""
        raise NotImplementedError

    def read_ahead(self, step: int, count: int) -> range:
        """The steps whose data may be read ahead from ``step`` on: at most ``count`` of them, none past the run."""
        raise NotImplementedError


class StepSchedule(Schedule):
    """A run of ``max_steps`` optimizer steps: the phases and the learning rate fall on fixed steps.

    Args:
        phases (`list[Phase]`): the phases, in steps (summing to ``max_steps``).
        max_steps (`int`): the steps of the run.
        time_limit (`float`, *optional*): ``--max_time_minutes`` in seconds: time is up once this invocation has
            trained that long (a stop the callbacks may overrule); `None`: no limit.
    """

    stopped_by = "max_steps"

    def __init__(self, phases: list[Phase], max_steps: int, time_limit: float | None = None):
        self.phases, self.total_steps, self.time_limit = phases, max_steps, time_limit
        self.starts = [phase.first_step for phase in phases]

    @staticmethod
    def units(config) -> int:
        return config.max_steps

    @classmethod
    def from_config(cls, config, phases, scheduler, state) -> StepSchedule:
        limit = None if config.max_time_minutes is None else config.max_time_minutes * 60
        return cls(phases, config.max_steps, limit)

    def step_clock(self, clock: Clock) -> float:
        return clock.this_run()  # --max_time_minutes counts this invocation's time

    def time_up(self, seconds: float) -> bool:
        return self.time_limit is not None and seconds >= self.time_limit

    def done(self, step: int) -> bool:
        return step >= self.total_steps

    def phase_at(self, step: int) -> Phase:
        return self.phases[bisect.bisect_right(self.starts, step) - 1]

    def phases_run(self, steps_done: int) -> list[Phase]:
        return self.phases

    def share_of_phase(self, phase: Phase, step: int) -> float:
        return (step - phase.first_step) / max(phase.steps, 1)

    def read_ahead(self, step: int, count: int) -> range:
        return range(step, min(step + count, self.total_steps))


class BudgetSchedule(Schedule):
    """A run of ``minutes`` of training: after each step, at the clock every process agreed on, the learning rate is
    set at that share of the budget, the next phase begins once the clock reaches its share (the phases' step
    counts give the shares), and the run ends once the budget is spent. Time spent in a paused :class:`Clock` (a
    downstream evaluation) does not count.

    Args:
        minutes (`float`): the budget.
        phases (`list[Phase]`): the phases, in :data:`BUDGET_UNITS` of the budget.
        scheduler (`torch.optim.lr_scheduler.LRScheduler`): the learning-rate schedule, :data:`BUDGET_UNITS` long;
            set after each step.
        phase_starts (`list[int]`): the first step of each phase begun so far; appended to in place (it is kept in
            the run's checkpoints).
    """

    stopped_by = "budget"

    def __init__(self, minutes: float, phases: list[Phase], scheduler, phase_starts: list[int]):
        self.seconds, self.phases, self.scheduler, self.starts = minutes * 60, phases, scheduler, phase_starts
        total = sum(p.steps for p in phases)
        self.ends = [sum(p.steps for p in phases[: i + 1]) / total for i in range(len(phases) - 1)] + [float("inf")]
        self.recent = collections.deque([0.0], maxlen=9)  # this process's last step times
        self.spent = False

    @staticmethod
    def units(config) -> int:
        return BUDGET_UNITS

    @classmethod
    def from_config(cls, config, phases, scheduler, state) -> BudgetSchedule:
        return cls(config.budget_minutes, phases, scheduler, state.phase_starts)

    def step_clock(self, clock: Clock) -> float:
        # When this step will end (the clock now plus the median of the last steps' times), so that the schedule
        # and the stop fall on the budget, not a step after it.
        return clock.total() + statistics.median(self.recent)

    def after_step(self, step: int, seconds: float, step_seconds: float) -> None:
        self.recent.append(step_seconds)
        progress = min(seconds / self.seconds, 1.0)
        self.scheduler.last_epoch = int(progress * BUDGET_UNITS) - 1
        self.scheduler.step()  # to int(progress * BUDGET_UNITS)
        while progress >= self.ends[len(self.starts) - 1]:
            self.starts.append(step)
        self.spent = progress >= 1.0

    def time_up(self, seconds: float) -> bool:
        return self.spent  # the clock reached the budget at the last step

    def done(self, step: int) -> bool:
        return self.spent

    def phase_at(self, step: int) -> Phase:
        # A step not taken yet is counted in the latest phase begun.
        index = bisect.bisect_right(self.starts, step) - 1
        return dataclasses.replace(self.phases[index], first_step=self.starts[index])

    def phases_run(self, steps_done: int) -> list[Phase]:
        # As the clock cut them: the steps each one took.
        starts = self.starts + [steps_done]
        return [dataclasses.replace(self.phases[i], first_step=starts[i], steps=starts[i + 1] - starts[i])
                for i in range(len(starts) - 1)]

    def share_of_phase(self, phase: Phase, step: int) -> float:
        # Its share of the phase's time, by the learning-rate schedule's progress (set from the agreed clock).
        ends = [0.0, *[min(end, 1.0) for end in self.ends]]
        progress = self.scheduler.last_epoch / BUDGET_UNITS
        return (progress - ends[phase.index]) / max(ends[phase.index + 1] - ends[phase.index], 1e-9)

    def read_ahead(self, step: int, count: int) -> range:
        return range(step, step + count)
