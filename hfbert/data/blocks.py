"""Decoded row groups of a prepared corpus, kept in slots of one buffer per column.

A training batch takes rows from a few dozen row groups at once (the shuffle window). Kept as separate tables,
gathering them costs a few numpy calls per row group and column; kept in slots of one buffer per column, it costs a
few numpy calls per column for the whole batch, whatever the number of row groups. :class:`BlockSlots` is that
buffer: a least-recently-used set of decoded row groups, each in a slot, and one gather for any rows of the
resident ones.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable, Sequence

import numpy as np
import pyarrow as pa


class BlockSlots:
    """Up to ``capacity`` decoded row groups (blocks) of one schema, in slots.

    Per column, slot ``s`` of a list column holds its block's flat values in row ``s`` of a ``(slots, tokens)``
    array and each row's start and length in ``(slots, rows)`` arrays; a scalar column holds its values in a
    ``(slots, rows)`` array. The arrays grow when a block is larger than any before it (rarely: the blocks of a
    prepared corpus are all ``row_group_size`` rows but a shard's last) and when one batch needs more blocks than
    ``capacity``; they never hold more than ``max(capacity, blocks of one batch)`` blocks.
    """

    def __init__(self, schema: pa.Schema, capacity: int):
        self.schema = schema
        self.capacity = max(1, int(capacity))
        self.lists = [f.name for f in schema if pa.types.is_list(f.type)]
        self.scalars = [f.name for f in schema if not pa.types.is_list(f.type)]
        self.dtypes = {f.name: (f.type.value_type if pa.types.is_list(f.type) else f.type).to_pandas_dtype()
                       for f in schema}
        self.clear()

    def clear(self) -> None:
        """Drop every block and the buffers."""
        self._slot_of: OrderedDict[Hashable, int] = OrderedDict()
        self._free: list[int] = []
        self._slots = self._rows = 0
        self._tokens = {name: 0 for name in self.lists}
        self._values: dict[str, np.ndarray] = {}
        self._starts: dict[str, np.ndarray] = {}
        self._lengths: dict[str, np.ndarray] = {}
        self._allocate(0, 0, self._tokens)

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._slot_of

    @property
    def nbytes(self) -> int:
        """The bytes of the buffers (what the decoded blocks hold)."""
        return sum(a.nbytes for d in (self._values, self._starts, self._lengths) for a in d.values())

    def resize(self, capacity: int) -> None:
        """Keep at most ``capacity`` blocks (at least 1); shrinking drops the buffers, so that their memory goes."""
        capacity = max(1, int(capacity))
        if capacity < self._slots:
            self.clear()
        self.capacity = capacity

    def slots(self, keys: Sequence[Hashable], decode: Callable[[Hashable], pa.Table]) -> np.ndarray:
        """The slot of each block in ``keys`` (distinct), decoding with ``decode(key) -> pa.Table`` those that are
        not resident; blocks outside ``keys`` make room, least recently used first."""
        wanted = set(keys)
        for key in keys:
            if key in self._slot_of:
                self._slot_of.move_to_end(key)
        slots = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            if key not in self._slot_of:
                table = decode(key)
                self._slot_of[key] = slot = self._take_slot(wanted, table)
                self._fill(slot, table)
            slots[i] = self._slot_of[key]
        return slots

    def gather(self, slots: np.ndarray, rows: np.ndarray, pad_values: dict[str, int]) -> dict[str, np.ndarray]:
        """Row ``rows[i]`` of the block in slot ``slots[i]``, for every ``i``, as numpy arrays: a list column
        ``name`` as a ``(n, longest)`` array padded with ``pad_values.get(name, 0)`` and ``name + "_length"``, a
        scalar column as ``(n,)``."""
        arrays: dict[str, np.ndarray] = {}
        for name in self.scalars:
            arrays[name] = self._values[name][slots, rows]
        masks: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        for name in self.lists:
            lengths = self._lengths[name][slots, rows].astype(np.int64)
            key = lengths.tobytes()  # columns of equal lengths (input_ids, token_type_ids) share their mask
            if key not in masks:
                width = int(lengths.max()) if len(lengths) else 0
                masks[key] = (np.arange(width) < lengths[:, None], np.arange(width, dtype=np.int64))
            mask, columns = masks[key]
            flat = self._values[name].reshape(-1)
            # Dense: every position of a row reads the buffer (past a row's end, what follows it), and the
            # positions past its end are then padded; cheaper than picking the real tokens out one by one.
            source = (slots * self._tokens[name] + self._starts[name][slots, rows])[:, None] + columns
            taken = flat.take(np.minimum(source, len(flat) - 1)) if len(flat) else np.zeros(mask.shape, flat.dtype)
            arrays[name] = np.where(mask, taken, np.asarray(pad_values.get(name, 0), dtype=self.dtypes[name]))
            arrays[f"{name}_length"] = lengths
        return arrays

    # -- slots ------------------------------------------------------------------------------------------
    def _take_slot(self, wanted: set, table: pa.Table) -> int:
        if not self._free and len(self._slot_of) >= self.capacity:
            for key in self._slot_of:  # the least recently used block that this call does not need
                if key not in wanted:
                    self._free.append(self._slot_of.pop(key))
                    break
        rows = max(self._rows, table.num_rows)
        tokens = {name: max(self._tokens[name], _token_count(table, name)) for name in self.lists}
        slots = self._slots + (0 if self._free else max(1, min(self.capacity, 2 * self._slots) - self._slots))
        if slots != self._slots or rows != self._rows or tokens != self._tokens:
            # A little headroom, so that blocks a few tokens longer than the first do not each grow the buffers.
            if tokens != self._tokens:
                tokens = {name: max(tokens[name], int(1.0625 * tokens[name])) for name in self.lists}
            self._free.extend(range(self._slots, slots))
            self._allocate(slots, rows, tokens)
        return self._free.pop(0)

    def _allocate(self, slots: int, rows: int, tokens: dict[str, int]) -> None:
        """Grow the buffers to ``slots`` x ``rows`` (x ``tokens`` for list values), keeping what they hold."""
        def grown(old: np.ndarray | None, shape: tuple[int, int], dtype) -> np.ndarray:
            new = np.zeros(shape, dtype=dtype)
            if old is not None:
                new[: old.shape[0], : old.shape[1]] = old
            return new

        for name in self.scalars:
            self._values[name] = grown(self._values.get(name), (slots, rows), self.dtypes[name])
        for name in self.lists:
            self._values[name] = grown(self._values.get(name), (slots, tokens[name]), self.dtypes[name])
            self._starts[name] = grown(self._starts.get(name), (slots, rows), np.int64)
            self._lengths[name] = grown(self._lengths.get(name), (slots, rows), np.int32)
        self._slots, self._rows, self._tokens = slots, rows, dict(tokens)

    def _fill(self, slot: int, table: pa.Table) -> None:
        n = table.num_rows
        for name in self.scalars:
            self._values[name][slot, :n] = _column(table, name).to_numpy(zero_copy_only=False)
        for name in self.lists:
            offsets, values = _flat(table, name)
            self._values[name][slot, : len(values)] = values
            self._starts[name][slot, :n] = offsets[:-1]
            self._lengths[name][slot, :n] = np.diff(offsets)


def _column(table: pa.Table, name: str) -> pa.Array:
    column = table.column(name)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _token_count(table: pa.Table, name: str) -> int:
    """A list column's number of values, from its offsets alone."""
    offsets = _column(table, name).offsets
    return int(offsets[-1].as_py() - offsets[0].as_py()) if len(offsets) else 0


def _flat(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets (from 0) and flat values."""
    array = _column(table, name)
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.to_numpy(zero_copy_only=False)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values
