"""hfbert pretrain --budget_minutes: the schedule follows the clock, the phases switch at their share of the
budget, the run ends at the budget annealed, evaluated and exported, and a killed run resumed continues its clock.

A tiny model (hidden 32, 2 layers) on the nine-chapter corpus of test_pretrain, two phases (lengths 64 and 96).
"""

import json
import re
import signal

import pytest
from test_pretrain import (KILL_AFTER_CHECKPOINT, corpus, prepared, run_script,  # noqa: F401  (fixtures)
                           settings, write_config)

from hfbert.pretrain import pretrain
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.pretrain.tracking import read_jsonl

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
    assert abs(metrics["train_seconds"] - seconds) <= 0.05 * seconds, metrics["train_seconds"]
    lines = training_lines(output_dir)
    assert lines[-1]["step"] == metrics["step"] and lines[-1]["learning_rate"] == 0.0  # annealed to the end
    assert "eval_mlm_accuracy" in metrics and (output_dir / "model.safetensors").is_file()
    card = (output_dir / "README.md").read_text()
    assert "the end of its time budget" in card
    return lines


def test_a_budget_run_ends_at_its_budget_annealed_evaluated_and_exported(prepared, tmp_path):
    output_dir = tmp_path / "budget"
    result = pretrain(PretrainConfig.from_dict(budget_settings(prepared, output_dir, max_steps=3)))
    lines = assert_ended_at_the_budget(output_dir, result.metrics)
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


def test_a_killed_budget_run_resumed_ends_at_its_budget(prepared, tmp_path):
    output_dir = tmp_path / "killed"
    config = write_config(tmp_path / "run.json", budget_settings(prepared, output_dir, save_steps=40))
    killed = run_script(KILL_AFTER_CHECKPOINT, config, "checkpoint-00000080")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    saved = json.loads((output_dir / "checkpoint-00000080" / "hfbert_state.json").read_text())
    assert 0 < saved["train_seconds"] < BUDGET * 60
    result = pretrain(PretrainConfig.from_dict(budget_settings(prepared, output_dir, save_steps=40, resume=True)))
    lines = assert_ended_at_the_budget(output_dir, result.metrics)
    assert [line["step"] for line in lines][:16] == list(range(5, 81, 5))  # the log continues from the checkpoint


def test_budget_settings_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="budget_minutes must be > 0"):
        PretrainConfig(output_dir=str(tmp_path), budget_minutes=0)
    with pytest.raises(ConfigError, match="warmup_steps counts steps"):
        PretrainConfig(output_dir=str(tmp_path), budget_minutes=1, warmup_steps=10)
