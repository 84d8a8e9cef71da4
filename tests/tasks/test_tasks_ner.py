"""NER: label alignment, windows for long inputs merged by max context, entity scores, People's Daily."""

import numpy as np
import pytest
from transformers import AutoTokenizer

from hfbert.tasks import (
    align_labels,
    b_to_i_map,
    build_label_list,
    encode_tags,
    entity_scores,
    load_peoples_daily,
    merge_word_predictions,
    tokenize_and_align_labels,
)

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
L2I = {label: i for i, label in enumerate(LABELS)}


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def test_label_list_is_stable_and_b_maps_to_i():
    labels = build_label_list([["B-PER", "O"], ["I-LOC", "B-LOC", "I-PER"]])
    assert labels == LABELS
    assert b_to_i_map(LABELS) == {1: 2, 3: 4}


def test_unknown_tag_lists_the_known_labels():
    with pytest.raises(ValueError, match=r"unknown label 'B-ORG'.*known labels: \['B-LOC'"):
        encode_tags(["O", "B-ORG"], L2I)


def test_first_subtoken_and_all_subtoken_alignment(tokenizer):
    words = ["Schwarzenegger", "visited", "Reykjavik"]
    tags = ["B-PER", "O", "B-LOC"]
    first = tokenize_and_align_labels({"tokens": [words], "ner_tags": [tags]}, tokenizer, L2I)
    every = tokenize_and_align_labels({"tokens": [words], "ner_tags": [tags]}, tokenizer, L2I,
                                      label_all_subtokens=True)
    pieces = tokenizer.convert_ids_to_tokens(first["input_ids"][0])
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    assert first["labels"][0][0] == first["labels"][0][-1] == -100
    n_name = len(tokenizer.tokenize("Schwarzenegger"))
    assert n_name > 1  # the test needs a word split into several pieces
    assert first["labels"][0][1:1 + n_name] == [L2I["B-PER"]] + [-100] * (n_name - 1)
    assert every["labels"][0][1:1 + n_name] == [L2I["B-PER"]] + [L2I["I-PER"]] * (n_name - 1)
    supervised = [x for x in first["labels"][0] if x != -100]
    assert supervised == [L2I[t] for t in tags]
    assert first["word_index"][0][1:1 + n_name] == [0] + [-1] * (n_name - 1)
    assert align_labels([None, 0, 0], [False, True, False], [1], True, {1: 2}) == [-100, 1, 2]


def test_long_input_is_windowed_and_merged_back_without_loss(tokenizer):
    words = [f"w{i}" for i in range(100)]
    tags = ["O"] * 100
    tags[50], tags[51] = "B-LOC", "I-LOC"
    feats = tokenize_and_align_labels({"tokens": [words], "ner_tags": [tags]}, tokenizer, L2I,
                                      max_length=24, stride=6)
    assert len(feats["input_ids"]) > 5 and max(len(x) for x in feats["input_ids"]) <= 24
    seen = {w for row in feats["word_index"] for w in row if w >= 0}
    assert seen == set(range(100))  # nothing cut
    # Logits that encode each word's tag, except that windows disagree at their edges: the merge must
    # take every word from the window where it has the most context.
    n, T = len(feats["input_ids"]), max(len(x) for x in feats["input_ids"])
    logits = np.zeros((n, T, len(LABELS)))
    for w, row in enumerate(feats["word_index"]):
        content = [i for i, wid in enumerate(row) if wid >= 0]
        for i in content:
            edge = min(i - content[0], content[-1] - i) < 2
            label = L2I["B-PER"] if edge else L2I[tags[row[i]]]
            logits[w, i, label] = 1.0
    preds, missing = merge_word_predictions(feats["example_index"], feats["word_index"], logits, [100])
    assert missing == 0
    assert [LABELS[p] for p in preds[0][2:-2]] == tags[2:-2]


def test_words_the_tokenizer_drops_are_counted(tokenizer):
    feats = tokenize_and_align_labels({"tokens": [["a", "\u200b", "b"]]}, tokenizer)
    n, T = len(feats["input_ids"]), len(feats["input_ids"][0])
    preds, missing = merge_word_predictions(feats["example_index"], feats["word_index"], np.zeros((n, T, 2)), [3])
    assert missing == 1 and len(preds[0]) == 3


def test_entity_scores_are_entity_level():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    pred = [["B-PER", "O", "O", "B-LOC"]]  # 3 of 4 tags right, but only 1 of 2 entities
    scores = entity_scores(gold, pred)
    assert scores["accuracy"] == pytest.approx(0.75)
    assert scores["precision"] == pytest.approx(0.5) and scores["recall"] == pytest.approx(0.5)
    assert scores["LOC_f1"] == 1.0 and scores["PER_f1"] == 0.0
    with pytest.raises(ValueError, match="differ"):
        entity_scores(gold, [["O"]])


def test_peoples_daily_character_bio(tmp_path):
    path = tmp_path / "pd.txt"
    path.write_text("江/nr  泽民/nr  在/p  北京/ns  天津/ns  会见/v  新华社/nt  记者/n\n\n", encoding="utf-8")
    (rec,) = load_peoples_daily(path)
    assert "".join(rec["tokens"]) == "江泽民在北京天津会见新华社记者"
    assert rec["ner_tags"] == ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC", "B-LOC", "I-LOC", "O", "O",
                               "B-ORG", "I-ORG", "I-ORG", "O", "O"]
    with pytest.raises(FileNotFoundError):
        load_peoples_daily(tmp_path / "none.txt")


def test_real_peoples_daily_file_has_all_three_types(peoples_daily_path):
    records = load_peoples_daily(peoples_daily_path, max_sentences=200)
    assert len(records) == 200
    tags = {t for r in records for t in r["ner_tags"]}
    assert {"B-PER", "I-PER", "B-LOC", "B-ORG"} <= tags
    assert all(len(r["tokens"]) == len(r["ner_tags"]) for r in records)
