"""The training order and the reader behind it: BatchPlan's block-aware order (every row once per epoch, the same
global batch for any number of processes, each process reading its share of a window's blocks, each block decoded
once per window), rows gathered into arrays and collated exactly as the list-of-dicts collator does, read-ahead,
and a bounded number of open shard files (a corpus of 2,000 shards trains a full epoch under ``ulimit -n 256``)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from hfbert.data import DataCollatorForBertPretraining, PreparedCorpus, prepare_corpus
from hfbert.data.manifest import MANIFEST, Manifest
from hfbert.data.shards import parquet_bytes, shard_file
from hfbert.pretrain.batches import BatchPlan, ReadAhead, training_batch

AUSTEN_LINES = 1200


@pytest.fixture(scope="module")
def austen(shared_data, tmp_path_factory):
    lines = (shared_data / "en_austen_6novels.txt").read_text(encoding="utf-8").splitlines()[:AUSTEN_LINES]
    path = tmp_path_factory.mktemp("austen") / "austen.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _prepare(austen, tokenizer, folder, **overrides):
    settings = dict(input_layout="paragraphs", document_boundary="chapter", num_shards=3, dupe_factor=2,
                    max_seq_length=64, eval_fraction=0.2, pool_size=4, seed=7)
    settings.update(overrides)
    return prepare_corpus(austen, folder, tokenizer=tokenizer, **settings)


@pytest.fixture(scope="module")
def static_folder(austen, en_tok, tmp_path_factory):
    return _prepare(austen, en_tok, tmp_path_factory.mktemp("static") / "out")


@pytest.fixture(scope="module")
def dynamic_folder(austen, en_tok, tmp_path_factory):
    return _prepare(austen, en_tok, tmp_path_factory.mktemp("dynamic") / "out", masking="dynamic", dupe_factor=1,
                    whole_word_mask=True)


def reshard(folder: Path, output: Path, rows_per_shard: int) -> Path:
    """A copy of a prepared folder whose training rows are cut into shards of ``rows_per_shard`` rows (the same
    rows in the same order; the manifest describes the new shards)."""
    corpus = PreparedCorpus.open(folder)
    shutil.copytree(folder, output, ignore=shutil.ignore_patterns("train-*"))
    table = corpus.read("train", np.arange(corpus.num_rows("train")))
    count = -(-table.num_rows // rows_per_shard)
    shards = []
    for k in range(count):
        piece = table.slice(k * rows_per_shard, rows_per_shard)
        data = parquet_bytes(piece)
        name = shard_file("train", k, count)
        (output / name).write_bytes(data.to_pybytes())
        shards.append({"file": name, "rows": piece.num_rows, "tokens": int(pa.compute.sum(
            pa.compute.list_value_length(piece.column("input_ids"))).as_py()), "digest": "",
            "sha256": hashlib.sha256(data).hexdigest(), "bytes": data.size, "row_groups": 1})
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    manifest["splits"]["train"]["shards"] = shards
    (output / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    return output


# ---------------------------------------------------------------------------------------------------------
# The order


BLOCKS = [1024] * 9 + [700] + [1024] * 5 + [3] + [1024] * 4 + [512]  # three shards' row groups, short last groups


def test_every_row_once_per_epoch_and_any_step_by_arithmetic():
    plan = BatchPlan(BLOCKS, batch_size=50, world_size=2, seed=11, phase=0, window=4)
    epoch = np.concatenate([plan.global_rows(k) for k in range(plan.batches_per_epoch)])
    assert len(np.unique(epoch)) == len(epoch) == plan.batches_per_epoch * 100  # no row twice
    assert plan.num_examples - len(epoch) < 100  # only the tail that does not fill a global batch is skipped
    fresh = BatchPlan(BLOCKS, batch_size=50, world_size=2, seed=11, phase=0, window=4)
    assert fresh.rows(plan.batches_per_epoch + 7, 1) == plan.rows(plan.batches_per_epoch + 7, 1)
    nxt = np.concatenate([plan.global_rows(plan.batches_per_epoch + k) for k in range(plan.batches_per_epoch)])
    assert not np.array_equal(np.sort(epoch[:1000]), np.sort(nxt[:1000]))  # each epoch has its own order
    other = BatchPlan(BLOCKS, batch_size=50, world_size=2, seed=12, phase=0, window=4)
    assert other.rows(0, 0) != plan.rows(0, 0)


@pytest.mark.parametrize("window", [1, 4, 32])
def test_the_global_batch_does_not_depend_on_the_number_of_processes(window):
    whole = BatchPlan(BLOCKS, batch_size=64, world_size=1, seed=3, phase=1, window=window)
    starts = whole.starts
    for world in (2, 4, 8):
        split = BatchPlan(BLOCKS, batch_size=64 // world, world_size=world, seed=3, phase=1, window=window)
        for micro in (0, 5, 301, whole.batches_per_epoch + 2):
            shares = [split.rows(micro, rank) for rank in range(world)]
            assert sorted(sum(shares, [])) == whole.rows(micro, 0)
            # Each process reads a slice of the sorted rows: neighbours share at most the block at their edge,
            # so the processes together decode the batch's blocks once, plus at most one per edge.
            blocks = [set(np.searchsorted(starts, share, side="right") - 1) for share in shares]
            together = set(np.searchsorted(starts, whole.rows(micro, 0), side="right") - 1)
            assert sum(map(len, blocks)) <= len(together) + world - 1


@pytest.mark.slow
@pytest.mark.parametrize(("world", "batch", "window"), [(1, 256, 32), (2, 128, 32), (4, 16, 8), (1, 32, 64)])
def test_each_block_is_decoded_once_per_window_with_the_plans_cache(world, batch, window):
    plan = BatchPlan([1024] * 400, batch_size=batch, world_size=world, seed=5, phase=0, window=window)
    for rank in range(world):
        cache, decoded, blocks_touched = OrderedDict(), 0, set()
        for micro in range(plan.batches_per_epoch):
            for block in np.unique(np.asarray(plan.rows(micro, rank)) // 1024).tolist():
                blocks_touched.add(block)
                if block in cache:
                    cache.move_to_end(block)
                    continue
                decoded += 1
                cache[block] = True
                if len(cache) > plan.cache_blocks:
                    cache.popitem(last=False)
        assert decoded == len(blocks_touched)  # one epoch: one decode per block


def test_a_batch_mixes_its_window_of_row_groups():
    """With the default window, a batch of 256 draws from as many row groups as a window holds (32), not 1-2
    as a file-order read would; within a row group its rows are spread, not a contiguous run."""
    plan = BatchPlan([1024] * 2000, batch_size=256, world_size=1, seed=42, phase=0)
    distinct = [len(np.unique(np.asarray(plan.rows(k, 0)) // 1024)) for k in range(0, 400, 7)]
    assert np.mean(distinct) > 30
    rows = np.asarray(plan.rows(3, 0))
    for block in np.unique(rows // 1024)[:5]:
        inside = rows[rows // 1024 == block] % 1024
        assert len(inside) < 3 or np.ptp(inside) > 100


def test_plan_of_a_row_count_and_bad_windows():
    assert BatchPlan(2500, 10, 1, 0, 0).sizes.tolist() == [1024, 1024, 452]
    with pytest.raises(ValueError, match="shuffle window"):
        BatchPlan(2500, 10, 1, 0, 0, window=0)
    with pytest.raises(ValueError, match="fewer than one global batch"):
        BatchPlan([3, 4], 4, 2, 0, 0)


# ---------------------------------------------------------------------------------------------------------
# Rows -> arrays -> batches


@pytest.mark.parametrize("folder", ["static_folder", "dynamic_folder"])
def test_arrays_and_their_collation_match_rows_and_the_collator(folder, request, en_tok):
    corpus = PreparedCorpus.open(request.getfixturevalue(folder))
    indices = np.random.default_rng(0).choice(corpus.num_rows("train"), 48, replace=False)
    rows = corpus.rows("train", indices)
    arrays = corpus.read_arrays("train", indices, {"input_ids": en_tok.pad_token_id})
    for row, ids, length in zip(rows, arrays["input_ids"], arrays["input_ids_length"]):
        assert ids[:length].tolist() == row["input_ids"] and (ids[length:] == en_tok.pad_token_id).all()
    assert arrays["next_sentence_label"].tolist() == [row["next_sentence_label"] for row in rows]
    s = corpus.settings
    make = lambda: DataCollatorForBertPretraining(  # noqa: E731
        en_tok, s["masked_lm_prob"], max_predictions_per_seq=s["max_predictions_per_seq"],
        whole_word_mask=s["whole_word_mask"], pad_to_multiple_of=8, seed=9)
    expected, got = make()(rows), make().collate_arrays(arrays)
    assert expected.keys() == got.keys()
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
    assert got["input_ids"].shape[1] % 8 == 0


def test_a_static_position_outside_its_row_is_refused(static_folder, en_tok):
    corpus = PreparedCorpus.open(static_folder)
    arrays = corpus.read_arrays("train", [0, 1])
    arrays["masked_lm_positions"][1, 0] = arrays["input_ids_length"][1] + 3
    with pytest.raises(ValueError, match="masked_lm_positions"):
        DataCollatorForBertPretraining(en_tok).collate_arrays(arrays)


def test_training_batches_are_read_ahead_in_order_and_depend_only_on_their_step(static_folder, en_tok):
    corpus = PreparedCorpus.open(static_folder)
    collator = DataCollatorForBertPretraining(en_tok, pad_to_multiple_of=8)
    plan = BatchPlan(corpus.blocks("train"), 4, 2, 42, 0, window=2)
    made = []

    def make(micro):
        made.append(micro)
        return training_batch(corpus, collator, plan, micro, 1)

    ahead = ReadAhead(make, depth=2)
    try:
        for micro in range(6):
            (batch, layout), waited = ahead.get(micro, [micro + 1, micro + 2])
            again, _ = training_batch(corpus, collator, plan, micro, 1)
            assert all(torch.equal(batch[k], again[k]) for k in batch) and waited >= 0
            assert layout.supervised == int((batch["labels"] != -100).sum()) == len(layout.targets)
            assert torch.equal(layout.targets, batch["labels"][batch["labels"] != -100])
            assert layout.tokens == int(batch["attention_mask"].sum())
    finally:
        ahead.close()
    # Steps 6 and 7 were only queued: closing may cancel them before they start.
    assert made[:3] == [0, 1, 2] and set(range(6)) <= set(made) <= set(range(8))


# ---------------------------------------------------------------------------------------------------------
# Open files


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def _global_batch(corpus, collator, step: int, world: int, accumulation: int, global_batch: int) -> dict:
    """Step ``step``'s whole batch as one process count and micro-batch split reads it: row -> its tokens as
    trained on (masked), its labels and its NSP label, unpadded."""
    batch_size = global_batch // (world * accumulation)
    plan = BatchPlan(corpus.blocks("train"), batch_size, world, 42, 0, window=2, accumulation=accumulation)
    rows = {}
    for micro in range(step * accumulation, (step + 1) * accumulation):
        for rank in range(world):
            batch, _ = training_batch(corpus, collator, plan, micro, rank)
            lengths = batch["attention_mask"].sum(1).tolist()
            for i, row in enumerate(plan.rows(micro, rank)):
                n = lengths[i]
                rows[row] = (batch["input_ids"][i, :n].tolist(), batch["labels"][i, :n].tolist(),
                             int(batch["next_sentence_label"][i]))
    return rows


def test_dynamic_masks_of_a_step_do_not_depend_on_processes_or_accumulation(dynamic_folder, en_tok):
    corpus = PreparedCorpus.open(dynamic_folder)
    collator = DataCollatorForBertPretraining(corpus.load_tokenizer(), whole_word_mask=True)
    global_batch = 32
    per_epoch = corpus.num_rows("train") // global_batch
    assert 57 > per_epoch  # step 57 is in a later epoch than steps 0 and 1
    for step in (0, 1, 57):
        reference = _global_batch(corpus, collator, step, 1, 1, global_batch)
        assert len(reference) == global_batch
        assert sum(label != -100 for _, labels, _ in reference.values() for label in labels) > global_batch
        for world, accumulation in [(2, 1), (4, 1), (1, 4), (2, 2), (4, 4)]:
            assert _global_batch(corpus, collator, step, world, accumulation, global_batch) == reference, (
                step, world, accumulation)
    # a row is masked afresh each epoch
    plan = BatchPlan(corpus.blocks("train"), global_batch, 1, 42, 0, window=2)
    first, _ = training_batch(corpus, collator, plan, 0, 0)
    row = plan.rows(0, 0)[0]
    later = next(m for m in range(per_epoch, 2 * per_epoch) if row in plan.rows(m, 0))
    again, _ = training_batch(corpus, collator, plan, later, 0)
    j, n = plan.rows(later, 0).index(row), int(first["attention_mask"][0].sum())
    assert first["labels"][0, :n].tolist() != again["labels"][j, :n].tolist()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_at_most_max_open_files_shards_stay_open(static_folder, tmp_path, monkeypatch):
    many = reshard(Path(static_folder), tmp_path / "many", rows_per_shard=20)
    monkeypatch.setattr(PreparedCorpus, "MAX_OPEN_FILES", 8)
    corpus = PreparedCorpus.open(many)
    shards = len(corpus.manifest.splits["train"].shards)
    assert shards > 40
    before = _open_descriptors()
    order = np.random.default_rng(1).permutation(corpus.num_rows("train"))
    rows = [row for start in range(0, len(order), 64) for row in corpus.rows("train", order[start:start + 64])]
    assert corpus.open_files <= 8 and _open_descriptors() - before <= 8
    assert rows == PreparedCorpus.open(static_folder).rows("train", order)  # the same rows as the 3-shard folder
    corpus.close()
    assert _open_descriptors() <= before


TRAIN_UNDER_LIMIT = textwrap.dedent("""
    import resource, sys
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    from hfbert.data import PreparedCorpus
    if sys.argv[1] == "unbounded":
        PreparedCorpus.MAX_OPEN_FILES = 10**6
    from hfbert.pretrain.command import main
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.slow
def test_two_thousand_shards_train_a_full_epoch_under_ulimit_256(static_folder, tmp_path):
    corpus = PreparedCorpus.open(static_folder)
    rows_per_shard = max(1, corpus.num_rows("train") // 2000)
    many = reshard(Path(static_folder), tmp_path / "many", rows_per_shard=rows_per_shard)
    shards = len(Manifest.read(many).splits["train"].shards)
    assert shards >= 2000
    rows = PreparedCorpus.open(many).num_rows("train")
    batch = 64
    steps = rows // batch  # one epoch: every shard is read
    args = ["--prepared", str(many), "--preset", "tiny", "--model",
            json.dumps({"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                        "intermediate_size": 37}),
            "--batch_size", str(batch), "--max_steps", str(steps), "--logging_steps", str(steps),
            "--eval_steps", str(steps), "--save_steps", str(steps), "--max_eval_examples", "16",
            "--progress_bar", "false", "--report_to", "jsonl", "--mixed_precision", "no",
            "--max_time_minutes", "null"]
    bounded = subprocess.run([sys.executable, "-c", TRAIN_UNDER_LIMIT, "bounded", *args, "--output_dir",
                              str(tmp_path / "bounded")], capture_output=True, text=True, timeout=600)
    assert bounded.returncode == 0, bounded.stderr[-3000:]
    assert json.loads((tmp_path / "bounded" / "metrics.json").read_text())["step"] == steps
    # The premise: without the bound, the same epoch runs out of file descriptors.
    unbounded = subprocess.run([sys.executable, "-c", TRAIN_UNDER_LIMIT, "unbounded", *args, "--output_dir",
                                str(tmp_path / "unbounded")], capture_output=True, text=True, timeout=600)
    assert unbounded.returncode != 0 and "Too many open files" in unbounded.stderr
