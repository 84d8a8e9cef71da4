"""hfbert evaluate on a tiny model (2 layers, hidden 32) and tiny suites (a classification and an NER task, 32 rows
each, one epoch, two seeds): the results and the figure, resuming, the checks before any training, the card's
model-index through the local Hub server, the glue suite against stand-ins with GLUE's own columns and splits, and
hfbert pretrain's settings."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard, hf_hub_download

from hfbert.cli import main
from hfbert.evaluation import (
    RESULT_FILE,
    check_settings,
    eval_results,
    evaluate,
    evaluate_exported,
    load_suite,
    write_results_card,
)
from hfbert.hub import push_to_hub
from hfbert.pretrain import main as pretrain_main
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.pretrain.tracking import read_jsonl

from helpers.evaluation import FILLER, NEG, PEOPLE, PLACES, POS, RecipeRuns
from helpers.hub_server import allow_hub_calls, start_hub
from helpers.pretraining import assert_same_weights, settings

TASK = {"epochs": 1, "learning_rate": 1.0e-3, "batch_size": 8, "max_length": 32}


def _jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _sentences(rng, n):
    rows = []
    for i in range(n):
        label = i % 2
        words = [rng.choice(FILLER) for _ in range(4)] + [rng.choice(POS if label else NEG)]
        rng.shuffle(words)
        rows.append({"sentence": " ".join(words), "other": rng.choice(FILLER), "label": label,
                     "score": label * 4.0 + rng.random()})
    return rows


def _tagged(rng, n):
    rows = []
    for _ in range(n):
        words, tags = [], []
        while len(words) < 6:
            if rng.random() < 0.3:
                words.append(rng.choice(PEOPLE)), tags.append("B-PER")
            elif rng.random() < 0.2:
                words.append(rng.choice(PLACES)), tags.append("B-LOC")
            else:
                words.append(rng.choice(FILLER)), tags.append("O")
        rows.append({"tokens": words, "ner_tags": tags})
    return rows


@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    """Two tasks over local files: one file split by validation_rows, and separate train/validation files."""
    folder = tmp_path_factory.mktemp("suite")
    rng = random.Random(0)
    _jsonl(folder / "data" / "sentences.jsonl", _sentences(rng, 32))
    _jsonl(folder / "data" / "ner_train.jsonl", _tagged(rng, 24))
    _jsonl(folder / "data" / "ner_dev.jsonl", _tagged(rng, 8))
    suite = {"name": "tiny", "defaults": TASK, "tasks": [
        {"name": "polarity", "type": "classification", "file": "data/sentences.jsonl", "validation_rows": 8,
         "columns": {"text": "sentence", "label": "label"}, "metrics": ["eval_accuracy", "eval_f1"]},
        {"name": "people", "type": "ner", "train_file": "data/ner_train.jsonl", "validation_file": "data/ner_dev.jsonl",
         "columns": {"tokens": "tokens", "tags": "ner_tags"}, "metric": "eval_f1"},
    ]}
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def evaluated(model_dir, suite_file, tmp_path_factory):
    """``hfbert evaluate MODEL --suite tiny.yaml --seeds 1 2 --write_card`` on a copy of the model folder."""
    model = tmp_path_factory.mktemp("carded") / "tiny-bert"
    shutil.copytree(model_dir, model)
    out = tmp_path_factory.mktemp("evaluation") / "out"
    with pytest.MonkeyPatch.context() as mp:
        trainings = RecipeRuns(mp)
        code = main(["evaluate", str(model), "--suite", str(suite_file), "--seeds", "1", "2", "--output_dir",
                     str(out), "--write_card", "--progress_bar", "false"])
    assert code == 0
    summary = json.loads((out / "results.json").read_text())
    return {"model": model, "out": out, "runs": trainings.runs, "calls": trainings.calls, "summary": summary}


def test_evaluate_calls_each_recipe_run_with_typed_arguments(evaluated):
    """Every run is its recipe's ``run`` given dataclasses (a call of the recipe's ``main`` fails the run): the
    task's columns, its kind's problem type, labels and windows, and the suite's settings, each in its typed field."""
    from transformers import TrainingArguments

    from hfbert.recipes import finetune_classification, finetune_ner
    from hfbert.tasks.recipe import ModelArguments

    calls = {(Path(t.output_dir).parent.name, t.seed): (m, d, t) for m, d, t in evaluated["calls"]}
    assert sorted(calls) == [("people", 1), ("people", 2), ("polarity", 1), ("polarity", 2)]
    model, data, training = calls["polarity", 1]
    assert type(model) is ModelArguments and model.model_name_or_path == str(evaluated["model"])
    assert type(data) is finetune_classification.DataArguments and type(training) is TrainingArguments
    assert (data.text_column, data.label_column, data.task_type) == ("sentence", "label", "single_label_classification")
    assert (training.learning_rate, training.num_train_epochs, training.per_device_train_batch_size) == (1e-3, 1.0, 8)
    assert training.per_device_eval_batch_size == 64 and training.save_strategy == "no" and data.max_seq_length == 32
    _, data, training = calls["people", 2]
    assert type(data) is finetune_ner.DataArguments and training.seed == 2
    assert (data.tokens_column, data.tags_column, data.doc_stride) == ("tokens", "ner_tags", 8)  # a quarter of 32
    labels = data.label_list.split(",")
    assert labels[0] == "O" and sorted(labels) == ["B-LOC", "B-PER", "O"]


@pytest.mark.slow
def test_results_hold_every_task_its_spread_over_seeds_and_the_average(evaluated):
    out = evaluated["out"]
    assert sorted(evaluated["runs"]) == [("people", "1"), ("people", "2"), ("polarity", "1"), ("polarity", "2")]
    results = json.loads((out / "results.json").read_text())
    assert list(results["tasks"]) == ["polarity", "people"] and results["seeds"] == [1, 2]
    polarity = results["tasks"]["polarity"]
    assert (polarity["train_rows"], polarity["validation_rows"]) == (24, 8)  # 32 rows, 8 held out
    for name, task in results["tasks"].items():
        for metric, score in task["scores"].items():
            values = [json.loads((out / "runs" / name / f"seed-{s}" / RESULT_FILE).read_text())["scores"][metric]
                      for s in (1, 2)]
            assert list(score["values"].values()) == values
            assert score["mean"] == pytest.approx(statistics.fmean(values))
            assert score["std"] == pytest.approx(statistics.stdev(values))
    assert set(polarity["scores"]) == {"eval_accuracy", "eval_f1"}
    by_seed = [statistics.fmean([results["tasks"][t]["scores"][results["tasks"][t]["metric"]]["values"][s]
                                 for t in ("polarity", "people")]) for s in ("1", "2")]
    assert results["average"]["mean"] == pytest.approx(statistics.fmean(by_seed))
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the fine-tuned weights are scored, then deleted; the run's record stays
    run = out / "runs" / "polarity" / "seed-1"
    assert not list(run.glob("*.safetensors")) and (run / "all_results.json").is_file()


@pytest.mark.slow
def test_resume_runs_only_what_is_missing_or_incomplete(evaluated, monkeypatch):
    out = evaluated["out"]
    before = json.loads((out / "results.json").read_text())
    (out / "runs" / "people" / "seed-2" / RESULT_FILE).unlink()  # killed before its result was written
    trainings = RecipeRuns(monkeypatch)
    summary = evaluate(str(evaluated["model"]), load_suite(before["suite_file"]), seeds=[1, 2], output_dir=out,
                       resume=True, progress=False)
    assert trainings.runs == [("people", "2")]
    assert summary["tasks"]["polarity"] == before["tasks"]["polarity"]
    # a result made with other settings is not reused: one more seed runs only that seed
    trainings.calls.clear()
    evaluate(str(evaluated["model"]), before["suite_file"], seeds=[1, 2, 3], output_dir=out, resume=True,
             tasks=["polarity"], progress=False)
    assert trainings.runs == [("polarity", "3")]


@pytest.mark.slow
def test_a_killed_evaluation_resumes_with_the_runs_it_had_not_finished(model_dir, suite_file, tmp_path, monkeypatch):
    """SIGKILL of a real ``hfbert evaluate`` process as soon as its first run's result is written; ``--resume``
    then trains exactly the runs without a result, and the finished one is kept, not redone."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "hfbert.cli", "evaluate", str(model_dir), "--suite", str(suite_file),
               "--seeds", "1", "2", "--output_dir", str(out), "--progress_bar", "false"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    deadline = time.monotonic() + 240
    try:
        while not list(out.glob(f"runs/*/seed-*/{RESULT_FILE}")) and time.monotonic() < deadline:
            assert process.poll() is None, "the evaluation ended before it could be killed"
            time.sleep(0.02)
    finally:
        process.kill()
        process.wait()
    finished = {(path.parts[-3], path.parts[-2].removeprefix("seed-"))
                for path in out.glob(f"runs/*/seed-*/{RESULT_FILE}")}
    assert len(finished) == 1 and not (out / "results.json").exists()
    kept = {run: (out / "runs" / run[0] / f"seed-{run[1]}" / RESULT_FILE).read_bytes() for run in finished}
    trainings = RecipeRuns(monkeypatch)
    assert main(["evaluate", str(model_dir), "--suite", str(suite_file), "--seeds", "1", "2", "--output_dir",
                 str(out), "--resume", "--progress_bar", "false"]) == 0
    every = {("polarity", "1"), ("polarity", "2"), ("people", "1"), ("people", "2")}
    assert sorted(trainings.runs) == sorted(every - finished)
    assert all((out / "runs" / r[0] / f"seed-{r[1]}" / RESULT_FILE).read_bytes() == data for r, data in kept.items())
    assert set(json.loads((out / "results.json").read_text())["tasks"]) == {"polarity", "people"}


def test_the_card_gets_model_index_and_one_results_table_and_goes_through_the_hub(evaluated, tmp_path, monkeypatch):
    model, summary = evaluated["model"], evaluated["summary"]
    suite = load_suite(summary["suite_file"])
    card = ModelCard.load(model / "README.md")  # raises on a model-index that does not validate
    expected = eval_results(summary, suite)
    assert card.data.eval_results == expected and card.data.model_name == "tiny-bert"
    assert {(r.task_name, r.metric_type) for r in expected} == {("polarity", "accuracy"), ("polarity", "f1"),
                                                                ("people", "f1")}
    assert card.data.license == "apache-2.0" and "A tiny test model." in card.text  # the rest is kept
    assert card.text.count("## Downstream evaluation: the `tiny` suite") == 1
    write_results_card(model, summary, suite)  # a second run replaces its section
    again = ModelCard.load(model / "README.md")
    assert again.text.count("## Downstream evaluation: the `tiny` suite") == 1
    assert again.data.eval_results == expected

    hub, httpd = start_hub()
    try:
        allow_hub_calls(monkeypatch)
        push_to_hub(model, "user/evaluated", token=hub.WRITE_TOKEN, endpoint=hub.url)
        pulled = hf_hub_download("user/evaluated", "README.md", endpoint=hub.url, cache_dir=tmp_path / "cache",
                                 token=hub.WRITE_TOKEN)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert Path(pulled).read_text() == (model / "README.md").read_text()
    assert ModelCard.load(pulled).data.eval_results == expected


def _bad_suite(suite_file: Path, tmp_path: Path, change) -> Path:
    suite = yaml.safe_load(suite_file.read_text())
    change(suite)
    path = suite_file.parent / f"bad-{tmp_path.name}.yaml"  # beside the data, which it reads
    path.write_text(yaml.safe_dump(suite))
    return path


BAD = {
    "wrong column": (lambda s: s["tasks"][1]["columns"].update(tags="tags"),
                     r"task 'people': column 'tags' \(tags\) not in .*ner_train\.jsonl \(columns: tokens, ner_tags\)"),
    "unknown metric": (lambda s: s["tasks"][0].update(metrics=["eval_acc"]),
                       r"task 'polarity': metric 'eval_acc' is not a score .* known: \[.*'eval_accuracy'"),
    "missing file": (lambda s: s["tasks"][1].update(validation_file="data/nowhere.jsonl"),
                     r"task 'people': validation_file .*nowhere\.jsonl not found"),
    "unknown type": (lambda s: s["tasks"][0].update(type="sentiment"),
                     r"task 'polarity': type 'sentiment' is unknown; known: \['classification', 'ner', 'regression'\]"),
    "text, not a number": (lambda s: s["tasks"][0].update(type="regression", metrics=["eval_pearson"],
                                                          columns={"text": "sentence", "label": "other"}),
                           r"task 'polarity': column 'other' \(label\) must hold a number"),
    "bad recipe option": (lambda s: s["tasks"][0].update(training={"warmup_stepz": 3}),
                          r"task 'polarity': a recipe setting does not parse .*warmup_stepz"),
    "bad value": (lambda s: s["tasks"][0].update(batch_size=0), r"task 'polarity': batch_size must be an integer"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_suite_stops_before_any_training_in_one_line(case, model_dir, suite_file, tmp_path, monkeypatch,
                                                           capsys):
    change, message = BAD[case]
    trainings = RecipeRuns(monkeypatch)
    code = main(["evaluate", str(model_dir), "--suite", str(_bad_suite(suite_file, tmp_path, change)), "--output_dir",
                 str(tmp_path / "out"), "--progress_bar", "false"])
    err = capsys.readouterr().err
    assert code == 2 and trainings.runs == []
    assert len(err.splitlines()) == 1 and err.startswith("hfbert evaluate: error: "), err
    assert re.search(message, err), err
    assert not (tmp_path / "out").exists()


def test_a_missing_model_and_a_card_for_a_hub_id_stop_in_one_line(suite_file, tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "no-model"), "--suite", str(suite_file)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith(f"hfbert evaluate: error: MODEL {tmp_path / 'no-model'}: ")
    assert main(["evaluate", "user/model", "--suite", str(suite_file), "--write_card"]) == 2
    assert capsys.readouterr().err == ("hfbert evaluate: error: --write_card writes MODEL's README.md; user/model is "
                                       "not a folder\n")
    assert main(["evaluate", "user/model", "--suite", "glu"]) == 2
    assert capsys.readouterr().err == ("hfbert evaluate: error: suite 'glu' is neither a file nor a packaged suite "
                                       "(glue, local, local-quick)\n")


# ----------------------------------------------------------------------------------------------------------------
# GLUE: the packaged suite against stand-ins with GLUE's columns and splits


GLUE_COLUMNS = {
    "cola": ["sentence"], "sst2": ["sentence"], "mrpc": ["sentence1", "sentence2"], "stsb": ["sentence1", "sentence2"],
    "qqp": ["question1", "question2"], "mnli": ["premise", "hypothesis"], "qnli": ["question", "sentence"],
    "rte": ["sentence1", "sentence2"],
}


def _glue_stand_in(root: Path, config: str, columns: list[str], rng) -> None:
    """``load_dataset("nyu-mll/glue", config).save_to_disk(...)``'s layout: GLUE's splits and columns (and idx)."""
    import datasets

    splits = (["train", "validation_matched", "validation_mismatched", "test_matched", "test_mismatched"]
              if config == "mnli" else ["train", "validation", "test"])
    def rows(n):
        out = {c: [" ".join(rng.choice(POS + NEG + FILLER) for _ in range(5)) for _ in range(n)] for c in columns}
        out["label"] = [rng.random() * 5 for _ in range(n)] if config == "stsb" else [i % 2 for i in range(n)]
        out["idx"] = list(range(n))
        return out
    datasets.DatasetDict({s: datasets.Dataset.from_dict(rows(24 if s == "train" else 8)) for s in splits}).save_to_disk(
        str(root / "nyu-mll" / "glue" / config))


@pytest.mark.slow
def test_the_glue_suite_checks_against_glue_columns_and_runs_from_a_local_copy(model_dir, tmp_path, monkeypatch):
    rng = random.Random(4)
    for config, columns in GLUE_COLUMNS.items():
        _glue_stand_in(tmp_path / "data", config, columns, rng)
    suite = check_settings("glue", tmp_path / "data")  # every task: split names and columns
    assert [t.config for t in suite.tasks] == ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "mnli", "qnli", "rte"]
    assert {t.name: t.reference for t in suite.tasks}["stsb"] == 0.858
    assert all((t.epochs, t.batch_size, t.max_length, t.learning_rate) == (3, 32, 128, 2e-5) for t in suite.tasks)

    shutil.rmtree(tmp_path / "data" / "nyu-mll" / "glue" / "qnli")
    _glue_stand_in(tmp_path / "data", "qnli", ["question", "text"], rng)  # a column GLUE does not have
    with pytest.raises(ValueError, match=r"task 'qnli': column 'sentence' \(text_pair\) not in the train split of "
                                         r"dataset nyu-mll/glue \(config qnli\), local copy .*\(columns: question, "
                                         r"text, label, idx\)"):
        check_settings("glue", tmp_path / "data")

    trainings = RecipeRuns(monkeypatch)
    summary = evaluate(str(model_dir), "glue", data_dir=tmp_path / "data", tasks=["stsb"], seeds=[1],
                       output_dir=tmp_path / "out", progress=False, max_train_samples=16)
    assert trainings.runs == [("stsb", "1")]
    stsb = summary["tasks"]["stsb"]
    assert list(stsb["scores"]) == ["eval_spearman", "eval_pearson"] and stsb["train_rows"] == 16
    assert "local copy" in stsb["data"] and stsb["reference"] == 0.858


# ----------------------------------------------------------------------------------------------------------------
# hfbert pretrain --evaluate_suite


def test_pretrain_checks_the_suite_before_training(suite_file, tmp_path):
    bad = _bad_suite(suite_file, tmp_path, lambda s: s["tasks"][1]["columns"].update(tokens="words"))
    with pytest.raises(ConfigError, match=r"evaluate_suite .*: task 'people': column 'words' \(tokens\) not in"):
        PretrainConfig(output_dir=str(tmp_path / "run"), evaluate_suite=str(bad))
    with pytest.raises(ConfigError, match="evaluate_data_dir is the data of an evaluate_suite"):
        PretrainConfig(output_dir=str(tmp_path / "run"), evaluate_data_dir=str(tmp_path))
    config = PretrainConfig(output_dir=str(tmp_path / "run"), evaluate_suite=str(suite_file), evaluate_seeds=[5])
    assert config.evaluate_seeds == [5]


def test_a_run_that_evaluates_a_suite_lets_its_other_processes_wait_for_it(suite_file, tmp_path):
    """While the main process fine-tunes, the others wait in a collective: the process group's timeout (NCCL's
    default is 10 minutes) is raised for a run with a suite, and left alone without one."""
    from hfbert.pretrain import plan

    with_suite = plan.make_accelerator(PretrainConfig(output_dir=str(tmp_path / "a"), evaluate_suite=str(suite_file)))
    assert with_suite.init_handler.timeout == plan.SUITE_WAIT >= timedelta(hours=1)
    without = plan.make_accelerator(PretrainConfig(output_dir=str(tmp_path / "b")))
    assert without.init_handler is None


@pytest.mark.slow
def test_evaluate_exported_scores_the_exported_folder_and_writes_its_card(model_dir, suite_file, tmp_path):
    exported = tmp_path / "run"
    shutil.copytree(model_dir, exported)
    one_task = _bad_suite(suite_file, tmp_path, lambda s: s.update(tasks=s["tasks"][:1]))
    config = PretrainConfig(output_dir=str(exported), evaluate_suite=str(one_task), evaluate_seeds=[3],
                            progress_bar=False)
    assert evaluate_exported(PretrainConfig(output_dir=str(exported))) is None
    summary = evaluate_exported(config)
    assert list(summary["tasks"]) == ["polarity"] and summary["seeds"] == [3]
    assert Path(summary["output_dir"]).is_relative_to(exported / "runs")  # beside the logs, not pushed
    card = ModelCard.load(exported / "README.md")
    assert [r.task_name for r in card.data.eval_results] == ["polarity", "polarity"]


@pytest.mark.slow
def test_pretrain_with_a_suite_ends_with_its_scores_in_the_card_and_the_same_weights(prepared, suite_file, tmp_path):
    """The suite runs on the model at every evaluate_suite_steps and on the exported folder after training (not a
    trajectory setting: the weights are those of the same run without it); the scores along the way go to the log,
    the card and the downstream curve, the final ones to the card's model-index."""
    one_task = _bad_suite(suite_file, tmp_path, lambda s: s.update(tasks=s["tasks"][:1]))
    runs = {}
    suite = {"evaluate_suite": str(one_task), "evaluate_seeds": [1], "evaluate_suite_steps": 1}
    for name, extra in (("plain", {}), ("evaluated", suite)):
        values = settings([prepared[64]], tmp_path / name, max_steps=2, eval_steps=2, save_steps=2,
                          fill_mask_text="She was [MASK] happy.", **extra)
        config = tmp_path / f"{name}.json"
        config.write_text(json.dumps(values))
        assert pretrain_main(["--config", str(config)]) == 0
        runs[name] = tmp_path / name
    assert_same_weights(runs["plain"], runs["evaluated"])
    card = ModelCard.load(runs["evaluated"] / "README.md")
    assert {r.task_name for r in card.data.eval_results} == {"polarity"}
    assert ModelCard.load(runs["plain"] / "README.md").data.eval_results is None
    results = json.loads((runs["evaluated"] / "runs" / "evaluation" / "tiny" / "results.json").read_text())
    assert list(results["tasks"]) == ["polarity"]
    logged = [r for r in read_jsonl(runs["evaluated"] / "runs" / "metrics.jsonl") if "downstream_average" in r]
    assert [r["step"] for r in logged] == [1, 2]
    for record in logged:  # one task: the average is its score
        assert 0.0 <= record["downstream_polarity"] == record["downstream_average"] <= 1.0
        assert record["downstream_minutes"] > 0
    assert not list((runs["evaluated"] / "runs" / "downstream").glob("*/model"))  # the snapshots are deleted
    text = (runs["evaluated"] / "README.md").read_text()
    assert "## Downstream during pretraining" in text and "downstream_curve.png" in text
    assert (runs["evaluated"] / "downstream_curve.png").stat().st_size > 0
    assert "Downstream" not in (runs["plain"] / "README.md").read_text()
