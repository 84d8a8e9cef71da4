"""hfbert pretrain: exact resume after SIGKILL on prepared folders, training dynamics equal to transformers',
the default prepare-then-train path, loadable Hub-format output, and failures that happen before any work or leave
the last good checkpoint.

Everything runs a tiny model (hidden 32, 2 layers) on the first nine chapters of the shipped Austen corpus,
prepared once per module into folders of length 64 and 96 (one tokenizer).
"""

import dataclasses
import hashlib
import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import load_file

import hfbert
from hfbert.pretrain.checkpointing import STATE_FILE, latest_checkpoint, list_checkpoints
from hfbert.data import CHAPTER_HEADING, PreparedCorpus, prepare_corpus
from hfbert.optim import create_optimizer, linear_warmup_decay
from hfbert.pretrain import main, pretrain
from hfbert.pretrain.config import ConfigError, PretrainConfig, load_config, parse_args, resolve_phases
from hfbert.pretrain.batches import BatchPlan, Permutation, training_batch
from hfbert.pretrain.corpora import BUILTIN_CORPUS, prepare_source
from hfbert.pretrain.tracking import read_jsonl

from helpers.pretraining import (KILL_AFTER_CHECKPOINT, STEPS, TINY_MODEL, assert_same_weights, logged_steps,
                                 run_script, settings, write_config)

REPO = Path(__file__).resolve().parents[2]
N = STEPS  # steps of the resume experiments


# The resume experiments run BERT's two-phase schedule in miniature: 5 steps at length 64, then 3 at length 96.
PHASES = [{"max_seq_length": 64, "steps": 5}, {"max_seq_length": 96, "steps": 3}]


@pytest.fixture(scope="module")
def straight_run(prepared, tmp_path_factory):
    output_dir = tmp_path_factory.mktemp("straight")
    result = pretrain(PretrainConfig.from_dict(settings(prepared.values(), output_dir, phases=PHASES)))
    return output_dir, result


@pytest.mark.slow
def test_straight_run_follows_the_phases_and_keeps_the_last_checkpoints(straight_run):
    output_dir, result = straight_run
    assert [step for step, _ in list_checkpoints(output_dir)] == [4, 6, 8]  # keep_last=3
    lengths = {r["step"]: r["max_seq_length"] for r in logged_steps(output_dir) if "loss" in r}
    assert lengths == {1: 64, 2: 64, 3: 64, 4: 64, 5: 64, 6: 96, 7: 96, 8: 96}
    assert result.metrics["step"] == N and result.metrics["stopped_by"] == "max_steps"
    assert not (output_dir / "prepared").exists()  # trained from the given folders, nothing built
    saved = json.loads((output_dir / "metrics.json").read_text(encoding="utf-8"))
    by_length = saved["baselines_by_length"]  # trivial baselines of each length's held-out set
    assert set(by_length) == {"64", "96"} and by_length["64"] != by_length["96"]
    for key, value in by_length["96"].items():  # the final evaluation is at the last phase's length
        assert saved[key] == value


# ----------------------------------------------------------------------------------------------------------------
# 1. Exact resume


KILL_DURING_CHECKPOINT = """
    import os, signal, sys, torch
    torch.set_num_threads(1)
    import hfbert.pretrain.checkpointing as checkpointing
    from hfbert.pretrain import main

    flush = checkpointing.fsync_tree

    def die_half_written(folder):
        if folder.name == sys.argv[2] + ".tmp":
            victim = folder / "optimizer.bin"  # leave a half-written file behind, as a crash mid-write would
            victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        flush(folder)

    checkpointing.fsync_tree = die_half_written
    sys.exit(main(["--config", sys.argv[1]]))
"""


@pytest.mark.slow
def test_sigkill_after_half_the_steps_then_resume_is_bitwise_identical(straight_run, prepared,
                                                                       tmp_path):
    straight_dir, _ = straight_run
    output_dir = tmp_path / "killed"
    config_file = write_config(tmp_path / "run.json", settings(prepared.values(), output_dir, phases=PHASES))
    killed = run_script(KILL_AFTER_CHECKPOINT, config_file, f"checkpoint-{N // 2:08d}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert [step for step, _ in list_checkpoints(output_dir)] == [2, 4]
    assert not (output_dir / "model.safetensors").exists()  # it never got to the export

    resumed = pretrain(PretrainConfig.from_dict(
        settings(prepared.values(), output_dir, phases=PHASES, resume=True)))
    assert resumed.metrics["step"] == N
    assert_same_weights(straight_dir, output_dir)
    assert logged_steps(output_dir) == logged_steps(straight_dir)
    assert [r["step"] for r in logged_steps(output_dir) if "loss" in r] == list(range(1, N + 1))


@pytest.mark.slow
def test_kill_while_writing_a_checkpoint_keeps_the_previous_one(straight_run, prepared, tmp_path):
    straight_dir, _ = straight_run
    output_dir = tmp_path / "killed"
    config_file = write_config(tmp_path / "run.json", settings(prepared.values(), output_dir, phases=PHASES))
    killed = run_script(KILL_DURING_CHECKPOINT, config_file, f"checkpoint-{4:08d}")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (output_dir / "checkpoint-00000004.tmp").is_dir()  # the torn write is there ...
    assert latest_checkpoint(output_dir).name == "checkpoint-00000002"  # ... and is not taken for a checkpoint

    pretrain(PretrainConfig.from_dict(settings(prepared.values(), output_dir, phases=PHASES, resume=True)))
    assert not (output_dir / "checkpoint-00000004.tmp").exists()
    assert_same_weights(straight_dir, output_dir)
    assert logged_steps(output_dir) == logged_steps(straight_dir)


# ----------------------------------------------------------------------------------------------------------------
# 2. Training dynamics equal to transformers' BertForPreTraining


def _train(model, batches, optimizer_name: str) -> list[tuple[float, float, float]]:
    """The pretraining step of hfbert.pretrain: forward, backward, clip at 1.0, optimizer, schedule."""
    optimizer = create_optimizer(model, optimizer_name, lr=1e-3, weight_decay=0.01)
    scheduler = linear_warmup_decay(optimizer, warmup_steps=5, total_steps=len(batches))
    losses = []
    for batch in batches:
        outputs = model(**batch)
        outputs.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        # transformers' output has no separate MLM/NSP losses: compare the total and the NSP logits' loss.
        nsp = torch.nn.functional.cross_entropy(outputs.seq_relationship_logits, batch["next_sentence_label"])
        losses.append((outputs.loss.item(), nsp.item()))
    return losses


@pytest.mark.slow
@pytest.mark.parametrize("optimizer_name", ["adamw", "adam_google", "lamb"])
def test_fifty_steps_match_transformers_bert(prepared, optimizer_name):
    corpus = PreparedCorpus.open(prepared[64])
    tokenizer = corpus.load_tokenizer()
    plan = BatchPlan(corpus.blocks("train"), 8, 1, 42, 0)
    collator = hfbert.data.DataCollatorForBertPretraining(tokenizer)
    batches = [training_batch(corpus, collator, plan, k, 0)[0] for k in range(50)]

    model_config = hfbert.HfBertConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **TINY_MODEL)
    torch.manual_seed(0)
    ours = hfbert.HfBertForPreTraining(model_config)
    theirs = transformers.BertForPreTraining(model_config.to_bert_config())
    theirs.load_state_dict(ours.state_dict())
    ours_losses, theirs_losses = _train(ours, batches, optimizer_name), _train(theirs, batches, optimizer_name)
    for step, (a, b) in enumerate(zip(ours_losses, theirs_losses)):
        assert a == pytest.approx(b, rel=1e-4), f"step {step}: hfbert {a} vs transformers {b}"
    assert ours_losses[-1][0] < ours_losses[0][0]  # and it trained


# ----------------------------------------------------------------------------------------------------------------
# 5. The output folder loads everywhere


def test_output_folder_has_the_hub_files(straight_run):
    output_dir, result = straight_run
    for name in ("config.json", "model.safetensors", "modeling_hfbert.py", "configuration_hfbert.py",
                 "tokenizer.json", "vocab.txt", "README.md", "metrics.json", "loss_curve.png"):
        assert (output_dir / name).is_file(), name
    config = json.loads((output_dir / "config.json").read_text())
    assert config["model_type"] == "hfbert" and "AutoModelForPreTraining" in config["auto_map"]
    card = (output_dir / "README.md").read_text()
    assert "library_name: transformers" in card and "- hfbert" in card and "license: apache-2.0" in card
    assert "MLM accuracy" in card and "loss_curve.png" in card and "Limitations" in card
    answers = ", ".join(f"`{r['token']}` ({r['score']:.3f})" for r in result.fill_mask[0]["answers"])
    assert f"| She was [MASK] happy. | {answers} |" in card  # every prompt with its five answers
    metrics = json.loads((output_dir / "metrics.json").read_text())
    assert metrics == result.metrics and 0.0 <= metrics["eval_mlm_accuracy"] <= 1.0
    assert metrics["eval_nsp_baseline_majority_class"] >= 0.5


def test_the_default_fill_mask_prompts_are_three_sentences_and_one_string_is_a_list_of_one():
    prompts = PretrainConfig().fill_mask_text
    assert len(prompts) == 3 and all(text.count("[MASK]") == 1 for text in prompts)
    assert PretrainConfig(fill_mask_text="She was [MASK] happy.").fill_mask_text == ["She was [MASK] happy."]
    with pytest.raises(ConfigError, match="fill_mask_text must contain \\[MASK\\]"):
        PretrainConfig(fill_mask_text=["She was [MASK] happy.", "no mask here"])


def test_auto_class_and_fill_mask_pipeline_load_the_output(straight_run):
    output_dir, result = straight_run
    model = transformers.AutoModelForPreTraining.from_pretrained(output_dir)
    assert isinstance(model, hfbert.HfBertForPreTraining)
    saved = load_file(output_dir / "model.safetensors")
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in saved.items())
    fill = transformers.pipeline("fill-mask", model=str(output_dir))
    answers = fill("She was [MASK] happy.", top_k=5)
    assert len(answers) == 5 and all(a["sequence"].startswith("she was") for a in answers)
    assert [example["text"] for example in result.fill_mask] == ["She was [MASK] happy."]
    assert [a["token_str"] for a in answers] == [r["token"] for r in result.fill_mask[0]["answers"]]


REMOTE_CODE = """
    import json, sys

    class RefuseHfbert:  # as on a machine where hfbert is not installed
        def find_spec(self, name, path=None, target=None):
            if name == "hfbert" or name.startswith("hfbert."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
            return None

    sys.meta_path.insert(0, RefuseHfbert())
    import torch, transformers
    torch.set_num_threads(1)
    model = transformers.AutoModelForPreTraining.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
    fill = transformers.pipeline("fill-mask", model=sys.argv[1], trust_remote_code=True)
    ids = torch.tensor([[2, 10, 11, 12, 3, 13, 14, 3]])
    print(json.dumps({
        "class": type(model).__module__ + "." + type(model).__name__,
        "hfbert_imported": any(m == "hfbert" or m.startswith("hfbert.") for m in sys.modules),
        "nsp": model(ids).seq_relationship_logits.tolist(),
        "top": fill("She was [MASK] happy.", top_k=1)[0]["token_str"],
    }))
"""


@pytest.mark.slow
def test_output_loads_as_remote_code_without_hfbert(straight_run):
    output_dir, result = straight_run
    done = run_script(REMOTE_CODE, output_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert not report["hfbert_imported"] and "transformers_modules" in report["class"]
    local = transformers.AutoModelForPreTraining.from_pretrained(output_dir).eval()
    expected = local(torch.tensor([[2, 10, 11, 12, 3, 13, 14, 3]])).seq_relationship_logits
    torch.testing.assert_close(torch.tensor(report["nsp"]), expected, rtol=1e-5, atol=1e-6)
    assert report["top"] == result.fill_mask[0]["answers"][0]["token"]


# ----------------------------------------------------------------------------------------------------------------
# 6. Bad input and faults


def exit_status(argv: list[str]) -> int:
    """``hfbert pretrain ARGV``'s exit status: argparse exits itself for a malformed command line."""
    try:
        return main(argv)
    except SystemExit as exited:
        return exited.code


def test_bad_settings_fail_before_any_work(corpus, tmp_path, capsys):
    output_dir = tmp_path / "never"
    config_file = tmp_path / "bad.yaml"
    cases = [
        (["--input", str(tmp_path / "missing.txt")], "input file not found"),
        (["--prepared", str(tmp_path / "nowhere")], "prepared folder not found"),
        (["--prepared", str(tmp_path), "--tokenizer", str(tmp_path)], "give prepared, or input/dataset/tokenizer"),
        (["--document_boundary", "(unclosed"], "is not a regular expression"),
        (["--optimizer", "sgd"], "unknown optimizer 'sgd'"),
        (["--batch_size", "0"], "batch_size must be >= 1"),
        (["--model", "{hidden_size: 31}"], "not a multiple of the number of attention heads"),
        (["--phases", "[{max_seq_length: 128, fraction: 0.5}]"], "must sum to 1"),
        (["--tokenizer", str(tmp_path / "nope")], "tokenizer folder not found"),
        (["--learning_rte", "1e-3"], "unrecognized arguments: --learning_rte"),
        (["--batch_size", "many"], "argument --batch_size/--batch-size: invalid int value: 'many'"),
        (["--config", str(config_file)], "unknown setting(s) ['warmup_ratoi']"),
    ]
    config_file.write_text("max_steps: 10\nwarmup_ratoi: 0.1\n")
    for argv, message in cases:
        assert exit_status([*argv, "--output_dir", str(output_dir)]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("hfbert pretrain: error: ") and message in err and err.count("\n") == 1, err
    assert not output_dir.exists()  # nothing was created
    # Values from a file or from Python are checked as strictly as the command line's.
    with pytest.raises(ConfigError, match="batch_size must be an int, got 'many'"):
        load_config(write_config(tmp_path / "typed.json", {"batch_size": "many"}))
    with pytest.raises(ConfigError, match=r"max_time_minutes must be a number \(or null\), got True"):
        PretrainConfig(max_time_minutes=True)


def _tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def test_unwritable_or_occupied_output_folder_fails_clearly(straight_run, prepared, tmp_path,
                                                            monkeypatch, capsys):
    straight_dir, _ = straight_run
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ["--config", str(write_config(tmp_path / "run.json", settings([prepared[64]], "x")))]
    assert main([*args, "--output_dir", str(blocker / "out")]) == 2
    assert "is not writable" in capsys.readouterr().err

    before = {path.name: _tree_digest(path) for _, path in list_checkpoints(straight_dir)}
    assert main([*args, "--output_dir", str(straight_dir)]) == 2  # a finished run is not overwritten by accident
    assert "already holds a run" in capsys.readouterr().err

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("hfbert.pretrain.plan.tempfile.mkstemp", read_only)  # a read-only folder (root ignores chmod)
    assert main([*args, "--output_dir", str(straight_dir), "--resume"]) == 2
    assert f"output_dir {straight_dir} is not writable: Permission denied" in capsys.readouterr().err
    assert {path.name: _tree_digest(path) for _, path in list_checkpoints(straight_dir)} == before


def test_failed_checkpoint_write_keeps_the_previous_checkpoint(prepared, tmp_path, monkeypatch):
    import hfbert.pretrain.checkpointing as checkpointing

    flush = checkpointing.fsync_tree

    def disk_full_at_step_4(folder):
        if folder.name == "checkpoint-00000004.tmp":
            raise OSError(28, "No space left on device")
        flush(folder)

    monkeypatch.setattr(checkpointing, "fsync_tree", disk_full_at_step_4)
    output_dir = tmp_path / "full"
    with pytest.raises(OSError, match=r"step 4 .*No space left on device.*checkpoint-00000002 and was not modified"):
        pretrain(PretrainConfig.from_dict(settings([prepared[64]], output_dir)))
    latest = latest_checkpoint(output_dir)
    assert latest.name == "checkpoint-00000002"
    assert json.loads((latest / STATE_FILE).read_text())["step"] == 2
    assert torch.load(latest / "pytorch_model.bin", weights_only=True)  # loadable


@pytest.mark.slow
def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(prepared, tmp_path, monkeypatch,
                                                                   capsys):
    forward = hfbert.HfBertForPreTraining.forward
    calls = {"train": 0}

    def nan_at_step_5(self, *args, **kwargs):
        outputs = forward(self, *args, **kwargs)
        if self.training:
            calls["train"] += 1
            if calls["train"] == 5:
                outputs.nsp_loss = outputs.nsp_loss * float("nan")
        return outputs

    monkeypatch.setattr(hfbert.HfBertForPreTraining, "forward", nan_at_step_5)
    output_dir = tmp_path / "nan"
    config_file = write_config(tmp_path / "run.json", settings([prepared[64]], output_dir))
    assert main(["--config", str(config_file)]) == 1
    message = capsys.readouterr().err
    # checkpoint 4 holds the weights that computed step 5's loss: the last good one is 2
    assert "the training loss became nan at step 5" in message and "checkpoint-00000002" in message
    assert latest_checkpoint(output_dir).name == "checkpoint-00000004"
    assert not (output_dir / "model.safetensors").exists()  # no export of a diverged model
    monkeypatch.setattr(hfbert.HfBertForPreTraining, "forward", forward)
    resumed = pretrain(PretrainConfig.from_dict(settings([prepared[64]], output_dir, resume=True)))
    assert resumed.metrics["step"] == N  # the kept checkpoint resumes


# ----------------------------------------------------------------------------------------------------------------
# Settings, data plan, the default job


def test_config_file_overrides_and_help(tmp_path, capsys):
    config_file = tmp_path / "run.yaml"
    config_file.write_text("batch_size: 16\nlearning_rate: 1.0e-4\noptimizer: lamb\nmodel: {hidden_size: 128}\n")
    config = parse_args(["--config", str(config_file), "--batch-size", "4", "--input", "a.txt", "b.txt",
                         "--max_time_minutes", "null", "--resume", "--max-seq-length", "64",
                         "--phases", '[{"max_seq_length": 64, "fraction": 1.0}]'])
    assert (config.batch_size, config.learning_rate, config.optimizer) == (4, 1e-4, "lamb")
    assert config.input == ["a.txt", "b.txt"] and config.max_time_minutes is None and config.resume is True
    assert config.model == {"hidden_size": 128} and config.max_seq_length == 64
    assert config.phases == [{"max_seq_length": 64, "fraction": 1.0}]
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for f in dataclasses.fields(PretrainConfig):  # every option, with its field's own help line
        assert f"--{f.name} " in text and f.metadata["help"].split()[0] in text, f.name


@pytest.mark.slow
def test_without_prepared_folders_the_job_prepares_its_input_first(corpus, tmp_path):
    """The default job's path: prepare into output_dir/prepared (the folders hfbert prepare writes), then train
    from them exactly as from --prepared. --document_boundary chapter is the chapter-heading rule there too."""
    output_dir = tmp_path / "run"
    values = settings([], output_dir, max_steps=2, eval_steps=2, save_steps=2)
    del values["prepared"]
    values.update(input=[str(corpus)], input_layout="paragraphs", document_boundary="chapter", vocab_size=400,
                  eval_fraction=0.2)
    result = pretrain(PretrainConfig.from_dict(values))
    folder = PreparedCorpus.open(output_dir / "prepared" / "length-64")
    assert folder.manifest.input["document_boundary"] == CHAPTER_HEADING
    assert folder.manifest.report["documents"]["used"] == 10  # the front matter and nine chapters
    assert folder.settings["seed"] == 42 and folder.settings["masking"] == "dynamic"
    assert result.metrics["step"] == 2 and (output_dir / "model.safetensors").is_file()
    exported = json.loads((output_dir / "tokenizer.json").read_text())
    assert exported == json.loads((folder.path / "tokenizer.json").read_text())  # the model speaks the folder's ids


def test_example_configs_are_valid():
    configs = sorted((REPO / "configs").glob("*.*"))
    assert configs, "no example configs"
    for path in configs:
        load_config(path)
    two_phase = load_config(REPO / "configs" / "two_phase_128_512.yaml")
    phases = resolve_phases(two_phase)
    assert [(p.max_seq_length, p.steps) for p in phases] == [(128, 900), (512, 100)]
    assert phases[1].first_step == 900


def test_batch_plan_is_arithmetic_and_disjoint_across_processes():
    plan = BatchPlan([20, 20, 10], batch_size=4, world_size=2, seed=3, phase=0, window=2)
    assert plan.batches_per_epoch == 6
    epoch = [row for micro in range(6) for rank in range(2) for row in plan.rows(micro, rank)]
    assert len(set(epoch)) == 48  # one epoch: every row at most once, two ranks never share a row
    fresh = BatchPlan([20, 20, 10], batch_size=4, world_size=2, seed=3, phase=0, window=2)
    assert fresh.rows(13, 1) == plan.rows(13, 1)  # jumping straight to a step gives the same rows
    assert plan.rows(6, 0) != plan.rows(0, 0)  # the next epoch is a new permutation
    assert set(plan.mask_streams(5, 0).keys.tolist()).isdisjoint(plan.mask_streams(5, 1).keys.tolist())
    with pytest.raises(ValueError, match="fewer than one global batch"):
        BatchPlan(7, batch_size=4, world_size=2, seed=0, phase=0)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 50, 1000, 4097])
def test_permutation_is_a_seeded_bijection(n):
    order = Permutation(n, [3, 0, 0])(np.arange(n))
    assert sorted(order.tolist()) == list(range(n))
    assert np.array_equal(order, Permutation(n, [3, 0, 0])(np.arange(n)))  # a function of the seed alone
    if n >= 50:
        assert not np.array_equal(order, Permutation(n, [3, 0, 1])(np.arange(n)))
        assert np.mean(order == np.arange(n)) < 0.1  # not close to the identity
        assert abs(np.corrcoef(order, np.arange(n))[0, 1]) < 0.15  # no trend: early rows are not early positions


def test_permutation_of_a_terabyte_corpus_costs_no_memory():
    """Two billion rows, as a terabyte of text makes at length 128: any position is one call away."""
    n = 2_000_000_123
    permutation = Permutation(n, [42, 0, 0])
    rows = permutation(np.arange(n - 4096, n))
    assert len(set(rows.tolist())) == 4096 and rows.min() >= 0 and rows.max() < n
    assert all(getattr(value, "nbytes", 0) < 1024 for value in vars(permutation).values())


def _fail_if_built(*args, **kwargs):
    raise AssertionError("prepare_corpus was called on the --prepared path")


def test_prepared_folders_are_checked_against_the_schedule_and_the_model(prepared, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("hfbert.pretrain.corpora.prepare_corpus", _fail_if_built)
    output_dir = tmp_path / "run"
    base = ["--prepared", str(prepared[64]), "--output_dir", str(output_dir), "--preset", "tiny", "--model",
            json.dumps(TINY_MODEL), "--progress_bar", "false", "--report_to", "jsonl", "--max_seq_length", "64"]
    assert main([*base, "--max_seq_length", "128"]) == 2
    assert "the schedule trains at length(s) [128], but the prepared folders hold [64]" in capsys.readouterr().err
    assert main([*base, "--masking", "static"]) == 2
    assert "masking is 'static' but the prepared folder" in capsys.readouterr().err

    tampered = tmp_path / "tampered"
    shutil.copytree(prepared[64], tampered)
    manifest = json.loads((tampered / "hfbert_prepare.json").read_text())
    manifest["tokenizer"]["vocab_size"] += 1
    (tampered / "hfbert_prepare.json").write_text(json.dumps(manifest))
    assert main([*base[2:], "--prepared", str(tampered)]) == 2
    assert "differs from the vocabulary of the prepared corpus" in capsys.readouterr().err

    assert not list_checkpoints(output_dir)  # every check came before the first step


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["one folder at its own length", "two folders, two phases"])
def test_each_corpus_of_a_run_is_opened_once(prepared, tmp_path, monkeypatch, schedule):
    """The plan opens each --prepared folder once, with the real limits, and the phases, the model check and the
    loop all read that one corpus (a second open, without the limits, once found the length of a lone folder)."""
    opened = []
    real_open = PreparedCorpus.open.__func__

    def counting(cls, location, **kwargs):
        opened.append(str(location))
        return real_open(cls, location, **kwargs)

    monkeypatch.setattr(PreparedCorpus, "open", classmethod(counting))
    if schedule == "one folder at its own length":
        folders, overrides = [prepared[96]], {"max_seq_length": None, "max_steps": 2}
    else:
        folders, overrides = list(prepared.values()), {"phases": PHASES}
    pretrain(PretrainConfig.from_dict(settings(folders, tmp_path / "run", **overrides)))
    assert sorted(opened) == sorted(str(folder) for folder in folders)


def test_prepared_folders_need_one_tokenizer(prepared, corpus, tmp_path, capsys):
    other = prepare_corpus([str(corpus)], tmp_path / "other-96", vocab_size=300, max_seq_length=96,
                           input_layout="paragraphs", document_boundary="chapter", eval_fraction=0.2)
    values = settings([prepared[64], other], tmp_path / "run", phases=PHASES)
    with pytest.raises(ConfigError, match="were built with different tokenizers"):
        pretrain(PretrainConfig.from_dict(values))


@pytest.mark.slow
def test_a_prepared_hub_dataset_repo_trains_like_its_folder(prepared, tmp_path, monkeypatch):
    """--prepared user/name: the dataset repo is downloaded (once per machine) and trains exactly as its folder."""
    from helpers.hub_server import allow_hub_calls, start_hub

    from hfbert.data import push_prepared

    hub, httpd = start_hub()
    try:
        allow_hub_calls(monkeypatch)
        monkeypatch.setenv("HF_TOKEN", hub.WRITE_TOKEN)
        push_prepared(prepared[64], "user/austen-64", endpoint=hub.url)
        from_hub = tmp_path / "from-hub"
        config_file = write_config(tmp_path / "hub.json",
                                   settings(["user/austen-64"], from_hub, max_steps=2, eval_steps=2))
        env = hub.client_env(tmp_path / "home")  # HF_ENDPOINT and a fresh cache, as a user's machine has
        done = subprocess.run([sys.executable, "-m", "hfbert.pretrain", "--config", str(config_file)],
                              capture_output=True, text=True, timeout=240, env=env)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Preparing shards" not in done.stderr and not (from_hub / "prepared").exists()
    from_folder = tmp_path / "from-folder"
    pretrain(PretrainConfig.from_dict(settings([prepared[64]], from_folder, max_steps=2, eval_steps=2)))
    assert_same_weights(from_hub, from_folder)
    assert logged_steps(from_hub) == logged_steps(from_folder)


def test_default_job_prepares_the_builtin_corpus():
    config = PretrainConfig()
    assert config.input is None and config.dataset is None and config.prepared is None
    assert prepare_source(config) is None and BUILTIN_CORPUS.is_file()  # None: the built-in Austen corpus
    assert config.preset == "tiny" and config.vocab_size == 8000
    # Short sequences first, then the final length; a one-length run when max_seq_length is given.
    assert [(p.max_seq_length, p.steps) for p in resolve_phases(config)] == [(32, 1800), (128, 1200)]
    assert [p.max_seq_length for p in resolve_phases(PretrainConfig(max_seq_length=64))] == [64]
    assert config.max_time_minutes is not None  # the default job is bounded in time
    with pytest.raises(ConfigError, match="either input"):
        PretrainConfig(input=["a.txt"], dataset="b")


@pytest.mark.slow
def test_push_to_hub_uploads_the_export_but_not_the_checkpoints(prepared, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from helpers.hub_server import allow_hub_calls, start_hub

    hub, httpd = start_hub()
    try:
        allow_hub_calls(monkeypatch)
        monkeypatch.setattr(constants, "ENDPOINT", hub.url)  # what HF_ENDPOINT sets when read at import
        monkeypatch.setenv("HF_TOKEN", hub.WRITE_TOKEN)
        output_dir = tmp_path / "pushed"
        pretrain(PretrainConfig.from_dict(settings([prepared[64]], output_dir, max_steps=2, eval_steps=2,
                                                   push_to_hub="user/austen-tiny", hub_revision="exp")))
        repo = hub.repos[("model", "user/austen-tiny")]
        files = set(repo.commits[repo.branches["exp"]].files)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert {"config.json", "model.safetensors", "README.md", "tokenizer.json", "metrics.json", "loss_curve.png",
            "modeling_hfbert.py"} <= files
    assert not any(name.startswith(("checkpoint-", "runs/")) for name in files)  # resumable state stays local
    assert (output_dir / "checkpoint-00000002").is_dir()


def test_a_datasets_dataset_is_an_input_too(tmp_path, capsys):
    from datasets import Dataset

    texts = [f"Chapter {i} begins here. It has a second sentence. And a third one, Mr. Knightley said."
             for i in range(5)]
    Dataset.from_dict({"text": texts}).save_to_disk(tmp_path / "ds")
    source = prepare_source(PretrainConfig(dataset=str(tmp_path / "ds")))
    assert source.column_names == ["text"] and source["text"] == texts
    output_dir = tmp_path / "run"
    assert main(["--dataset", str(tmp_path / "ds"), "--text_column", "body", "--output_dir", str(output_dir)]) == 2
    assert "text_column 'body' is not a column of" in capsys.readouterr().err


@pytest.mark.slow
def test_the_readmes_scale_example_trains_one_folder_at_its_length(prepared, tmp_path):
    """`hfbert pretrain --prepared prepared-128 --preset base --max_steps 100000 --output_dir out/bert` as the README
    writes it (on a folder of length 64, the steps and the model made small by options added after it): no
    --max_seq_length or --phases, so the run trains at the folder's own length."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "hfbert pretrain --prepared prepared-128 --preset base --max_steps 100000 --output_dir out/bert" in readme
    args = ["--prepared", str(prepared[64]), "--preset", "base", "--max_steps", "100000", "--output_dir",
            str(tmp_path / "bert")]
    small = ["--max_steps", "2", "--model", json.dumps({**TINY_MODEL, "hidden_dropout_prob": 0.0}),
             "--batch_size", "4", "--eval_steps", "2", "--save_steps", "2", "--max_eval_examples", "8",
             "--progress_bar", "false", "--report_to", "jsonl", "--mixed_precision", "no"]
    assert main(args + small) == 0
    logged = [r for r in read_jsonl(tmp_path / "bert" / "runs" / "metrics.jsonl") if "loss" in r]
    assert logged and {r["max_seq_length"] for r in logged} == {64}
    assert {"data_seconds", "step_seconds"} <= set(logged[-1])
    assert 0 < logged[-1]["reader_mib"] < 64 and 1 <= logged[-1]["open_files"] <= PreparedCorpus.MAX_OPEN_FILES
