"""Classification helpers and sentence pooling."""

import numpy as np
import pytest
import torch

from hfbert.tasks import (
    build_label_maps,
    check_columns,
    classification_metrics,
    encode_labels,
    pool,
    special_tokens_mask,
)


def test_label_maps_sort_numbers_numerically_and_encode():
    label2id, id2label = build_label_maps([10, 2, 1, 2])
    assert label2id == {"1": 0, "2": 1, "10": 2} and id2label[2] == "10"
    assert encode_labels([2, 10], label2id, "single_label_classification") == [1, 2]
    multi, _ = build_label_maps([["b", "a"], ["c"]], multi_label=True)
    assert encode_labels([["a", "c"]], multi, "multi_label_classification") == [[1.0, 0.0, 1.0]]
    assert encode_labels(["0.5", 2], None, "regression") == [0.5, 2.0]


def test_unknown_label_and_missing_column_list_what_exists():
    label2id, _ = build_label_maps(["neg", "pos"])
    with pytest.raises(ValueError, match=r"unknown label\(s\) \['neutral'\]; known labels: \['neg', 'pos'\]"):
        encode_labels(["pos", "neutral"], label2id, "single_label_classification")
    with pytest.raises(ValueError, match=r"column 'label' not found in the train; available columns: \['text'"):
        check_columns(["text", "valence"], ["text", "label"], split="train")
    with pytest.raises(ValueError, match="regression targets must be numbers"):
        encode_labels(["high"], None, "regression")
    with pytest.raises(TypeError, match="list of labels"):
        build_label_maps(["a"], multi_label=True)


def test_metrics_match_hand_computed_values():
    logits = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    labels = np.array([0, 1, 0, 0])
    m = classification_metrics(logits, labels, "single_label_classification")
    assert m["accuracy"] == 0.75 and m["f1"] == pytest.approx(2 / 3)
    # MCC from the confusion matrix tp=1, tn=2, fp=1, fn=0.
    assert m["mcc"] == pytest.approx((1 * 2 - 1 * 0) / np.sqrt(2 * 1 * 3 * 2))
    r = classification_metrics(np.array([[1.0], [2.0], [4.0]]), np.array([1.0, 3.0, 3.5]), "regression")
    assert r["spearman"] == pytest.approx(1.0) and 0.8 < r["pearson"] < 1.0
    ml = classification_metrics(np.array([[1.0, -1.0], [1.0, 1.0]]), np.array([[1, 0], [0, 1]]),
                                "multi_label_classification")
    assert ml["subset_accuracy"] == 0.5 and ml["f1_micro"] == pytest.approx(0.8)


def test_mean_pooling_skips_padding_and_special_tokens():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float).reshape(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    ids = torch.tensor([[101, 7, 8, 102], [101, 9, 102, 0]])
    special = special_tokens_mask(ids, [0, 101, 102])
    out = pool(hidden, mask, "mean", special)
    assert torch.allclose(out[0], hidden[0, 1:3].mean(0)) and torch.allclose(out[1], hidden[1, 1])
    assert torch.equal(pool(hidden, mask, "cls"), hidden[:, 0])
    # Padding content must not matter.
    changed = hidden.clone()
    changed[1, 3] = 1e6
    assert torch.allclose(pool(changed, mask, "mean", special), out)
    with pytest.raises(ValueError, match="no valid non-special token"):
        pool(hidden, mask, "mean", torch.ones_like(special))
    with pytest.raises(ValueError, match="pooling strategy"):
        pool(hidden, mask, "max")
