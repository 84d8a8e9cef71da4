"""The fine-tuning recipes end to end on tiny models (2 layers, hidden 32) and a few dozen rows, and the
transformers pipelines on the folders they write: the pipeline must reproduce the recipe's own evaluation."""

import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest
import yaml
from transformers import pipeline

import hfbert.tasks

from helpers.hub_server import run_client, start_hub

REPO = Path(__file__).resolve().parents[2]
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}
POS, NEG = ["good", "great", "fine", "nice", "superb"], ["bad", "awful", "poor", "dull", "weak"]
FILLER = ["the", "movie", "was", "plot", "acting", "really", "quite", "and", "it", "met", "in", "who", "where"]
PEOPLE, PLACES = ["alice", "bob", "carol"], ["paris", "london", "rome"]


def _recipe(name):
    """Import recipes/<name>.py as a module (recipes are scripts, not part of the package)."""
    module_name = f"_recipe_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, REPO / "recipes" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses resolve their annotations through sys.modules
        spec.loader.exec_module(module)
    return sys.modules[module_name]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("recipes")
    vocab = ["[PAD]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "?", ".", *POS, *NEG, *FILLER, *PEOPLE,
             *PLACES, "##s"]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    rng = random.Random(0)
    for split, n in (("train", 48), ("dev", 16)):
        rows = []
        for i in range(n):
            label = i % 2
            words = [rng.choice(FILLER) for _ in range(4)] + [rng.choice(POS if label else NEG)]
            rng.shuffle(words)
            rows.append({"sentence": " ".join(words), "other": rng.choice(FILLER), "label": ["neg", "pos"][label],
                         "valence": label * 2.0 - 1.0 + rng.random() / 10, "tags": [["neg", "pos"][label], "x"]})
        _jsonl(d / f"{split}.jsonl", rows)
    return d


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _args(data_dir, out, *extra, epochs=10, lr="3e-3"):
    return ["--preset", "tiny", "--config_overrides", json.dumps(TINY), "--tokenizer", str(data_dir / "vocab.txt"),
            "--output_dir", str(out), "--num_train_epochs", str(epochs), "--learning_rate", lr,
            "--per_device_train_batch_size", "8", "--per_device_eval_batch_size", "16", "--report_to", "none",
            "--save_strategy", "no", "--use_cpu", "true", "--seed", "0", "--disable_tqdm", "true",
            "--logging_strategy", "no", *extra]


def _read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


# ------------------------------------------------------------------------------------------ classification
@pytest.mark.slow
def test_classification_learns_writes_a_hub_folder_and_the_pipeline_agrees(data_dir, tmp_path):
    out = tmp_path / "cls"
    metrics = _recipe("finetune_classification").main(_args(
        data_dir, out, "--train_file", str(data_dir / "train.jsonl"), "--validation_file", str(data_dir / "dev.jsonl")))
    assert metrics["eval_accuracy"] >= 0.9  # the toy task is separable by one word
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "hfbert" and config["id2label"] == {"0": "neg", "1": "pos"}
    card = (out / "README.md").read_text()
    assert "eval_accuracy" in card and "`neg`" in card and "text-classification" in card
    recipe_predictions = [r["prediction"] for r in _read_jsonl(out / "eval_predictions.jsonl")]
    pipe = pipeline("text-classification", model=str(out), device="cpu")
    texts = [r["sentence"] for r in _read_jsonl(data_dir / "dev.jsonl")]
    piped = [r["label"] for r in pipe(texts)]
    assert piped == recipe_predictions
    gold = [r["label"] for r in _read_jsonl(data_dir / "dev.jsonl")]
    assert sum(p == g for p, g in zip(piped, gold)) / len(gold) == pytest.approx(metrics["eval_accuracy"])


@pytest.mark.slow
def test_pair_regression_from_a_yaml_file_with_transformers_classes(data_dir, tmp_path):
    out = tmp_path / "reg"
    args = _args(data_dir, out, "--train_file", str(data_dir / "train.jsonl"), "--validation_file",
                 str(data_dir / "dev.jsonl"), "--label_column", "valence", "--text_pair_column", "other",
                 "--model_family", "transformers")
    # Typed values as a user would write them (YAML reads a bare `no` as False, so strings stay strings).
    as_dict = {args[i].lstrip("-"): args[i + 1] for i in range(0, len(args), 2)}
    for key in ("num_train_epochs", "learning_rate"):
        as_dict[key] = float(as_dict[key])
    for key in ("per_device_train_batch_size", "per_device_eval_batch_size", "seed"):
        as_dict[key] = int(as_dict[key])
    as_dict.update(use_cpu=True, disable_tqdm=True)
    (tmp_path / "args.yaml").write_text(yaml.safe_dump(as_dict))
    metrics = _recipe("finetune_classification").main([str(tmp_path / "args.yaml")])
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "bert" and config["problem_type"] == "regression"
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert metrics["eval_pearson"] > 0.8 and "eval_spearman" in metrics


@pytest.mark.slow
def test_multi_label(data_dir, tmp_path):
    out = tmp_path / "ml"
    metrics = _recipe("finetune_classification").main(_args(
        data_dir, out, "--train_file", str(data_dir / "train.jsonl"), "--validation_file", str(data_dir / "dev.jsonl"),
        "--label_column", "tags", epochs=1))
    config = json.loads((out / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification" and len(config["id2label"]) == 3
    assert 0.0 <= metrics["eval_f1_micro"] <= 1.0


def test_missing_column_and_unknown_label_name_what_exists(data_dir, tmp_path):
    recipe = _recipe("finetune_classification")
    base = _args(data_dir, tmp_path / "x", "--train_file", str(data_dir / "train.jsonl"),
                 "--validation_file", str(data_dir / "dev.jsonl"), epochs=1)
    with pytest.raises(ValueError, match=r"column 'polarity' not found in the train split; available columns: "):
        recipe.main(base + ["--label_column", "polarity"])
    dev = _read_jsonl(data_dir / "dev.jsonl")
    dev[0]["label"] = "neutral"
    _jsonl(tmp_path / "dev_bad.jsonl", dev)
    bad = _args(data_dir, tmp_path / "x", "--train_file", str(data_dir / "train.jsonl"),
                "--validation_file", str(tmp_path / "dev_bad.jsonl"), epochs=1)
    with pytest.raises(ValueError, match=r"unknown label\(s\) \['neutral'\]; known labels: \['neg', 'pos'\]"):
        recipe.main(bad)


# ------------------------------------------------------------------------------------------------------ NER
def _ner_rows(rng, n, long_every=0):
    rows = []
    for i in range(n):
        length = 30 if long_every and i % long_every == 0 else 6
        words, tags = [], []
        while len(words) < length:
            kind = rng.random()
            if kind < 0.2:
                words.append(rng.choice(PEOPLE)), tags.append("B-PER")
            elif kind < 0.35:
                words += [rng.choice(PLACES), rng.choice(PLACES)]
                tags += ["B-LOC", "I-LOC"]
            else:
                words.append(rng.choice(FILLER)), tags.append("O")
        rows.append({"tokens": words, "ner_tags": tags})
    return rows


@pytest.mark.slow
def test_ner_windows_long_sentences_and_the_pipeline_agrees(data_dir, tmp_path):
    rng = random.Random(1)
    _jsonl(tmp_path / "train.jsonl", _ner_rows(rng, 48, long_every=8))
    dev = _ner_rows(rng, 12, long_every=6)
    _jsonl(tmp_path / "dev.jsonl", dev)
    out = tmp_path / "ner"
    metrics = _recipe("finetune_ner").main(_args(
        data_dir, out, "--train_file", str(tmp_path / "train.jsonl"), "--validation_file", str(tmp_path / "dev.jsonl"),
        "--max_seq_length", "16", "--doc_stride", "4"))
    results = json.loads((out / "all_results.json").read_text())
    assert any("windowed, not cut" in n for n in results["notes"])
    assert metrics["eval_f1"] > 0.5 and 0 <= metrics["eval_precision"] <= 1
    predictions = _read_jsonl(out / "eval_predictions.jsonl")
    assert [len(p["predicted"]) for p in predictions] == [len(r["tokens"]) for r in dev]  # every word predicted
    pipe = pipeline("token-classification", model=str(out), device="cpu", ignore_labels=[])
    compared = 0
    for row, pred in zip(dev, predictions):
        if len(row["tokens"]) + 2 > 16:
            continue  # the recipe windowed this one; the pipeline reads it whole, so contexts differ
        tokens = pipe(" ".join(row["tokens"]))
        assert [t["entity"] for t in tokens] == pred["predicted"]
        compared += 1
    assert compared >= 8


# ------------------------------------------------------------------------------------------------------- QA
def _squad(rng, n, with_bad=False):
    paragraphs = []
    for i in range(n):
        person, place = rng.choice(PEOPLE), rng.choice(PLACES)
        filler = " ".join(rng.choice(FILLER) for _ in range(rng.randint(2, 12)))
        context = f"{filler} {person} met it in {place} . {' '.join(rng.choice(FILLER) for _ in range(6))}"
        qas = [{"id": f"{i}-who", "question": "who met it ?",
                "answers": [{"text": person, "answer_start": context.index(f" {person} met") + 1}]}]
        if i % 3 == 0:
            qas.append({"id": f"{i}-none", "question": "where was bob good ?", "answers": [], "is_impossible": True})
        paragraphs.append({"context": context, "qas": qas})
    if with_bad:
        paragraphs[0]["qas"][0]["answers"][0]["answer_start"] = 0  # text not at its offset: must be reported
    return {"version": "v2.0", "data": [{"title": "toy", "paragraphs": paragraphs}]}


@pytest.mark.slow
def test_qa_v2_recipe_and_the_question_answering_pipeline_agree(data_dir, tmp_path):
    rng = random.Random(2)
    (tmp_path / "train.json").write_text(json.dumps(_squad(rng, 40, with_bad=True)))
    dev = _squad(rng, 10)
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    out = tmp_path / "qa"
    metrics = _recipe("finetune_qa").main(_args(
        data_dir, out, "--train_file", str(tmp_path / "train.json"), "--validation_file", str(tmp_path / "dev.json"),
        "--version_2_with_negative", "true", "--max_seq_length", "24", "--doc_stride", "6", "--max_query_length",
        "8", epochs=8))
    results = json.loads((out / "all_results.json").read_text())
    assert any("1 not at their offset" in n for n in results["notes"])
    assert any("windowed, not cut" in n for n in results["notes"])
    assert 0 <= metrics["eval_best_f1"] <= 100 and metrics["eval_best_f1"] >= metrics["eval_f1"] - 1e-9
    recipe_answers = json.loads((out / "eval_predictions.json").read_text())

    hfbert.tasks.register_pipelines()
    qa = pipeline("question-answering", model=str(out), device="cpu")
    for paragraph in dev["data"][0]["paragraphs"]:
        for q in paragraph["qas"]:
            got = qa(question=q["question"], context=paragraph["context"], max_seq_len=24, doc_stride=6,
                     max_question_len=8, handle_impossible_answer=True,
                     null_score_diff_threshold=metrics["eval_best_threshold"])
            assert got["answer"] == recipe_answers[q["id"]]
            assert got["answer"] == paragraph["context"][got["start"]:got["end"]]


# ------------------------------------------------------------------------------------------ multiple choice
@pytest.mark.slow
def test_multiple_choice(data_dir, tmp_path):
    rng = random.Random(3)
    rows = []
    for i in range(32):
        right = i % 3
        endings = [rng.choice(NEG) for _ in range(3)]
        endings[right] = rng.choice(POS)
        rows.append({"sent1": "the movie was", "ending0": endings[0], "ending1": endings[1], "ending2": endings[2],
                     "label": right})
    _jsonl(tmp_path / "mc.jsonl", rows)
    recipe = _recipe("finetune_multiple_choice")
    common = ["--train_file", str(tmp_path / "mc.jsonl"), "--validation_file", str(tmp_path / "mc.jsonl"),
              "--choice_columns", "ending0,ending1,ending2"]
    out = tmp_path / "mc"
    metrics = recipe.main(_args(data_dir, out, *common))
    assert metrics["eval_accuracy"] >= 0.9
    assert "AutoModelForMultipleChoice" in (out / "README.md").read_text()
    rows[0]["label"] = 7
    _jsonl(tmp_path / "mc_bad.jsonl", rows)
    with pytest.raises(ValueError, match=r"label\(s\) \[7\] are not choice indices; known labels: \[0, 1, 2\]"):
        recipe.main(_args(data_dir, tmp_path / "bad", "--train_file", str(tmp_path / "mc_bad.jsonl"),
                          "--choice_columns", "ending0,ending1,ending2", epochs=1))


# --------------------------------------------------------------------------------------------- push_to_hub
@pytest.mark.slow
def test_push_to_hub_passes_through_to_trainer_and_keeps_the_hfbert_card(data_dir, tmp_path):
    """`--push_to_hub` on the local Hub-protocol server (tests/helpers), in a process that is online to it."""
    hub, httpd = start_hub()
    try:
        out = tmp_path / "pushed"
        args = _args(data_dir, out, "--train_file", str(data_dir / "train.jsonl"), "--validation_file",
                     str(data_dir / "dev.jsonl"), "--push_to_hub", "true", "--hub_model_id", "user/tiny-sentiment",
                     "--hub_strategy", "end", epochs=1)
        code = (
            "import importlib.util, json, sys\n"
            f"spec = importlib.util.spec_from_file_location('recipe', {str(REPO / 'recipes' / 'finetune_classification.py')!r})\n"
            "module = importlib.util.module_from_spec(spec); sys.modules['recipe'] = module\n"
            "spec.loader.exec_module(module)\n"
            "module.main(json.loads(sys.argv[1]))\n"
            "from huggingface_hub import hf_hub_download\n"
            "card = open(hf_hub_download('user/tiny-sentiment', 'README.md')).read()\n"
            "config = json.load(open(hf_hub_download('user/tiny-sentiment', 'config.json')))\n"
            "print(json.dumps({'card': card, 'id2label': config['id2label']}))\n"
        )
        got = run_client(code, hub.client_env(tmp_path / "home"), tmp_path, args)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert "hfbert `finetune_classification` recipe" in got["card"]  # not Trainer's generic card
    assert got["card"] == (out / "README.md").read_text()
    assert got["id2label"] == {"0": "neg", "1": "pos"}
