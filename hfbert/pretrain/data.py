"""Data for ``hfbert pretrain``: prepared corpora (one per sequence length) -> batches, by row index.

Training reads prepared folders (:class:`hfbert.data.PreparedCorpus`: Parquet shards, a manifest, the
tokenizer), never raw text: ``--prepared DIR_OR_REPO`` names them, and without it the job first prepares its
input (``--input``, ``--dataset`` or the built-in corpus) into ``output_dir/prepared/`` with
:func:`hfbert.data.prepare_corpus` -- the same folders ``hfbert prepare`` writes, read the same way.

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
* The held-out set is the prepared validation split (whole documents held out when the folder was built),
  capped at ``max_eval_examples`` rows spread over all shards, and masked once: statically in the folder, or,
  for a dynamically masked folder, by the collator with a seed fixed by the batch's number. Every evaluation
  scores the same positions, whatever the number of processes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list

from ..data import DataCollatorForBertPretraining, PreparedCorpus, prepare_corpus
from ..data.collator import IGNORE_INDEX
from ..data.manifest import MANIFEST, Manifest, PreparedDataError
from ..data.masking import RowStreams, splitmix64
from ..data.settings import ExampleSettings
from ..data.shards import ROW_GROUP_SIZE
from ..data.sources import BUILTIN_CORPUS, load_dataset_split
from ..modeling_hfbert import check_inputs
from ..usage import settings_marked
from ..unpadding_hfbert import PackedRows
from .config import ConfigError, PretrainConfig

__all__ = [
    "BUILTIN_CORPUS", "PREPARED_DIR", "SHUFFLE_WINDOW", "BatchPlan", "Permutation", "ReadAhead", "TrainingData",
    "baselines", "check_sources", "collate", "corpus_collator", "load_training_data", "prepare_source",
    "training_batch",
]

BUILTIN_CORPUS_NAME = "Jane Austen's six novels (public domain, shipped with hfbert)"
#: Where a job without ``--prepared`` prepares its input, inside ``output_dir`` (one folder per length).
PREPARED_DIR = "prepared"
#: Batch widths are rounded up to a multiple of this (see :func:`corpus_collator`).
PAD_TO_MULTIPLE_OF = 8
#: Row groups whose rows are mixed together in the training order (see :class:`BatchPlan`, docs/data.md).
SHUFFLE_WINDOW = 32
_HELD_OUT_STREAM = 0x686F6C64  # separates the held-out masks' seeds from the training masks'
_MASK_STREAM = 0x6D61736B  # separates the training masks' keys from the batch order's
# Errors of reading or building data that a user can fix: a missing file, a corrupt shard, an empty input.
_DATA_ERRORS = (FileNotFoundError, FileExistsError, KeyError, ValueError)


def check_sources(config: PretrainConfig) -> None:
    """Fail before any work when an input named in the config does not exist."""
    for path in config.input or []:
        if "://" not in path and not any(char in path for char in "*?[") and not Path(path).is_file():
            raise ConfigError(f"input file not found: {path}")
    if config.input is None and config.dataset is None and config.prepared is None and not BUILTIN_CORPUS.is_file():
        raise ConfigError(f"the built-in corpus is missing from the installation: {BUILTIN_CORPUS}")
    if config.dataset is not None and Path(config.dataset).exists() and not Path(config.dataset).is_dir():
        raise ConfigError(f"dataset must be a save_to_disk folder or a dataset name, got the file {config.dataset}")
    if config.tokenizer is not None and not Path(config.tokenizer).is_dir():
        raise ConfigError(f"tokenizer folder not found: {config.tokenizer}")
    for name in config.prepared or []:
        if "://" in name and not name.startswith("file://"):
            continue  # a Hub dataset (hf://datasets/user/name) or another fsspec URL: checked when opened
        name = name[len("file://"):] if name.startswith("file://") else name
        if Path(name).exists() and not Path(name).is_dir():
            raise ConfigError(f"prepared must name folders or Hub dataset repos, got the file {name}")
        if not Path(name).exists() and (name.count("/") != 1 or name.startswith((".", "/"))):
            raise ConfigError(f"prepared folder not found: {name}")


# ----------------------------------------------------------------------------------------------------------------
# Opening (and, without --prepared, building) the prepared corpora


def prepared_lengths(config: PretrainConfig) -> list[int] | None:
    """The sequence length of the one ``--prepared`` folder when the schedule is not given (no ``phases``, no
    ``max_seq_length``): such a run trains at that length (see :func:`~hfbert.pretrain.config.resolve_phases`).
    None otherwise. Raises :class:`ConfigError` for a folder that does not open."""
    if config.prepared is None or len(config.prepared) != 1 or config.phases is not None \
            or config.max_seq_length is not None:
        return None
    try:
        return [PreparedCorpus.open(config.prepared[0]).max_seq_length]
    except _DATA_ERRORS as err:
        raise ConfigError(str(err).strip("'\"")) from None


@dataclass
class TrainingData:
    """What the loop reads: per sequence length, the prepared corpus, its collator and the held-out batches."""

    corpora: dict[int, PreparedCorpus]
    collators: dict[int, DataCollatorForBertPretraining]
    held_out: dict[int, list[dict[str, torch.Tensor]]]  # collated once, fixed masks; process r takes every W-th
    tokenizer: Any
    stats: dict[str, Any]


def load_training_data(config: PretrainConfig, accelerator, lengths: Sequence[int], tokenizer=None) -> TrainingData:
    """The prepared corpus of every length of the schedule, checked against each other and the settings; without
    ``--prepared``, prepared first (see :func:`prepare_in_output_dir`) with ``tokenizer`` (a pretrained model's),
    else ``--tokenizer``, else a vocabulary trained on the input. Raises :class:`ConfigError`."""
    lengths = list(dict.fromkeys(lengths))
    try:
        if config.prepared is not None:
            # The local main process first: it fetches a remote corpus's small files (or, with prepared_download,
            # the whole corpus) into the machine's cache, where the other processes then find them.
            with accelerator.local_main_process_first():
                opened = [PreparedCorpus.open(name, timeout=config.hub_timeout, cache_limit=config.cache_limit,
                                              download=config.prepared_download) for name in config.prepared]
        else:
            folders = prepare_in_output_dir(config, accelerator, lengths, tokenizer)
            opened = [PreparedCorpus.open(folders[length]) for length in lengths]
        corpora = _by_length(opened, lengths, config)
        tokenizer = corpora[lengths[0]].load_tokenizer()
    except _DATA_ERRORS as err:
        raise ConfigError(str(err).strip("'\"")) from None
    collators = {length: corpus_collator(corpus, tokenizer) for length, corpus in corpora.items()}
    held_out = {length: held_out_batches(corpus, collators[length], config.max_eval_examples,
                                         config.eval_batch_size, config.seed)
                for length, corpus in corpora.items()}
    return TrainingData(corpora, collators, held_out, tokenizer, _stats(corpora, held_out, lengths))


def _by_length(opened: list[PreparedCorpus], lengths: list[int], config: PretrainConfig) -> dict[int, PreparedCorpus]:
    """Each phase's length -> the corpus prepared at that length (folders of other lengths are not used); one
    tokenizer for all; held-out rows present."""
    corpora: dict[int, PreparedCorpus] = {}
    for corpus in opened:
        if corpus.max_seq_length in corpora:
            raise ConfigError(f"prepared folders {corpora[corpus.max_seq_length].path} and {corpus.path} both hold "
                              f"length {corpus.max_seq_length}; give one folder per length")
        corpora[corpus.max_seq_length] = corpus
    missing = [length for length in lengths if length not in corpora]
    if missing:
        raise ConfigError(f"the schedule trains at length(s) {missing}, but the prepared folders hold "
                          f"{sorted(corpora)}; prepare one folder per length (hfbert prepare --max_seq_length N) or "
                          "set --max_seq_length / --phases to the folders' lengths")
    first = corpora[lengths[0]]
    for length in lengths:
        corpus = corpora[length]
        if corpus.manifest.tokenizer.sha256 != first.manifest.tokenizer.sha256:
            raise ConfigError(f"the prepared folders {first.path} and {corpus.path} were built with different "
                              "tokenizers; build every length with the same one (hfbert prepare --tokenizer DIR)")
        if "validation" not in corpus.splits or corpus.num_rows("validation") == 0:
            raise ConfigError(f"the prepared folder {corpus.path} has no validation rows to evaluate on; prepare it "
                              "with --eval_fraction > 0 and enough documents")
    if config.prepared is not None:
        _check_data_settings(config, first)
    return {length: corpora[length] for length in lengths}


def _check_data_settings(config: PretrainConfig, corpus: PreparedCorpus) -> None:
    """With ``--prepared`` the example settings are the folder's (its manifest records them): a value given here that
    differs from both the default and the manifest is a mistake to report. The settings the job gives a meaning of
    its own (``job=True``: ``seed`` also seeds the job, ``max_seq_length`` is the schedule's) are not compared."""
    defaults = PretrainConfig()
    built_with = ExampleSettings.from_recorded(corpus.settings)
    the_jobs = set(settings_marked(PretrainConfig, "job"))
    for name in corpus.settings.keys() & {f.name for f in dataclasses.fields(ExampleSettings)} - the_jobs:
        given, built = getattr(config, name), getattr(built_with, name)
        if given != getattr(defaults, name) and given != built:
            raise ConfigError(f"{name} is {given!r} but the prepared folder {corpus.path} was built with {built!r}; "
                              "a prepared folder's data settings are its own (rebuild it to change them)")


def corpus_collator(corpus: PreparedCorpus, tokenizer) -> DataCollatorForBertPretraining:
    """The collator of a prepared corpus: pads (static masks are in the rows) or masks (dynamic) with the settings
    the folder was built with.

    Batches are padded to a multiple of :data:`PAD_TO_MULTIPLE_OF` tokens, so a phase's batches take a few widths
    instead of every length up to its maximum: allocations of the same few sizes are reused by the allocator
    (and by kernel caches keyed on shapes) step after step, instead of accumulating blocks of ever new sizes.
    """
    masking = ExampleSettings.from_recorded(corpus.settings).masking_options()
    return DataCollatorForBertPretraining(tokenizer, **masking, pad_to_multiple_of=PAD_TO_MULTIPLE_OF)


def prepare_source(config: PretrainConfig):
    """What :func:`hfbert.data.prepare_corpus` reads: None (the built-in corpus), the input files, or the dataset."""
    return config.input if config.dataset is None else load_dataset_split(config.dataset, config.dataset_split)


def prepare_in_output_dir(config: PretrainConfig, accelerator, lengths: list[int], tokenizer=None) -> dict[int, Path]:
    """Prepare the input into ``output_dir/prepared/length-N`` (one folder per length) on every machine.

    The main process prepares first, training the WordPiece vocabulary (at the first length; the others reuse
    it); then it sends the tokenizer files and the shards' digests to every process. The main process of each
    other machine prepares the same folders with that tokenizer -- shards depend only on the input, the settings
    and the tokenizer, so the machines agree byte for byte without a shared disk, and the digests prove it --
    unless it already sees them (a disk shared with the main process). A resumed run reuses its folders.
    """
    root = Path(config.output_dir) / PREPARED_DIR
    folders = {length: root / f"length-{length}" for length in lengths}
    if config.resume:
        return folders
    sent = None
    if accelerator.is_main_process:
        _prepare(config, folders, lengths, config.tokenizer if tokenizer is None else tokenizer)
        sent = _built(folders, with_tokenizer=True)
    sent = broadcast_object_list([sent])[0]
    if accelerator.is_local_main_process and not accelerator.is_main_process and _built(folders) != sent["digests"]:
        tokenizer_dir = root / "tokenizer"
        tokenizer_dir.mkdir(parents=True, exist_ok=True)
        for name, data in sent["tokenizer"].items():
            (tokenizer_dir / name).write_bytes(data)
        _prepare(config, folders, lengths, str(tokenizer_dir))
        if _built(folders) != sent["digests"]:
            raise RuntimeError(f"the prepared folders in {root} differ from those of the main process: the input "
                               "must be the same files on every machine")
    accelerator.wait_for_everyone()
    return folders


def _prepare(config: PretrainConfig, folders: dict[int, Path], lengths: list[int], tokenizer) -> None:
    source = prepare_source(config)
    for number, length in enumerate(lengths):
        prepare_corpus(source, folders[length], config.example_settings(max_seq_length=length),
                       tokenizer=tokenizer if number == 0 else folders[lengths[0]], num_proc=config.num_proc,
                       overwrite=True)


def _built(folders: dict[int, Path], with_tokenizer: bool = False) -> dict | None:
    """Each folder's shard digests (None when a folder is not complete); with the tokenizer files, to send."""
    digests = {}
    for length, folder in folders.items():
        if not (folder / MANIFEST).is_file():
            return None
        digests[length] = Manifest.read(folder).splits_digest
    if not with_tokenizer:
        return digests
    first = folders[next(iter(folders))]
    names = Manifest.read(first).tokenizer.files
    return {"digests": digests, "tokenizer": {name: (first / name).read_bytes() for name in names}}


# ----------------------------------------------------------------------------------------------------------------
# The held-out set and the statistics of the data


def held_out_batches(corpus: PreparedCorpus, collator, cap: int, batch_size: int, seed: int) -> list[dict]:
    """The first ``cap`` rows of an even spread over the validation split, collated in fixed batches with fixed
    masks (a batch's masks are seeded by its number, so they do not depend on the number of processes)."""
    total = corpus.num_rows("validation")
    count = min(total, cap)
    indices = (np.arange(count, dtype=np.int64) * total) // count  # every shard contributes
    batches = []
    for number, start in enumerate(range(0, count, batch_size)):
        rows = corpus.rows("validation", indices[start : start + batch_size])
        seed_of_batch = int(np.random.SeedSequence([seed, _HELD_OUT_STREAM, number]).generate_state(1)[0])
        batches.append(collate(collator, rows, seed_of_batch))
    return batches


def baselines(batches: list[dict[str, torch.Tensor]]) -> dict[str, float]:
    """Trivial predictors on the held-out set: the most frequent masked token, and the majority NSP class."""
    targets = torch.cat([b["labels"][b["labels"] != -100] for b in batches])
    nsp = torch.cat([b["next_sentence_label"] for b in batches]).double()
    top = torch.bincount(targets).max().item() if targets.numel() else 0
    return {
        "eval_mlm_baseline_most_frequent_token": float(top / max(targets.numel(), 1)),
        "eval_nsp_baseline_majority_class": float(max(nsp.mean(), 1 - nsp.mean())) if nsp.numel() else 0.0,
    }


def _corpus_name(corpus: PreparedCorpus) -> str:
    described = corpus.manifest.input
    files = described.get("files")
    if files == [f"hfbert:{BUILTIN_CORPUS.name}"]:
        return BUILTIN_CORPUS_NAME
    return ", ".join(files) if files else str(described.get("name", corpus.path))


def _stats(corpora: dict[int, PreparedCorpus], held_out: dict[int, list], lengths: list[int]) -> dict[str, Any]:
    """What the model card and metrics.json say about the data (from the manifests and the held-out batches)."""
    first = corpora[lengths[0]]
    report = first.manifest.report
    stats = {
        "corpus": _corpus_name(first),
        "prepared": [str(corpus.path) for corpus in corpora.values()],
        "documents": report["documents"]["used"],
        "train_documents": report["splits"]["train"]["documents"],
        "eval_documents": report["splits"]["validation"]["documents"],
        "sentences": report["sentences"]["used"],
        "vocab_size": first.manifest.tokenizer.vocab_size,
        "train_examples": {length: corpus.num_rows("train") for length, corpus in corpora.items()},
        "eval_examples": {length: sum(len(b["input_ids"]) for b in held_out[length]) for length in corpora},
        "train_tokens": first.manifest.splits["train"].tokens,
        "masking": first.settings["masking"],
        "random_next_fraction": report.get("instances", {}).get("random_next_fraction"),  # None: an older manifest
    }
    by_length = {length: baselines(batches) for length, batches in held_out.items()}
    # The final evaluation is at the last phase's length, so its baselines are the ones reported next to it.
    stats.update(by_length[lengths[-1]])
    if len(by_length) > 1:
        stats["baselines_by_length"] = by_length
    return stats


# ----------------------------------------------------------------------------------------------------------------
# Batches


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


def training_batch(corpus: PreparedCorpus, collator: DataCollatorForBertPretraining, plan: BatchPlan, micro: int,
                   rank: int, pin_memory: bool = False, model_config=None) -> tuple[dict[str, torch.Tensor], dict]:
    """Process ``rank``'s share of micro-batch ``micro``: its rows gathered into arrays and collated (masks from a
    keys of :meth:`BatchPlan.mask_streams`, torch's RNG untouched, so this can run in another thread),
    and what the loop knows on the host instead of asking the device: the supervised labels in row-major order
    (``targets``), where they are in the flattened batch (``positions``, the model's ``supervised_positions``),
    their number (``supervised``), the real tokens (``tokens``) and where those sit (``packed``, the model's
    ``packed_rows``).

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
    return _with_counts(batch, torch.from_numpy(np.asarray(arrays["input_ids_length"])), pin_memory)


def stand_in_batch(length: int = PAD_TO_MULTIPLE_OF) -> tuple[dict[str, torch.Tensor], dict]:
    """One row of ``length`` tokens of id 0, the first of them supervised, and its counts as :func:`training_batch`
    gives them: what a process trains on in place of rows it could not read, so that its collectives (DDP's
    gradient all-reduce) meet the other processes' at a step that is then abandoned."""
    ids = torch.zeros(1, length, dtype=torch.long)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, 0] = 0
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids),
             "labels": labels, "next_sentence_label": torch.zeros(1, dtype=torch.long)}
    return _with_counts(batch, torch.tensor([length]), pin_memory=False)


def _with_counts(batch: dict[str, torch.Tensor], lengths: torch.Tensor, pin_memory: bool) -> tuple[dict, dict]:
    """A collated batch and its rows' ``lengths`` -> the batch and its counts (see :func:`training_batch`)."""
    labels = batch["labels"]
    layout = host_layout(labels, lengths)
    positions = layout["supervised_positions"]
    counts = {"targets": labels.flatten()[positions], "positions": positions, "tokens": int(lengths.sum()),
              "packed": layout["packed_rows"]}
    counts["supervised"] = int(counts["targets"].numel())
    if pin_memory:  # page-locked, so the copy to the GPU can overlap the step before it
        batch = {name: tensor.pin_memory() for name, tensor in batch.items()}
        counts["targets"], counts["positions"] = counts["targets"].pin_memory(), counts["positions"].pin_memory()
        counts["packed"] = counts["packed"] and counts["packed"].pin_memory()
    return batch, counts


def host_layout(labels: torch.Tensor, lengths: torch.Tensor) -> dict[str, Any]:
    """What :class:`~hfbert.HfBertForPreTraining` would otherwise find on the device, found on the host from a
    right-padded batch's MLM ``labels`` (B, T) and its rows' ``lengths`` (B,): ``packed_rows`` and
    ``supervised_positions``, the model's keyword arguments."""
    return {"packed_rows": PackedRows.from_lengths(lengths, labels.shape[1]),
            "supervised_positions": (labels.flatten() != IGNORE_INDEX).nonzero().squeeze(1)}


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
