"""Extractive QA: SQuAD metrics, sliding windows, span decoding and null handling (no model needed)."""

import json

import numpy as np
import pytest
from transformers import AutoTokenizer

from hfbert.tasks import (
    best_null_threshold,
    best_spans,
    check_answer_offsets,
    exact_match,
    f1,
    load_peoples_daily,
    load_squad_json,
    postprocess_qa_predictions,
    prepare_qa_features,
    squad_evaluate,
    synthetic_squad_from_entities,
)


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return AutoTokenizer.from_pretrained(minilm_path)


def _features(batch):
    return [{"example_id": e, "offset_mapping": o, "max_context": m}
            for e, o, m in zip(batch["example_id"], batch["offset_mapping"], batch["max_context"])]


def _batch(records):
    return {k: [r[k] for r in records] for k in ("id", "question", "context", "answers")}


# ------------------------------------------------------------------------------------------------- metrics
def test_squad_normalisation_and_f1():
    assert exact_match("The Eiffel Tower!", "eiffel tower") == 1.0
    assert exact_match("Eiffel", "eiffel tower") == 0.0
    assert f1("Eiffel", "the Eiffel Tower") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert f1("", "") == 1.0 and f1("x", "") == 0.0 and f1("", "x") == 0.0


def test_chinese_is_scored_per_character():
    # One wrong character out of four: word-level scoring would give 0, character level gives 0.75.
    assert f1("北京大学", "北京大字") == pytest.approx(0.75)
    assert exact_match("北京大学。", "北京大学") == 1.0  # CJK punctuation is stripped too
    assert f1("在北京 2008", "北京 2008") == pytest.approx(2 * 0.75 * 1.0 / 1.75)


def test_squad_evaluate_splits_has_and_no_answer_and_counts_missing():
    refs = {"a": ["Paris"], "b": [], "c": ["blue sky"]}
    result = squad_evaluate({"a": "Paris", "b": "", "c": "sky"}, refs)
    assert result["exact_match"] == pytest.approx(200 / 3)
    assert result["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3) / 3)
    assert result["HasAns_total"] == 2 and result["NoAns_exact_match"] == 100.0
    partial = squad_evaluate({"a": "Paris"}, refs)
    assert partial["missing"] == 2 and partial["exact_match"] == pytest.approx(100 / 3)
    with pytest.raises(ValueError, match="not in the references"):
        squad_evaluate({"zzz": "x"}, refs)


def test_null_threshold_search_finds_the_best_cut():
    refs = {"a": ["x"], "b": [], "c": ["y"], "d": []}
    best = {"a": "x", "b": "wrong", "c": "y", "d": "wrong"}
    # Answerable questions have low null-minus-span differences here: the best cut lies between 0.5 and 2.
    diffs = {"a": -1.0, "c": 0.5, "b": 2.0, "d": 3.0}
    threshold, score = best_null_threshold(diffs, best, refs)
    assert threshold == 0.5 and score == 100.0
    # Abstaining everywhere would only score 50: the search must not settle for it.
    assert best_null_threshold({"a": 5.0, "c": 5.0, "b": 5.0, "d": 5.0}, best, refs)[1] == 50.0


# ------------------------------------------------------------------------------------------- decoding
def test_best_spans_never_end_before_start_and_respects_length():
    start = np.array([0.0, 0.0, 1.0, 9.0, 0.0, 0.0])
    end = np.array([0.0, 8.0, 0.0, 0.0, 0.5, 2.0])  # the best end (1) lies before the best start (3)
    ctx = np.array([False, True, True, True, True, True])
    spans = best_spans(start, end, ctx, n_best_size=5, max_answer_length=30)
    assert all(s <= e for _, s, e in spans)
    assert spans[0][1:] == (3, 5)  # not the independent arg-max pair (3, 1)
    short = best_spans(start, end, ctx, n_best_size=5, max_answer_length=2)
    assert all(e - s + 1 <= 2 for _, s, e in short) and short[0][1:] == (3, 4)


def test_spans_crossing_the_question_are_refused(tokenizer):
    rec = {"id": "q", "question": "What colour is the sky?", "context": "The sky is blue.",
           "answers": {"text": ["blue"], "answer_start": [11]}}
    feats = prepare_qa_features(_batch([rec]), tokenizer, max_length=32, doc_stride=8, max_query_length=12)
    T = len(feats["input_ids"][0])
    start, end = np.zeros((1, T)), np.zeros((1, T))
    start[0, 2] = 50.0  # a question token: huge score, illegal start
    context_positions = [i for i, o in enumerate(feats["offset_mapping"][0]) if o is not None]
    blue = next(i for i in context_positions if feats["offset_mapping"][0][i][0] == 11)
    start[0, blue] = 3.0
    end[0, blue] = 3.0
    out = postprocess_qa_predictions([rec], _features(feats), start, end)
    assert out.predictions["q"] == "blue"
    assert all(c["start"] >= 0 and "colour" not in c["text"] for c in out.nbest["q"])


def _long_record():
    words = [f"filler{i}" for i in range(80)]
    words[40:42] = ["Blue", "Harbor"]
    context = " ".join(words)
    return {"id": "long", "question": "Where?", "context": context,
            "answers": {"text": ["Blue Harbor"], "answer_start": [context.index("Blue Harbor")]}}


def test_windows_cover_the_context_and_label_only_windows_holding_the_answer(tokenizer):
    rec = _long_record()
    feats = prepare_qa_features(_batch([rec]), tokenizer, max_length=40, doc_stride=20, max_query_length=8,
                                training=True)
    assert len(feats["input_ids"]) > 3  # windowed, not cut
    covered = {tuple(o) for offsets in feats["offset_mapping"] for o in offsets if o is not None}
    assert covered == {tuple(o) for o in tokenizer(rec["context"], return_offsets_mapping=True,
                                                   add_special_tokens=False)["offset_mapping"]}
    labelled = [w for w, s in enumerate(feats["start_positions"]) if s != 0]
    assert labelled  # at least one window holds the whole answer
    for w in range(len(feats["input_ids"])):
        s, e = feats["start_positions"][w], feats["end_positions"][w]
        if w in labelled:
            a, b = feats["offset_mapping"][w][s][0], feats["offset_mapping"][w][e][1]
            assert rec["context"][a:b] == "Blue Harbor"
        else:
            assert (s, e) == (0, 0)  # the [CLS] position, never a span the window cannot see
    # Every context token is a max-context token in exactly one window.
    counts = {}
    for offsets, flags in zip(feats["offset_mapping"], feats["max_context"]):
        for o, flag in zip(offsets, flags):
            if flag:
                counts[tuple(o)] = counts.get(tuple(o), 0) + 1
    assert set(counts) == covered and set(counts.values()) == {1}


def test_answer_split_across_windows_is_taken_from_its_max_context_window(tokenizer):
    rec = _long_record()
    feats = prepare_qa_features(_batch([rec]), tokenizer, max_length=40, doc_stride=20, max_query_length=8)
    n, T = len(feats["input_ids"]), len(feats["input_ids"][0])
    start, end = np.full((n, T), -1.0), np.full((n, T), -1.0)
    target = rec["answers"]["answer_start"][0]
    answer_windows = set()
    for w, offsets in enumerate(feats["offset_mapping"]):
        for i, o in enumerate(offsets):
            if o is not None and o[0] == target:
                start[w, i] = 10.0
                answer_windows.add(w)
            if o is not None and o[1] == target + len("Blue Harbor"):
                end[w, i] = 10.0
            if o is not None and not feats["max_context"][w][i] and target - 30 < o[0] < target:
                # Tempting starts just before the answer, but in windows where those tokens sit near the
                # edge: a decoder without the max-context rule would answer "filler3x ... Blue Harbor".
                start[w, i] = 15.0
    assert len(answer_windows) >= 2  # the answer really is seen by several windows
    out = postprocess_qa_predictions([rec], _features(feats), start, end)
    assert out.predictions["long"] == "Blue Harbor"


def test_null_answer_wins_in_version_2(tokenizer):
    rec = {"id": "n", "question": "Who?", "context": "Nobody came to the party.",
           "answers": {"text": [], "answer_start": []}}
    feats = prepare_qa_features(_batch([rec]), tokenizer, max_length=24, doc_stride=4, max_query_length=6)
    T = len(feats["input_ids"][0])
    start, end = np.zeros((1, T)), np.zeros((1, T))
    start[0, 0] = end[0, 0] = 5.0  # [CLS] = null score 10
    start[0, 5] = end[0, 5] = 3.0  # best span scores 6
    v2 = postprocess_qa_predictions([rec], _features(feats), start, end, version_2_with_negative=True)
    assert v2.predictions["n"] == "" and v2.null_score_diffs["n"] == pytest.approx(4.0)
    assert v2.best_answers["n"] != ""
    # A threshold above the difference lets the span through; SQuAD 1.1 never abstains.
    assert v2.with_threshold(5.0)["n"] == v2.best_answers["n"]
    v1 = postprocess_qa_predictions([rec], _features(feats), start, end)
    assert v1.predictions["n"] == v2.best_answers["n"]
    assert squad_evaluate(v2.predictions, {"n": []})["exact_match"] == 100.0


# ---------------------------------------------------------------------------------------- input checks
def test_load_squad_json_and_offset_report(tmp_path):
    data = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "Alice met Bob in Paris.",
        "qas": [
            {"id": "ok", "question": "Who?", "answers": [{"text": "Bob", "answer_start": 10}]},
            {"id": "moved", "question": "Where?", "answers": [{"text": "Paris", "answer_start": 3}]},
            {"id": "gone", "question": "When?", "answers": [{"text": "Monday", "answer_start": 0}]},
            {"id": "none", "question": "Why?", "answers": [], "is_impossible": True},
        ]}]}]}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(data))
    records = load_squad_json(path)
    assert [r["id"] for r in records] == ["ok", "moved", "gone", "none"]
    fixed, report = check_answer_offsets(records)
    assert report.checked == 3 and report.relocated == ["moved"] and report.unfound == ["gone"]
    assert [r["id"] for r in fixed] == ["ok", "moved", "none"]
    assert fixed[1]["answers"]["answer_start"] == [17]
    assert "1 not in the context" in report.summary()
    with pytest.raises(FileNotFoundError):
        load_squad_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="SQuAD layout"):
        load_squad_json(tmp_path / "bad.json")


def test_bad_window_settings_and_long_questions(tokenizer):
    rec = _long_record()
    with pytest.raises(ValueError, match="doc_stride"):
        prepare_qa_features(_batch([rec]), tokenizer, max_length=40, doc_stride=36, max_query_length=8)
    long_q = {**rec, "question": " ".join(["why"] * 30)}
    with pytest.raises(ValueError, match="longest question 30"):
        prepare_qa_features(_batch([long_q]), tokenizer, max_length=40, doc_stride=8, max_query_length=64)
    with pytest.warns(UserWarning, match="1 questions were longer"):
        feats = prepare_qa_features(_batch([long_q]), tokenizer, max_length=40, doc_stride=10, max_query_length=8)
    assert feats["input_ids"][0][1:9] == [tokenizer.convert_tokens_to_ids("why")] * 8


# --------------------------------------------------------------------------- synthetic set from real text
def test_oracle_logits_recover_every_answer_on_a_synthetic_set_from_real_news(peoples_daily_path, tokenizer):
    """SYNTHETIC QA built mechanically from real news sentences (People's Daily entities): with logits that point
    at the gold tokens, windowing + max-context decoding must return every gold answer exactly."""
    rows = load_peoples_daily(peoples_daily_path, max_sentences=300)
    records = synthetic_squad_from_entities(rows, seed=0, joiner="")
    assert len(records) > 100
    for r in records:  # mechanically built: the answer is at its offset
        a, s = r["answers"]["text"][0], r["answers"]["answer_start"][0]
        assert r["context"][s:s + len(a)] == a
    feats = prepare_qa_features(_batch(records), tokenizer, max_length=32, doc_stride=8, max_query_length=10,
                                training=True)
    assert len(feats["input_ids"]) > 1.5 * len(records)  # many tweets need several 32-token windows
    n, T = len(feats["input_ids"]), len(feats["input_ids"][0])
    rng = np.random.default_rng(0)
    start, end = rng.normal(0, 1, (n, T)), rng.normal(0, 1, (n, T))
    for w, (s, e) in enumerate(zip(feats["start_positions"], feats["end_positions"])):
        if s:  # the windows that hold the answer point at it
            start[w, s] += 20
            end[w, e] += 20
    out = postprocess_qa_predictions(records, _features(feats), start, end, max_answer_length=30)
    refs = {r["id"]: r["answers"]["text"] for r in records}
    # Answers longer than one window cannot be recovered: count them instead of hiding them.
    too_long = sum(1 for r in records if all(r["id"] != feats["example_id"][w] or s == 0
                                             for w, s in enumerate(feats["start_positions"])))
    scores = squad_evaluate(out.predictions, refs)
    assert scores["exact_match"] == pytest.approx(100.0 * (len(records) - too_long) / len(records))
    assert too_long < len(records) * 0.05


def test_synthetic_chinese_set_with_unanswerable_questions(tmp_path):
    rows = [{"tokens": list("江泽民在北京"), "ner_tags": ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC"]},
            {"tokens": list("上海很大"), "ner_tags": ["B-LOC", "I-LOC", "O", "O"]}]
    records = synthetic_squad_from_entities(rows, seed=1, joiner="", unanswerable_rate=1.0)
    assert any(not r["answers"]["text"] for r in records)
    answerable = synthetic_squad_from_entities(rows, seed=1, joiner="")
    first = answerable[0]
    assert first["context"] == "江泽民在北京"
    assert first["answers"]["text"][0] in {"江泽民", "北京"}
    s = first["answers"]["answer_start"][0]
    assert first["context"][s:s + len(first["answers"]["text"][0])] == first["answers"]["text"][0]
