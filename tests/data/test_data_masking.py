"""MLM masking rules, truncate_seq_pair and the collator, checked against the original's definitions."""

import random

import numpy as np
import pytest
import torch
from transformers import BertTokenizerFast

from hfbert.data import DataCollatorForBertPretraining, MaskingSpec, num_to_predict, truncate_seq_pair
from hfbert.data.masking import RowStreams, mask_batch


@pytest.fixture(scope="module")
def tokenizer(minilm_path):
    return BertTokenizerFast.from_pretrained(minilm_path)


def _rows(tokenizer, n_rows, seed):
    """Random [CLS] A [SEP] B [SEP] rows of real word pieces, back to back."""
    rng = np.random.default_rng(seed)
    rows, specials = [], []
    for _ in range(n_rows):
        len_a, len_b = rng.integers(1, 60, size=2)
        body = rng.integers(1999, 29000, size=len_a + len_b)
        row = np.concatenate(([tokenizer.cls_token_id], body[:len_a], [tokenizer.sep_token_id], body[len_a:],
                              [tokenizer.sep_token_id]))
        rows.append(row)
        specials.append([0, len_a + 1, len(row) - 1])
    offsets = np.concatenate(([0], np.cumsum([len(r) for r in rows])))
    candidates = np.ones(offsets[-1], dtype=bool)
    for start, spec in zip(offsets[:-1], specials):
        candidates[start + np.asarray(spec)] = False
    return np.concatenate(rows), offsets, candidates


def test_truncate_seq_pair_matches_the_original_loop():
    def original_sides(len_a, len_b, max_num_tokens):
        sides = []
        while len_a + len_b > max_num_tokens:
            if len_a > len_b:
                sides.append(0)
                len_a -= 1
            else:
                sides.append(1)
                len_b -= 1
        return sides

    cases = random.Random(0)
    for _ in range(2000):
        len_a, len_b, limit = cases.randint(1, 200), cases.randint(1, 200), cases.randint(2, 200)
        seed = cases.randrange(10**9)
        sides = original_sides(len_a, len_b, limit)
        coins = random.Random(seed).getrandbits(len(sides)) if sides else 0
        expected = [0, 0, 0, 0]  # a_front, a_back, b_front, b_back; coin bit set = trim the front
        for step, side in enumerate(sides):
            expected[2 * side + (0 if coins >> step & 1 else 1)] += 1
        assert list(truncate_seq_pair(len_a, len_b, limit, random.Random(seed))) == expected


def test_fixed_selection_count_is_exact_and_never_special(tokenizer):
    ids, offsets, candidates = _rows(tokenizer, 400, seed=1)
    spec = MaskingSpec.from_tokenizer(tokenizer, max_predictions_per_seq=12)
    corrupted, positions, labels, counts = mask_batch(ids, offsets, candidates, spec, np.random.default_rng(0))
    lengths = np.diff(offsets)
    assert counts.tolist() == [num_to_predict(int(n), 0.15, 12) for n in lengths]
    flat = positions + np.repeat(offsets[:-1], counts)
    assert candidates[flat].all()  # [CLS]/[SEP] are never selected
    assert np.array_equal(labels, ids[flat])  # every selected position is supervised with its original token
    unselected = np.ones(len(ids), dtype=bool)
    unselected[flat] = False
    assert np.array_equal(corrupted[unselected], ids[unselected])
    for row in range(len(lengths)):  # positions sorted within each row
        mine = positions[counts[:row].sum(): counts[: row + 1].sum()]
        assert np.all(np.diff(mine) > 0)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["generator", "row streams"])
def test_80_10_10_and_random_tokens_are_not_special(tokenizer, source):
    ids, offsets, candidates = _rows(tokenizer, 3000, seed=2)
    spec = MaskingSpec.from_tokenizer(tokenizer)
    rng = np.random.default_rng(3) if source == "generator" else RowStreams.for_rows(range(3000), [3])
    corrupted, positions, labels, counts = mask_batch(ids, offsets, candidates, spec, rng)
    shown = corrupted[positions + np.repeat(offsets[:-1], counts)]
    n = len(shown)
    masked = np.mean(shown == tokenizer.mask_token_id)
    unchanged = np.mean(shown == labels)
    replaced = shown[(shown != tokenizer.mask_token_id) & (shown != labels)]
    # n ~ 19k: 3 standard errors are 0.009 (80%) and 0.007 (10%); tolerances 0.015 / 0.012.
    assert n > 15000
    assert abs(masked - 0.8) < 0.015 and abs(unchanged - 0.1) < 0.012 and abs(len(replaced) / n - 0.1) < 0.012
    vocab = tokenizer.convert_ids_to_tokens(replaced.tolist())
    assert not any(token.startswith("[") and token.endswith("]") for token in vocab)  # no [PAD]/[unusedN]


def test_random_token_ids_any_restores_the_original_vocabulary(tokenizer):
    assert len(MaskingSpec.from_tokenizer(tokenizer, random_token_ids="any").replacement_ids) == 30522
    assert len(MaskingSpec.from_tokenizer(tokenizer).replacement_ids) < 30522 - 990  # [unused0..993] excluded
    with pytest.raises(ValueError, match="random_token_ids"):
        MaskingSpec.from_tokenizer(tokenizer, random_token_ids="some")


def test_whole_word_masking_masks_whole_words_with_one_decision(tokenizer):
    text = "unbelievably unforgettable characterisations of extraordinarily complicated relationships " * 3
    body = tokenizer(text, add_special_tokens=False)["input_ids"]
    ids = np.array([tokenizer.cls_token_id] + body + [tokenizer.sep_token_id])
    pieces = tokenizer.convert_ids_to_tokens(ids.tolist())
    starts = np.array([not p.startswith("##") for p in pieces])
    word_of = np.cumsum(starts)
    spec = MaskingSpec.from_tokenizer(tokenizer, whole_word_mask=True, max_predictions_per_seq=40)
    candidates = np.ones(len(ids), dtype=bool)
    candidates[[0, len(ids) - 1]] = False
    split_words = 0
    for seed in range(200):
        corrupted, positions, _, counts = mask_batch(ids, np.array([0, len(ids)]), candidates, spec,
                                                    np.random.default_rng(seed), starts)
        chosen_words = set(word_of[positions].tolist())
        assert counts[0] <= num_to_predict(len(ids), 0.15, 40)
        for word in chosen_words:
            members = np.flatnonzero(word_of == word)
            assert set(members.tolist()) <= set(positions.tolist())  # all pieces of a chosen word
            states = {"mask" if corrupted[m] == tokenizer.mask_token_id else "other" for m in members}
            split_words += len(states) > 1
    # One 80/10/10 decision per word: a word is never part [MASK] (a random token may equal an original,
    # but that never mixes with [MASK] within one word).
    assert split_words == 0


@pytest.mark.parametrize("whole_word_mask", [False, True])
def test_row_streams_mask_a_row_the_same_in_any_batch(tokenizer, whole_word_mask):
    ids, offsets, candidates = _rows(tokenizer, 60, seed=6)
    starts = np.random.default_rng(0).random(len(ids)) < 0.6  # words of one to a few pieces
    spec = MaskingSpec.from_tokenizer(tokenizer, whole_word_mask=whole_word_mask)
    keys = RowStreams.for_rows(range(60), [11]).keys
    split = [slice(offsets[r], offsets[r + 1]) for r in range(60)]

    def masked(order):  # the rows in ``order`` as one batch -> row -> (corrupted ids, positions)
        parts = [split[r] for r in order]
        sub_offsets = np.concatenate(([0], np.cumsum([p.stop - p.start for p in parts])))
        corrupted, positions, _, counts = mask_batch(
            np.concatenate([ids[p] for p in parts]), sub_offsets, np.concatenate([candidates[p] for p in parts]),
            spec, RowStreams(keys[list(order)]), np.concatenate([starts[p] for p in parts]))
        ends = np.cumsum(counts)
        return {r: (corrupted[sub_offsets[i]:sub_offsets[i + 1]].tolist(), positions[ends[i] - counts[i]:ends[i]]
                    .tolist()) for i, r in enumerate(order)}

    together = masked(range(60))
    assert masked([7]) == {7: together[7]}
    some = np.random.default_rng(1).permutation(60)[:25].tolist()
    assert masked(some) == {r: together[r] for r in some}
    other_keys = mask_batch(ids, offsets, candidates, spec, RowStreams.for_rows(range(60), [12]), starts)
    assert other_keys[1].tolist() != [p for r in range(60) for p in together[r][1]]  # the key matters


def test_bernoulli_selection_rate(tokenizer):
    ids, offsets, candidates = _rows(tokenizer, 2000, seed=4)
    spec = MaskingSpec.from_tokenizer(tokenizer, selection="bernoulli")
    _, positions, _, counts = mask_batch(ids, offsets, candidates, spec, np.random.default_rng(5))
    rate = len(positions) / candidates.sum()
    assert abs(rate - 0.15) < 0.01  # ~64k candidates: 3 standard errors = 0.004
    assert (counts == 0).any()  # no minimum of one, unlike fixed selection


def test_collator_dynamic_pads_and_masks_fresh_each_batch(tokenizer):
    examples = [
        {"input_ids": [101, 2023, 2003, 1037, 3231, 102, 2178, 6251, 102], "token_type_ids": [0] * 6 + [1] * 3,
         "next_sentence_label": 1},
        {"input_ids": [101, 2460, 102, 2009, 102], "token_type_ids": [0, 0, 0, 1, 1], "next_sentence_label": 0},
    ]
    collator = DataCollatorForBertPretraining(tokenizer, pad_to_multiple_of=8, seed=0)
    batch = collator(examples)
    assert batch["input_ids"].shape == (2, 16) and batch["input_ids"].dtype == torch.long
    assert batch["attention_mask"].sum(dim=1).tolist() == [9, 5]
    assert (batch["input_ids"][1, 5:] == tokenizer.pad_token_id).all()
    assert batch["token_type_ids"][0].tolist()[:9] == [0] * 6 + [1] * 3
    assert batch["next_sentence_label"].tolist() == [1, 0]
    supervised = batch["labels"] != -100
    assert supervised.sum(dim=1).tolist() == [num_to_predict(9, 0.15, 20), num_to_predict(5, 0.15, 20)]
    assert not (supervised & (batch["attention_mask"] == 0)).any()  # padding never selected
    for special in (101, 102):
        assert not (supervised & (torch.tensor([e["input_ids"] + [0] * (16 - len(e["input_ids"]))
                                                for e in examples]) == special)).any()
    draws = {tuple(collator(examples)["labels"][0].tolist()) for _ in range(20)}
    assert len(draws) > 1  # fresh masks per batch


def test_collator_static_examples_are_only_padded(tokenizer):
    example = {"input_ids": [101, 103, 2003, 102, 2009, 103, 102], "token_type_ids": [0, 0, 0, 0, 1, 1, 1],
               "next_sentence_label": 0, "masked_lm_positions": [1, 5], "masked_lm_ids": [2023, 2092]}
    batch = DataCollatorForBertPretraining(tokenizer)([example, dict(example)])
    assert batch["input_ids"][0].tolist() == example["input_ids"]
    assert batch["labels"][0].tolist() == [-100, 2023, -100, -100, -100, 2092, -100]
    bad = dict(example, masked_lm_positions=[1, 9])
    with pytest.raises(ValueError, match="outside a sequence of length 7"):
        DataCollatorForBertPretraining(tokenizer)([bad])
    with pytest.raises(ValueError, match="empty list"):
        DataCollatorForBertPretraining(tokenizer)([])
    dynamic = {k: example[k] for k in ("input_ids", "token_type_ids", "next_sentence_label")}
    with pytest.raises(ValueError, match="mixes examples with static masks"):
        DataCollatorForBertPretraining(tokenizer)([example, dynamic])
    with pytest.raises(ValueError, match="token_type_ids has length 3 but input_ids has length 7"):
        DataCollatorForBertPretraining(tokenizer)([dict(dynamic, token_type_ids=[0, 0, 0])])


def test_collator_takes_masked_lm_prob_and_the_old_name_with_a_warning(tokenizer):
    assert DataCollatorForBertPretraining(tokenizer, masked_lm_prob=0.3).spec.masked_lm_prob == 0.3
    with pytest.warns(DeprecationWarning, match="pass masked_lm_prob"):
        old = DataCollatorForBertPretraining(tokenizer, mlm_probability=0.25)
    assert old.spec.masked_lm_prob == 0.25
