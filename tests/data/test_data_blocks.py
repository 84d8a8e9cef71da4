"""The reader's block slots: rows of many decoded row groups gathered in one pass, exactly as the row groups hold
them, in memory bounded by the slots' capacity."""

import numpy as np
import pyarrow as pa
import pytest

from hfbert.data.blocks import BlockSlots

SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("token_type_ids", pa.list_(pa.int8())),
                    ("next_sentence_label", pa.int8()), ("masked_lm_positions", pa.list_(pa.int32()))])


def _table(seed: int, rows: int, longest: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest + 1, rows)
    ids = [rng.integers(0, 30_000, n).tolist() for n in lengths]
    return pa.table({"input_ids": ids, "token_type_ids": [[int(i % 2) for i in range(n)] for n in lengths],
                     "next_sentence_label": rng.integers(0, 2, rows).astype(np.int8),
                     "masked_lm_positions": [sorted(rng.choice(n, min(n, 3), replace=False).tolist())
                                             for n in lengths]}, schema=SCHEMA)


@pytest.fixture(scope="module")
def tables():
    # Blocks of different sizes: later ones longer and with more rows than the first, so the buffers grow.
    return {key: _table(key, rows=40 + 7 * key, longest=12 + 3 * key) for key in range(12)}


def _expected(tables, keys, rows, name):
    return [tables[k].column(name)[int(r)].as_py() for k, r in zip(keys, rows)]


def test_gathered_rows_equal_their_blocks_under_eviction_and_growth(tables):
    slots = BlockSlots(SCHEMA, capacity=3)
    decoded = []

    def decode(key):
        decoded.append(key)
        return tables[key]

    rng, most = np.random.default_rng(0), 0
    for _ in range(40):
        keys = rng.choice(len(tables), rng.integers(1, 5), replace=False).tolist()  # up to 4 blocks > capacity 3
        most = max(most, len(keys))
        which = rng.integers(0, len(keys), 30)
        rows = np.array([rng.integers(0, tables[keys[w]].num_rows) for w in which])
        got = slots.gather(slots.slots(keys, decode)[which], rows, {"input_ids": 7})
        owners = [keys[w] for w in which]
        for name in ("input_ids", "token_type_ids", "masked_lm_positions"):
            lengths = got[f"{name}_length"]
            assert [row[:n].tolist() for row, n in zip(got[name], lengths)] == _expected(tables, owners, rows, name)
        pad = np.arange(got["input_ids"].shape[1]) >= got["input_ids_length"][:, None]
        assert (got["input_ids"][pad] == 7).all() and (got["token_type_ids"][pad] == 0).all()
        assert got["next_sentence_label"].tolist() == _expected(tables, owners, rows, "next_sentence_label")
        assert len(slots) <= max(3, most)  # a call that needs more blocks than the capacity gets them
    assert len(decoded) < 40 * 2.5  # resident blocks are not decoded again


def test_a_resident_block_is_not_decoded_again_and_the_least_recently_used_goes(tables):
    slots = BlockSlots(SCHEMA, capacity=2)
    decoded = []
    decode = lambda key: decoded.append(key) or tables[key]  # noqa: E731
    slots.slots([0, 1], decode)
    slots.slots([0], decode)      # 0 is now the most recently used
    slots.slots([2], decode)      # so 1 makes room
    assert 0 in slots and 2 in slots and 1 not in slots and decoded == [0, 1, 2]


def test_memory_is_bounded_by_the_capacity_and_shrinking_frees_it(tables):
    slots = BlockSlots(SCHEMA, capacity=4)
    for key in range(len(tables)):
        slots.slots([key], tables.__getitem__)
    held = slots.nbytes
    largest = max(t.nbytes for t in tables.values())
    assert len(slots) == 4 and 0 < held < 4 * 3 * largest
    slots.resize(1)
    assert len(slots) == 0 and slots.nbytes == 0
    slots.slots([5], tables.__getitem__)
    assert len(slots) == 1 and slots.nbytes < held
