"""hfbert pretrain across micro-batches, processes and machines: the loss of an optimizer step is normalised over
its whole global batch, so how the batch is split (gradient accumulation, processes) does not change training.

The multi-process runs start real ``accelerate launch`` process groups on the CPU (gloo), with the tiny model of
tests/test_pretrain.py.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from hfbert.pretrain import PretrainConfig, pretrain
from hfbert.pretrain.checkpointing import latest_checkpoint
from hfbert.pretrain.data import BatchPlan, load_documents, load_tokenizer, prepare_data, split_documents
from test_pretrain import TINY_MODEL, corpus, logged_steps, one_thread, settings, tokenizer_dir, write_config  # noqa: F401

STEPS = 20
NO_DROPOUT = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


def launch(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``accelerate launch ARGS`` on CPU processes (--multi_gpu is what makes accelerate start one per rank)."""
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([launcher, "launch", "--mixed_precision", "no", "--dynamo_backend", "no", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def losses(output_dir: Path) -> dict[int, tuple[float, float]]:
    return {r["step"]: (r["mlm_loss"], r["nsp_loss"]) for r in logged_steps(output_dir) if "loss" in r}


@pytest.fixture(scope="module")
def split_settings(corpus, tokenizer_dir):
    """Static masks (the same masked positions however the batch is split), no dropout, fp32, 20 steps."""
    def make(output_dir, **overrides):
        values = settings(corpus, tokenizer_dir, output_dir, masking="static", dupe_factor=2, short_seq_prob=0.5,
                          max_steps=STEPS,
                          model={**TINY_MODEL, **NO_DROPOUT}, eval_steps=STEPS,
                          save_steps=STEPS, max_eval_examples=8, logging_steps=1)
        values.update(overrides)
        return values
    return make


def test_rows_of_a_step_have_different_masked_counts(split_settings, tokenizer_dir):
    """The premise of the comparisons below: the micro-batches of a step hold different numbers of masked tokens,
    so a mean of per-micro-batch means would differ from the mean over the step's tokens."""
    config = PretrainConfig.from_dict(split_settings("unused"))
    documents, _ = load_documents(config)
    train, held_out = split_documents(documents, config.eval_fraction, config.seed)
    data = prepare_data(config, load_tokenizer(tokenizer_dir), train, held_out, [config.max_seq_length], "test")
    dataset = data.train[config.max_seq_length]
    plan = BatchPlan(len(dataset), 2, 1, config.seed, 0)  # the finest split below: micro-batches of two rows
    assert plan.batches_per_epoch >= 4 * STEPS  # no epoch boundary inside the comparison
    counts = [sum(len(dataset[row]["masked_lm_positions"]) for row in plan.rows(micro, 0))
              for micro in range(4 * STEPS)]
    uneven = [len(set(counts[4 * s : 4 * s + 4])) > 1 for s in range(STEPS)]
    assert sum(uneven) >= STEPS // 2, counts


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
