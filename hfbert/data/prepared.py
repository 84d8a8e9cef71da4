"""Prepared pretraining corpora: built once into Parquet shards, read by row index from any process.

A prepared folder (one sequence length per folder)::

    DIR/hfbert_prepare.json                     the manifest: format, every build setting, the tokenizer's
                                                fingerprint and special ids, per split and shard: file, rows,
                                                tokens, content digest, sha256, bytes; the health report
    DIR/data/train-00000-of-00008.parquet       the training rows, shuffled within each shard
    DIR/data/validation-00000-of-00008.parquet  rows of the held-out documents (whole documents)
    DIR/tokenizer.json, vocab.txt, ...          the tokenizer the rows were built with
    DIR/report.json, DIR/report.txt             the health report (what came in, what was skipped, what came out)
    DIR/README.md                               the dataset card (its YAML names the splits for the Hub)

Columns: ``input_ids`` (list<int32>), ``token_type_ids`` (list<int8>), ``next_sentence_label`` (int8); static
masking adds ``masked_lm_positions`` and ``masked_lm_ids`` (list<int32>, ``input_ids`` already corrupted);
dynamic whole-word masking adds ``word_starts`` (list<int8>).  The validation split has the same columns.

:func:`prepare_corpus` builds it (shards are the units of work, see :mod:`hfbert.data.shards` and
:mod:`hfbert.data.engines`; the output is byte-identical for every engine and ``num_proc``);
:class:`PreparedCorpus` reads it -- a local folder or a Hub dataset repo -- without converting it: a row is
found from the manifest's rows per shard and the Parquet footer's row groups, and only the row groups that hold
the requested rows are decoded (read with pread, a small cache of decoded groups), so opening a corpus of
any size takes the time of reading its footers and memory does not grow with it.  ``datasets.load_dataset(DIR)``
(also with ``streaming=True``), DuckDB, Spark and the Hub's viewer read the same files.
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import sys
import tempfile
import threading
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from .blocks import BlockSlots
from .documents import CorpusError, read_document_range
from .engines import run_tasks
from .manifest import MANIFEST, Manifest, PreparedDataError, ShardRecord, SplitRecord, TokenizerRecord, dataset_card
from ..google_checkpoint import is_google_folder
from ..hub import is_repo_id, push_to_hub, resolve_timeout
from ..model_source import ModelSourceError, locate, source_tokenizer
from ..tokenization import train_wordpiece
from .pipeline import TokenizerFacts, make_builder, output_features
from .report import (
    assemble_report,
    merge_line_sketches,
    merge_pool_summaries,
    merge_row_summaries,
    render_report,
)
from .remote import (
    DEFAULT_CACHE_LIMIT,
    RangeCache,
    RemoteShards,
    default_cache_dir,
    download_corpus,
    fetch_metadata,
    list_sizes,
    parse_size,
    resolve_location,
)
from .settings import ExampleSettings
from .shards import ROW_GROUP_SIZE, SPLITS, ShardTask, build_shard, features_metadata, write_atomically
from .sources import BUILTIN_CORPUS, TextFiles, resolve_input

__all__ = ["MANIFEST", "PreparedCorpus", "PreparedDataError", "auto_num_shards", "prepare_corpus", "push_prepared"]

# Input bytes per shard and duplication pass when num_shards is not given.  A worker holds one shard's rows
# (they are shuffled before writing), so this bounds a worker's memory whatever the corpus size.
SHARD_INPUT_BYTES = 32 << 20


def _check_shards(manifest: Manifest, size_of, shown: str) -> None:
    """Every shard the manifest lists is there (``size_of(file)`` is not None) with the manifest's size."""
    for split, info in manifest.splits.items():
        for shard in info.shards:
            size = size_of(shard.file)
            if size is None:
                raise PreparedDataError(f"shard {shard.file} of {shown} is missing (the manifest lists "
                                        f"{len(info.shards)} {split} shards)")
            if size != shard.bytes:
                raise PreparedDataError(f"shard {shard.file} of {shown} has {size} bytes, the manifest says "
                                        f"{shard.bytes}: the file is truncated or was replaced")


def auto_num_shards(input_bytes: int, dupe_factor: int) -> int:
    """The default shard count: one shard per ``SHARD_INPUT_BYTES`` of input per duplication pass."""
    return max(1, -(-input_bytes * dupe_factor // SHARD_INPUT_BYTES))


def _display(path: str) -> str:
    # The built-in corpus by its name, so the manifest does not depend on where hfbert is installed.
    return f"hfbert:{BUILTIN_CORPUS.name}" if path == str(BUILTIN_CORPUS) else path


# ---------------------------------------------------------------------------------------------------------
# Building


def prepare_corpus(source=None, output_dir: str | Path = "prepared", settings: ExampleSettings | None = None, *,
                   tokenizer=None, num_proc: int = 1, engine: str = "local", scheduler: str | None = None,
                   overwrite: bool = False, **changes) -> Path | str:
    """Build a prepared corpus (see the module docstring) and return its folder.

    ``source``: ``None`` (the built-in Austen corpus: paragraphs, chapters are documents), a text file, glob or
    fsspec URL or a list of them, a ``datasets.Dataset`` (a ``sentences`` or ``text`` column), or a list of
    documents (lists of sentences).  ``settings``: an :class:`~hfbert.data.ExampleSettings` (masking, NSP pairs,
    input layout, the vocabulary trained when ``tokenizer`` is None, shards and the held-out split); any of its
    fields may also be given as a keyword argument (``max_seq_length=64``), which replaces its value.
    ``tokenizer``: a fast BERT tokenizer, its folder, or a pretrained model's (a model folder, a Google folder, a
    Hub id); ``None`` trains a WordPiece vocabulary of
    ``settings.vocab_size`` on the input.  ``engine``/``num_proc``/``scheduler``: who builds the shards
    (:mod:`hfbert.data.engines`); they never change the output.
    """
    settings = (settings or ExampleSettings()).example_settings(**changes)
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be an int >= 1, got {num_proc!r}")
    source = resolve_input(source, input_layout=settings.input_layout, document_boundary=settings.document_boundary,
                           text_column=settings.text_column)
    output = str(output_dir)
    _claim_output(output, overwrite)
    tokenizer = _tokenizer(tokenizer, source, settings)
    builder, facts = make_builder(tokenizer, settings)
    num_shards = settings.num_shards
    if num_shards is None:
        size = sum(source.sizes) if isinstance(source, TextFiles) else sum(map(_document_bytes, source.rows))
        num_shards = auto_num_shards(size, settings.passes)
    schema = builder.features.arrow_schema.with_metadata(features_metadata(builder.features))
    tasks = [ShardTask(k, num_shards, source, builder, output, schema, settings.seed, settings.pool_size,
                       settings.eval_fraction, builder.spec.mask_token_id) for k in range(num_shards)]
    sketches = {split: merge_line_sketches([]) for split in SPLITS}

    def fold_sketches(result: dict) -> dict:  # one running sketch per split instead of one per shard
        for split, entry in result["splits"].items():
            sketches[split] = merge_line_sketches([sketches[split], entry.pop("lines")])
        return result

    results = run_tasks(build_shard, tasks, engine=engine, num_proc=num_proc, scheduler=scheduler,
                        desc="Preparing shards", on_result=fold_sketches)
    settings = {**settings.recorded(), "num_shards": num_shards, "validation_dupe_factor": 1,
                "row_group_size": ROW_GROUP_SIZE}
    used = sum(e["pools"]["documents"] - e["pools"]["empty_documents"] for r in results for e in r["splits"].values())
    if used == 0:
        _remove_outputs(output)
        raise CorpusError(f"{_input_name(source)}: the input has no documents (no line of text)")
    report = _report(results, sketches, source, settings)
    _finish_output(output, tokenizer, facts, source, settings, results, report)
    return Path(output) if "://" not in output else output


def _document_bytes(document) -> int:
    return len(document) if isinstance(document, str) else sum(map(len, document or ()))


def _input_name(source) -> str:
    return ", ".join(map(_display, source.paths)) if isinstance(source, TextFiles) else source.name


def _tokenizer(tokenizer, source, settings: ExampleSettings):
    """The tokenizer to build with: trained on the input (None), a tokenizer folder (a prepared corpus too), or the
    tokenizer of a pretrained model anywhere :func:`hfbert.model_source.locate` finds one (a model folder, a
    Google folder, a Hub id), in the casing ``do_lower_case`` asks for."""
    if tokenizer is None:
        return train_wordpiece(_texts(source), vocab_size=settings.vocab_size, lowercase=settings.lowercase)
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer
    path = Path(tokenizer)
    if path.is_dir() and not (path / "config.json").is_file() and not is_google_folder(path):
        return AutoTokenizer.from_pretrained(str(path))
    try:
        found, notes = source_tokenizer(locate(str(tokenizer)), settings.do_lower_case)
    except ModelSourceError as err:
        raise ValueError(f"tokenizer: {err}") from None
    for warning in notes:
        print(f"warning: {warning}", file=sys.stderr)
    return found


def _texts(source):
    """Every text unit of the input, for training a vocabulary (held-out documents included, as Google's
    vocabularies were learned on the whole corpus)."""
    if isinstance(source, TextFiles):
        for path in source.paths:
            for document in read_document_range(path, layout=source.layout, boundary=source.boundary):
                yield from document
        return
    for start in range(0, len(source.rows), 1024):
        batch = source.rows[start:start + 1024] if source.column is None else source.rows[start:start + 1024][
            source.column]
        for document in batch:
            yield from ([document] if isinstance(document, str) else document)


def _fs(output: str):
    return fsspec.core.url_to_fs(output)


def _claim_output(output: str, overwrite: bool) -> None:
    """Refuse a folder that holds anything unless ``overwrite``; then clear what a previous build wrote (a stale
    shard of another shard count would otherwise be picked up by ``load_dataset``'s patterns)."""
    if "://" in output:
        fs, root = _fs(output)
        taken = fs.exists(root) and bool(fs.ls(root))
    else:
        root = Path(output)
        if root.exists() and not root.is_dir():
            raise FileExistsError(f"output_dir {output} is a file")
        taken = root.is_dir() and any(root.iterdir())
    if taken and not overwrite:
        raise FileExistsError(f"output_dir {output} is not empty; choose another or pass overwrite_output_dir")
    if taken:
        _remove_outputs(output, everything=True)


def _remove_outputs(output: str, everything: bool = False) -> None:
    if "://" in output:
        fs, root = _fs(output)
        for child in fs.ls(root) if everything else [f"{root.rstrip('/')}/data"]:
            if fs.exists(child):
                fs.rm(child, recursive=True)
        return
    root = Path(output)
    for child in list(root.iterdir()) if everything and root.is_dir() else [root / "data"]:
        if child.is_dir():
            shutil.rmtree(child)
        elif child.exists():
            child.unlink()


def _report(results: list[dict], sketches: dict, source, settings: dict) -> dict:
    pools, rows, lines, splits, digests = [], [], [], {}, []
    for split in SPLITS:
        entries = [r["splits"][split] for r in results if split in r["splits"]]
        if not entries:
            continue
        for entry in entries:
            pools.append(entry["pools"])
            rows.append(entry["rows_summary"])
            digests.append(f"{entry['file']}:{entry['digest']}")
        lines.append(sketches[split])
        splits[split] = {"rows": sum(e["rows"] for e in entries),
                         "documents": sum(e["pools"]["documents"] - e["pools"]["empty_documents"] for e in entries)}
    read_stats = None
    if isinstance(source, TextFiles):
        read_stats = {key: sum(r["read_stats"][key] for r in results) for key in results[0]["read_stats"]
                      if key != "files"}
        read_stats = {"files": [_display(p) for p in source.paths], **read_stats}
    digest = hashlib.sha256("\n".join(digests).encode()).hexdigest()
    pools = merge_pool_summaries(pools)
    report = assemble_report(pools, merge_row_summaries(rows), merge_line_sketches(lines), read_stats, settings,
                             digest)
    report["splits"] = splits
    report["warnings"] = _warnings(pools, splits, settings)
    return report


def _warnings(pools: dict, splits: dict, settings: dict) -> list[str]:
    messages = []
    lonely = pools["single_document_pools_with_rows"]
    if lonely:
        messages.append(f"{lonely} pool(s) have a single non-empty document: random-next segments there come from "
                        "the same document; use more documents per shard (fewer shards) or a larger pool_size")
    if settings["eval_fraction"] > 0 and splits.get("validation", {}).get("rows", 0) == 0:
        messages.append("no document was held out for validation: the corpus has too few documents for "
                        f"eval_fraction {settings['eval_fraction']}")
    for message in messages:
        warnings.warn(message, UserWarning, stacklevel=4)
    return messages


def _finish_output(output: str, tokenizer, facts: TokenizerFacts, source, settings: dict, results: list[dict],
                   report: dict) -> None:
    """The client's part: tokenizer files, manifest, report and card (the shards are in place already)."""
    with tempfile.TemporaryDirectory(prefix="hfbert-tokenizer-") as scratch:
        tokenizer.save_pretrained(scratch)
        files = {path.name: path.read_bytes() for path in sorted(Path(scratch).iterdir()) if path.is_file()}
    for name, data in files.items():
        write_atomically(output, name, data)
    specials = {name: getattr(tokenizer, f"{name}_token_id") for name in ("pad", "unk", "cls", "sep", "mask")}
    splits = {}
    for split in SPLITS:
        entries = [r["splits"][split] for r in results if split in r["splits"]]
        if entries:
            shards = [ShardRecord(e["file"], e["rows"], e["tokens"], e["digest"], e["sha256"], e["bytes"],
                                  e["row_groups"]) for e in entries]
            splits[split] = SplitRecord(sum(e["rows"] for e in entries), sum(e["tokens"] for e in entries), shards)
    input_description = source.describe()
    if "files" in input_description:
        input_description["files"] = [_display(p) for p in input_description["files"]]
    manifest = Manifest(
        settings=settings,
        input=input_description,
        tokenizer=TokenizerRecord(hashlib.sha256(files["tokenizer.json"]).hexdigest(), len(facts.vocab), specials,
                                  sorted(files)),
        columns={field.name: str(field.type) for field in settings_schema(settings)},
        splits=splits,
        report=report,
    )
    write_atomically(output, "report.json", (json.dumps(report, indent=2, ensure_ascii=False) + "\n").encode())
    write_atomically(output, "report.txt", render_report(report).encode())
    write_atomically(output, "README.md", dataset_card(manifest).encode())
    manifest.write(output)
    _remove_leftovers(output)


def settings_schema(settings: dict) -> pa.Schema:
    return output_features(settings["masking"], settings["whole_word_mask"]).arrow_schema


def _remove_leftovers(output: str) -> None:
    """Temporary files of tasks that died mid-write (their retries wrote the shard again)."""
    if "://" in output:
        fs, root = _fs(output)
        for path in fs.glob(f"{root.rstrip('/')}/data/.*.tmp"):
            fs.rm(path)
        return
    for path in (Path(output) / "data").glob(".*.tmp"):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------
# Reading


class PreparedCorpus:
    """A prepared folder opened for reading (see the module docstring); use :meth:`open`."""

    #: Decoded row groups kept per corpus by default (a few MB each at most); see :meth:`set_cache`.
    CACHED_GROUPS = 16
    #: Shard files kept open per corpus (all splits together); opening one more closes the least recently used.
    MAX_OPEN_FILES = 64

    def __init__(self, path: Path, manifest: Manifest):
        self.path = Path(path)
        self.manifest = manifest
        self._offsets = {split: np.concatenate(([0], np.cumsum([s.rows for s in info.shards])))
                         for split, info in manifest.splits.items()}
        self._files: OrderedDict[tuple[str, int], pq.ParquetFile] = OrderedDict()
        self._ends: dict[tuple[str, int], np.ndarray] = {}
        self._blocks = BlockSlots(settings_schema(manifest.settings), self.CACHED_GROUPS)
        # Every row group but a shard's last holds ``row_group_size`` rows: a row's group is arithmetic.
        self._group_size = manifest.settings.get("row_group_size") if all(
            shard.row_groups is not None for shard in manifest.shards()) else None
        self._lock = threading.RLock()  # the training loop reads ahead in a thread

    @classmethod
    def open(cls, location: str | Path, *, revision: str | None = None, token: str | None = None,
             endpoint: str | None = None, timeout: float | None = None, cache_dir: str | Path | None = None,
             cache_limit: int | str = DEFAULT_CACHE_LIMIT, download: bool = False) -> PreparedCorpus:
        """Open a prepared corpus: a local folder, a Hub dataset repo (``user/name`` or
        ``hf://datasets/user/name[@revision]``; ``revision``, ``token``, ``endpoint`` as in huggingface_hub) or any
        fsspec URL (``s3://...``, ``gs://...``).

        A remote corpus is read on demand (:mod:`hfbert.data.remote`): the manifest and tokenizer files come to
        ``cache_dir`` (default ``$HF_HOME/hfbert/shards``), and each shard's footer and row groups only when rows
        in them are read, through a cache of at most ``cache_limit`` bytes shared by the processes of the machine;
        a read is retried for ``timeout`` seconds (default as :func:`hfbert.hub.resolve_timeout`) and then raises
        :class:`~hfbert.data.remote.ShardReadError` naming the shard and the URL.  ``download=True`` copies the
        whole corpus to local disk first instead and checks every shard's sha256.

        Checks the manifest and that every shard it lists is present with its size; a corrupted page is found by
        its checksum when read (:meth:`verify` checks every byte of a local folder)."""
        name = str(location)
        name = name[len("file://"):] if name.startswith("file://") else name
        path = Path(name)
        if path.is_dir() or ("://" not in name and not is_repo_id(name)):
            if not path.is_dir():
                raise FileNotFoundError(f"prepared folder not found: {location}")
            return cls._open_local(path)
        seconds = resolve_timeout(timeout)
        remote = resolve_location(name, revision=revision, token=token, endpoint=endpoint, timeout=seconds)
        cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        if download:
            folder = download_corpus(remote, MANIFEST, cache_dir, seconds)
            try:
                corpus = cls._open_local(folder)
                corpus.verify()  # every byte was read anyway: the manifest's sha256 of each shard is checked
            except PreparedDataError:
                shutil.rmtree(folder, ignore_errors=True)  # the next attempt downloads again
                raise
            return corpus
        folder = fetch_metadata(remote, MANIFEST, cache_dir, seconds)
        manifest = Manifest.read(folder, remote.url)
        shards = {shard.file: shard for shard in manifest.shards()}
        sizes = list_sizes(remote, sorted({file.rsplit("/", 1)[0] for file in shards}), seconds)
        _check_shards(manifest, sizes.get, remote.url)
        corpus = cls(folder, manifest)
        corpus.url = remote.url
        corpus._remote = RemoteShards(remote, RangeCache(cache_dir / "ranges", parse_size(cache_limit)), seconds,
                                      shards)
        return corpus

    @classmethod
    def _open_local(cls, path: Path) -> PreparedCorpus:
        manifest = Manifest.read(path)

        def size(name: str) -> int | None:
            file = path / name
            return file.stat().st_size if file.is_file() else None

        _check_shards(manifest, size, str(path))
        return cls(path, manifest)

    # -- what it holds ----------------------------------------------------------------------------------
    @property
    def settings(self) -> dict:
        return self.manifest.settings

    @property
    def max_seq_length(self) -> int:
        return int(self.settings["max_seq_length"])

    @property
    def splits(self) -> list[str]:
        return list(self.manifest.splits)

    def num_rows(self, split: str = "train") -> int:
        return int(self._offsets[self._split(split)][-1])

    def load_tokenizer(self):
        """The tokenizer the rows were built with (its fingerprint is checked against the manifest)."""
        digest = hashlib.sha256((self.path / "tokenizer.json").read_bytes()).hexdigest()
        if digest != self.manifest.tokenizer.sha256:
            raise PreparedDataError(f"{self.path / 'tokenizer.json'} is not the tokenizer the corpus was built with "
                                    f"(sha256 {digest[:12]}..., the manifest says "
                                    f"{self.manifest.tokenizer.sha256[:12]}...)")
        return AutoTokenizer.from_pretrained(str(self.path))

    def check_model_config(self, config) -> None:
        """Raise ValueError naming both values when a model config disagrees with the corpus's tokenizer."""
        expected = self.manifest.tokenizer
        if config.vocab_size != expected.vocab_size:
            raise ValueError(f"the model's vocab_size ({config.vocab_size}) differs from the vocabulary of the "
                             f"prepared corpus {self.url or self.path} ({expected.vocab_size}); build the model "
                             f"with vocab_size={expected.vocab_size}")
        pad = getattr(config, "pad_token_id", None)
        if pad is not None and pad != expected.special_token_ids["pad"]:
            raise ValueError(f"the model's pad_token_id ({pad}) differs from the prepared corpus's [PAD] id "
                             f"({expected.special_token_ids['pad']}, {self.url or self.path})")

    # -- rows -------------------------------------------------------------------------------------------
    def rows(self, split: str, indices) -> list[dict[str, Any]]:
        """The rows at global indices ``indices`` of ``split`` (in that order), as dicts of Python lists."""
        table = self.read(split, indices)
        return table.to_pylist()

    def read(self, split: str, indices) -> pa.Table:
        """:meth:`rows` as an Arrow table (no conversion to Python objects)."""
        arrays = self.read_arrays(split, indices)
        schema = settings_schema(self.settings)
        columns = []
        for field in schema:
            if not pa.types.is_list(field.type):
                columns.append(pa.array(arrays[field.name], type=field.type))
                continue
            lengths = arrays[f"{field.name}_length"]
            values = arrays[field.name][np.arange(arrays[field.name].shape[1]) < lengths[:, None]]
            offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))), type=pa.int32())
            columns.append(pa.ListArray.from_arrays(offsets, pa.array(values, type=field.type.value_type),
                                                    type=field.type))
        return pa.Table.from_arrays(columns, schema=schema)

    def read_arrays(self, split: str, indices, pad_values: dict[str, int] | None = None) -> dict[str, np.ndarray]:
        """The rows at ``indices`` as numpy arrays, gathered without Python objects: a list column ``name`` becomes
        a ``(rows, longest)`` array padded with ``pad_values.get(name, 0)`` and its lengths ``name + "_length"``;
        a scalar column a ``(rows,)`` array.  What the training loop collates.

        The row groups the rows lie in are decoded into the corpus's block slots (:mod:`hfbert.data.blocks`; the
        least recently used make room) and every column is gathered from them in one pass."""
        split = self._split(split)
        indices = self._check_indices(split, indices)
        with self._lock:
            keys, block_of_row, local = self._locate(split, indices)
            if self._remote is not None:
                self._prefetch(keys)
            slots = self._blocks.slots(keys, self._decode)
            return self._blocks.gather(slots[block_of_row], local, pad_values or {})

    def blocks(self, split: str = "train") -> np.ndarray:
        """Rows per block (Parquet row group) of ``split``, shard after shard, in row order: block ``i`` holds the
        rows that follow the first ``i`` blocks'.  From the manifest alone (no file is opened)."""
        split = self._split(split)
        sizes = [np.diff(self._group_ends(split, shard), prepend=0)
                 for shard in range(len(self.manifest.splits[split].shards))]
        return np.concatenate(sizes).astype(np.int64) if sizes else np.zeros(0, dtype=np.int64)

    def set_cache(self, blocks: int) -> None:
        """Keep up to ``blocks`` decoded row groups (least recently used dropped first); at least 1."""
        with self._lock:
            self._blocks.resize(blocks)

    @property
    def cached_blocks(self) -> int:
        """How many decoded row groups are kept (see :meth:`set_cache`)."""
        return self._blocks.capacity

    @property
    def held_bytes(self) -> int:
        """The bytes the decoded row groups hold now: bounded by :attr:`cached_blocks`, whatever the corpus's size."""
        return self._blocks.nbytes

    @property
    def open_files(self) -> int:
        """How many shard files are open now (at most :attr:`MAX_OPEN_FILES`)."""
        return len(self._files)

    def close(self) -> None:
        """Close the open shard files and drop the decoded row groups (reading again reopens them)."""
        with self._lock:
            while self._files:
                _, file = self._files.popitem(last=False)
                file.close(force=True)
            self._blocks.clear()

    def verify(self) -> None:
        """Check every shard's bytes against the manifest's sha256 (reads the whole corpus once)."""
        for shard in self.manifest.shards():
            digest = hashlib.sha256()
            with open(self.path / shard.file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    digest.update(block)
            if digest.hexdigest() != shard.sha256:
                raise PreparedDataError(f"shard {shard.file} of {self.path} is corrupt: its sha256 differs "
                                        "from the manifest's; re-download or rebuild it")

    def _split(self, split: str) -> str:
        if split not in self._offsets:
            raise KeyError(f"the prepared corpus {self.url or self.path} has no {split!r} split "
                           f"(splits: {self.splits})")
        return split

    def _check_indices(self, split: str, indices) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        total = self.num_rows(split)
        if len(indices) and (indices.min() < 0 or indices.max() >= total):
            bad = int(indices[(indices < 0) | (indices >= total)][0])
            raise IndexError(f"row {bad} is outside the {split} split of {self.url or self.path} ({total} rows)")
        return indices

    def _locate(self, split: str, indices: np.ndarray) -> tuple[list, np.ndarray, np.ndarray]:
        """The distinct blocks ``(split, shard, row group)`` that ``indices`` lie in, which of them each index
        lies in, and its row within that block."""
        offsets = self._offsets[split]
        shard_of = np.searchsorted(offsets, indices, side="right") - 1
        local = indices - offsets[shard_of]
        if self._group_size:
            group_of, local = np.divmod(local, self._group_size)
        else:  # from each shard's footer
            group_of = np.empty_like(local)
            for shard in np.unique(shard_of).tolist():
                in_shard = shard_of == shard
                ends = self._group_ends(split, shard)
                group_of[in_shard] = np.searchsorted(ends, local[in_shard], side="right")
                local[in_shard] -= np.concatenate(([0], ends[:-1]))[group_of[in_shard]]
        blocks, block_of_row = np.unique(shard_of * (1 << 32) + group_of, return_inverse=True)
        keys = [(split, block >> 32, block & 0xFFFFFFFF) for block in blocks.tolist()]
        return keys, block_of_row.reshape(-1), local

    def _group_ends(self, split: str, shard: int) -> np.ndarray:
        """The cumulative rows of a shard's row groups: from the manifest (every group but the last holds the
        folder's ``row_group_size`` rows), or from the footer for a manifest that does not list them."""
        key = (split, shard)
        if key not in self._ends:
            entry = self.manifest.splits[split].shards[shard]
            size = self.settings.get("row_group_size")
            if entry.row_groups is not None and size:
                ends = np.minimum(np.arange(1, entry.row_groups + 1, dtype=np.int64) * size, entry.rows)
            else:
                metadata = self._file(split, shard).metadata
                ends = np.cumsum([metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)],
                                 dtype=np.int64)
            self._ends[key] = ends
        return self._ends[key]

    #: For a remote corpus: its URL, and how its shards are read (:meth:`open` sets them).
    url: str | None = None
    _remote: RemoteShards | None = None

    @property
    def remote(self) -> RemoteShards | None:
        """How a remote corpus's shards are read (its range cache counts what was fetched); None for a folder."""
        return self._remote

    def _open_parquet(self, name: str) -> pq.ParquetFile:
        """Open shard file ``name`` (a path relative to the folder) for reading its footer and row groups."""
        if self._remote is not None:  # the footer now, each row group's bytes when it is read
            return self._remote.open_parquet(name)
        # Read with pread, not mmap: every mapped page a random row touches stays in the process's resident
        # memory, so a training process reading rows across the corpus would grow towards the corpus's size.
        return pq.ParquetFile(self.path / name, memory_map=False, page_checksum_verification=True)

    def _file(self, split: str, shard: int) -> pq.ParquetFile:
        """The shard's open file; at most :attr:`MAX_OPEN_FILES` stay open (the least recently used is closed)."""
        key = (split, shard)
        with self._lock:
            if key in self._files:
                self._files.move_to_end(key)
                return self._files[key]
            name = self.manifest.splits[split].shards[shard].file
            try:
                file = self._open_parquet(name)
            except (OSError, pa.ArrowException) as err:
                raise self._read_error(name, err) from None
            self._keep_open(key, file)
            return file

    def _keep_open(self, key: tuple[str, int], file: pq.ParquetFile) -> None:
        self._files[key] = file
        while len(self._files) > self.MAX_OPEN_FILES:
            _, oldest = self._files.popitem(last=False)
            oldest.close(force=True)

    def _prefetch(self, keys: list[tuple[str, int, int]]) -> None:
        """For a remote corpus: open the shards and fetch the row groups of ``keys`` that are not decoded yet,
        several reads at once (:meth:`RemoteShards.prefetch`), so that a window's first batch does not wait for
        its row groups one after the other. A read that fails here is read again by the decode, which names it."""
        missing = [key for key in keys if key not in self._blocks]
        if len(missing) < 2:
            return
        shards = {key[:2]: self.manifest.splits[key[0]].shards[key[1]].file for key in missing}
        files = {name: self._files.get(key) for key, name in shards.items()}
        try:
            files = self._remote.prefetch(files, [(shards[key[:2]], key[2]) for key in missing])
        except (OSError, pa.ArrowException):
            return
        for key, name in shards.items():
            if key not in self._files:
                self._keep_open(key, files[name])

    def _decode(self, key: tuple[str, int, int]) -> pa.Table:
        split, shard, group = key
        file = self._file(split, shard)
        try:
            return file.read_row_group(group)
        except (OSError, pa.ArrowException) as err:
            raise self._read_error(self.manifest.splits[split].shards[shard].file, err, group) from None

    def _read_error(self, name: str, err: Exception, group: int | None = None) -> Exception:
        """The one-line error of a shard that could not be opened or read: the process out of file descriptors
        and a missing file are said as such; anything else is a corrupt shard."""
        where = f"shard {name} of {self.url or self.path}" + (f" (row group {group})" if group is not None else "")
        if isinstance(err, OSError) and err.errno in (errno.EMFILE, errno.ENFILE):
            return OSError(err.errno, f"cannot open {where}: too many open files ({err.strerror}); raise the "
                                      f"limit (ulimit -n) or lower PreparedCorpus.MAX_OPEN_FILES "
                                      f"({self.MAX_OPEN_FILES})")
        if isinstance(err, FileNotFoundError):
            return PreparedDataError(f"{where} is missing ({err}); re-download or rebuild it")
        return PreparedDataError(f"{where} is corrupt: {err}; re-download or rebuild it")


# ---------------------------------------------------------------------------------------------------------
# The Hub


def push_prepared(folder: str | Path, repo_id: str, *, token: str | None = None, revision: str | None = None,
                  private: bool | None = None, endpoint: str | None = None, commit_message: str | None = None,
                  timeout: float | None = None):
    """Upload a prepared folder as a Hub *dataset* repo in one commit (:func:`hfbert.hub.push_to_hub`: the repo and
    the branch ``revision`` are created when missing); returns its ``PushResult``.  :meth:`PreparedCorpus.open`
    and ``load_dataset`` read it back by its id."""
    corpus = PreparedCorpus.open(folder)  # never upload a folder that does not read back
    rows = {split: corpus.num_rows(split) for split in corpus.splits}
    return push_to_hub(corpus.path, repo_id, repo_type="dataset", revision=revision, private=private, token=token,
                       endpoint=endpoint, commit_message=commit_message or f"hfbert prepare: {rows}", timeout=timeout)
