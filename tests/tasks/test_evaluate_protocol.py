"""hfbert evaluate under the field's protocol, on a tiny model and a tiny suite: the rate chosen on the selection
split and never on the reported one, label budgets of the same number of steps, the failed-run count, the
random-weights baseline (same architecture and tokenizer, fresh weights) and its paired bootstrap interval."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

from hfbert.cli import main
from hfbert.evaluation import evaluate
from hfbert.evaluation.protocol import (
    Protocol,
    bootstrap_difference,
    chosen_rate,
    constant_score,
    parse_sizes,
    spread,
)
from hfbert.evaluation.suites import SuiteTask
from hfbert.settings import UsageError
from hfbert.tasks.loading import load_model, reinitialize

from helpers.evaluation import FILLER, NEG, POS, RecipeRuns



@pytest.fixture(scope="module")
def suite_file(tmp_path_factory) -> Path:
    """One sentiment task, 80 rows, 16 held out."""
    folder = tmp_path_factory.mktemp("suite")
    rng = random.Random(0)
    rows = []
    for i in range(80):
        label = i % 2
        words = [rng.choice(FILLER) for _ in range(4)] + [rng.choice(POS if label else NEG)]
        rng.shuffle(words)
        rows.append({"sentence": " ".join(words), "label": label})
    (folder / "sentences.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = {"name": "tiny", "defaults": {"epochs": 1, "learning_rate": 1e-3, "batch_size": 8, "max_length": 16},
             "tasks": [{"name": "polarity", "type": "classification", "file": "sentences.jsonl",
                        "validation_rows": 16, "columns": {"text": "sentence", "label": "label"},
                        "metrics": ["eval_accuracy", "eval_f1"]}]}
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def protocol_run(model_dir, suite_file, tmp_path_factory):
    """Two rates, two label budgets, a baseline, seeds 1 and 2, a fixed step budget."""
    out = tmp_path_factory.mktemp("protocol") / "out"
    with pytest.MonkeyPatch.context() as mp:
        recorded = RecipeRuns(mp)
        code = main(["evaluate", str(model_dir), "--suite", str(suite_file), "--seeds", "1", "2", "--output_dir",
                     str(out), "--learning_rates", "1e-4", "3e-3", "--train_sizes", "8", "full", "--max_steps", "6",
                     "--selection_rows", "12", "--baseline", "--progress_bar", "false"])
    assert code == 0
    return {"out": out, "calls": recorded.calls, "summary": json.loads((out / "results.json").read_text())}


@pytest.mark.slow
def test_the_rate_is_chosen_on_the_selection_split_and_never_on_the_reported_one(protocol_run):
    out, calls = protocol_run["out"], protocol_run["calls"]
    selection = out / "data" / "polarity" / "protocol" / "selection.jsonl"
    held_out = out / "data" / "polarity" / "validation.jsonl"
    for _, data, _ in calls:  # every run: chooses on the selection rows, reports on the held-out ones
        assert Path(data.validation_file) == selection
        assert Path(data.test_file) == held_out
    # the selection rows and the pool the budgets draw from split the training rows between them (rows may repeat
    # in this tiny suite, so they are counted, not compared as sets); every run trains on pool rows only
    lines = lambda path: Counter(Path(path).read_text().splitlines())  # noqa: E731
    pool = out / "data" / "polarity" / "protocol" / "pool.jsonl"
    assert sum(lines(selection).values()) == 12
    assert lines(selection) + lines(pool) == lines(out / "data" / "polarity" / "train.jsonl")
    for _, data, _ in calls:
        assert not lines(data.train_file) - lines(pool)
    # the chosen rate is the one that scores best on the selection rows
    task = protocol_run["summary"]["protocol"]["tasks"]["polarity"]
    for entry in task["sizes"].values():
        for arm in ("model", "baseline"):
            scores = entry[arm]["selection"]
            best = max(scores.values())
            assert scores[f"{entry[arm]['learning_rate']:g}"] == best
    runs = out / "runs" / "polarity" / "model" / "size-full"
    for seed in (1, 2):
        for rate in ("0.0001", "0.003"):
            result = json.loads((runs / f"lr-{rate}" / f"seed-{seed}" / "result.json").read_text())
            assert "eval_accuracy" in result["metrics"] and "test_accuracy" in result["metrics"]
    chosen = task["sizes"]["full"]["model"]["learning_rate"]
    reported = task["sizes"]["full"]["model"]["held_out"]["values"]
    for seed in ("1", "2"):
        result = json.loads((runs / f"lr-{chosen:g}" / f"seed-{seed}" / "result.json").read_text())
        assert reported[seed] == result["metrics"]["test_accuracy"]


def test_a_rate_is_chosen_by_the_selection_score_and_ties_keep_the_first():
    assert chosen_rate({1e-4: [0.6, 0.7], 3e-4: [0.8, 0.5], 1e-3: [0.9, 0.1]}, "eval_accuracy") == 3e-4
    assert chosen_rate({1e-4: [0.5], 3e-4: [0.5]}, "eval_accuracy") == 1e-4
    assert chosen_rate({1e-4: [0.5], 3e-4: [0.2]}, "eval_mse") == 3e-4
    assert chosen_rate({1e-4: [float("nan")], 3e-4: [0.2]}, "eval_accuracy") == 3e-4


def test_every_label_budget_runs_the_same_steps_on_its_own_rows_per_seed(protocol_run):
    calls = protocol_run["calls"]
    assert {training.max_steps for _, _, training in calls} == {6}
    small = {data.train_file for _, data, training in calls if "size-8" in training.output_dir}
    assert len(small) == 2  # one draw per seed, shared by the model and the baseline
    for path in small:
        assert len(Path(path).read_text().splitlines()) == 8
    entry = protocol_run["summary"]["protocol"]["tasks"]["polarity"]["sizes"]
    assert entry["8"]["rows"] == 8 and entry["full"]["rows"] == 80 - 16 - 12
    # 2 arms x 2 sizes x (2 rates x 2 seeds)
    assert len(calls) == 16


def test_the_baseline_is_the_same_architecture_and_tokenizer_with_fresh_weights(protocol_run, model_dir):
    calls = protocol_run["calls"]
    baseline = [(m, t) for m, _, t in calls if "/baseline/" in t.output_dir]
    model = [(m, t) for m, _, t in calls if "/model/" in t.output_dir]
    assert baseline and all(m.from_scratch is True for m, _ in baseline)
    assert model and not any(m.from_scratch for m, _ in model)
    assert {m.model_name_or_path for m, _ in baseline} == {str(model_dir)}
    # what --from_scratch loads: the model's config, fresh weights (different for another seed), its vocabulary
    pretrained = load_model("sequence-classification", model_name_or_path=str(model_dir), num_labels=2)
    torch.manual_seed(1)
    fresh = load_model("sequence-classification", model_name_or_path=str(model_dir), from_scratch=True, num_labels=2)
    torch.manual_seed(2)
    other = load_model("sequence-classification", model_name_or_path=str(model_dir), from_scratch=True, num_labels=2)
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
            "max_position_embeddings", "type_vocab_size", "hidden_act")
    assert {k: getattr(fresh.config, k) for k in keys} == {k: getattr(pretrained.config, k) for k in keys}
    name = "bert.embeddings.word_embeddings.weight"
    assert not torch.equal(fresh.state_dict()[name], pretrained.state_dict()[name])
    assert not torch.equal(fresh.state_dict()[name], other.state_dict()[name])
    assert fresh.state_dict()[name].std().item() == pytest.approx(0.02, rel=0.25)  # the model's own initialiser
    run = Path(baseline[0][1].output_dir)
    assert (run / "vocab.txt").read_text() == (model_dir / "vocab.txt").read_text()


def test_the_difference_has_a_paired_interval_and_the_picture_is_written(protocol_run):
    summary, out = protocol_run["summary"], protocol_run["out"]
    for entry in summary["protocol"]["tasks"]["polarity"]["sizes"].values():
        d = entry["difference"]
        model = entry["model"]["held_out"]["values"]
        base = entry["baseline"]["held_out"]["values"]
        assert d["difference"] == pytest.approx(sum(model[s] - base[s] for s in model) / len(model))
        assert d["low"] <= d["difference"] <= d["high"] and d["resampled"] == "seeds and rows"
    assert (out / "label_budgets.png").stat().st_size > 5000


def test_the_bootstrap_interval_excludes_zero_only_for_a_real_difference():
    rng = random.Random(0)
    gold = [rng.randrange(2) for _ in range(400)]
    good = {s: [g if rng.random() < 0.9 else 1 - g for g in gold] for s in range(5)}
    same = {s: [g if rng.random() < 0.9 else 1 - g for g in gold] for s in range(5)}
    worse = {s: [g if rng.random() < 0.6 else 1 - g for g in gold] for s in range(5)}

    def accuracy(predictions):
        return {s: sum(p == g for p, g in zip(v, gold)) / len(gold) for s, v in predictions.items()}

    real = bootstrap_difference(accuracy(good), accuracy(worse), rows=("accuracy", good, worse, gold))
    assert real["low"] > 0.2
    tie = bootstrap_difference(accuracy(good), accuracy(same), rows=("accuracy", good, same, gold))
    assert tie["low"] < 0 < tie["high"]
    seeds_only = bootstrap_difference({1: 0.8, 2: 0.7, 3: 0.75}, {1: 0.6, 2: 0.65, 3: 0.6})
    assert seeds_only["resampled"] == "seeds" and 0.04 < seeds_only["low"] <= seeds_only["high"] < 0.2 + 1e-9


def test_failed_runs_are_those_at_or_below_a_constant_predictor():
    task = SuiteTask(name="t", type="classification", columns={"text": "s", "label": "y"},
                     metrics=["eval_accuracy"])
    train = [{"y": 1}] * 7 + [{"y": 0}] * 3
    held_out = [{"y": 1}] * 6 + [{"y": 0}] * 4
    floor = constant_score(task, train, held_out)
    assert floor == pytest.approx(0.6)
    result = spread({1: 0.6, 2: 0.59, 3: 0.8, 4: float("nan"), 5: 0.61}, floor)
    assert result["failed"] == 3  # at the floor, below it, not finite
    assert spread({1: 0.7, 2: 0.9, 3: 0.8}, floor)["median"] == pytest.approx(0.8)
    regression = SuiteTask(name="v", type="regression", columns={"text": "s", "label": "y"},
                           metrics=["eval_pearson"])
    assert constant_score(regression, train, held_out) == 0.0
    assert spread({1: -0.1, 2: 0.4}, 0.0)["failed"] == 1


def test_reinitialize_draws_the_pooler_and_the_top_layers_afresh(model_dir):
    model = load_model("sequence-classification", model_name_or_path=str(model_dir), num_labels=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(5)
    assert reinitialize(model, pooler=True, top_layers=1) == ["encoder.layer.1", "pooler"]
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert "bert.pooler.dense.weight" in changed and "bert.encoder.layer.1.attention.self.query.weight" in changed
    assert not any(k.startswith(("bert.encoder.layer.0.", "bert.embeddings.")) for k in changed)
    with pytest.raises(ValueError, match="top 3 layers of a model of 2"):
        reinitialize(model, top_layers=3)


@pytest.mark.parametrize("family", ["hfbert", "transformers"])
def test_reinitialize_draws_with_the_models_own_initialiser_over_weights_marked_loaded(family):
    """The re-drawn weights follow the model's own initialiser (a fresh model's spread; hfbert's cut at two std,
    transformers' not), biases 0, LayerNorm 1 and 0, though loading marked every weight initialised; the rest is
    left alone."""
    sizes = {"vocab_size": 50, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128}
    model = load_model("sequence-classification", family, preset="tiny", config_overrides=sizes, num_labels=2)
    fresh = load_model("sequence-classification", family, preset="tiny", config_overrides=sizes, num_labels=2)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(0.5)
            parameter._is_hf_initialized = True  # as loading a checkpoint marks them
    torch.manual_seed(3)
    reinitialize(model, pooler=True, top_layers=1)
    drawn = ("bert.pooler", "bert.encoder.layer.1")

    def weights(of, kind=torch.nn.Linear):
        return torch.cat([m.weight.flatten() for n, m in of.named_modules() if n.startswith(drawn)
                          and isinstance(m, kind)])

    std = model.config.initializer_range
    assert weights(model).std().item() == pytest.approx(weights(fresh).std().item(), rel=0.05)
    assert weights(model).mean().abs().item() < std / 20
    cut = weights(model).abs().max().item() <= 2 * std
    assert cut == (family == "hfbert")
    for name, module in model.named_modules():
        if name.startswith(drawn) and isinstance(module, (torch.nn.Linear, torch.nn.LayerNorm)):
            assert not module.bias.any(), name
    assert bool((weights(model, torch.nn.LayerNorm) == 1).all())
    kept = [p for n, p in model.named_parameters() if not n.startswith(drawn)]
    assert kept and all(bool((p == 0.5).all()) for p in kept)


def test_bad_protocol_settings_stop_in_one_line(model_dir, suite_file, tmp_path, capsys):
    for options, message in ((["--train_sizes", "two"], "--train_sizes"),
                             (["--learning_rates", "1e-4", "1e-4"], "repeats a rate"),
                             (["--selection_seeds", "3"], "more than the 2 seeds"),
                             (["--preset", "fast"], "--preset must be one of")):
        code = main(["evaluate", str(model_dir), "--suite", str(suite_file), "--seeds", "1", "2", "--output_dir",
                     str(tmp_path / "o"), "--progress_bar", "false", *options])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and message in err[0], (options, err)
    assert parse_sizes(["200", "1,000", "full"]) == (200, 1000, "full")
    with pytest.raises(UsageError, match="selection split of 64 rows"):
        evaluate(str(model_dir), suite_file, seeds=[1], output_dir=tmp_path / "p", progress=False,
                 protocol=Protocol(selection_rows=64, baseline=True))


@pytest.mark.slow
def test_the_stable_preset_trains_every_run_and_keeps_the_best_checkpoint_on_the_selection_split(model_dir, suite_file,
                                                                                                 tmp_path):
    out = tmp_path / "stable"
    summary = evaluate(str(model_dir), suite_file, seeds=[1], output_dir=out, progress=False,
                       protocol=Protocol(preset="stable", learning_rates=(1e-4, 3e-3), max_steps=10))
    task = summary["protocol"]["tasks"]["polarity"]
    assert task["max_steps"] == 10 and set(task["sizes"]["full"]["model"]["selection"]) == {"0.0001", "0.003"}
    for rate in ("0.0001", "0.003"):
        run = out / "runs" / "polarity" / "model" / "size-full" / f"lr-{rate}" / "seed-1"
        metrics = json.loads((run / "result.json").read_text())["metrics"]
        assert metrics["train_loss"] > 0 and metrics["epoch"] > 0  # it trained, though evaluations turn do_eval on
        assert not list(run.glob("checkpoint-*")) and not list(run.glob("*.safetensors"))
        args = torch.load(run / "training_args.bin", weights_only=False)
        assert args.load_best_model_at_end and args.eval_steps == 1 and args.max_steps == 10
