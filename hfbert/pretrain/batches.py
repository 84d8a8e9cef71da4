"""Batches for ``hfbert pretrain``: rows by index, masks by row, the host's layout of each batch, read ahead.

* Rows by index. :class:`BatchPlan` maps an optimizer step to row indices by arithmetic alone: each epoch is a
  seeded bijection of ``[0, rows)`` (a Feistel network, :class:`Permutation`, so no order array of the corpus's
  size is ever held), and micro-batch ``k`` takes positions ``[k*B*W, (k+1)*B*W)`` of it, process ``r`` the
  ``r``-th slice of ``B``. Each process reads only its own rows (``PreparedCorpus.rows`` decodes only the
  Parquet row groups that hold them), resuming at step ``s`` jumps straight to its rows, and the rows do not
  depend on how often the job was interrupted. Reading by index rather than giving each process its own shards
  keeps the batch of a step independent of the number of processes and lets any number of processes share any
  number of shards.
* Dynamic masks are drawn by the collator from each row's own key, a hash of ``(seed, phase, epoch, row)``
  (:meth:`BatchPlan.mask_streams`, :class:`hfbert.data.masking.RowStreams`): a row's mask does not depend on the
  number of processes, on how a step is split into micro-batches, or on where a run was resumed.
* What the step must know of a batch is found on the host when the batch is read (:class:`HostLayout`), and
  :class:`ReadAhead` reads the next steps' batches in a background thread, so the step waits for neither.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data import DataCollatorForBertPretraining, PreparedCorpus
from ..data.collator import IGNORE_INDEX
from ..data.manifest import PreparedDataError
from ..data.masking import RowStreams, splitmix64
from ..data.shards import ROW_GROUP_SIZE
from ..modeling_hfbert import check_inputs
from ..unpadding_hfbert import PackedRows

__all__ = ["PAD_TO_MULTIPLE_OF", "SHUFFLE_WINDOW", "BatchPlan", "HostLayout", "Permutation", "ReadAhead", "collate",
           "stand_in_batch", "training_batch"]

#: Batch widths are rounded up to a multiple of this (see :func:`hfbert.pretrain.corpora.corpus_collator`).
PAD_TO_MULTIPLE_OF = 8
#: Row groups whose rows are mixed together in the training order (see :class:`BatchPlan`, docs/data.md).
SHUFFLE_WINDOW = 32
_MASK_STREAM = 0x6D61736B  # separates the training masks' keys from the batch order's


class Permutation:
    """A seeded bijection of ``[0, n)`` that costs O(1) memory, however large ``n``.

    A balanced Feistel network over the smallest even number of bits that covers ``n`` (six rounds, SplitMix64
    as the round function) permutes ``[0, 2^bits)``; values ``>= n`` are encrypted again until they fall inside
    (cycle walking), which keeps it a bijection of ``[0, n)``. ``2^bits < 4n``, so a value needs fewer than four
    encryptions on average. ``np.random.permutation`` would be as random but holds 8 bytes per row: 16 GB for the
    two billion rows of a terabyte corpus, in every process.
    """

    ROUNDS = 6

    def __init__(self, n: int, seed: Sequence[int]):
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        bits = max(2, (n - 1).bit_length())
        self.n, self.half = n, np.uint64((bits + bits % 2) // 2)
        self.mask = np.uint64((1 << int(self.half)) - 1)
        self.keys = np.random.SeedSequence(list(seed)).generate_state(self.ROUNDS, dtype=np.uint64)

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self.half, x & self.mask
        for key in self.keys:
            left, right = right, left ^ (splitmix64(right ^ key) & self.mask)
        return (left << self.half) | right

    def __call__(self, positions) -> np.ndarray:
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size and (positions.min() < 0 or positions.max() >= self.n):
            raise IndexError(f"positions must be in [0, {self.n})")
        values = self._encrypt(positions.astype(np.uint64))
        outside = values >= self.n
        while outside.any():
            values[outside] = self._encrypt(values[outside])
            outside = values >= self.n
        return values.astype(np.int64)


class BatchPlan:
    """Which rows of a phase's corpus each process reads at each micro-batch, by arithmetic only.

    The training order of an epoch is block-aware, so that a decoded block serves many rows before it is dropped.
    The blocks are the corpus's Parquet row groups (``blocks``: rows per block, in row order, as
    :meth:`~hfbert.data.PreparedCorpus.blocks` gives them; an int is a row count in blocks of
    ``ROW_GROUP_SIZE`` rows). Epoch ``e``:

    1. the blocks are permuted (:class:`Permutation` seeded by ``(seed, phase, e)``);
    2. consecutive runs of ``window`` blocks form windows, and the rows of each window are permuted together
       (seeded by ``(seed, phase, e, window number)``); the epoch's stream is the windows' rows in turn;
    3. micro-batch ``k`` is stream positions ``[k*B*W, (k+1)*B*W)`` (``W`` processes); the tail that does not fill
       a global batch is skipped in that epoch (and lands elsewhere in the next one);
    4. process ``r`` takes the ``r``-th slice of ``B`` of the global batch's row indices *sorted*: rows are
       numbered shard by shard and row group by row group, so each process reads about ``window / W`` of the
       window's blocks, and the union is the same global batch for any number of processes.

    Shards are shuffled when they are built, so a row group is already a random sample of its shard's documents;
    the window mixes rows of ``window`` row groups of (mostly) different shards. What the plan holds is the block
    order and its running sums: O(number of row groups), 16 bytes each, never O(rows).
    """

    def __init__(self, blocks, batch_size: int, world_size: int, seed: int, phase: int,
                 window: int = SHUFFLE_WINDOW, accumulation: int = 1):
        if isinstance(blocks, (int, np.integer)):
            full, rest = divmod(int(blocks), ROW_GROUP_SIZE)
            blocks = [ROW_GROUP_SIZE] * full + ([rest] if rest else [])
        self.sizes = np.asarray(blocks, dtype=np.int64).reshape(-1)
        if window < 1:
            raise ValueError(f"the shuffle window must be at least 1 row group, got {window}")
        num_examples = int(self.sizes.sum())
        global_batch = batch_size * world_size
        if num_examples < global_batch * accumulation:
            split = f"{batch_size} x {world_size} processes" + (f" x {accumulation} micro-batches" if accumulation > 1
                                                                 else "")
            raise ValueError(
                f"the training set has {num_examples} examples, fewer than one global batch "
                f"({split}); use a larger corpus or a smaller batch_size"
            )
        self.num_examples, self.batch_size, self.world_size = num_examples, batch_size, world_size
        self.seed, self.phase, self.window = seed, phase, window
        self.starts = np.cumsum(self.sizes) - self.sizes  # the first row of each block
        # Whole optimizer steps per epoch: the tail skipped is the same however the step's batch is split.
        self.batches_per_epoch = num_examples // (global_batch * accumulation) * accumulation
        self._epoch, self._order, self._ends = -1, None, None
        self._windows: dict[tuple[int, int], np.ndarray] = {}

    def _blocks_of(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """The epoch's block order and, along it, the running sum of rows (where each block ends in the stream)."""
        if epoch != self._epoch:
            order = Permutation(len(self.sizes), [self.seed, self.phase, epoch])(np.arange(len(self.sizes)))
            self._order, self._ends, self._epoch = order, np.cumsum(self.sizes[order]), epoch
        return self._order, self._ends

    def global_rows(self, micro: int) -> np.ndarray:
        """The row indices of micro-batch ``micro`` on all processes together, sorted."""
        epoch, index = divmod(micro, self.batches_per_epoch)
        order, ends = self._blocks_of(epoch)
        global_batch = self.batch_size * self.world_size
        positions = np.arange(index * global_batch, (index + 1) * global_batch, dtype=np.int64)
        window_ends = ends[np.minimum(np.arange(self.window, len(order) + self.window, self.window), len(order)) - 1]
        window_of = np.searchsorted(window_ends, positions, side="right")
        mixed = np.empty_like(positions)
        for number in np.unique(window_of).tolist():
            members = window_of == number
            first = int(window_ends[number - 1]) if number else 0
            mixed[members] = first + self._window_order(epoch, number, int(window_ends[number]) - first)[
                positions[members] - first]
        block = np.searchsorted(ends, mixed, side="right")  # the position along the epoch's block order
        rows = self.starts[order[block]] + mixed - (ends[block] - self.sizes[order[block]])
        return np.sort(rows)

    def _window_order(self, epoch: int, number: int, rows: int) -> np.ndarray:
        """The permutation of a window's rows, as an array (a window's rows, not the corpus's: ``window`` row
        groups). The last two are kept: a global batch spans at most two windows, and the next batch starts in
        the window where this one ended."""
        key = (epoch, number)
        if key not in self._windows:
            self._windows[key] = Permutation(rows, [self.seed, self.phase, epoch, number])(np.arange(rows))
            while len(self._windows) > 2:
                self._windows.pop(next(iter(self._windows)))
        return self._windows[key]

    @property
    def cache_blocks(self) -> int:
        """Decoded blocks a process keeps so that each is decoded once per window: its share of a window and of the
        next one (a global batch can straddle two windows), and one more at either edge of its slice."""
        return 2 * -(-self.window // self.world_size) + 2

    def rows(self, micro: int, rank: int) -> list[int]:
        """The rows process ``rank`` reads at micro-batch ``micro`` (ascending)."""
        return self.global_rows(micro)[rank * self.batch_size : (rank + 1) * self.batch_size].tolist()

    def mask_streams(self, micro: int, rank: int) -> RowStreams:
        """The dynamic masks' random numbers for the rows process ``rank`` reads at micro-batch ``micro``, in the
        order of :meth:`rows`: each row's key is a hash of ``(seed, phase, epoch, row)``, so a row is masked afresh
        each epoch and the same way whichever process or micro-batch reads it."""
        epoch = micro // self.batches_per_epoch
        return RowStreams.for_rows(self.rows(micro, rank), [self.seed, self.phase, epoch, _MASK_STREAM])


@dataclass
class HostLayout:
    """What the loop knows of a micro-batch from the host, found when the batch is read, instead of asking the
    device: the supervised labels in row-major order (``targets``), where they are in the flattened batch
    (``positions``: the model's ``supervised_positions``), the number of real tokens (``tokens``) and where those
    sit (``packed``: the model's ``packed_rows``; None for a batch with an empty row)."""

    targets: torch.Tensor
    positions: torch.Tensor
    tokens: int
    packed: PackedRows | None

    @classmethod
    def of(cls, labels: torch.Tensor, lengths: torch.Tensor) -> HostLayout:
        """The layout of a right-padded batch from its MLM ``labels`` (B, T) and its rows' ``lengths`` (B,)."""
        positions = (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)
        return cls(labels.flatten()[positions], positions, int(lengths.sum()),
                   PackedRows.from_lengths(lengths, labels.shape[1]))

    @property
    def supervised(self) -> int:
        """The number of supervised labels (a shape, so it never waits for a device)."""
        return self.targets.numel()

    def model_inputs(self) -> dict[str, Any]:
        """The keyword arguments that spare :class:`~hfbert.HfBertForPreTraining` finding them on the device."""
        return {"packed_rows": self.packed, "supervised_positions": self.positions}

    def to(self, device: torch.device | str, non_blocking: bool = False) -> HostLayout:
        return HostLayout(self.targets.to(device, non_blocking=non_blocking),
                          self.positions.to(device, non_blocking=non_blocking), self.tokens,
                          self.packed and self.packed.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> HostLayout:
        """Page-locked, so that the copy to a GPU can overlap the step before it."""
        return HostLayout(self.targets.pin_memory(), self.positions.pin_memory(), self.tokens,
                          self.packed and self.packed.pin_memory())


def training_batch(corpus: PreparedCorpus, collator: DataCollatorForBertPretraining, plan: BatchPlan, micro: int,
                   rank: int, pin_memory: bool = False,
                   model_config=None) -> tuple[dict[str, torch.Tensor], HostLayout]:
    """Process ``rank``'s share of micro-batch ``micro``: its rows gathered into arrays and collated (masks from
    the keys of :meth:`BatchPlan.mask_streams`, torch's RNG untouched, so this can run in another thread), and its
    :class:`HostLayout`; both pinned for a GPU with ``pin_memory``.

    ``model_config`` (the model's :class:`~hfbert.HfBertConfig`): the batch is checked against it here, on the host
    (:func:`~hfbert.modeling_hfbert.check_inputs`: ids inside the vocabulary, token types, the length), so that the
    model need not read the ids on the device (its ``inputs_checked``); a batch that fails is a
    :class:`~hfbert.data.PreparedDataError` naming the corpus and the error."""
    arrays = corpus.read_arrays("train", plan.rows(micro, rank), {"input_ids": collator.pad_token_id})
    batch = collator.collate_arrays(arrays, plan.mask_streams(micro, rank))
    if model_config is not None:
        try:
            check_inputs(model_config, batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))
        except ValueError as err:
            raise PreparedDataError(f"rows of {corpus.path} do not fit the model: {err}") from None
    layout = HostLayout.of(batch["labels"], torch.from_numpy(np.asarray(arrays["input_ids_length"])))
    if pin_memory:
        return {name: tensor.pin_memory() for name, tensor in batch.items()}, layout.pin_memory()
    return batch, layout


def stand_in_batch(length: int = PAD_TO_MULTIPLE_OF) -> tuple[dict[str, torch.Tensor], HostLayout]:
    """One row of ``length`` tokens of id 0, the first of them supervised, and its layout, as :func:`training_batch`
    gives them: what a process trains on in place of rows it could not read, so that its collectives (DDP's
    gradient all-reduce) meet the other processes' at a step that is then abandoned."""
    ids = torch.zeros(1, length, dtype=torch.long)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 0] = 0
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "labels": labels, "next_sentence_label": torch.zeros(1, dtype=torch.long)}
    return batch, HostLayout.of(labels, torch.tensor([length]))


class ReadAhead:
    """Items made ahead of need in one background thread (a ``ThreadPoolExecutor``), by key.

    :meth:`get` returns the item of a key -- waiting for it when it is not ready yet, making it when it was never
    asked for -- and queues the next ``depth`` keys the caller names. Each item depends only on its key, so what is
    read ahead never changes what is trained on, and a resumed run asks for the same keys. One thread is enough:
    decoding Parquet, gathering arrays and collating release the interpreter for most of their time, the training
    process's own threads do the model's work, and a single queue keeps the items in order.
    """

    def __init__(self, make: Callable[[Hashable], Any], depth: int):
        self._make, self.depth = make, depth
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hfbert-read-ahead")
        self._pending: dict[Hashable, Future] = {}

    def get(self, key: Hashable, upcoming: Sequence[Hashable] = ()) -> tuple[Any, float]:
        """The item of ``key`` and the seconds this call waited for it; queues ``upcoming[:depth]``."""
        future = self._pending.pop(key, None) or self._pool.submit(self._make, key)
        wanted = list(upcoming)[: self.depth]
        for stale in [k for k in self._pending if k not in wanted]:
            self._pending.pop(stale).cancel()
        for later in wanted:
            if later not in self._pending:
                self._pending[later] = self._pool.submit(self._make, later)
        started = time.monotonic()
        item = future.result()  # an error of the reader is raised here, in the training process's thread
        return item, time.monotonic() - started

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)


def collate(collator, examples: list[dict], mask_seed: int) -> dict[str, torch.Tensor]:
    """Run the collator with its masking randomness fixed by ``mask_seed`` and the global RNG left untouched.

    The collator (``seed=None``) draws its generator from torch's global RNG; forking the RNG around the call keeps
    dropout's random stream independent of the data.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(mask_seed)
        return collator(examples)
