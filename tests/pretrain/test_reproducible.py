"""A run can be repeated: the same input and settings give the same vocabulary, the same shards and the same
weights, bit for bit, on one machine with one thread count; and each setting that is said not to change what a run
computes (``TRAJECTORY_NEUTRAL``) ends, changed alone, in the same weights.

Dropout is on in these runs, so a setting that disturbed torch's random stream (an evaluation or a checkpoint that
drew a random number) would show; the tiny model and corpus of tests/helpers/pretraining.py, fp32.
"""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hfbert.data import PreparedCorpus
from hfbert.data.remote import parse_size
from hfbert.pretrain import PretrainConfig, pretrain
from hfbert.pretrain.config import RESUMABLE_CHANGES, TRAJECTORY_NEUTRAL

from helpers.pretraining import TINY_MODEL, assert_same_weights, logged_steps, settings

DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
STEPS = 6


def digests(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` but the build's own log, by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.suffix != ".log"}


@pytest.mark.slow
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


@pytest.mark.slow
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
    "cache_limit": "16KB",
    "prepared_download": True,
    "push_to_hub": "user/neutral",
    "hub_revision": "experiment",
}
# The settings that act only on a Hub: the push's, run with a push (to the local Hub server); the remote corpus's
# (hub_timeout bounds both), run from the reference's prepared folder pushed to that server as a dataset repo.
ON_THE_HUB = {"push": {"push_to_hub", "hub_revision", "hub_timeout"},
              "remote-corpus": {"cache_limit", "prepared_download", "hub_timeout"}}
NEUTRAL_CASES = [(name, where) for name in sorted(CHANGED)
                 for where in [w for w, names in ON_THE_HUB.items() if name in names] or [None]]
# Settings of TRAJECTORY_NEUTRAL whose change is a part of every comparison here (output_dir), or of the resume
# tests in test_pretrain.py and test_recovery.py (a resumed run ends bitwise equal to an uninterrupted one). The
# downstream evaluation (its suite, data and fine-tuning seeds) fine-tunes copies of the model and ends in the weights
# of the same run without it (test_evaluate.py, test_pretrain_with_a_suite_ends_with_its_scores_in_the_card_and_the_
# same_weights).
COVERED_ELSEWHERE = {"output_dir", "resume", "resume_from", "resume_with_changes", "evaluate_suite",
                     "evaluate_data_dir", "evaluate_seeds", "evaluate_suite_steps"}


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


@pytest.mark.slow
@pytest.mark.parametrize("name, where", NEUTRAL_CASES, ids=[f"{n}-{w}" if w else n for n, w in NEUTRAL_CASES])
def test_a_neutral_setting_changed_alone_ends_in_the_same_weights(name, where, prepared, reference, tmp_path,
                                                                  monkeypatch):
    output_dir = tmp_path / "changed"
    values = neutral_settings(prepared, output_dir, **{name: CHANGED[name]})
    if where is None:
        pretrain(PretrainConfig.from_dict(values))
    else:
        on_the_local_hub(where, values, prepared, tmp_path / "cache", monkeypatch)
    if where == "remote-corpus":  # the setting acted: the cache kept within its limit, or the corpus copied whole
        held = sum(f.stat().st_size for f in (tmp_path / "cache" / "ranges").rglob("*") if f.is_file())
        assert name != "cache_limit" or 0 < held <= parse_size(CHANGED[name]), held
        assert (tmp_path / "cache" / "downloads").is_dir() == (name == "prepared_download")
    assert_same_weights(reference, output_dir)


def on_the_local_hub(where: str, values: dict, prepared, cache: Path, monkeypatch) -> None:
    """Run ``values`` where its setting acts, on the local Hub server: with a push, or from a Hub dataset repo that
    holds the reference's prepared folder (read through ``cache``)."""
    from huggingface_hub import constants
    from helpers.hub_server import allow_hub_calls, start_hub

    from hfbert.data import push_prepared

    hub, httpd = start_hub()
    try:
        allow_hub_calls(monkeypatch)
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # what HF_ENDPOINT sets when read at import
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                            hub.url + "/{repo_id}/resolve/{revision}/{filename}")  # hf_hub_url's, made from it
        monkeypatch.setenv("HF_TOKEN", hub.WRITE_TOKEN)
        if where == "push":
            values.setdefault("push_to_hub", "user/n")
        else:
            monkeypatch.setenv("HFBERT_CACHE", str(cache))
            push_prepared(prepared[64], "user/neutral-64", endpoint=hub.url)
            values["prepared"] = ["user/neutral-64"]
        pretrain(PretrainConfig.from_dict(values))
        if where == "push":
            assert ("model", values["push_to_hub"]) in hub.repos
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.slow
def test_the_reference_run_drew_dropout(prepared, reference, tmp_path):
    """What makes the comparisons above worth making: another seed gives other weights."""
    output_dir = tmp_path / "other-seed"
    pretrain(PretrainConfig.from_dict(neutral_settings(prepared, output_dir, seed=43)))
    with pytest.raises(AssertionError, match="differ bitwise"):
        assert_same_weights(reference, output_dir)
    assert json.loads((reference / "metrics.json").read_text())["step"] == STEPS
