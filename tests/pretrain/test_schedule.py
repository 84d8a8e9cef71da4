"""hfbert.pretrain.schedule: a step-counted run's phases and end fall on fixed steps; a budget run's follow the
agreed clock (the learning rate at its share of the budget, each phase cut where the clock reaches its share,
the end at the budget)."""

import types

import pytest
import torch

import hfbert.pretrain.clock
from hfbert.optim import LinearWarmupDecay, linear_warmup_decay
from hfbert.pretrain.clock import Clock
from hfbert.pretrain.config import Phase, PretrainConfig, resolve_phases
from hfbert.pretrain.plan import LoopState
from hfbert.pretrain.schedule import BUDGET_UNITS, BudgetSchedule, StepSchedule

LR = 1e-3


def two_phases(total, first):
    return [Phase(0, 64, first, 0, 8), Phase(1, 128, total - first, first, 8)]


def scheduler(units):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=LR)
    rates = linear_warmup_decay(optimizer, 0, units)
    optimizer.step()  # as in training, before the schedule follows the clock
    return rates


def test_a_step_schedule_cuts_its_phases_and_ends_on_fixed_steps():
    phases = two_phases(5, 3)
    schedule = StepSchedule(phases, max_steps=5)
    assert [schedule.phase_at(step).index for step in range(5)] == [0, 0, 0, 1, 1]
    assert [schedule.done(step) for step in (0, 4, 5)] == [False, False, True]
    assert (schedule.stopped_by, schedule.total_steps, schedule.phases_run(5)) == ("max_steps", 5, phases)
    assert schedule.share_of_phase(phases[0], 3) == 1.0 and schedule.share_of_phase(phases[1], 4) == 0.5
    assert list(schedule.read_ahead(2, 2)) == [2, 3] and list(schedule.read_ahead(4, 2)) == [4]  # not past the run
    assert not schedule.time_up(1e9)  # no --max_time_minutes


def test_a_step_schedule_is_up_at_this_invocations_time_limit(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(hfbert.pretrain.clock, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    config = PretrainConfig(max_steps=10, max_time_minutes=2)
    schedule = StepSchedule.from_config(config, resolve_phases(config, total=StepSchedule.units(config)), None,
                                        LoopState())
    assert StepSchedule.units(config) == 10 and sum(p.steps for p in schedule.phases) == 10
    clock = Clock(500.0)  # earlier invocations' seconds do not count towards the limit
    now[0] += 30
    assert schedule.step_clock(clock) == 30.0
    assert not schedule.time_up(119.9) and schedule.time_up(120.0)
    schedule.after_step(1, 120.0, 1.0)  # nothing follows the clock: the rate is stepped with the optimizer
    assert not schedule.done(1)


def test_a_budget_schedule_follows_the_agreed_clock(monkeypatch):
    # One minute; the first phase a quarter of it.
    phases, rates = two_phases(BUDGET_UNITS, BUDGET_UNITS // 4), scheduler(BUDGET_UNITS)
    starts = [0]
    schedule = BudgetSchedule(1, phases, rates, starts)
    assert (schedule.stopped_by, schedule.total_steps, schedule.done(0)) == ("budget", None, False)
    assert list(schedule.read_ahead(7, 2)) == [7, 8]  # no last step known

    schedule.after_step(1, 6.0, 0.5)  # a tenth of the budget
    assert rates.get_last_lr()[0] == pytest.approx(LR * LinearWarmupDecay(0, BUDGET_UNITS)(1000))
    assert schedule.share_of_phase(phases[0], 1) == pytest.approx(0.4) and starts == [0]
    assert not (schedule.done(1) or schedule.time_up(6.0))

    schedule.after_step(2, 15.0, 0.7)  # a quarter: the second phase begins with step 2 (the third step)
    assert starts == [0, 2]
    assert schedule.phase_at(1) == phases[0]
    assert schedule.phase_at(2) == Phase(1, 128, phases[1].steps, 2, 8)
    assert schedule.phase_at(9) == schedule.phase_at(2)  # a step not taken yet: the latest phase begun
    assert schedule.share_of_phase(schedule.phase_at(2), 2) == 0.0

    # The next step is offered at the clock's total plus the median of this process's last step times.
    now = [100.0]
    monkeypatch.setattr(hfbert.pretrain.clock, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    clock = Clock(20.0)
    now[0] += 4
    assert schedule.step_clock(clock) == 24.0 + 0.5  # the median of 0.0 (none yet), 0.5 and 0.7

    schedule.after_step(3, 60.0, 0.6)  # the budget is spent
    assert schedule.done(3) and schedule.time_up(60.0) and rates.get_last_lr()[0] == 0.0
    assert schedule.phases_run(3) == [Phase(0, 64, 2, 0, 8), Phase(1, 128, 1, 2, 8)]


def test_a_budget_schedule_begins_every_phase_the_clock_passed():
    phases = [Phase(0, 32, 2000, 0, 8), Phase(1, 64, 3000, 2000, 8), Phase(2, 128, 5000, 5000, 8)]
    starts = [0]
    schedule = BudgetSchedule(1, phases, scheduler(BUDGET_UNITS), starts)
    schedule.after_step(4, 31.0, 1.0)  # past the ends of both the first and the second phase
    assert starts == [0, 4, 4]
    assert [p.steps for p in schedule.phases_run(4)] == [4, 0, 0]
    assert schedule.phase_at(4).index == 2


def test_a_resumed_budget_schedule_keeps_its_phase_starts():
    config = PretrainConfig(budget_minutes=2, phases=[{"max_seq_length": 64, "fraction": 0.5},
                                                      {"max_seq_length": 96, "fraction": 0.5}])
    phases = resolve_phases(config, total=BudgetSchedule.units(config))
    state = LoopState(step=50, phase_starts=[0, 40])  # as a checkpoint holds them
    schedule = BudgetSchedule.from_config(config, phases, scheduler(BUDGET_UNITS), state)
    assert [p.steps for p in phases] == [BUDGET_UNITS // 2] * 2 and schedule.seconds == 120
    assert schedule.phase_at(50).first_step == 40 and not schedule.done(50)  # a resumed run takes a step first
    schedule.after_step(51, 120.0, 1.0)
    assert schedule.done(51) and state.phase_starts == [0, 40]
