"""Recovering from failures: a crash at any point of save-and-prune, and a run that diverges.

Checkpointing is driven first with a stand-in for accelerate (it writes and checks small files named as
``save_state`` names them), so every crash point runs in milliseconds; the crash is injected through
``checkpointing.crash_hook``, not by timing. Then real tiny runs (hidden 32, 2 layers, the first chapters of the
shipped Austen corpus): a SIGKILL in the middle of pruning, and a run forced to diverge that recovers through the
documented path.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from safetensors.torch import load_file

import hfbert.optim
import hfbert.pretrain.plan as plan
from hfbert.hub import HubPushError
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
from hfbert.pretrain.config import ConfigError, PretrainConfig, command_parser
from hfbert.pretrain.recovery import RECOVERY_CHANGES, LossWatch, last_good_checkpoint, plan_start
from hfbert.pretrain.tracking import read_jsonl

from helpers.hub_server import allow_hub_calls
from helpers.pretraining import prepare_folders, settings, write_config

# ----------------------------------------------------------------------------------------------------------------
# Checkpoints with a stand-in accelerator

FILES = ("pytorch_model.bin", "optimizer.bin", "custom_checkpoint_0.pkl", "random_states_0.pkl")


def content(name: str, step: int) -> bytes:
    return f"{name} of step {step}\n".encode() * (50 + step)


class FakeAccelerator:
    """The part of accelerate that checkpointing uses: save_state writes the files of a step, load_state checks
    that every one holds what the step wrote."""

    is_main_process = True
    num_processes = 1

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
            monkeypatch.setattr(checkpointing, "crash_hook", lambda _: None)
            raise Crash(point)

    monkeypatch.setattr(checkpointing, "crash_hook", hook)
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


# ----------------------------------------------------------------------------------------------------------------
# Real runs

# A checkpoint every step, one evaluation at the end, a fixed learning rate (the suggested recovery rates below are
# quarters of it).
RECOVERY = {"eval_steps": 8, "save_steps": 1, "learning_rate": 5e-4}


@pytest.fixture(scope="module")
def folder(corpus, tmp_path_factory) -> Path:
    """The nine chapters prepared once at length 64."""
    return prepare_folders(corpus, tmp_path_factory.mktemp("recovery"), lengths=(64,))[64]


def run_settings(folder: Path, output_dir: Path, **overrides) -> dict:
    return settings([folder], output_dir, **{**RECOVERY, **overrides})


def break_the_schedule(monkeypatch, from_step: int, factor: float = 4e4) -> None:
    """From optimizer step ``from_step`` on, the learning rate is ``factor`` times what the schedule says: the
    update of that step is enormous, so the loss of the next one goes wrong. A lower learning_rate fixes it."""
    multiplier = hfbert.optim.LinearWarmupDecay.__call__

    def broken(self, step: int) -> float:  # ``step`` optimizer steps done: the rate of step ``step + 1``
        return multiplier(self, step) * (factor if step + 1 >= from_step else 1.0)

    monkeypatch.setattr(hfbert.optim.LinearWarmupDecay, "__call__", broken)


def printed_command(message: str) -> list[str]:
    (line,) = [line for line in message.splitlines() if line.strip().startswith("hfbert pretrain ")]
    words = shlex.split(line)
    assert words[:2] == ["hfbert", "pretrain"]
    return words[2:]


@pytest.mark.slow
def test_a_diverging_run_recovers_with_a_lower_learning_rate_through_the_documented_path(folder, tmp_path,
                                                                                       monkeypatch, capsys):
    out = tmp_path / "run"
    break_the_schedule(monkeypatch, from_step=5)  # step 5's update blows the weights up: step 6's loss spikes
    assert main(["--config", str(write_config(tmp_path / "run.json", run_settings(folder, out)))]) == 1
    message = capsys.readouterr().err
    assert "at step 6; stopped before updating the weights" in message
    # checkpoint 5 holds the weights that produced step 6's loss: the last good one is 4
    assert f"The last good checkpoint is {out / 'checkpoint-00000004'}." in message
    command = printed_command(message)
    assert command == ["--config", str(out / "pretrain_config.json"), "--resume_from", "checkpoint-00000004",
                       "--resume_with_changes", "learning_rate", "--learning_rate", "0.000125"]
    assert [s for s, _ in list_checkpoints(out)] == [3, 4, 5] and not (out / "model.safetensors").exists()

    # A changed learning rate without the flag is refused, naming the flag.
    assert main(["--config", str(out / "pretrain_config.json"), "--resume", "--learning_rate", "1e-6"]) == 2
    assert ("learning_rate (0.0005 -> 1e-06); to resume with it changed, add --resume_with_changes learning_rate"
            in capsys.readouterr().err)

    # The printed command works; a quarter of the rate is not low enough for this schedule, and says so again.
    assert main(command) == 1
    again = capsys.readouterr().err
    assert f"The last good checkpoint is {out / 'checkpoint-00000004'}." in again and "at step 6" in again
    # A rate low enough recovers: the run finishes from checkpoint 4.
    assert main([*command[:-1], "5e-08"]) == 0
    capsys.readouterr()

    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 8 and (out / "model.safetensors").is_file()
    change = {"learning_rate": {"from": 0.0005, "to": 5e-08}}
    history = read_state(out / "checkpoint-00000008")["history"]
    assert [{k: v for k, v in entry.items() if k != "diverged"} for entry in history] == [
        {"step": 4, "checkpoint": "checkpoint-00000004", "changed": change}]
    assert history[0]["diverged"]["step"] == 6 and history[0]["diverged"]["reason"].startswith("the training loss")
    assert [s for s, _ in list_checkpoints(out)] == [6, 7, 8]  # the abandoned trajectory's 5 is gone
    records = read_jsonl(out / "runs" / "metrics.jsonl")
    events = [r for r in records if "event" in r]
    assert [(r["step"], r["event"], r["changed"]) for r in events] == [(4, "resumed", change)]  # one, this one
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 9))
    rates = {r["step"]: r["learning_rate"] for r in records if "learning_rate" in r}
    def schedule(done: int) -> float:  # one warmup step, linear decay to 0 at step 8 (LinearWarmupDecay(1, 8))
        return (8 - done) / 7

    assert rates[3] == pytest.approx(5e-4 * schedule(3))  # logged after step 3: the rate of step 4
    assert rates[6] == pytest.approx(5e-8 * 4e4 * schedule(6))  # the new peak through the same broken schedule
    assert json.loads((out / "pretrain_config.json").read_text())["learning_rate"] == 5e-4  # as the run started

    # Resuming the recovered run again compares with its settings as of the checkpoint, not as it started.
    started = json.loads((out / "pretrain_config.json").read_text())
    with pytest.raises(ConfigError, match=r"as of checkpoint-00000008: learning_rate \(5e-08 -> 0\.0005\)"):
        plan_start(PretrainConfig.from_dict({**started, "resume": True}), out / "pretrain_config.json")
    plan_start(PretrainConfig.from_dict({**started, "resume": True, "learning_rate": 5e-8}),
               out / "pretrain_config.json")
    with pytest.raises(ConfigError, match="resume_with_changes: batch_size cannot change on resume"):
        plan_start(PretrainConfig.from_dict({**started, "resume": True, "resume_with_changes": ["batch_size"]}),
                   out / "pretrain_config.json")
    with pytest.raises(ConfigError, match=r"resume_from: there is no .*checkpoint-00000002 \(complete checkpoints: "
                                          r"checkpoint-00000006, checkpoint-00000007, checkpoint-00000008\)"):
        plan_start(PretrainConfig.from_dict({**started, "resume_from": "checkpoint-00000002"}),
                   out / "pretrain_config.json")
    assert RECOVERY_CHANGES >= {"learning_rate", "warmup_ratio", "mixed_precision", "max_grad_norm"}


def test_a_divergence_before_any_good_checkpoint_says_to_start_over(folder, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    break_the_schedule(monkeypatch, from_step=2)  # step 3's loss goes wrong; checkpoint 2 holds its weights
    config = PretrainConfig.from_dict(run_settings(folder, out, save_steps=2))
    with pytest.raises(TrainingDivergedError) as caught:
        pretrain(config)
    message = str(caught.value)
    assert "at step 3; stopped before updating the weights. No checkpoint from before the loss went wrong is left " \
           "(checkpoint-00000002: the weights that produced it)" in message
    assert "--resume" not in message and "last good checkpoint" not in message
    command = printed_command(message)
    assert command == ["--config", str(out / "pretrain_config.json"), "--overwrite_output_dir", "true",
                       "--learning_rate", "0.000125"]
    plan.preflight(command_parser().parse_values(command))  # the command is accepted as it stands
    diverged = [r for r in read_jsonl(out / "runs" / "metrics.jsonl") if r.get("event") == "diverged"]
    assert [r["step"] for r in diverged] == [3]


def test_the_loss_window_is_resumed_exactly(folder, tmp_path):
    """A resumed run watches the same window as an uninterrupted one (it is in the checkpoint)."""
    out = tmp_path / "run"
    pretrain(PretrainConfig.from_dict(run_settings(folder, out, max_steps=4, save_steps=2, loss_spike_window=3)))
    two, four = (read_state(out / f"checkpoint-{s:08d}")["recent_losses"] for s in (2, 4))
    losses = [r["loss"] for r in read_jsonl(out / "runs" / "metrics.jsonl") if "loss" in r]
    assert two == pytest.approx(losses[:2]) and four == pytest.approx(losses[1:4])  # logged every step


KILL_WHILE_PRUNING = """
    import os, signal, sys, torch
    torch.set_num_threads(1)
    import hfbert.pretrain.checkpointing as checkpointing
    from hfbert.pretrain import main

    def die(point):
        if point == sys.argv[2] and os.path.isdir(os.path.join(sys.argv[3], "checkpoint-00000006")):
            os.kill(os.getpid(), signal.SIGKILL)

    checkpointing.crash_hook = die
    sys.exit(main(["--config", sys.argv[1]]))
"""


@pytest.fixture(scope="module")
def straight(folder, tmp_path_factory) -> Path:
    """An uninterrupted run of the settings the kill tests use."""
    out = tmp_path_factory.mktemp("straight")
    pretrain(PretrainConfig.from_dict(run_settings(folder, out, save_steps=2, keep_last=2)))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("point", ["published", "deleting"])
def test_sigkill_during_save_and_prune_then_resume_keeps_keep_last_and_is_exact(folder, straight, tmp_path, point):
    out = tmp_path / "killed"
    config_file = write_config(tmp_path / "run.json", run_settings(folder, out, save_steps=2, keep_last=2))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(KILL_WHILE_PRUNING), str(config_file), point,
                             str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    # killed while checkpoint 6 was being saved: 2, 4, 6 complete after "published"; 2 half-deleted after "deleting"
    assert [s for s, _ in list_checkpoints(out)] == ([2, 4, 6] if point == "published" else [4, 6])
    assert (out / "checkpoint-00000002.deleting").is_dir() == (point == "deleting")

    pretrain(PretrainConfig.from_dict(run_settings(folder, out, save_steps=2, keep_last=2, resume=True)))
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-00000006", "checkpoint-00000008"]
    left, right = load_file(straight / "model.safetensors"), load_file(out / "model.safetensors")
    assert all(torch.equal(left[name], right[name]) for name in left)


@pytest.mark.slow
def test_pretrain_push_to_a_silent_hub_fails_within_the_timeout(folder, tmp_path, monkeypatch, silent_server):
    allow_hub_calls(monkeypatch)
    monkeypatch.setattr(constants, "ENDPOINT", silent_server.url)
    monkeypatch.setenv("HF_TOKEN", "hf_write_token")
    out = tmp_path / "run"
    config = PretrainConfig.from_dict(run_settings(folder, out, max_steps=2, save_steps=2, push_to_hub="user/tiny",
                                               hub_timeout=1.0))
    with pytest.raises(HubPushError, match=rf"the Hub at {re.escape(silent_server.url)} did not answer within 1 s "
                                           r"while pushing user/tiny .*Nothing was changed in"):
        started = time.monotonic()
        pretrain(config)
    assert time.monotonic() - started < 60  # training, export, and one second of waiting for the Hub
    assert (out / "model.safetensors").is_file() and (out / "checkpoint-00000002").is_dir()
