"""hfbert pretrain across micro-batches, processes and machines: the loss of an optimizer step is normalised over
its whole global batch, so how the batch is split (gradient accumulation, processes) does not change training;
processes read prepared folders and build nothing; machines without a shared disk agree on the data.

The multi-process runs start real ``accelerate launch`` process groups on the CPU (gloo), with the tiny model of
tests/helpers/pretraining.py.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from hfbert.data import DataCollatorForBertPretraining, PreparedCorpus
from hfbert.pretrain import PretrainConfig, pretrain
from hfbert.pretrain.checkpointing import latest_checkpoint
from hfbert.pretrain.batches import BatchPlan, training_batch

from helpers.pretraining import TINY_MODEL, launch, logged_steps, prepare_folders, settings, write_config

STEPS = 20
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def losses(output_dir: Path) -> dict[int, tuple[float, float]]:
    return {r["step"]: (r["mlm_loss"], r.get("nsp_loss")) for r in logged_steps(output_dir) if "loss" in r}


@pytest.fixture(scope="module")
def folder(corpus, tmp_path_factory) -> Path:
    """Dynamic masks (each row's mask follows from the row and the seed, however a batch is split), many short
    rows (uneven mask counts)."""
    return prepare_folders(corpus, tmp_path_factory.mktemp("dynamic"), lengths=(64,), dupe_factor=2,
                           short_seq_prob=0.5)[64]


@pytest.fixture(scope="module")
def split_settings(folder):
    """No dropout, fp32, 20 steps."""
    def make(output_dir, **overrides):
        values = settings([folder], output_dir, max_steps=STEPS, model={**TINY_MODEL, **NO_DROPOUT},
                          eval_steps=STEPS, save_steps=STEPS, max_eval_examples=8, logging_steps=1)
        values.update(overrides)
        return values
    return make


def test_rows_of_a_step_have_different_masked_counts(folder):
    """The premise of the comparisons below: the micro-batches of a step hold different numbers of masked tokens,
    so a mean of per-micro-batch means would differ from the mean over the step's tokens."""
    corpus = PreparedCorpus.open(folder)
    collator = DataCollatorForBertPretraining(corpus.load_tokenizer())
    plan = BatchPlan(corpus.blocks("train"), 2, 1, 42, 0)  # the finest split below: micro-batches of two rows
    assert plan.batches_per_epoch >= 4 * STEPS  # no epoch boundary inside the comparison
    counts = [training_batch(corpus, collator, plan, micro, 0)[1].supervised for micro in range(4 * STEPS)]
    uneven = [len(set(counts[4 * s : 4 * s + 4])) > 1 for s in range(STEPS)]
    assert sum(uneven) >= STEPS // 2, counts


@pytest.mark.slow
def test_accumulation_and_processes_match_one_big_batch(split_settings, tmp_path):
    whole = tmp_path / "1x8"
    pretrain(PretrainConfig.from_dict(split_settings(whole, batch_size=8)))
    accumulated = tmp_path / "2x4"
    pretrain(PretrainConfig.from_dict(split_settings(accumulated, batch_size=4, gradient_accumulation_steps=2)))
    # Two processes of two micro-batches of two rows: the same 8 rows per step, split four ways.
    processes = tmp_path / "2procs"
    config_file = write_config(tmp_path / "ddp.json", split_settings(processes, batch_size=2,
                                                                      gradient_accumulation_steps=2))
    done = launch("--multi_gpu", "--num_processes", "2", "--num_machines", "1", "-m", "hfbert.pretrain",
                  "--config", str(config_file))
    assert done.returncode == 0, done.stderr[-3000:]
    # Neither process built data or trained a tokenizer: they read the prepared folder.
    assert "Preparing shards" not in done.stderr and not (processes / "prepared").exists()

    reference = losses(whole)
    assert sorted(reference) == list(range(1, STEPS + 1))
    for name, folder in (("accumulation 2 x 4", accumulated), ("2 processes x 2 x 2", processes)):
        other = losses(folder)
        assert sorted(other) == sorted(reference), name
        for step in reference:
            assert other[step] == pytest.approx(reference[step], rel=1e-4), f"{name}, step {step}"
        left, right = load_file(whole / "model.safetensors"), load_file(folder / "model.safetensors")
        for key in left:
            torch.testing.assert_close(left[key], right[key], rtol=1e-4, atol=1e-5, msg=f"{name}: {key}")
    assert reference[STEPS][0] < reference[1][0]  # and it trained

    metrics = json.loads((processes / "metrics.json").read_text())
    assert metrics["num_processes"] == 2 and metrics["step"] == STEPS
    checkpoint = latest_checkpoint(processes)
    assert {"random_states_0.pkl", "random_states_1.pkl", "optimizer.bin"} <= {p.name for p in checkpoint.iterdir()}
    model = transformers.AutoModelForPreTraining.from_pretrained(processes)
    state = torch.load(checkpoint / "pytorch_model.bin", weights_only=True)
    model.load_state_dict(state)  # strict: the checkpoint holds every parameter
    exported = load_file(processes / "model.safetensors")  # the final checkpoint is the exported model
    assert all(torch.equal(state[name], exported[name]) for name in exported)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.slow
def test_two_machines_without_a_shared_disk_prepare_the_same_data(corpus, tmp_path):
    """Two `accelerate launch --num_machines 2` commands on one host, each with its own output folder: the main
    process trains the vocabulary and sends it; the other machine prepares the same shards with it; only the
    main process writes the run's outputs."""
    config = settings([], "OUT", max_steps=4, eval_steps=4, save_steps=4, batch_size=4, eval_fraction=0.2,
                      vocab_size=400)
    del config["prepared"]
    config.update(input=[str(corpus)], input_layout="paragraphs", document_boundary="chapter")
    port, commands = free_port(), []
    for rank in (0, 1):
        config["output_dir"] = str(tmp_path / f"machine{rank}")
        config_file = write_config(tmp_path / f"machine{rank}.json", config)
        commands.append(["--multi_gpu", "--num_machines", "2", "--machine_rank", str(rank), "--num_processes", "2",
                         "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), "-m",
                         "hfbert.pretrain", "--config", str(config_file)])
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    machines = [subprocess.Popen([launcher, "launch", "--mixed_precision", "no", "--dynamo_backend", "no", *args],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for args in commands]
    results = [machine.communicate(timeout=300) for machine in machines]
    for machine, (_, err) in zip(machines, results):
        assert machine.returncode == 0, err[-3000:]
    main_dir, other_dir = tmp_path / "machine0", tmp_path / "machine1"
    built = [PreparedCorpus.open(folder / "prepared" / "length-64") for folder in (main_dir, other_dir)]
    assert built[0].manifest.tokenizer == built[1].manifest.tokenizer  # one vocabulary
    assert built[0].manifest.splits == built[1].manifest.splits  # byte-identical shards (sha256 each)
    metrics = json.loads((main_dir / "metrics.json").read_text())
    assert metrics["num_processes"] == 2 and metrics["step"] == 4
    assert not any((other_dir / name).exists() for name in ("model.safetensors", "metrics.json", "runs"))
