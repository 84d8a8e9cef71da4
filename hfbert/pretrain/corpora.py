"""The data of a ``hfbert pretrain`` run: its prepared corpora (one per sequence length), opened once.

Training reads prepared folders (:class:`hfbert.data.PreparedCorpus`: Parquet shards, a manifest, the
tokenizer), never raw text: ``--prepared DIR_OR_REPO`` names them (:func:`open_prepared` opens each once, with the
Hub timeout and the cache limit), and without it the job first prepares its input (``--input``, ``--dataset`` or
the built-in corpus) into ``output_dir/prepared/`` with :func:`hfbert.data.prepare_corpus` -- the same folders
``hfbert prepare`` writes, read the same way. :func:`load_training_data` gives each phase's length its
:class:`PhaseData`: the corpus, its collator and the held-out batches.

The held-out set is the prepared validation split (whole documents held out when the folder was built), capped at
``max_eval_examples`` rows spread over all shards, and masked once: statically in the folder, or, for a
dynamically masked folder, by the collator with a seed fixed by the batch's number. Every evaluation scores the
same positions, whatever the number of processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate.utils import broadcast_object_list

from ..data import DataCollatorForBertPretraining, PreparedCorpus, prepare_corpus
from ..data.manifest import MANIFEST, Manifest
from ..data.settings import ExampleSettings
from ..data.sources import BUILTIN_CORPUS, load_dataset_split
from ..settings import settings_marked
from .batches import PAD_TO_MULTIPLE_OF, collate
from .config import ConfigError, PretrainConfig

__all__ = [
    "BUILTIN_CORPUS", "PREPARED_DIR", "PhaseData", "TrainingData", "baselines", "check_sources", "corpus_collator",
    "held_out_batches", "load_training_data", "open_prepared", "prepare_in_output_dir", "prepare_source",
]

BUILTIN_CORPUS_NAME = "Jane Austen's six novels (public domain, shipped with hfbert)"
#: Where a job without ``--prepared`` prepares its input, inside ``output_dir`` (one folder per length).
PREPARED_DIR = "prepared"
_HELD_OUT_STREAM = 0x686F6C64  # separates the held-out masks' seeds from the training masks'
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


def open_prepared(config: PretrainConfig, accelerator) -> list[PreparedCorpus] | None:
    """The ``--prepared`` folders, each opened once, with the Hub timeout and the cache limit (None without
    ``--prepared``: the job prepares its input once the schedule is known). The local main process opens first: it
    fetches a remote corpus's small files (or, with ``prepared_download``, the whole corpus) into the machine's
    cache, where the other processes then find them. Raises :class:`ConfigError`."""
    if config.prepared is None:
        return None
    try:
        with accelerator.local_main_process_first():
            return [PreparedCorpus.open(name, timeout=config.hub_timeout, cache_limit=config.cache_limit,
                                        download=config.prepared_download) for name in config.prepared]
    except _DATA_ERRORS as err:
        raise ConfigError(str(err).strip("'\"")) from None


@dataclass
class PhaseData:
    """What a phase reads: the corpus prepared at its length, its collator, and the held-out batches (collated once,
    with fixed masks; process ``r`` of ``W`` evaluates every ``W``-th)."""

    corpus: PreparedCorpus
    collator: DataCollatorForBertPretraining
    held_out: list[dict[str, torch.Tensor]]


@dataclass
class TrainingData:
    """The data of a run: each length of its schedule -> :class:`PhaseData`, the one tokenizer, and what the card and
    metrics.json say of the data."""

    by_length: dict[int, PhaseData]
    tokenizer: Any
    stats: dict[str, Any]

    def of(self, phase) -> PhaseData:
        """The data of a :class:`~hfbert.pretrain.config.Phase`."""
        return self.by_length[phase.max_seq_length]

    @property
    def corpora(self) -> list[PreparedCorpus]:
        return [data.corpus for data in self.by_length.values()]


def load_training_data(config: PretrainConfig, accelerator, lengths: Sequence[int],
                       opened: list[PreparedCorpus] | None = None, tokenizer=None) -> TrainingData:
    """The prepared corpus of every length of the schedule, checked against each other and the settings: the
    ``opened`` ones (:func:`open_prepared`), or, without ``--prepared``, the input prepared first (see
    :func:`prepare_in_output_dir`) with ``tokenizer`` (a pretrained model's), else ``--tokenizer``, else a
    vocabulary trained on the input. Raises :class:`ConfigError`."""
    lengths = list(dict.fromkeys(lengths))
    try:
        if opened is None:
            folders = prepare_in_output_dir(config, accelerator, lengths, tokenizer)
            opened = [PreparedCorpus.open(folders[length]) for length in lengths]
        corpora = _by_length(opened, lengths, config)
        tokenizer = corpora[lengths[0]].load_tokenizer()
    except _DATA_ERRORS as err:
        raise ConfigError(str(err).strip("'\"")) from None
    by_length = {}
    for length, corpus in corpora.items():
        collator = corpus_collator(corpus, tokenizer)
        held_out = held_out_batches(corpus, collator, config.max_eval_examples, config.eval_batch_size, config.seed)
        by_length[length] = PhaseData(corpus, collator, held_out)
    return TrainingData(by_length, tokenizer, _stats(by_length, lengths))


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
            if corpus.manifest.report.get("documents", {}).get("used") == 1:  # nothing to hold out, nor for NSP
                raise ConfigError(f"the prepared folder {corpus.path} holds a single document, so none is held out "
                                  "to evaluate on and NSP's random segments come from that same document; a text "
                                  "file without blank lines is one document: put a blank line between documents")
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


def _stats(data: dict[int, PhaseData], lengths: list[int]) -> dict[str, Any]:
    """What the model card and metrics.json say about the data (from the manifests and the held-out batches)."""
    corpora = {length: phase.corpus for length, phase in data.items()}
    held_out = {length: phase.held_out for length, phase in data.items()}
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
