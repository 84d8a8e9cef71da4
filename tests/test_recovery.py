"""Recovering from failures: a crash at any point of save-and-prune, and a run that diverges.

Checkpointing is driven first with a stand-in for accelerate (it writes and checks small files named as
``save_state`` names them), so every crash point runs in milliseconds; the crash is injected through
``checkpointing._crash_hook``, not by timing. Then real tiny runs (hidden 32, 2 layers, the first chapters of the
shipped Austen corpus): a SIGKILL in the middle of pruning, and a run forced to diverge that recovers through the
documented path.
"""

import gzip
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import hfbert.optim
import hfbert.pretrain.loop as loop
from hfbert.data import prepare_corpus
from hfbert.pretrain import TrainingDivergedError, main, pretrain
from hfbert.pretrain import checkpointing
from hfbert.pretrain.checkpointing import (
    CRASH_POINTS,
    STATE_FILE,
    is_complete,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    missing_files,
    read_state,
    remove_incomplete,
    save_checkpoint,
)
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.pretrain.data import BUILTIN_CORPUS
from hfbert.pretrain.recovery import RECOVERY_CHANGES, LossWatch, check_resume, last_good_checkpoint
from hfbert.pretrain.tracking import read_jsonl

# ----------------------------------------------------------------------------------------------------------------
# Checkpoints with a stand-in accelerator

FILES = ("pytorch_model.bin", "optimizer.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl")


def content(name: str, step: int) -> bytes:
    return f"{name} of step {step}\n".encode() * (50 + step)


class FakeAccelerator:
    """The part of accelerate that checkpointing uses: save_state writes the files of a step, load_state checks
    that every one holds what the step wrote."""

    is_main_process = True

    def wait_for_everyone(self) -> None:
        pass

    @staticmethod
    def _step(path) -> int:
        return int(re.search(r"checkpoint-(\d+)", Path(path).name)[1])

    def save_state(self, path, safe_serialization=False) -> None:
        Path(path).mkdir(parents=True)
        for name in FILES:
            (Path(path) / name).write_bytes(content(name, self._step(path)))

    def load_state(self, path) -> None:
        for name in FILES:
            assert (Path(path) / name).read_bytes() == content(name, self._step(path)), f"{path}/{name} is damaged"


class Crash(BaseException):
    """What a SIGKILL does to this process: nothing after it runs (not even an `except Exception`)."""


def crash_at(monkeypatch, point: str) -> list[str]:
    """Make the next time ``point`` is reached kill the "process"; returns the points passed, in order."""
    passed = []

    def hook(reached: str) -> None:
        passed.append(reached)
        if reached == point:
            monkeypatch.setattr(checkpointing, "_crash_hook", lambda _: None)
            raise Crash(point)

    monkeypatch.setattr(checkpointing, "_crash_hook", hook)
    return passed


def save(output_dir: Path, step: int, keep_last: int = 2) -> Path:
    return save_checkpoint(FakeAccelerator(), output_dir, step, {"loss": float(step)}, keep_last)


def start(output_dir: Path, keep_last: int = 2) -> None:
    """What a run does first in an output folder that holds a previous run."""
    remove_incomplete(output_dir, keep_last=keep_last)


def assert_clean(output_dir: Path, keep_last: int = 2) -> list[int]:
    """At most keep_last checkpoints, every checkpoint-* folder complete, nothing half-done left; the newest
    loads. Returns the steps."""
    names = sorted(p.name for p in output_dir.iterdir())
    assert all(re.fullmatch(r"checkpoint-\d{8}", n) for n in names), names
    assert all(is_complete(output_dir / n) for n in names), names
    steps = [step for step, _ in list_checkpoints(output_dir)]
    assert len(steps) <= keep_last, steps
    state = load_checkpoint(FakeAccelerator(), latest_checkpoint(output_dir))
    assert state["step"] == steps[-1] and state["loss"] == float(steps[-1])
    return steps


# The re-save of a step that already has a checkpoint is the only path through "moved_old_copy".
RESAVE = {"moved_old_copy"}


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_at_any_point_of_save_and_prune_leaves_at_most_keep_last(tmp_path, monkeypatch, point):
    for step in (1, 2, 3):
        save(tmp_path, step)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    passed = crash_at(monkeypatch, point)
    target = 3 if point in RESAVE else 4
    with pytest.raises(Crash):
        save(tmp_path, target)
    assert passed[-1] == point
    # Whatever was on disk at that moment, no incomplete folder counts as a checkpoint ...
    for path in tmp_path.glob("checkpoint-*"):
        counted = path in {p for _, p in list_checkpoints(tmp_path)}
        assert counted == (re.fullmatch(r"checkpoint-\d{8}", path.name) is not None and not missing_files(path))
    # ... and the next start is strict about keep_last, and resumes from a checkpoint that loads.
    start(tmp_path)
    published = CRASH_POINTS.index(point) >= CRASH_POINTS.index("published")
    assert assert_clean(tmp_path)[-1] == (target if published or point in RESAVE else 3)
    for step in (5, 6):
        save(tmp_path, step)
    assert assert_clean(tmp_path) == [5, 6]


@pytest.mark.parametrize("point", ["marked_for_deletion", "deleting"])
def test_a_crash_while_the_next_start_prunes_is_cleaned_by_the_one_after(tmp_path, monkeypatch, point):
    for step in (1, 2, 3):
        save(tmp_path, step, keep_last=3)
    crash_at(monkeypatch, point)
    with pytest.raises(Crash):
        start(tmp_path, keep_last=1)  # the keep_last of the resumed run is smaller
    start(tmp_path, keep_last=1)
    assert assert_clean(tmp_path, keep_last=1) == [3]


def test_a_folder_that_lost_files_never_counts_and_resume_skips_it(tmp_path):
    for step in (1, 2, 3):
        save(tmp_path, step, keep_last=3)
    newest = tmp_path / "checkpoint-00000003"
    for name in FILES:  # what an interrupted deletion by other tools leaves: only the state file
        (newest / name).unlink()
    assert missing_files(newest) == sorted(FILES)
    assert latest_checkpoint(tmp_path).name == "checkpoint-00000002"
    with pytest.raises(FileNotFoundError, match=r"checkpoint-00000003 is not a complete hfbert checkpoint \(missing: "
                                                r"custom_checkpoint_0\.pkl, optimizer\.bin, pytorch_model\.bin"):
        load_checkpoint(FakeAccelerator(), newest)
    truncated = tmp_path / "checkpoint-00000002" / "optimizer.bin"
    truncated.write_bytes(truncated.read_bytes()[:10])
    assert missing_files(truncated.parent) == [f"optimizer.bin (10 bytes, not {len(content('optimizer.bin', 2))})"]
    assert latest_checkpoint(tmp_path).name == "checkpoint-00000001"
    (tmp_path / "checkpoint-00000001" / STATE_FILE).write_text("{not json")
    assert latest_checkpoint(tmp_path) is None
    assert read_state(tmp_path / "checkpoint-00000001") is None


def test_a_state_file_that_lists_no_files_is_checked_against_what_accelerate_writes(tmp_path):
    path = save(tmp_path, 7)
    state = read_state(path)
    assert set(state["files"]) == set(FILES)
    del state["files"]
    (path / STATE_FILE).write_text(json.dumps(state))
    assert is_complete(path)
    (path / "random_states_0.pkl").unlink()
    assert missing_files(path) == ["random_states_0.pkl"]


# ----------------------------------------------------------------------------------------------------------------
# Watching the loss


def test_loss_watch_flags_non_finite_losses_and_spikes_over_the_recent_median():
    recent = []
    watch = LossWatch(recent, factor=3.0, window=4)
    for loss in (8.0, 7.0, 6.0, 5.5, 5.0):
        assert watch.problem(loss) is None
        watch.add(loss)
    assert recent == [7.0, 6.0, 5.5, 5.0]  # the window, kept in the loop state
    assert watch.problem(17.0) is None  # 3 x the median 5.75 is 17.25
    assert watch.problem(17.5) == ("the training loss spiked to 17.5, 3.0 times the median 5.75 of the last 4 "
                                   "steps (loss_spike_factor 3)")
    assert watch.problem(float("nan")) == "the training loss became nan"
    assert watch.problem(float("inf")) == "the training loss became inf"
    assert LossWatch([5.0], None, 4).problem(1e9) is None  # spike detection off: only non-finite losses stop


def test_the_last_good_checkpoint_is_before_the_weights_that_went_wrong(tmp_path):
    for step, losses in ((2, [7.0, 6.5]), (4, [6.5, 6.0, 5.8]), (6, [6.0, 5.8, 50.0])):
        save_checkpoint(FakeAccelerator(), tmp_path, step, {"recent_losses": losses}, keep_last=5)
    assert last_good_checkpoint(tmp_path, 9, factor=4.0).name == "checkpoint-00000004"  # 6 recorded a spike
    assert last_good_checkpoint(tmp_path, 9, factor=None).name == "checkpoint-00000006"
    assert last_good_checkpoint(tmp_path, 5, factor=4.0).name == "checkpoint-00000002"  # 4 computed step 5's loss
    assert last_good_checkpoint(tmp_path, 3, factor=4.0) is None
