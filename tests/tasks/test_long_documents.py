"""Documents longer than the model reads: windows with a stride, the per-document mean of logits, and the
classification recipe with --doc_stride end to end (one prediction per input row, scored per row during
training too)."""

import json
import random
from pathlib import Path

import numpy as np
import pytest
from transformers import EvalPrediction

from hfbert.recipes import finetune_classification
from hfbert.tasks import load_tokenizer, metrics_for_trainer
from hfbert.tasks.windows import combine_windows, document_labels, window_texts

TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 37}
POS, NEG = ["good", "great", "fine"], ["bad", "awful", "poor"]
FILLER = ["the", "movie", "was", "plot", "acting", "really", "quite", "and", "it", "met", "in", "who", "where"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Reviews of 20 filler words whose one sentiment word is among the last three: past a 16-token window."""
    d = tmp_path_factory.mktemp("long_documents")
    vocab = ["[PAD]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *POS, *NEG, *FILLER]
    (d / "vocab.txt").write_text("\n".join(vocab) + "\n")
    rng = random.Random(0)
    for split, n in (("train", 128), ("dev", 16), ("test", 12)):
        rows = []
        for i in range(n):
            label = i % 2
            words = [rng.choice(FILLER) for _ in range(20)]
            words[rng.randrange(17, 20)] = rng.choice(POS if label else NEG)
            rows.append({"sentence": " ".join(words), "label": ["neg", "pos"][label], "valence": label * 2.0 - 1.0})
        (d / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d


def _read_jsonl(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _args(data_dir, out, *extra):
    return ["--preset", "tiny", "--config_overrides", json.dumps(TINY), "--tokenizer", str(data_dir / "vocab.txt"),
            "--train_file", str(data_dir / "train.jsonl"), "--validation_file", str(data_dir / "dev.jsonl"),
            "--test_file", str(data_dir / "test.jsonl"), "--max_seq_length", "16", "--output_dir", str(out),
            "--learning_rate", "3e-3", "--per_device_train_batch_size", "16", "--per_device_eval_batch_size", "32",
            "--report_to", "none", "--use_cpu", "true", "--seed", "0", "--disable_tqdm", "true",
            "--logging_strategy", "no", *extra]


# ------------------------------------------------------------------------------------------------ windows
def test_windows_share_the_stride_and_cover_the_whole_text(data_dir):
    tokenizer = load_tokenizer(str(data_dir / "vocab.txt"))
    words = [FILLER[i % len(FILLER)] for i in range(20)]
    batch = {"text": [" ".join(words), "good movie"], "other": ["it was", "the plot"]}
    enc = window_texts(batch, [5, 6], tokenizer, max_length=8, stride=2, text_column="text", labels=["a", "b"])
    pieces = [tokenizer.convert_ids_to_tokens(ids) for ids in enc["input_ids"]]
    assert all(p[0] == "[CLS]" and p[-1] == "[SEP]" and len(p) <= 8 for p in pieces)
    body = [p[1:-1] for p in pieces]
    # 20 words, 6 per window, each window starting 4 after the last: 0-5, 4-9, 8-13, 12-17, 16-19.
    assert enc["document"] == [5] * 5 + [6] and enc["labels"] == ["a"] * 5 + ["b"]
    for left, right in zip(body[:4], body[1:5]):
        assert left[-2:] == right[:2]  # neighbours share the stride's 2 tokens
    assert body[0] + [t for b in body[1:5] for t in b[2:]] == words  # and together hold every token, in order
    assert body[5] == ["good", "movie"]  # a text that fits is one window

    pairs = window_texts(batch, [0, 1], tokenizer, max_length=10, stride=2, text_column="text",
                         text_pair_column="other")
    first = tokenizer.convert_ids_to_tokens(pairs["input_ids"][0])
    assert first[-4:] == ["[SEP]", "it", "was", "[SEP]"] and len(first) == 10  # the second text rides whole
    assert pairs["document"].count(0) == 6  # 5 tokens of the first text per window, 3 of them new: 0-4, ..., 15-19


def test_a_stride_that_leaves_no_room_is_refused_in_one_line(data_dir, tmp_path, capsys):
    tokenizer = load_tokenizer(str(data_dir / "vocab.txt"))
    with pytest.raises(ValueError, match=r"^stride \(6\) must be at least 0 and smaller than the 6 text tokens"):
        window_texts({"text": ["a b"]}, [0], tokenizer, max_length=8, stride=6, text_column="text")
    with pytest.raises(ValueError, match=r"row 1: its 'other' text has 4 tokens, which leaves 3 tokens of a "
                                         r"10-token window for 'text'; the stride \(3\) must be smaller"):
        window_texts({"text": ["the", "the"], "other": ["it", "it was the plot"]}, [0, 1], tokenizer, max_length=10,
                     stride=3, text_column="text", text_pair_column="other")
    for stride in ("14", "-1"):
        with pytest.raises(SystemExit) as exc:
            finetune_classification.main(_args(data_dir, tmp_path / "x", "--doc_stride", stride))
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"error: --doc_stride ({stride}) must be at least 0 and smaller than " \
                                              "the 14 text tokens of a 16-token window" in err


# --------------------------------------------------------------------------------------- one per document
def test_the_mean_of_a_documents_window_logits_decides():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, 1.5],   # document 0: two weak "1" windows, one strong "0"
                       [0.0, 3.0],                           # document 1: one window
                       [1.0, 0.0], [1.0, 1.5]])              # document 2
    documents = [0, 0, 0, 1, 2, 2]
    mean = combine_windows(logits, documents)
    assert mean == pytest.approx(np.array([[2 / 3, 2.5 / 3], [0.0, 3.0], [1.0, 0.75]]))
    # A majority vote would say 1 for document 0 and the mean does too; the most confident window alone says 0.
    assert mean.argmax(-1)[0] == 1 and logits[:3].max(-1).argmax() == 0
    assert combine_windows(np.array([[1.0], [3.0], [-2.0]]), [0, 0, 1]) == pytest.approx(np.array([[2.0], [-2.0]]))
    assert list(document_labels(np.array([1, 1, 1, 0, 1, 1]), documents)) == [1, 0, 1]
    with pytest.raises(ValueError, match="6 window predictions but 5 window documents"):
        combine_windows(logits, documents[:5])
    with pytest.raises(ValueError, match="must run 0, 1, 2, ... in order"):
        combine_windows(logits, [0, 0, 2, 2, 3, 3])

    # The trainer's metric scores documents: per window 4 of 6 are right, per document all 3.
    labels = np.array([1, 1, 1, 1, 0, 0])
    per_window = metrics_for_trainer("single_label_classification")(EvalPrediction(logits, labels))
    per_document = metrics_for_trainer("single_label_classification", documents=documents)(
        EvalPrediction(logits, labels))
    assert per_window["accuracy"] == pytest.approx(4 / 6) and per_document["accuracy"] == 1.0


# ------------------------------------------------------------------------------------------------ recipe
@pytest.mark.slow
def test_windows_read_the_tail_that_truncation_cuts_one_prediction_per_row(data_dir, tmp_path):
    dev, test = _read_jsonl(data_dir / "dev.jsonl"), _read_jsonl(data_dir / "test.jsonl")
    # Scored per document during training: every evaluation chooses the best checkpoint on document accuracy.
    every = ["--eval_strategy", "steps", "--eval_steps", "50", "--save_strategy", "steps", "--save_steps", "50",
             "--load_best_model_at_end", "true", "--metric_for_best_model", "accuracy", "--max_steps", "300"]
    out = tmp_path / "windows"
    metrics = finetune_classification.main(_args(data_dir, out, "--doc_stride", "4", *every))
    for prefix, rows in (("eval", dev), ("test", test)):
        predicted = [r["prediction"] for r in _read_jsonl(out / f"{prefix}_predictions.jsonl")]
        assert len(predicted) == len(rows)  # one row per input row, in order
        right = sum(p == r["label"] for p, r in zip(predicted, rows)) / len(rows)
        assert metrics[f"{prefix}_accuracy"] == pytest.approx(right)
    assert metrics["eval_accuracy"] >= 0.9 and metrics["test_accuracy"] >= 0.9
    last = max(out.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((last / "trainer_state.json").read_text())
    scores = [e["eval_accuracy"] for e in state["log_history"] if "eval_accuracy" in e]
    assert len(scores) == 6 and all(s * len(dev) == pytest.approx(round(s * len(dev))) for s in scores)
    assert state["best_metric"] == pytest.approx(metrics["eval_accuracy"])  # the best model came back
    results = json.loads((out / "all_results.json").read_text())
    assert any("16 of 16 validation texts are longer than 16 tokens" in n and "windowed, not cut" in n
               for n in results["notes"])
    assert "train.jsonl (128 rows)" in (out / "README.md").read_text()  # the card counts rows, not windows

    cut = finetune_classification.main(_args(data_dir, tmp_path / "cut", "--max_steps", "300"))
    assert cut["eval_accuracy"] <= 0.75  # the sentiment word is past the first 16 tokens: chance, near enough
    assert len(_read_jsonl(tmp_path / "cut" / "test_predictions.jsonl")) == len(test)


@pytest.mark.slow
def test_regression_windows_average_the_predicted_values(data_dir, tmp_path):
    out = tmp_path / "regression"
    metrics = finetune_classification.main(_args(data_dir, out, "--doc_stride", "4", "--label_column", "valence",
                                                 "--task_type", "regression", "--max_steps", "60"))
    rows = _read_jsonl(out / "test_predictions.jsonl")
    assert len(rows) == 12 and all(isinstance(r["prediction"], float) for r in rows)
    assert "test_pearson" in metrics and "eval_pearson" in metrics
