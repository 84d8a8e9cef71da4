"""A run can be repeated: the same input and settings give the same vocabulary, the same shards and the same
weights, bit for bit, on one machine with one thread count; and each setting that is said not to change what a run
computes (``TRAJECTORY_NEUTRAL``) ends, changed alone, in the same weights.

Dropout is on in these runs, so a setting that disturbed torch's random stream (an evaluation or a checkpoint that
drew a random number) would show; the tiny model and corpus of tests/test_pretrain.py, fp32.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hfbert.data import PreparedCorpus
from hfbert.pretrain import PretrainConfig, pretrain
from hfbert.pretrain.config import RESUMABLE_CHANGES, TRAJECTORY_NEUTRAL
from test_pretrain import (  # noqa: F401  (fixtures)
    TINY_MODEL, assert_same_weights, corpus, logged_steps, one_thread, prepared, settings)

DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
STEPS = 6


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` but the build's own log, by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix != ".log"}


def test_prepare_without_a_tokenizer_twice_gives_the_same_folder(corpus, tmp_path):
    """Two `hfbert prepare` processes (other hash seeds), each training its own vocabulary: the same files."""
    folders = []
    for run, seed in (("a", "1"), ("b", "2")):
        folder = tmp_path / run
        done = subprocess.run(
            [sys.executable, "-m", "hfbert.cli", "prepare", "--input", str(corpus), "--output_dir", str(folder),
             "--vocab_size", "400", "--max_seq_length", "64", "--input_layout", "paragraphs",
             "--document_boundary", "chapter", "--eval_fraction", "0.2"],
            capture_output=True, text=True, timeout=240,
            env={**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr[-2000:]
        folders.append(folder)
    left, right = (digests(folder) for folder in folders)
    assert "vocab.txt" in left and any(name.startswith("data/train-") for name in left)
    assert left == right
    manifests = [PreparedCorpus.open(folder).manifest for folder in folders]
    assert manifests[0].tokenizer == manifests[1].tokenizer


def test_a_job_from_raw_text_twice_gives_the_same_model(corpus, tmp_path):
    """`hfbert pretrain` from empty folders (vocabulary, shards, training): the same vocab.txt and weights."""
    runs = []
    for run in ("a", "b"):
        values = settings([], tmp_path / run, max_steps=STEPS, eval_steps=3, save_steps=3, vocab_size=400,
                          input=[str(corpus)], input_layout="paragraphs", document_boundary="chapter",
                          eval_fraction=0.2, model={**TINY_MODEL, **DROPOUT})
        del values["prepared"]
        pretrain(PretrainConfig.from_dict(values))
        runs.append(tmp_path / run)
    assert (runs[0] / "vocab.txt").read_bytes() == (runs[1] / "vocab.txt").read_bytes()
    assert digests(runs[0] / "prepared") == digests(runs[1] / "prepared")
    assert (runs[0] / "model.safetensors").read_bytes() == (runs[1] / "model.safetensors").read_bytes()
    assert logged_steps(runs[0]) == logged_steps(runs[1])


# Each setting of TRAJECTORY_NEUTRAL, and a value other than the reference run's.
CHANGED = {
    "max_time_minutes": 600.0,
    "keep_last": 1,
    "save_steps": 4,
    "eval_steps": 5,
    "logging_steps": 4,
    "fill_mask_text": "It was a [MASK] morning.",
    "progress_bar": True,
    "report_to": [],
    "overwrite_output_dir": True,
    "max_eval_examples": 5,
    "eval_batch_size": 3,
    "loss_spike_factor": None,
    "loss_spike_window": 3,
    "hub_timeout": 7.0,
    "cache_limit": "64MB",
    "prepared_download": True,
    "push_to_hub": "user/neutral",
    "hub_revision": "experiment",
    "evaluate_seeds": [7],
}
# Settings of TRAJECTORY_NEUTRAL whose change is a part of every comparison here (output_dir), or of the resume
# tests in test_pretrain.py and test_recovery.py (a resumed run ends bitwise equal to an uninterrupted one). The
# downstream evaluation fine-tunes copies of the exported folder after it is written (test_evaluate.py).
COVERED_ELSEWHERE = {"output_dir", "resume", "resume_from", "resume_with_changes", "evaluate_suite",
                     "evaluate_data_dir"}


def test_every_neutral_setting_is_tested_and_resumable():
    assert set(CHANGED) | COVERED_ELSEWHERE == TRAJECTORY_NEUTRAL
    assert TRAJECTORY_NEUTRAL <= RESUMABLE_CHANGES


@pytest.fixture(scope="module")
def reference(prepared, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("reference")
    pretrain(PretrainConfig.from_dict(neutral_settings(prepared, output_dir)))
    return output_dir


def neutral_settings(prepared, output_dir, **overrides) -> dict:
    values = dict(max_steps=STEPS, eval_steps=2, save_steps=2, logging_steps=1, model={**TINY_MODEL, **DROPOUT})
    return settings([prepared[64]], output_dir, **{**values, **overrides})


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_a_neutral_setting_changed_alone_ends_in_the_same_weights(name, prepared, reference, tmp_path,
                                                                  monkeypatch):
    value = CHANGED[name]
    if name in ("push_to_hub", "hub_revision"):
        neutral_push(name, value, prepared, reference, tmp_path, monkeypatch)
        return
    output_dir = tmp_path / "changed"
    pretrain(PretrainConfig.from_dict(neutral_settings(prepared, output_dir, **{name: value})))
    assert_same_weights(reference, output_dir)


def neutral_push(name, value, prepared, reference, tmp_path, monkeypatch) -> None:
    """The push settings need a Hub to push to: the local Hub server."""
    from huggingface_hub import constants
    from hub_server import allow_hub_calls, start_hub

    hub, httpd = start_hub()
    try:
        allow_hub_calls(monkeypatch)
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)
        monkeypatch.setenv("HF_TOKEN", hub.WRITE_TOKEN)
        push = {"push_to_hub": value} if name == "push_to_hub" else {"push_to_hub": "user/n", name: value}
        output_dir = tmp_path / "changed"
        pretrain(PretrainConfig.from_dict(neutral_settings(prepared, output_dir, **push)))
        assert ("model", push["push_to_hub"]) in hub.repos
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert_same_weights(reference, output_dir)


def test_the_reference_run_drew_dropout(prepared, reference, tmp_path):
    """What makes the comparisons above worth making: another seed gives other weights."""
    output_dir = tmp_path / "other-seed"
    pretrain(PretrainConfig.from_dict(neutral_settings(prepared, output_dir, seed=43)))
    with pytest.raises(AssertionError, match="differ bitwise"):
        assert_same_weights(reference, output_dir)
    assert json.loads((reference / "metrics.json").read_text())["step"] == STEPS
