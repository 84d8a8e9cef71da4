"""build_pretraining_dataset end to end on real text (Austen, People's Daily): determinism, statistics with
stated tolerances, streaming, Chinese whole-word masking, bad input and the report (the command: test_data_prepared)."""

import itertools
import warnings
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset
from datasets.utils.logging import disable_progress_bar
from transformers import BertTokenizerFast

from hfbert.data import (
    CHAPTER_HEADING,
    DataCollatorForBertPretraining,
    PreSegmented,
    build_pretraining_dataset,
    content_digest,
    num_to_predict,
    pool_bounds,
    read_people_daily,
)

disable_progress_bar()
AUSTEN_LINES = 2500  # Emma's first ~20 chapters: ~230k tokens, enough for the tolerances below


@pytest.fixture(scope="module")
def zh_tok():
    import importlib.util

    vocab = Path(importlib.util.find_spec("berserker").origin).parent / "assets" / "vocab.txt"
    return BertTokenizerFast(vocab=str(vocab))


@pytest.fixture(scope="module")
def austen(shared_data, tmp_path_factory):
    lines = (shared_data / "en_austen_6novels.txt").read_text(encoding="utf-8").splitlines()[:AUSTEN_LINES]
    path = tmp_path_factory.mktemp("austen") / "austen.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _austen_kwargs(**overrides):
    kwargs = dict(input_layout="paragraphs", document_boundary=CHAPTER_HEADING, dupe_factor=1, pool_size=8, seed=7)
    kwargs.update(overrides)
    return kwargs


@pytest.fixture(scope="module")
def static_build(austen, en_tok):
    return build_pretraining_dataset(austen, en_tok, return_report=True, **_austen_kwargs())


@pytest.mark.slow
def test_byte_identical_for_num_proc_1_and_2_and_across_runs(static_build, austen, en_tok):
    dataset, report = static_build
    two = build_pretraining_dataset(austen, en_tok, num_proc=2, **_austen_kwargs())
    again = build_pretraining_dataset(austen, en_tok, num_proc=1, **_austen_kwargs())
    other_seed = build_pretraining_dataset(austen, en_tok, **_austen_kwargs(seed=8))
    assert report["digest"] == content_digest(dataset) == content_digest(two) == content_digest(again)
    assert content_digest(other_seed) != report["digest"]
    # The content digest is also the datasets fingerprint: the same content, the same fingerprint.
    assert dataset._fingerprint == two._fingerprint == report["digest"][:32] != other_seed._fingerprint


def test_layout_segment_ids_lengths_and_fixed_mask_counts(static_build, en_tok):
    dataset, report = static_build
    cls, sep, mask = en_tok.cls_token_id, en_tok.sep_token_id, en_tok.mask_token_id
    assert len(dataset) == report["instances"]["total"] > 1500
    for row in dataset:
        ids, types, positions = row["input_ids"], row["token_type_ids"], row["masked_lm_positions"]
        assert len(ids) <= 128 and len(types) == len(ids)
        seps = [i for i, t in enumerate(ids) if t == sep]
        assert ids[0] == cls and len(seps) == 2 and seps[1] == len(ids) - 1 and seps[0] >= 2
        assert types == [0] * (seps[0] + 1) + [1] * (len(ids) - seps[0] - 1)
        assert len(positions) == num_to_predict(len(ids), 0.15, 20)  # exact, fixed selection
        assert not {0, seps[0], seps[1]} & set(positions)  # specials never selected
        assert all(ids[p] != sep and ids[p] != cls for p in positions)
        assert cls not in ids[1:] and ids.count(mask) <= len(positions)


def test_nsp_balance_and_80_10_10(static_build):
    _, report = static_build
    # A one-sentence chunk always takes a random B (as in the original), so the share sits a little above 0.5.
    assert 0.45 <= report["instances"]["random_next_fraction"] <= 0.60
    actions = report["mask_actions"]
    n = actions["selected"]  # ~ 40k positions: 3 standard errors are 0.006 (80%) and 0.005 (10%)
    assert n > 25000
    assert abs(actions["mask_token"] / n - 0.8) < 0.015
    assert abs(actions["random_token"] / n - 0.1) < 0.012
    assert abs(actions["unchanged"] / n - 0.1) < 0.012
    assert all(report["checks"].values()), report["checks"]


@pytest.mark.slow
def test_random_next_prob_sets_the_nsp_balance(austen, en_tok, tmp_path):
    from hfbert.data import ExampleSettings, PreparedCorpus, prepare_corpus
    from hfbert.pretrain.config import parse_args

    def random_share(**settings):
        report = build_pretraining_dataset(austen, en_tok, return_report=True, **_austen_kwargs(**settings))[1]
        return report["instances"]["random_next_fraction"]

    # Only chunks of one sentence take a random B at 0; every B is random at 1; the default is the original's 0.5.
    assert random_share(random_next_prob=0.0) < 0.15 < 0.45 <= random_share() <= 0.60
    assert random_share(random_next_prob=1.0) == 1.0
    assert 0.2 <= random_share(random_next_prob=0.25) <= 0.35
    with pytest.raises(ValueError, match=r"random_next_prob must be in \[0, 1\], got 1.5"):
        ExampleSettings(random_next_prob=1.5)
    # The prepared folder records it, and both commands take it.
    folder = prepare_corpus(austen, tmp_path / "p", tokenizer=en_tok, random_next_prob=0.25,
                            **_austen_kwargs(num_shards=1))
    assert PreparedCorpus.open(folder).settings["random_next_prob"] == 0.25
    assert parse_args(["--random_next_prob", "0.25"]).random_next_prob == 0.25


@pytest.mark.slow
def test_streaming_gives_the_map_style_rows(austen, en_tok):
    kwargs = _austen_kwargs(masking="dynamic", pool_size=6)
    mapped = build_pretraining_dataset(austen, en_tok, shuffle=False, **kwargs)
    streamed = build_pretraining_dataset(austen, en_tok, streaming=True, **kwargs)
    assert set(mapped.column_names) == {"input_ids", "token_type_ids", "next_sentence_label"}
    assert list(streamed) == mapped.to_list()


def _small_corpus(n_documents=40):
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly hex".split()
    return [[" ".join(words[(d + s + k) % len(words)] for k in range(3 + (d * s) % 9)) + "."
             for s in range(2 + d % 5)] for d in range(n_documents)]


@pytest.mark.slow
def test_any_num_proc_gives_the_same_rows(en_tok):
    documents = _small_corpus()
    digests = {content_digest(build_pretraining_dataset(documents, en_tok, pool_size=4, dupe_factor=2, seed=1,
                                                        num_proc=num_proc)) for num_proc in (1, 2, 3)}
    assert len(digests) == 1


def test_shuffled_table_is_arrow_take(monkeypatch):
    import pyarrow as pa

    from hfbert.data import pipeline
    from hfbert.data.pipeline import shuffled_table

    monkeypatch.setattr(pipeline, "GATHER_ROWS", 7)  # several blocks, the last one partial

    rng = np.random.default_rng(0)

    def chunk(n, start):
        lengths = rng.integers(0, 9, n)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
        table = pa.table({
            "ids": pa.ListArray.from_arrays(pa.array(offsets),
                                            pa.array(rng.integers(0, 30000, offsets[-1]), pa.int32())),
            "types": pa.ListArray.from_arrays(pa.array(offsets), pa.array(rng.integers(0, 2, offsets[-1]), pa.int8())),
            "label": pa.array(rng.integers(0, 2, n), pa.int8()),
            "name": pa.array([f"row{start + i}" for i in range(n)]),  # not numeric: goes through take
            "maybe": pa.array([None if i % 3 == 0 else [i] for i in range(n)], pa.list_(pa.int64())),  # nulls
        })
        return table.slice(2, n - 5)  # sliced: offsets do not start at 0

    table = pa.concat_tables([chunk(40, 0), chunk(17, 100), chunk(33, 200)])
    order = rng.permutation(table.num_rows)
    assert shuffled_table(table, order).equals(table.combine_chunks().take(order))
    empty = table.slice(0, 0)
    assert shuffled_table(empty, np.arange(0)).equals(empty.combine_chunks())


def test_tokenizer_facts_give_get_vocab(en_tok, zh_tok):
    import copy

    from hfbert.data.pipeline import TokenizerFacts

    extended = copy.deepcopy(en_tok)
    extended.add_tokens(["[NEWTOKEN]", "hfbertword"])
    for tokenizer in (en_tok, zh_tok, extended):
        assert TokenizerFacts.of(tokenizer).vocab == tokenizer.get_vocab()


class LoggingSegmenter:
    """Records which process segmented which text (module level: worker processes import it by name)."""

    def __init__(self, folder):
        self.folder = str(folder)

    def __call__(self, text):
        import os

        with open(os.path.join(self.folder, str(os.getpid())), "a") as log:
            log.write(text + "\n")
        return text.split()


def failing_segmenter(text):
    if text == "boom":
        raise ValueError("segmenter failed on boom")
    return text.split()


@pytest.mark.slow
def test_rows_do_not_depend_on_which_process_builds_which_pool(en_tok, tmp_path):
    """The pools are units of work handed to worker processes; the rows are the same whoever builds them."""
    documents = _small_corpus(48)
    kwargs = dict(pool_size=4, whole_word_mask=True, word_segmenter=LoggingSegmenter(tmp_path), seed=3)
    two = build_pretraining_dataset(documents, en_tok, num_proc=2, **kwargs)
    logs = {path.name: path.read_text().count("\n") for path in tmp_path.iterdir()}
    assert len(logs) == 2 and sum(logs.values()) == sum(map(len, documents))  # two workers, every sentence once
    assert content_digest(two) == content_digest(build_pretraining_dataset(documents, en_tok, num_proc=1, **kwargs))


@pytest.mark.slow
@pytest.mark.parametrize("where", [0, -1])
def test_a_failure_in_any_process_is_raised(en_tok, where):
    documents = _small_corpus()
    documents[where] = documents[where] + ["boom"]
    with pytest.raises(ValueError, match="segmenter failed on boom"):
        build_pretraining_dataset(documents, en_tok, pool_size=4, num_proc=2, whole_word_mask=True,
                                  word_segmenter=failing_segmenter)


def test_pool_bounds_merge_a_short_tail():
    assert pool_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert pool_bounds(9, 4) == [(0, 4), (4, 9)]  # a tail of 1 < 4 // 2 joins the previous pool
    assert pool_bounds(3, 4) == [(0, 3)]


@pytest.fixture(scope="module")
def people_daily():
    return list(itertools.islice(read_people_daily(), 300))


@pytest.mark.slow
def test_chinese_whole_word_masking_masks_whole_words(people_daily, zh_tok):
    kwargs = dict(whole_word_mask=True, word_segmenter=PreSegmented(), dupe_factor=2, pool_size=32, seed=3,
                  shuffle=False, short_seq_prob=0.2)
    static, report = build_pretraining_dataset(people_daily, zh_tok, return_report=True, **kwargs)
    plain = build_pretraining_dataset(people_daily, zh_tok, masking="dynamic", **dict(kwargs, dupe_factor=2))
    assert len(static) == len(plain) > 800
    multi_char_words, split_decisions = 0, 0
    for masked_row, row in zip(static, plain):
        starts = np.asarray(row["word_starts"])
        word_of = np.cumsum(starts)
        selected = set(masked_row["masked_lm_positions"])
        assert np.array_equal(np.asarray(masked_row["masked_lm_ids"]), np.asarray(row["input_ids"])[sorted(selected)])
        for word in set(word_of[sorted(selected)].tolist()):
            members = np.flatnonzero(word_of == word).tolist()
            assert set(members) <= selected  # all characters of a selected word, never part of one
            multi_char_words += len(members) > 1
            shown = {masked_row["input_ids"][m] == zh_tok.mask_token_id for m in members}
            split_decisions += len(shown) > 1
        assert len(selected) <= num_to_predict(len(row["input_ids"]), 0.15, 20)
    assert multi_char_words > 800 and split_decisions == 0
    # Short targets are drawn once per document per pass: 600 passes, 3 standard errors = 0.049.
    assert abs(report["short_targets"]["fraction"] - 0.2) < 0.06
    assert report["short_targets"]["document_passes"] == 2 * report["documents"]["used"]


def test_word_starts_follow_the_segmentation(zh_tok):
    documents = [["中共中央 总书记 江 泽民 。", "我们 热爱 和平 。"], ["新年 好 。", "世界 和平 ！"]]
    dataset = build_pretraining_dataset(documents, zh_tok, masking="dynamic", whole_word_mask=True,
                                        word_segmenter=PreSegmented(), shuffle=False, pool_size=2)
    row = dataset[0]
    tokens = zh_tok.convert_ids_to_tokens(row["input_ids"])
    assert tokens[:10] == ["[CLS]", "中", "共", "中", "央", "总", "书", "记", "江", "泽"]
    assert row["word_starts"][:11] == [1, 1, 0, 0, 0, 1, 0, 0, 1, 1, 0]


def test_bad_input_is_skipped_counted_and_truncated(tmp_path, en_tok):
    long_sentence = " ".join(["extraordinarily"] * 400)  # 400+ tokens: must be truncated like the original
    text = ("First sentence here.\nSecond one.\n\n\n\n\x00\x01\nThird doc sentence.\n" + long_sentence +
            "\nAnother.\n\nLast doc.\nWith two lines.\n")
    path = tmp_path / "messy.txt"
    path.write_text(text, encoding="utf-8")
    dataset, report = build_pretraining_dataset(path, en_tok, max_seq_length=64, dupe_factor=3, pool_size=8,
                                                return_report=True)
    assert report["documents"] == {"total": 5, "empty_skipped": 2, "used": 3}
    assert report["sentences"]["skipped_empty"] == 1  # the control-character line tokenizes to nothing
    assert report["input"]["lines"] == report["input"]["text_lines"] + report["input"]["blank_lines"]
    assert max(len(ids) for ids in dataset["input_ids"]) <= 64
    assert report["instances"]["truncated"] > 0 and all(report["checks"].values())


def test_one_document_corpus_works_with_a_warning(tmp_path, en_tok):
    path = tmp_path / "one.txt"
    path.write_text("A single document.\nIt has three sentences.\nThat is all.\n", encoding="utf-8")
    with pytest.warns(UserWarning, match="single non-empty document"):
        dataset = build_pretraining_dataset(path, en_tok, dupe_factor=4)
    assert len(dataset) >= 4 and set(dataset["next_sentence_label"]) <= {0, 1}


def test_arguments_are_checked_up_front(tmp_path, en_tok, austen):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        build_pretraining_dataset(tmp_path / "missing.txt", en_tok)
    with pytest.raises(ValueError, match="masking must be"):
        build_pretraining_dataset(austen, en_tok, masking="sometimes")
    with pytest.raises(ValueError, match="max_seq_length"):
        build_pretraining_dataset(austen, en_tok, max_seq_length=4)
    with pytest.raises(ValueError, match="whole_word_mask=True"):
        build_pretraining_dataset(austen, en_tok, word_segmenter=PreSegmented())
    with pytest.raises(TypeError, match="fast tokenizer"):
        build_pretraining_dataset(austen, object())
    with pytest.raises(ValueError, match="'sentences' or 'text' column"):
        build_pretraining_dataset(Dataset.from_dict({"body": ["x"]}), en_tok)


def test_text_column_documents_are_split_into_sentences(en_tok):
    documents = Dataset.from_dict({"text": ["It rained. We stayed in. Then it cleared! " * 3,
                                            "Another document entirely. Short one."]})
    dataset, report = build_pretraining_dataset(documents, en_tok, dupe_factor=1, return_report=True)
    assert report["sentences"]["used"] == 11 and report["documents"]["used"] == 2 and len(dataset) >= 2


@pytest.mark.slow
def test_batches_train_hfbert_for_pretraining(static_build, en_tok):
    import torch

    from hfbert import HfBertConfig, HfBertForPreTraining

    dataset, _ = static_build
    model = HfBertForPreTraining(HfBertConfig.from_preset("tiny", vocab_size=len(en_tok)))
    for collator in (DataCollatorForBertPretraining(en_tok),):  # static rows: labels from stored positions
        batch = collator([dataset[i] for i in range(4)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            output = model(**batch)
        assert torch.isfinite(output.loss) and output.loss.item() > 0
        assert int((batch["labels"] != -100).sum()) == sum(len(dataset[i]["masked_lm_positions"]) for i in range(4))


def test_a_pool_of_empty_documents_is_counted_and_leaves_no_row(en_tok):
    documents = [["a b c.", "d e f."], ["g h."], [], [], [], ["x y z.", "more words here."], ["last one."]]
    with pytest.warns(UserWarning, match="single non-empty document"):  # pools [4, 6) and [6, 7) hold one each
        dataset, report = build_pretraining_dataset(documents, en_tok, pool_size=2, return_report=True)
    assert report["documents"] == {"total": 7, "empty_skipped": 3, "used": 4}
    assert None not in dataset["input_ids"] and len(dataset) == report["instances"]["total"]
    assert all(report["checks"].values())
