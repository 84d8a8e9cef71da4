"""hfbert pretrain --init_from: continued pretraining from a Google folder, a transformers folder of another head and
a Hub repository; the announcement of fresh and dropped weights; settings that contradict the checkpoint refused in
one line; a corpus prepared with another vocabulary refused naming both; a SIGKILLed run resumed bitwise with the
checkpoint gone; the card's base_model through a local Hub server.

The pretrained model is the committed Google fixture (hidden 32, 2 layers, 101-token vocabulary, 64 positions).
"""

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import transformers
from huggingface_hub import HfApi, constants

from hfbert.data import prepare_corpus
from hfbert.model_source import locate, source_tokenizer
from hfbert.pretrain import main, pretrain
from hfbert.pretrain.checkpointing import list_checkpoints
from hfbert.pretrain.config import PretrainConfig
from hfbert.tf_checkpoint import read_checkpoint

from helpers.hub_server import allow_hub_calls
from helpers.pretraining import (GOOGLE, KILL_AFTER_CHECKPOINT, FirstWeights, argv, assert_same_weights,
                                 init_from_settings, run_script)

@pytest.mark.slow
def test_a_google_folder_is_continued_from_its_own_weights_with_a_fresh_optimizer(corpus, tmp_path, capsys):
    first = FirstWeights()
    config = PretrainConfig.from_dict(init_from_settings(corpus, tmp_path / "run", model={"hidden_dropout_prob": 0.0}))
    assert config.preset is None and config.learning_rate == 1e-4  # the size is the checkpoint's; a smaller step
    result = pretrain(config, callbacks=[first])
    out = capsys.readouterr().out
    assert f"init_from {GOOGLE} (a Google BERT checkpoint): 46 tensors into HfBertForPreTraining; fresh: none; " \
           "skipped 93 optimizer/step variables" in out
    assert "the optimizer and the learning-rate schedule start fresh (learning_rate 0.0001" in out
    # training started from exactly Google's variables (the kernels transposed)
    google = read_checkpoint(GOOGLE / "bert_model.ckpt", ["bert/encoder/layer_1/intermediate/dense/kernel",
                                                          "cls/predictions/output_bias"])
    assert torch.equal(first.state["bert.encoder.layer.1.intermediate.dense.weight"],
                       torch.from_numpy(google["bert/encoder/layer_1/intermediate/dense/kernel"].T.copy()))
    assert torch.equal(first.state["cls.predictions.bias"], torch.from_numpy(google["cls/predictions/output_bias"]))
    assert result.metrics["step"] == 6
    record = json.loads((tmp_path / "run" / "init_from.json").read_text())
    assert record["format"] == "google" and record["loaded"]["tensors"] == 46 and record["loaded"]["fresh"] == []
    assert record["config"]["hidden_dropout_prob"] == 0.0 and record["config"]["hidden_act"] == "gelu_tanh"
    exported = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "run")
    assert exported.config.vocab_size == 101 and exported.config.hidden_size == 32
    assert transformers.AutoTokenizer.from_pretrained(tmp_path / "run").convert_tokens_to_ids("[MASK]") == 8
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"A BERT continued from `{GOOGLE}`" in card and "base_model" not in card  # a local path is no Hub id


@pytest.mark.slow
def test_a_transformers_folder_of_another_head_gets_fresh_heads_and_drops_its_own(corpus, tmp_path, capsys):
    folder = tmp_path / "bert-cls"
    bert = transformers.BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64, num_labels=3)
    transformers.BertForSequenceClassification(bert).save_pretrained(folder)
    source_tokenizer(locate(GOOGLE))[0].save_pretrained(folder)
    values = init_from_settings(corpus, tmp_path / "run", init_from=str(folder), max_steps=2, eval_steps=2)
    assert main(argv(values)) == 0
    out = capsys.readouterr().out
    announced = [line for line in out.splitlines() if line.startswith("init_from")]
    assert "fresh: cls.predictions.bias, cls.predictions.transform.LayerNorm.bias" in announced[0]
    assert "cls.seq_relationship.weight" in announced[0] and "(a transformers BERT folder)" in announced[0]
    assert announced[1] == ("init_from: 2 weights of the checkpoint are not used by HfBertForPreTraining and are "
                            "dropped: classifier.bias, classifier.weight")


@pytest.mark.parametrize("extra, said", [
    ({"preset": "tiny"}, "--preset tiny and --init_from"),
    ({"model": {"hidden_size": 64}}, "--model sets hidden_size, which --init_from"),
    ({"tokenizer": "tok"}, "tokenizer folder not found: tok"),
    ({"init_from": None, "init_revision": "v1", "preset": "tiny"}, "init_revision names a revision of --init_from"),
    ({"max_seq_length": 128}, "max_seq_length 128 exceeds the 64 positions of --init_from"),
    ({"init_from": "./no/such/folder"}, "no such folder, and not a Hub repository id"),
    ({"init_from": "EMPTY"}, "neither a model folder"),
    ({"init_from": "TRUNCATED"}, "runcated checkpoint data"),
])
def test_settings_that_contradict_the_checkpoint_stop_in_one_line(corpus, tmp_path, capsys, extra, said):
    if extra.get("init_from") == "EMPTY":
        (tmp_path / "empty").mkdir()
        extra = {"init_from": str(tmp_path / "empty")}
    if extra.get("init_from") == "TRUNCATED":
        shutil.copytree(GOOGLE, tmp_path / "truncated")
        data = tmp_path / "truncated" / "bert_model.ckpt.data-00000-of-00001"
        data.write_bytes(data.read_bytes()[:1000])
        extra = {"init_from": str(tmp_path / "truncated")}
    values = {k: v for k, v in {**init_from_settings(corpus, tmp_path / "run"), **extra}.items() if v is not None}
    assert main(argv(values)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hfbert pretrain: error: ") and said in err, err
    assert not (tmp_path / "run" / "pretrain_config.json").exists()


@pytest.mark.slow
def test_a_corpus_prepared_with_another_vocabulary_is_refused_naming_both(corpus, tmp_path, capsys):
    other = prepare_corpus([str(corpus)], tmp_path / "other", vocab_size=101, max_seq_length=32,
                           input_layout="paragraphs", document_boundary="chapter", masking="dynamic", eval_fraction=0.2)
    values = {k: v for k, v in init_from_settings(corpus, tmp_path / "run", prepared=[str(other)]).items()
              if k not in ("input", "input_layout", "document_boundary")}
    assert main(argv(values)) == 2
    err = capsys.readouterr().err.strip()
    assert f"the corpus in {other}" in err and f"--init_from {GOOGLE}" in err and "different vocabularies" in err
    # the same corpus prepared with the checkpoint's tokenizer (hfbert prepare --tokenizer GOOGLE_DIR) trains
    same = prepare_corpus([str(corpus)], tmp_path / "same", tokenizer=str(GOOGLE), max_seq_length=32,
                          input_layout="paragraphs", document_boundary="chapter", masking="dynamic", eval_fraction=0.2)
    values["prepared"] = [str(same)]
    assert main(argv({**values, "max_steps": 1, "eval_steps": 1, "save_steps": 1})) == 0


@pytest.mark.slow
def test_sigkill_then_resume_is_bitwise_identical_with_the_checkpoint_gone(corpus, tmp_path):
    source = tmp_path / "google"
    shutil.copytree(GOOGLE, source)
    straight = tmp_path / "straight"
    pretrain(PretrainConfig.from_dict(init_from_settings(corpus, straight, init_from=str(source))))
    killed_dir = tmp_path / "killed"
    config_file = tmp_path / "run.json"
    config_file.write_text(json.dumps(init_from_settings(corpus, killed_dir, init_from=str(source))), encoding="utf-8")
    killed = run_script(KILL_AFTER_CHECKPOINT, config_file, "checkpoint-00000004")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [step for step, _ in list_checkpoints(killed_dir)] == [2, 4]
    shutil.move(source, tmp_path / "gone")  # the pretrained model is no longer reachable
    resumed_settings = init_from_settings(corpus, killed_dir, init_from=str(source), resume=True)
    resumed = pretrain(PretrainConfig.from_dict(resumed_settings))
    assert resumed.metrics["step"] == 6
    assert_same_weights(straight, killed_dir)


PULL_AND_CONTINUE = """
    import json, sys
    from hfbert.pretrain import main
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_init_from_a_hub_repository_at_a_revision_and_the_card_names_it(corpus, tmp_path, hub_server,
                                                                           monkeypatch):
    allow_hub_calls(monkeypatch)
    api = HfApi(endpoint=hub_server.url, token=hub_server.WRITE_TOKEN)
    api.create_repo("user/google-bert-tiny")
    api.upload_folder(folder_path=str(GOOGLE), repo_id="user/google-bert-tiny", allow_patterns=[
        "bert_config.json", "vocab.txt", "bert_model.ckpt.*"])
    api.create_tag("user/google-bert-tiny", tag="v1")
    api.upload_file(path_or_fileobj=b"later", path_in_repo="NOTES.txt", repo_id="user/google-bert-tiny")
    env = hub_server.client_env(tmp_path / "home")
    values = init_from_settings(corpus, tmp_path / "run", init_from="user/google-bert-tiny", init_revision="v1",
                                max_steps=2, eval_steps=2, push_to_hub="user/continued")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PULL_AND_CONTINUE), *argv(values)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    tagged = hub_server.repos[("model", "user/google-bert-tiny")].tags["v1"]
    assert f"init_from user/google-bert-tiny@{tagged[:12]} (a Google BERT checkpoint)" in done.stdout
    pulled = HfApi(endpoint=hub_server.url).hf_hub_download("user/continued", "README.md",
                                                             cache_dir=tmp_path / "pull")
    card = Path(pulled).read_text()
    assert "base_model: user/google-bert-tiny" in card
    assert f"(revision `{tagged}`)" in card and "A BERT continued from [`user/google-bert-tiny`]" in card

    missing = init_from_settings(corpus, tmp_path / "run2", init_from="user/no-such-model")
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PULL_AND_CONTINUE), *argv(missing)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr[-3000:]
    assert "user/no-such-model: no such folder, and no such model on the Hub" in done.stderr


@pytest.mark.slow
def test_init_from_a_hub_that_never_answers_stops_in_one_line(corpus, tmp_path, silent_server,
                                                               monkeypatch, capsys):
    allow_hub_calls(monkeypatch)
    monkeypatch.setattr(constants, "ENDPOINT", silent_server.url)  # what HF_ENDPOINT sets when read at import
    values = init_from_settings(corpus, tmp_path / "run", init_from="user/x", hub_timeout=1)
    started = time.monotonic()
    assert main(argv(values)) == 2
    assert time.monotonic() - started < 10  # the limit, not a hang (nor five retries)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"hfbert pretrain: error: init_from user/x: the Hub at {silent_server.url} did not answer "
                          "within 1 s while listing the files of user/x"), err
    assert not (tmp_path / "run" / "pretrain_config.json").exists()


def test_an_error_the_command_does_not_expect_is_not_hidden(monkeypatch):
    """Only the errors the command means become its one line: any other OSError is a bug to see in full."""
    import hfbert.pretrain.loop as loop

    def pretrain(config):
        raise PermissionError("not one of the command's errors")

    monkeypatch.setattr(loop, "pretrain", pretrain)
    with pytest.raises(PermissionError, match="not one of the command's errors"):
        main(["--output_dir", "unused"])
