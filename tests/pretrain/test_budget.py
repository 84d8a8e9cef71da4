"""hfbert pretrain --budget_minutes: the schedule follows the clock, the phases switch at their share of the
budget, the run ends at the budget annealed, evaluated and exported, a downstream evaluation stops the clock, a
killed run resumed continues its clock, and the processes of a run follow one clock.

A tiny model (hidden 32, 2 layers) on the nine-chapter corpus (tests/helpers/pretraining.py), two phases (lengths 64 and 96).
"""

import json
import re
import signal
import time
import types

import pytest

import hfbert.pretrain.clock
import hfbert.pretrain.loop
from hfbert.optim import LinearWarmupDecay, warmup_steps_for
from hfbert.pretrain import PretrainCallback, pretrain
from hfbert.pretrain.clock import Clock
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.pretrain.schedule import BUDGET_UNITS
from hfbert.pretrain.tracking import read_jsonl

from helpers.pretraining import KILL_AFTER_CHECKPOINT, launch, run_script, settings, write_config

BUDGET = 0.4  # minutes
PHASES = [{"max_seq_length": 64, "fraction": 0.5}, {"max_seq_length": 96, "fraction": 0.5}]


def budget_settings(prepared, output_dir, **overrides):
    values = settings(prepared.values(), output_dir, phases=PHASES, budget_minutes=BUDGET, logging_steps=5,
                      eval_steps=10_000, save_steps=10_000, max_eval_examples=8)
    values.update(overrides)
    return values


def training_lines(output_dir):
    return [r for r in read_jsonl(output_dir / "runs" / "metrics.jsonl") if "loss" in r]


def assert_ended_at_the_budget(output_dir, metrics):
    seconds = BUDGET * 60
    assert metrics["stopped_by"] == "budget"
    lines = training_lines(output_dir)
    # Within a step of the budget: the step that crosses it was predicted from the median of the last steps, which
    # a busy machine makes uneven.
    step = max(line["step_seconds"] for line in lines[-2:])
    ends = [{k: line[k] for k in ("step", "train_seconds", "step_seconds")} for line in lines[-3:]]
    assert abs(metrics["train_seconds"] - seconds) <= 0.05 * seconds + 2 * step, (metrics["train_seconds"], ends)
    assert lines[-1]["step"] == metrics["step"]
    assert_the_rate_follows_the_clock(output_dir, lines)
    assert "eval_mlm_accuracy" in metrics and (output_dir / "model.safetensors").is_file()
    card = (output_dir / "README.md").read_text()
    assert "the end of its time budget" in card
    return lines


def assert_the_rate_follows_the_clock(output_dir, lines):
    """Each line's learning rate is the schedule's at its training seconds over the budget. After a step the rate is
    set at the clock the processes predicted for the step's end (its start plus the median of the last 9 steps), and
    the line logs the clock just after it: the two differ by less than the median, which is at most the sum of the
    mean step times of this line's 5 steps and the previous line's, or by less than the step and the log. The lines
    of the warm-up, whose rate climbs faster than a step, are not compared."""
    run = json.loads((output_dir / "pretrain_config.json").read_text())
    seconds, peak = BUDGET * 60, run["learning_rate"]
    multiplier = LinearWarmupDecay(warmup_steps_for(BUDGET_UNITS, run["warmup_ratio"]), BUDGET_UNITS)
    warmup = run["warmup_ratio"] * seconds
    compared = 0
    for previous, line in zip([lines[0], *lines], lines):
        slack = 5 * line["step_seconds"] + previous["step_seconds"] + 0.5
        if line["train_seconds"] - slack <= warmup:
            continue
        expected = [peak * multiplier(int(min(max(t, 0.0) / seconds, 1.0) * BUDGET_UNITS))
                    for t in (line["train_seconds"] - slack, line["train_seconds"] + slack)]
        shown = {k: line[k] for k in ("step", "train_seconds", "step_seconds", "learning_rate")}
        assert min(expected) - 1e-9 <= line["learning_rate"] <= max(expected) + 1e-9, (shown, expected)
        compared += 1
    assert compared >= len(lines) // 2


class Downstream(PretrainCallback):
    """Asks for a downstream evaluation at ``step``; keeps what it reported."""

    def __init__(self, step):
        self.step, self.scores = step, None

    def on_step_end(self, step, model, control, **kwargs):
        control.should_evaluate_downstream |= step == self.step

    def on_evaluate(self, step, metrics, model, control, **kwargs):
        if "downstream_minutes" in metrics:
            self.scores = metrics


PAUSE = 4.0  # seconds of the stand-in downstream evaluation


def slow_downstream(config, model, tokenizer, step):
    time.sleep(PAUSE)
    return {"downstream_average": 0.5}


@pytest.mark.slow
def test_a_budget_run_ends_at_its_budget_annealed_evaluated_and_exported(prepared, tmp_path, monkeypatch):
    output_dir = tmp_path / "budget"
    # A downstream evaluation after step 10, which takes PAUSE seconds, does not count.
    monkeypatch.setattr(hfbert.pretrain.loop, "evaluate_during_training", slow_downstream)
    downstream = Downstream(10)
    started = time.monotonic()
    result = pretrain(PretrainConfig.from_dict(budget_settings(prepared, output_dir, max_steps=3)),
                      callbacks=[downstream])
    assert time.monotonic() - started > BUDGET * 60 + PAUSE
    lines = assert_ended_at_the_budget(output_dir, result.metrics)
    before, after = (next(line for line in lines if line["step"] == step) for step in (10, 15))
    # The clock went on for the 5 steps between the lines, not for the evaluation between them.
    assert after["train_seconds"] - before["train_seconds"] - 5 * after["step_seconds"] < PAUSE / 2, (before, after)
    assert downstream.scores["downstream_minutes"] * 60 == pytest.approx(before["train_seconds"], abs=PAUSE / 2)
    assert result.metrics["step"] > 3  # max_steps does not count in a budget run
    rates = [line["learning_rate"] for line in lines]
    peak = rates.index(max(rates))
    assert all(a >= b for a, b in zip(rates[peak:], rates[peak + 1:]))  # decays with the clock after the warm-up
    # The second phase begins at half the budget: the last line at length 64 is logged before half the budget,
    # the first at 96 after it (a line is logged every 5 steps).
    switch = next(i for i, line in enumerate(lines) if line["max_seq_length"] == 96)
    assert {line["max_seq_length"] for line in lines[:switch]} == {64}
    assert lines[switch - 1]["train_seconds"] <= BUDGET * 30 + 1 and lines[switch]["train_seconds"] >= BUDGET * 30
    assert all(line["max_seq_length"] == 96 for line in lines[switch:])
    # The card gives the steps each phase took, as the clock cut them.
    shown = re.search(r"(\d+) steps at length 64 .*, then (\d+) steps at length 96", (output_dir / "README.md").read_text())
    first, second = int(shown.group(1)), int(shown.group(2))
    assert lines[switch - 1]["step"] <= first < lines[switch]["step"] and first + second == result.metrics["step"]


@pytest.mark.slow
def test_a_killed_budget_run_resumed_ends_at_its_budget(prepared, tmp_path):
    output_dir = tmp_path / "killed"
    config = write_config(tmp_path / "run.json", budget_settings(prepared, output_dir, save_steps=40))
    killed = run_script(KILL_AFTER_CHECKPOINT, config, "checkpoint-00000080")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    saved = json.loads((output_dir / "checkpoint-00000080" / "hfbert_state.json").read_text())
    assert 0 < saved["train_seconds"] < BUDGET * 60
    watch = Watch()
    result = pretrain(PretrainConfig.from_dict(budget_settings(prepared, output_dir, save_steps=40, resume=True)),
                      callbacks=[watch])
    lines = assert_ended_at_the_budget(output_dir, result.metrics)
    assert [line["step"] for line in lines][:16] == list(range(5, 81, 5))  # the log continues from the checkpoint
    # ... and so does the clock: the resumed run trained for what the checkpoint had left of the budget.
    trained = watch.ended - watch.began
    assert result.metrics["train_seconds"] - saved["train_seconds"] == pytest.approx(trained, abs=1.0), trained
    clock = [line["train_seconds"] for line in lines]
    assert clock[16] > saved["train_seconds"] and clock == sorted(clock), (saved["train_seconds"], clock)


class Watch(PretrainCallback):
    """When the training loop began and ended, by a clock of its own."""

    def on_train_begin(self, step, model, **kwargs):
        self.began = time.monotonic()

    def on_train_end(self, step, metrics, model, **kwargs):
        self.ended = time.monotonic()


def test_the_clock_counts_training_only(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(hfbert.pretrain.clock, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    clock = Clock(30.0)  # 30 s before this invocation
    now[0] += 5
    with clock.paused():  # a downstream evaluation
        now[0] += 60
    now[0] += 2
    assert (clock.this_run(), clock.total()) == (7.0, 37.0)


# Each process of a two-process budget run records its log lines; the second process's clock runs SKEW seconds ahead.
SKEWED_RUN = """
import json, os, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from hfbert.pretrain import PretrainCallback, PretrainConfig, pretrain
from hfbert.pretrain.clock import Clock

rank = int(os.environ["RANK"])
if rank == 1:
    start = Clock.__init__
    Clock.__init__ = lambda self, earlier: start(self, earlier + float(sys.argv[3]))

class Lines(PretrainCallback):
    lines = []

    def on_log(self, step, logs, control, **kwargs):
        kept = ("learning_rate", "max_seq_length", "train_seconds")
        self.lines.append({"step": step, **{k: logs[k] for k in kept}})

result = pretrain(PretrainConfig.from_dict(json.loads(Path(sys.argv[1]).read_text())), callbacks=[Lines()])
Path(sys.argv[2], f"rank-{rank}.json").write_text(json.dumps({"lines": Lines.lines, "step": result.metrics["step"]}))
"""
SKEW = 3.0


@pytest.mark.slow
def test_the_processes_of_a_budget_run_follow_one_clock(prepared, tmp_path):
    """Their clocks differ (process 1's by SKEW seconds); each step's learning rate and phase, and the stop, come
    from the mean, so the processes agree on every one (a process that followed its own clock would train at other
    rates, switch phase and stop at other steps, and its collectives would not meet the others')."""
    config = write_config(tmp_path / "run.json", budget_settings(prepared, tmp_path / "out", budget_minutes=0.2,
                                                                  logging_steps=1))
    script = tmp_path / "skewed.py"
    script.write_text(SKEWED_RUN)
    done = launch("--multi_gpu", "--num_processes", "2", "--num_machines", "1", str(script), str(config),
                  str(tmp_path), str(SKEW), timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1))
    assert first["step"] == second["step"] and len(first["lines"]) == first["step"] > 10
    agreed = [{k: v for k, v in line.items() if k != "train_seconds"} for line in first["lines"]]
    assert agreed == [{k: v for k, v in line.items() if k != "train_seconds"} for line in second["lines"]]
    assert {line["max_seq_length"] for line in agreed} == {64, 96}
    # The clocks did differ, by SKEW less the time between the processes' starts; the run ended at the budget by
    # their mean.
    for mine, theirs in zip(first["lines"], second["lines"]):
        assert SKEW / 2 < theirs["train_seconds"] - mine["train_seconds"] < SKEW + 1
    ended = (first["lines"][-1]["train_seconds"] + second["lines"][-1]["train_seconds"]) / 2
    assert ended == pytest.approx(0.2 * 60, abs=0.1 * 0.2 * 60 + 1)


def test_budget_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="budget_minutes must be > 0"):
        PretrainConfig(output_dir=str(tmp_path), budget_minutes=0)
    with pytest.raises(ConfigError, match="warmup_steps counts steps"):
        PretrainConfig(output_dir=str(tmp_path), budget_minutes=1, warmup_steps=10)
