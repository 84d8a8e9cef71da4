"""hfbert.metrics: the fine-tuning scores as evaluate modules, equal to scikit-learn/scipy/seqeval computed
directly and to hand-worked SQuAD examples; loaded offline from anywhere; usable by evaluate's evaluators."""

import json
import os
import subprocess
import sys
import textwrap

import evaluate
import numpy as np
import pytest
import torch
from datasets import Dataset
from scipy.stats import pearsonr, spearmanr
from seqeval.metrics import accuracy_score as seqeval_accuracy
from seqeval.metrics import classification_report
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef
from transformers import pipeline

import hfbert
import hfbert.metrics
from hfbert.tasks import (
    best_null_threshold,
    classification_metrics,
    entity_scores,
    metrics_for_trainer,
    squad_evaluate,
)
from hfbert.metrics.squad_scoring import score_question
from hfbert.tokenization import bert_tokenizer_from_vocab

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]


class EvalPrediction:
    """What ``Trainer`` hands ``compute_metrics``."""

    def __init__(self, predictions, label_ids):
        self.predictions, self.label_ids = predictions, label_ids


@pytest.fixture(scope="module")
def modules():
    return {name: hfbert.metrics.load(name) for name in hfbert.metrics.NAMES}


def test_paths_point_into_the_package_and_an_unknown_name_lists_the_names():
    for name in hfbert.metrics.NAMES:
        path = hfbert.metrics.path(name)
        assert os.path.isfile(path) and path.endswith(f"{name}/{name}.py")
    with pytest.raises(ValueError, match=r"unknown hfbert metric 'bleu'; the metrics are \['classification'"):
        hfbert.metrics.path("bleu")


def test_classification_equals_scikit_learn_and_classification_metrics(modules):
    rng = np.random.default_rng(7)
    for num_labels, average in ((2, "binary"), (4, "macro")):
        logits = rng.normal(size=(97, num_labels)).astype(np.float32)
        labels = rng.integers(0, num_labels, 97)
        pred = logits.argmax(-1)
        expected = {
            "accuracy": accuracy_score(labels, pred),
            "f1": f1_score(labels, pred, average=average, zero_division=0),
            "mcc": matthews_corrcoef(labels, pred),
        }
        assert 0.1 < expected["accuracy"] < 0.9  # not a degenerate case
        assert modules["classification"].compute(predictions=pred, references=labels) == expected  # default average
        assert modules["classification"].compute(predictions=pred, references=labels, average=average) == expected
        assert classification_metrics(logits, labels, "single_label_classification") == expected
    micro = modules["classification"].compute(predictions=pred, references=labels, average="micro")["f1"]
    assert micro == f1_score(labels, pred, average="micro")
    with pytest.raises(ValueError, match="average must be one of"):
        modules["classification"].compute(predictions=pred, references=labels, average="samples")


def test_multilabel_equals_scikit_learn():
    rng = np.random.default_rng(8)
    logits = rng.normal(size=(60, 5)).astype(np.float32)
    labels = rng.integers(0, 2, (60, 5)).astype(np.float32)
    pred, gold = (logits > 0).astype(int), labels.astype(int)
    expected = {
        "f1_micro": f1_score(gold, pred, average="micro", zero_division=0),
        "f1_macro": f1_score(gold, pred, average="macro", zero_division=0),
        "subset_accuracy": accuracy_score(gold, pred),
    }
    module = hfbert.metrics.load("classification", config_name="multilabel")
    assert module.compute(predictions=pred, references=gold) == expected
    assert classification_metrics(logits, labels, "multi_label_classification") == expected
    with pytest.raises(ValueError, match="same length"):
        module.compute(predictions=[[0, 1], [1, 0, 1]], references=[[0, 1], [1, 0, 0]])
    with pytest.raises(ValueError, match="config_name must be 'default' or 'multilabel'"):
        hfbert.metrics.load("classification", config_name="multiclass")


def test_regression_equals_scipy(modules):
    rng = np.random.default_rng(9)
    gold = rng.uniform(0, 5, 80)
    pred = (gold + rng.normal(scale=1.5, size=80)).astype(np.float32).reshape(-1, 1)
    expected = {
        "pearson": pearsonr(pred.reshape(-1).astype(np.float64), gold)[0],
        "spearman": spearmanr(pred.reshape(-1).astype(np.float64), gold)[0],
        "mse": np.mean((pred.reshape(-1).astype(np.float64) - gold) ** 2),
    }
    assert 0.3 < expected["pearson"] < 0.95
    assert modules["regression"].compute(predictions=pred.reshape(-1), references=gold) == expected
    assert classification_metrics(pred, gold, "regression") == expected


@pytest.mark.slow
def test_entities_equal_seqeval_and_entity_scores(modules):
    rng = np.random.default_rng(10)
    gold = [[TAGS[i] for i in rng.integers(0, len(TAGS), rng.integers(1, 15))] for _ in range(120)]
    pred = [[TAGS[j] if rng.random() < 0.3 else g for g, j in zip(row, rng.integers(0, len(TAGS), len(row)))]
            for row in gold]
    report = classification_report(gold, pred, output_dict=True, zero_division=0)
    expected = {"precision": report["micro avg"]["precision"], "recall": report["micro avg"]["recall"],
                "f1": report["micro avg"]["f1-score"], "accuracy": seqeval_accuracy(gold, pred),
                **{f"{t}_f1": report[t]["f1-score"] for t in ("LOC", "ORG", "PER")}}
    assert 0.2 < expected["f1"] < 0.9
    assert modules["entities"].compute(predictions=pred, references=gold) == expected
    assert entity_scores(gold, pred) == expected
    assert entity_scores(gold, pred, metric=hfbert.metrics.path("entities")) == expected  # a name for evaluate.load
    with pytest.raises(ValueError, match="sentence 1: 2 reference tags but 1 predicted tags"):
        modules["entities"].compute(predictions=[["O"], ["O"]], references=[["O"], ["O", "B-PER"]])
    with pytest.raises(ValueError, match=r"Mismatch in the number of predictions \(1\) and references \(2\)"):
        modules["entities"].compute(predictions=[["O"]], references=[["O"], ["O"]])


def _squad_inputs(rows, with_null=False):
    predictions, references = [], []
    for qid, (text, answers, *null) in rows.items():
        prediction = {"id": qid, "prediction_text": text}
        predictions.append({**prediction, "no_answer_probability": null[0]} if with_null else prediction)
        references.append({"id": qid, "answers": {"text": answers, "answer_start": [0] * len(answers)}})
    return {"predictions": predictions, "references": references}


@pytest.mark.slow
def test_squad_hand_worked(modules):
    rows = {
        "exact": ("The Eiffel Tower!", ["Eiffel Tower", "the tower"], 0.0),  # EM 1, F1 1
        "half": ("Eiffel", ["Eiffel Tower"], 0.0),  # P 1, R 1/2: F1 2/3
        "chinese": ("北京市", ["北京"], 0.0),  # per character: P 2/3, R 1: F1 4/5
        "wrong": ("Rome", ["Paris"], 0.0),
    }
    expected = {"exact_match": 100 * 1 / 4, "f1": 100 * (1 + 2 / 3 + 4 / 5) / 4}
    assert modules["squad"].compute(**_squad_inputs(rows)) == pytest.approx(expected, rel=1e-12)
    v2 = modules["squad_v2"].compute(**_squad_inputs({**rows, "none": ("", [], 0.0)}, with_null=True))
    assert v2["exact_match"] == pytest.approx(100 * 2 / 5) and v2["f1"] == pytest.approx(100 * (2 + 2 / 3 + 4 / 5) / 5)
    assert (v2["HasAns_total"], v2["NoAns_total"], v2["NoAns_f1"]) == (4.0, 1.0, 100.0)
    assert v2["HasAns_exact_match"] == expected["exact_match"]
    with pytest.raises(ValueError, match="not in the references"):
        modules["squad"].compute(predictions=[{"id": "x", "prediction_text": "a"}],
                                 references=[{"id": "y", "answers": {"text": ["a"], "answer_start": [0]}}])
    with pytest.raises(ValueError, match="'y' appears twice in the references"):
        modules["squad"].compute(predictions=[{"id": "y", "prediction_text": "a"}] * 2,
                                 references=[{"id": "y", "answers": {"text": ["a"], "answer_start": [0]}}] * 2)


def test_squad_v2_threshold_hand_worked(modules):
    # Sorted by no-answer score: c (-3, right), b (-1, wrong on an unanswerable one), a (2, right), d (2, wrong).
    rows = {"a": ("Paris", ["Paris"], 2.0), "b": ("Rome", [], -1.0), "c": ("blue", ["blue"], -3.0),
            "d": ("Oslo", ["Bergen"], 2.0)}
    # never answer: 1 (b); answer c: 2; and b: 1; and a and d together: 2 -> the first 2 wins: threshold -3.
    result = modules["squad_v2"].compute(**_squad_inputs(rows, with_null=True))
    assert (result["best_exact_match"], result["best_exact_match_thresh"]) == (50.0, -3.0)
    assert (result["best_f1"], result["best_f1_thresh"]) == (50.0, -3.0)
    rows["d"] = ("Bergen", ["Bergen"], 2.0)  # now answering a and d gains 2: 3 of 4 at threshold 2
    assert best_null_threshold({q: r[2] for q, r in rows.items()}, {q: r[0] for q, r in rows.items()},
                               {q: r[1] for q, r in rows.items()}) == (2.0, 75.0)


def test_squad_v2_threshold_is_the_best_of_every_threshold():
    rng = np.random.default_rng(11)
    words = ["paris", "the", "tower", "blue", "sky", "北", "京", "river"]
    refs = {f"q{i}": ([] if rng.random() < 0.35 else [" ".join(rng.choice(words, rng.integers(1, 4)))])
            for i in range(150)}
    best = {q: (r[0] if r and rng.random() < 0.5 else " ".join(rng.choice(words, rng.integers(1, 3))))
            for q, r in refs.items()}
    diffs = {q: float(rng.choice([rng.normal(), 0.25, -0.5])) for q in refs}  # ties included
    for metric, index in (("f1", 1), ("exact_match", 0)):
        def total(threshold):
            return 100 * sum(score_question(best[q] if diffs[q] <= threshold else "", refs[q])[index]
                             for q in refs) / len(refs)
        candidates = sorted({*diffs.values(), min(diffs.values()) - 1.0})
        scores = [total(t) for t in candidates]
        threshold, score = best_null_threshold(diffs, best, refs, metric)
        assert score == pytest.approx(max(scores), rel=1e-12)
        assert threshold == candidates[scores.index(max(scores))]  # the lowest threshold reaching the best
        assert squad_evaluate({q: best[q] if diffs[q] <= threshold else "" for q in refs}, refs)[metric] == \
            pytest.approx(score, rel=1e-12)


@pytest.mark.slow
def test_metrics_for_trainer_takes_a_loaded_or_combined_metric():
    rng = np.random.default_rng(12)
    logits, labels = rng.normal(size=(50, 3)), rng.integers(0, 3, 50)
    pred = logits.argmax(-1)
    default = metrics_for_trainer("single_label_classification")(EvalPrediction((logits,), labels))
    assert default["f1"] == f1_score(labels, pred, average="macro")
    combined = evaluate.combine([hfbert.metrics.path("classification")])
    combined = metrics_for_trainer("single_label_classification", metric=combined)
    assert combined(EvalPrediction(logits, labels)) == default
    loaded = metrics_for_trainer("single_label_classification", metric=hfbert.metrics.load("classification"))
    assert loaded(EvalPrediction(logits, labels)) == default
    by_path = metrics_for_trainer("regression", metric=hfbert.metrics.path("regression"))
    values = rng.normal(size=(50, 1))
    assert by_path(EvalPrediction(values, labels.astype(float)))["pearson"] == \
        pearsonr(values.reshape(-1), labels.astype(float))[0]
    with pytest.raises(TypeError, match="metric must be a name or an evaluate module"):
        metrics_for_trainer("regression", metric=42)
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        classification_metrics(logits[:3], labels[:2], "single_label_classification")


LOAD_TWICE = """
import json, os, sys
import evaluate
import hfbert.metrics
out = {}
for name in hfbert.metrics.NAMES:
    first = evaluate.load(hfbert.metrics.path(name))
    again = hfbert.metrics.load(name)
    out[name] = [type(first).__name__, type(again).__name__]
out["scored"] = hfbert.metrics.load("squad_v2").compute(
    predictions=[{"id": "q", "prediction_text": "x", "no_answer_probability": 0.5}],
    references=[{"id": "q", "answers": {"text": ["x"], "answer_start": [0]}}])["f1"]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_module_loads_offline_from_anywhere_twice_and_in_two_processes(tmp_path):
    work, home = tmp_path / "elsewhere", tmp_path / "hf"
    work.mkdir()
    (work / "load.py").write_text(textwrap.dedent(LOAD_TWICE))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTEST"))}
    # An endpoint that cannot answer: any download attempt would fail loudly.
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(home), HF_ENDPOINT="http://127.0.0.1:9", TOKENIZERS_PARALLELISM="false")
    procs = [subprocess.Popen([sys.executable, "load.py"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
        result = json.loads(stdout.strip().splitlines()[-1])
        assert result.pop("scored") == 100.0
        assert sorted(result) == sorted(hfbert.metrics.NAMES)
        assert result["squad_v2"] == ["SquadV2", "SquadV2"]
    cached = {p.name for p in (home / "modules" / "evaluate_modules" / "metrics").iterdir() if p.is_dir()}
    assert cached == set(hfbert.metrics.NAMES)  # evaluate's module cache, nothing else fetched into it
    # HF_HOME/metrics is evaluate's scratch space for the predictions of a computation; no hub/ downloads
    assert {p.name for p in home.iterdir()} <= {"modules", "metrics"}


WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "in", "park", "paris", "london", "anna", "bob", "."]


def _tiny_model_folder(model_cls, path, labels):
    """A tiny untrained hfbert model and its tokenizer (a vocabulary of WORDS), saved to ``path``."""
    vocab = {token: i for i, token in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS])}
    tokenizer = bert_tokenizer_from_vocab(vocab)
    torch.manual_seed(3)
    config = hfbert.HfBertConfig.from_preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=37,
                                             vocab_size=len(vocab), id2label=dict(enumerate(labels)),
                                             label2id={label: i for i, label in enumerate(labels)})
    model_cls(config).eval().save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _sentences(n, seed):
    rng = np.random.default_rng(seed)
    return [list(rng.choice(WORDS, rng.integers(2, 7))) for _ in range(n)]


# The evaluators get the model folder: evaluate 0.4.6 checks a Pipeline object against transformers.TFPreTrainedModel,
# which transformers 5 no longer has; given a path it builds the pipeline itself.
@pytest.mark.slow
def test_text_classification_evaluator_runs_on_an_hfbert_pipeline(tmp_path):
    folder = _tiny_model_folder(hfbert.HfBertForSequenceClassification, tmp_path, ["neg", "pos"])
    pipe = pipeline("text-classification", model=folder, device="cpu")
    texts = [" ".join(words) for words in _sentences(24, 0)]
    data = Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(24)]})
    metric = hfbert.metrics.load("classification")
    result = evaluate.evaluator("text-classification").compute(
        model_or_pipeline=folder, data=data, metric=metric, label_mapping={"neg": 0, "pos": 1})
    own = [{"neg": 0, "pos": 1}[out["label"]] for out in pipe(texts)]
    expected = metric.compute(predictions=own, references=data["label"])
    assert {k: result[k] for k in ("accuracy", "f1", "mcc")} == expected
    assert 0 <= result["accuracy"] <= 1 and 0 <= result["f1"] <= 1


@pytest.mark.slow
def test_token_classification_evaluator_runs_on_an_hfbert_pipeline(tmp_path):
    folder = _tiny_model_folder(hfbert.HfBertForTokenClassification, tmp_path, TAGS[:5])
    pipe = pipeline("token-classification", model=folder, device="cpu")
    sentences = _sentences(16, 1)
    rng = np.random.default_rng(2)
    gold = [[TAGS[i] for i in rng.integers(0, 5, len(words))] for words in sentences]
    data = Dataset.from_dict({"tokens": sentences, "ner_tags": gold})
    metric = hfbert.metrics.load("entities")
    result = evaluate.evaluator("token-classification").compute(model_or_pipeline=folder, data=data, metric=metric)
    own = []
    for words in sentences:  # each word takes the tag of the sub-token that starts it
        tokens = pipe(" ".join(words), ignore_labels=[])
        starts = np.cumsum([0] + [len(w) + 1 for w in words[:-1]])
        own.append([next(t["entity"] for t in tokens if t["start"] == s) for s in starts])
    expected = metric.compute(predictions=own, references=gold)
    assert {"precision", "recall", "f1", "accuracy"} <= set(result)
    assert {k: result[k] for k in expected} == expected
    assert all(0 <= expected[k] <= 1 for k in expected)
    assert 0 < expected["accuracy"] < 1  # random tags and an untrained model: some, not all, agree
