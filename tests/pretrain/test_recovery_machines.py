"""Recovery at many machines and on a full disk.

* Two machines without a shared disk (two ``accelerate launch --num_machines 2`` commands on one host, each with its
  own output folder), dropout on: both killed with SIGKILL mid-run, the second machine's folder deleted, resumed --
  the final weights equal an uninterrupted run's bit for bit. Nothing of the checkpoints lives on the second machine.
* A NaN on one of two processes: both stop at that step, the message is printed once, the exit status is non-zero,
  and nothing waits (every launch runs under a time limit).
* A disk that fills while a checkpoint or the export is written (the writers raise what torch and safetensors raise
  on a full disk): one line naming the folder and the space needed, the previous checkpoint loads, no half-written
  model folder, and ``--resume`` once space is free ends bitwise equal to an uninterrupted run; and a real full disk
  (a size-limited tmpfs) said the same way.
* A shard damaged on disk or of the wrong size, and a bad setting in a two-process run: one line, said once; the
  damaged shard stops both processes at the same step, and no process prints a traceback.

The tiny model and corpus of tests/helpers/pretraining.py, fp32 (``mixed_precision no``).
"""

import errno
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors import SafetensorError

import hfbert  # noqa: F401  (registers the Auto classes)
from hfbert.data import PreparedCorpus
from hfbert.pretrain import main, pretrain
from hfbert.pretrain.checkpointing import STATE_FILE, is_complete, list_checkpoints
from hfbert.pretrain.config import PretrainConfig
from hfbert.pretrain.batches import BatchPlan
from hfbert.pretrain.tracking import read_jsonl

from helpers.pretraining import (TINY_MODEL, assert_same_weights, logged_steps, prepare_folders, settings,
                                 write_config)

STEPS = 8
DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
LAUNCH_TIMEOUT = 300  # seconds; a launch that takes longer is a hang


@pytest.fixture(scope="module")
def folder(corpus, tmp_path_factory) -> Path:
    return prepare_folders(corpus, tmp_path_factory.mktemp("machines"), lengths=(64,))[64]


def run_settings(folder: Path, output_dir, **overrides) -> dict:
    """Dropout 0.1, fp32, a checkpoint every 2 steps; 4 rows per process and step."""
    values = dict(model={**TINY_MODEL, **DROPOUT}, batch_size=4, max_steps=STEPS, save_steps=2, eval_steps=STEPS,
                  keep_last=2, max_eval_examples=8)
    return settings([folder], output_dir, **{**values, **overrides})


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def accelerate(*args: str) -> list[str]:
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    return [launcher, "launch", "--mixed_precision", "no", "--dynamo_backend", "no", *args]


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}

# Run as each machine's process: `hfbert pretrain --config FILE`, killed by SIGKILL right after the main process has
# published checkpoint ``sys.argv[2]`` (the other machine is then waiting for it in a collective).
KILL_AFTER = """
    import os, signal, sys, torch
    torch.set_num_threads(1)
    import hfbert.pretrain.checkpointing as checkpointing
    from hfbert.pretrain import main

    def die(point):
        if point == "published" and os.path.isdir(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)

    checkpointing.crash_hook = die
    sys.exit(main(["--config", sys.argv[1]]))
"""


def two_machines(tmp_path: Path, name: str, values: dict, script: Path | None = None, *args: str):
    """Start machine 0 and machine 1 (one process each), each with its own output folder ``name-machine{r}``;
    returns the two Popen objects (each launcher in its own process group)."""
    port, machines = free_port(), []
    for rank in (0, 1):
        config_file = write_config(tmp_path / f"{name}-machine{rank}.json",
                                   {**values, "output_dir": str(tmp_path / f"{name}-machine{rank}")})
        program = [str(script), str(config_file), *args] if script else ["-m", "hfbert.pretrain", "--config",
                                                                          str(config_file)]
        command = accelerate("--multi_gpu", "--num_machines", "2", "--machine_rank", str(rank), "--num_processes",
                             "2", "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), *program)
        machines.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                         env=ENV, start_new_session=True))
    return machines


def finish(machines) -> list[str]:
    errors = []
    for machine in machines:
        _, err = machine.communicate(timeout=LAUNCH_TIMEOUT)
        assert machine.returncode == 0, err[-3000:]
        errors.append(err)
    return errors


@pytest.mark.slow
def test_two_machines_without_a_shared_disk_resume_exactly_after_both_die(folder, tmp_path):
    values = run_settings(folder, "OUT")
    finish(two_machines(tmp_path, "straight", values))
    straight, straight_other = tmp_path / "straight-machine0", tmp_path / "straight-machine1"
    assert json.loads((straight / "metrics.json").read_text())["num_processes"] == 2
    # Only the main machine holds checkpoints: the other removes its copy of accelerate's random states.
    assert not list(straight_other.glob("checkpoint-*")), sorted(p.name for p in straight_other.iterdir())

    script = tmp_path / "kill_after.py"
    script.write_text(textwrap.dedent(KILL_AFTER))
    killed_main = tmp_path / "killed-machine0"
    machines = two_machines(tmp_path, "killed", values, script, str(killed_main / "checkpoint-00000004"))
    machines[0].communicate(timeout=LAUNCH_TIMEOUT)  # its process killed itself after publishing checkpoint 4
    os.killpg(machines[1].pid, signal.SIGKILL)  # and the other machine dies too
    machines[1].communicate(timeout=60)
    assert [s for s, _ in list_checkpoints(killed_main)] == [2, 4]
    assert not (killed_main / "model.safetensors").exists()
    shutil.rmtree(tmp_path / "killed-machine1")  # the second machine's disk is lost

    finish(two_machines(tmp_path, "killed", {**values, "resume": True}))
    assert_same_weights(straight, killed_main)
    assert logged_steps(killed_main) == logged_steps(straight)
    state = json.loads((killed_main / "checkpoint-00000008" / STATE_FILE).read_text())
    assert state["step"] == STEPS and not list((tmp_path / "killed-machine1").glob("checkpoint-*"))


DIVERGE_ON_RANK_1 = """
    import os, sys, torch
    torch.set_num_threads(1)
    import hfbert
    from hfbert.pretrain import loop, main

    rank, at = int(os.environ["RANK"]), int(sys.argv[2])
    forward, calls = hfbert.HfBertForPreTraining.forward, {"train": 0}

    def nan_on_rank_1(self, *args, **kwargs):
        outputs = forward(self, *args, **kwargs)
        if self.training:
            calls["train"] += 1
            if rank == 1 and calls["train"] == at:
                outputs.nsp_loss = outputs.nsp_loss * float("nan")
        return outputs

    pretrain = loop.pretrain

    def watched(*args, **kwargs):  # what each process raised, before main() turns it into the one message
        try:
            return pretrain(*args, **kwargs)
        except loop.TrainingDivergedError as err:
            print(f"rank {rank} stopped at step {err.step}", flush=True)
            raise

    hfbert.HfBertForPreTraining.forward = nan_on_rank_1
    loop.pretrain = watched
    sys.exit(main(["--config", sys.argv[1]]))
"""


@pytest.mark.slow
def test_a_nan_on_one_of_two_processes_stops_both_at_that_step_with_one_message(folder, tmp_path):
    out = tmp_path / "run"
    config_file = write_config(tmp_path / "run.json", run_settings(folder, out))
    script = tmp_path / "diverge.py"
    script.write_text(textwrap.dedent(DIVERGE_ON_RANK_1))
    done = subprocess.run(accelerate("--multi_gpu", "--num_processes", "2", "--num_machines", "1", str(script),
                                     str(config_file), "5"),
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=ENV)
    assert done.returncode != 0
    assert "rank 0 stopped at step 5" in done.stdout and "rank 1 stopped at step 5" in done.stdout, done.stdout
    assert done.stderr.count("the training loss became nan at step 5") == 1, done.stderr[-3000:]
    assert done.stderr.count("hfbert pretrain: the training loss") == 1
    assert "The last good checkpoint is" in done.stderr and "checkpoint-00000002" in done.stderr
    diverged = [r for r in read_jsonl(out / "runs" / "metrics.jsonl") if r.get("event") == "diverged"]
    assert [r["step"] for r in diverged] == [5]
    assert not (out / "model.safetensors").exists()


# ----------------------------------------------------------------------------------------------------------------
# A full disk


@pytest.fixture(scope="module")
def straight(folder, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    pretrain(PretrainConfig.from_dict(run_settings(folder, out)))
    return out


def disk_fills(monkeypatch, what: str, when) -> None:
    """From the first write ``when(path)`` accepts on, ``what`` ("checkpoint": torch.save through a file object,
    as accelerate writes checkpoints; "export": safetensors, as save_pretrained writes weights) fails the way it does
    on a full disk."""
    if what == "checkpoint":
        save = torch.save

        def full(obj, f, *args, **kwargs):
            if when(str(f)):
                Path(f).write_bytes(b"\0" * 100)  # the part that fitted
                raise OSError(errno.ENOSPC, "No space left on device")
            return save(obj, f, *args, **kwargs)

        monkeypatch.setattr(torch, "save", full)
    else:
        def full(tensors, filename, *args, **kwargs):
            Path(filename).write_bytes(b"\0" * 100)
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)


@pytest.mark.slow
def test_a_full_disk_stops_in_one_line_keeps_the_last_checkpoint_and_resumes_exactly(folder, straight, tmp_path,
                                                                                      monkeypatch, capsys):
    out = tmp_path / "run"
    args = ["--config", str(write_config(tmp_path / "run.json", run_settings(folder, out)))]

    with monkeypatch.context() as patch:
        disk_fills(patch, "checkpoint", lambda path: "checkpoint-00000006.tmp" in path)
        assert main(args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("hfbert pretrain: error: could not write the checkpoint of step 6 to ")
    assert f"No space left on device in {out} (a checkpoint of this run takes " in err and " MB are free" in err
    assert f"The latest complete checkpoint is {out / 'checkpoint-00000004'} and was not modified" in err
    assert [s for s, _ in list_checkpoints(out)] == [2, 4] and not list(out.glob("*.tmp"))  # the partial write is gone
    latest = out / "checkpoint-00000004"
    assert is_complete(latest) and torch.load(latest / "pytorch_model.bin", weights_only=True)
    assert torch.load(latest / "optimizer.bin", weights_only=True)["state"]

    # Space freed, but the export does not fit: no model folder that from_pretrained would load.
    with monkeypatch.context() as patch:
        disk_fills(patch, "export", lambda path: True)
        assert main([*args, "--resume"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"hfbert pretrain: error: could not write the exported model to "
                                                   f"{out}: No space left on device"), err
    assert not (out / "config.json").exists() and not (out / "model.safetensors").exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []  # no staging folder left behind
    with pytest.raises((OSError, ValueError), match="config.json"):  # nothing to load, no mix of old and new
        transformers.AutoModelForPreTraining.from_pretrained(out)
    assert [s for s, _ in list_checkpoints(out)] == [6, 8]

    assert main([*args, "--resume"]) == 0  # the export, from the final checkpoint
    capsys.readouterr()
    assert_same_weights(straight, out)
    transformers.AutoModelForPreTraining.from_pretrained(out)


@pytest.fixture(scope="module")
def tmpfs(tmp_path_factory):
    """Mounts a size-limited tmpfs: ``mount(size_kb) -> folder``; skipped where this process may not mount."""
    mounted = []

    def mount(size_kb: int) -> Path:
        point = tmp_path_factory.mktemp("small-disk")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a size-limited tmpfs here: {done.stderr.strip() or done.returncode}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], capture_output=True)


@pytest.mark.slow
def test_a_real_full_disk_stops_in_one_line_and_the_last_checkpoint_loads(folder, tmp_path, tmpfs):
    """Not a simulated error: the output folder is on a 1.6 MB filesystem, two checkpoints fit and the third does
    not (torch's zip writer then fails with its own error, which is recognised as a full disk)."""
    out = tmpfs(1600) / "run"
    config_file = write_config(tmp_path / "run.json", run_settings(folder, out, save_steps=1, keep_last=5,
                                                                   report_to=[]))
    done = subprocess.run([sys.executable, "-m", "hfbert.pretrain", "--config", str(config_file)],
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=ENV)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and done.stderr.count("hfbert pretrain: error:") == 1, done.stderr[-3000:]
    assert last.startswith("hfbert pretrain: error: could not write the checkpoint of step 3 to ")
    assert f"No space left on device in {out}" in last
    latest = out / "checkpoint-00000002"
    assert f"The latest complete checkpoint is {latest} and was not modified" in last
    assert [s for s, _ in list_checkpoints(out)] == [1, 2] and not list(out.glob("*.tmp"))
    assert is_complete(latest) and torch.load(latest / "pytorch_model.bin", weights_only=True)


# ----------------------------------------------------------------------------------------------------------------
# Damaged shards and bad settings: one line, once


@pytest.fixture(scope="module")
def many_shards(corpus, tmp_path_factory) -> Path:
    """The corpus's nine chapters in as many shards; trained with a shuffle window of one row group, the second
    shard is first read several steps into a run."""
    return prepare_folders(corpus, tmp_path_factory.mktemp("many"), lengths=(64,), num_shards=9)[64]


LONG_STEPS = 24  # the runs that read a damaged shard: long enough to reach the second shard


def damaged_copy(source: Path, destination: Path, world: int, batch_size: int, first_step: int) -> tuple[Path, str]:
    """A copy of ``source`` with one byte flipped inside the pages of a shard that no process reads before step
    ``first_step`` (1-based) but one reads by step ``LONG_STEPS``; the file keeps its size. Returns (copy, shard)."""
    shutil.copytree(source, destination)
    corpus = PreparedCorpus.open(destination)
    shards = corpus.manifest.splits["train"].shards
    ends = np.cumsum([shard.rows for shard in shards])
    plan = BatchPlan(corpus.blocks("train"), batch_size, world, 42, 0, window=1)
    first_read = {}
    for micro in range(plan.batches_per_epoch):
        for row in plan.global_rows(micro).tolist():
            first_read.setdefault(int(np.searchsorted(ends, row, side="right")), micro + 1)
    name = next(shards[i].file for i, step in sorted(first_read.items(), key=lambda item: item[1])
                if first_step <= step <= LONG_STEPS)
    data = bytearray((destination / name).read_bytes())
    data[len(data) // 3] ^= 0xFF
    (destination / name).write_bytes(bytes(data))
    return destination, name


def test_a_shard_damaged_on_disk_stops_training_in_one_line_and_the_last_checkpoint_loads(many_shards, tmp_path,
                                                                                        capsys):
    damaged, name = damaged_copy(many_shards, tmp_path / "damaged", 1, 4, first_step=3)
    out = tmp_path / "run"
    # NSP given: the choice from the data would read the damaged shard's labels before the first step
    values = run_settings(damaged, out, save_steps=3, keep_last=10, report_to=[], shuffle_window=1,
                          max_steps=LONG_STEPS, eval_steps=LONG_STEPS, next_sentence_prediction=True)
    assert main(["--config", str(write_config(tmp_path / "run.json", values))]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("hfbert pretrain: error: step ") and f"shard {name} of {damaged}" in err
    assert "is corrupt" in err and "re-download or rebuild it" in err
    steps = [s for s, _ in list_checkpoints(out)]
    assert len(steps) >= 2 and not (out / "model.safetensors").exists()
    latest = out / f"checkpoint-{steps[-1]:08d}"
    assert is_complete(latest) and torch.load(latest / "pytorch_model.bin", weights_only=True)


def test_a_shard_of_the_wrong_size_stops_before_training_in_one_line(many_shards, tmp_path, capsys):
    damaged = shutil.copytree(many_shards, tmp_path / "short")
    shard = next(path for path in sorted((damaged / "data").glob("train-*")) if path.stat().st_size > 1000)
    shard.write_bytes(shard.read_bytes()[:-10])
    values = run_settings(damaged, tmp_path / "run", report_to=[])
    assert main(["--config", str(write_config(tmp_path / "run.json", values))]) == 2  # found before any work
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hfbert pretrain: error: "), err
    assert f"shard data/{shard.name} of {damaged} has " in err and "the manifest says" in err
    assert not (tmp_path / "run" / "checkpoint-00000001").exists()


@pytest.mark.slow
def test_two_processes_say_a_bad_setting_and_a_damaged_shard_once(many_shards, tmp_path):
    bad = subprocess.run(accelerate("--multi_gpu", "--num_processes", "2", "--num_machines", "1", "-m",
                                    "hfbert.pretrain", "--output_dir", str(tmp_path / "bad"), "--batch_size", "0"),
                         capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=ENV)
    assert bad.returncode != 0
    assert bad.stderr.count("hfbert pretrain: error: batch_size must be >= 1, got 0") == 1, bad.stderr[-3000:]

    damaged, name = damaged_copy(many_shards, tmp_path / "damaged", 2, 4, first_step=3)
    config_file = write_config(tmp_path / "run.json", run_settings(damaged, tmp_path / "run", report_to=[],
                                                                   shuffle_window=1, max_steps=LONG_STEPS,
                                                                   eval_steps=LONG_STEPS,
                                                                   next_sentence_prediction=True))
    script = tmp_path / "watched.py"
    script.write_text(textwrap.dedent(WATCH_THE_STOP))
    done = subprocess.run(accelerate("--multi_gpu", "--num_processes", "2", "--num_machines", "1", str(script),
                                     str(config_file)),
                          capture_output=True, text=True, timeout=LAUNCH_TIMEOUT, env=ENV)
    assert done.returncode != 0
    assert done.stderr.count("hfbert pretrain: error:") == 1, done.stderr[-3000:]
    assert done.stderr.count(f"shard {name} of {damaged}") == 1 and "is corrupt" in done.stderr
    stops = dict(re.findall(r"rank (\d) stopped at step (\d+)", done.stdout))
    assert stops.keys() == {"0", "1"} and len(set(stops.values())) == 1, done.stdout  # the same step on both
    assert f"hfbert pretrain: error: step {stops['0']}: shard {name}" in done.stderr, done.stderr[-3000:]
    assert not tracebacks_of_the_processes(done.stderr) and "Traceback" not in done.stdout, done.stderr[-3000:]


def tracebacks_of_the_processes(stderr: str) -> list[str]:
    """The Python tracebacks in a launch's stderr but the launcher's own (``accelerate launch`` reports a process
    that exited non-zero with a traceback of the accelerate command)."""
    blocks = stderr.split("Traceback (most recent call last):")[1:]
    return [block for block in blocks if not re.match(r'\s*File "[^"]*[/\\]accelerate"', block)]


# Run as each process: `hfbert pretrain --config FILE`, printing the step at which the process stopped.
WATCH_THE_STOP = """
    import os, re, sys, torch
    torch.set_num_threads(1)
    from hfbert.pretrain import loop, main

    rank, pretrain = int(os.environ["RANK"]), loop.pretrain

    def watched(*args, **kwargs):  # what each process raised, before main() turns it into the one message
        try:
            return pretrain(*args, **kwargs)
        except (loop.StepDataError, loop.StoppedByAnotherProcess) as err:
            step = re.search(r"step (\\d+)", str(err)).group(1)
            print(f"rank {rank} stopped at step {step}", flush=True)
            raise

    loop.pretrain = watched
    sys.exit(main(["--config", sys.argv[1]]))
"""
