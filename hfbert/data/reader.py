"""Prepared pretraining corpora, read by row index from any process: :class:`PreparedCorpus`.

A prepared folder (one sequence length per folder; :func:`hfbert.data.prepare_corpus` writes it,
:mod:`hfbert.data.writer`)::

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

:class:`PreparedCorpus` reads it -- a local folder or a Hub dataset repo -- without converting it: a row is
found from the manifest's rows per shard and the Parquet footer's row groups, and only the row groups that hold
the requested rows are decoded (read with pread, a small cache of decoded groups), so opening a corpus of
any size takes the time of reading its footers and memory does not grow with it.  ``datasets.load_dataset(DIR)``
(also with ``streaming=True``), DuckDB, Spark and the Hub's viewer read the same files.
"""

from __future__ import annotations

import errno
import hashlib
import shutil
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from ..hub import is_repo_id, resolve_timeout
from .blocks import BlockSlots
from .manifest import MANIFEST, Manifest, PreparedDataError
from .pipeline import output_features
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

__all__ = ["MANIFEST", "PreparedCorpus", "PreparedDataError", "settings_schema"]


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



def settings_schema(settings: dict) -> pa.Schema:
    return output_features(settings["masking"], settings["whole_word_mask"]).arrow_schema


# ---------------------------------------------------------------------------------------------------------
# Reading


class PreparedCorpus:
    """A prepared folder opened for reading (see the module docstring); use :meth:`open`.

    Args:
        path (`Path`):
            The local folder holding the manifest and tokenizer files.
        manifest ([`~hfbert.data.Manifest`]):
            The folder's manifest, already read.
    """

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
        """Open a prepared corpus: a local folder, a Hub dataset repo or any fsspec URL.

        A remote corpus is read on demand (:mod:`hfbert.data.remote`): the manifest and tokenizer files come to
        ``cache_dir``, and each shard's footer and row groups only when rows in them are read, through a cache
        shared by the processes of the machine. Checks the manifest and that every shard it lists is present with
        its size; a corrupted page is found by its checksum when read (:meth:`verify` checks every byte of a local
        folder).

        Args:
            location (`str` or `Path`):
                A local folder (``file://`` too), a Hub dataset repo (``user/name`` or
                ``hf://datasets/user/name[@revision]``) or any fsspec URL (``s3://...``, ``gs://...``).
            revision (`str`, *optional*):
                The Hub revision, as in huggingface_hub.
            token (`str`, *optional*):
                As in huggingface_hub.
            endpoint (`str`, *optional*):
                As in huggingface_hub.
            timeout (`float`, *optional*):
                Seconds a remote read is retried for before it raises
                :class:`~hfbert.data.remote.ShardReadError` naming the shard and the URL; default as
                :func:`hfbert.hub.resolve_timeout`.
            cache_dir (`str` or `Path`, *optional*):
                Where a remote corpus's files go; default ``$HF_HOME/hfbert/shards``.
            cache_limit (`int` or `str`, *optional*, defaults to `"20GB"`):
                The most bytes the shared cache of a remote corpus's row groups holds.
            download (`bool`, *optional*, defaults to `False`):
                Copy the whole corpus to local disk first instead, and check every shard's sha256.

        Returns:
            [`PreparedCorpus`]: the corpus, open for reading.

        Raises:
            `FileNotFoundError`: a local folder that does not exist.
            [`~hfbert.data.PreparedDataError`]: a manifest that does not read, or a shard missing or of another size
                (with ``download``, a shard whose sha256 differs).
        """
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
        """The settings the corpus was built with, as the manifest records them."""
        return self.manifest.settings

    @property
    def max_seq_length(self) -> int:
        """The longest row, in tokens, the corpus was built for."""
        return int(self.settings["max_seq_length"])

    @property
    def splits(self) -> list[str]:
        """The names of the corpus's splits."""
        return list(self.manifest.splits)

    def num_rows(self, split: str = "train") -> int:
        """How many rows ``split`` holds.

        Args:
            split (`str`, *optional*, defaults to `"train"`):
                One of :attr:`splits`.

        Returns:
            `int`: the number of rows.

        Raises:
            `KeyError`: the corpus has no such split.
        """
        return int(self._offsets[self._split(split)][-1])

    def load_tokenizer(self):
        """The tokenizer the rows were built with (its fingerprint is checked against the manifest).

        Returns:
            `PreTrainedTokenizerFast`: ``AutoTokenizer.from_pretrained`` of the corpus's folder.

        Raises:
            [`~hfbert.data.PreparedDataError`]: ``tokenizer.json``'s sha256 is not the manifest's.
        """
        digest = hashlib.sha256((self.path / "tokenizer.json").read_bytes()).hexdigest()
        if digest != self.manifest.tokenizer.sha256:
            raise PreparedDataError(f"{self.path / 'tokenizer.json'} is not the tokenizer the corpus was built with "
                                    f"(sha256 {digest[:12]}..., the manifest says "
                                    f"{self.manifest.tokenizer.sha256[:12]}...)")
        return AutoTokenizer.from_pretrained(str(self.path))

    def check_model_config(self, config) -> None:
        """Raise ValueError naming both values when a model config disagrees with the corpus's tokenizer.

        Args:
            config (`PretrainedConfig`):
                The model's config; its ``vocab_size`` and ``pad_token_id`` are compared.

        Raises:
            `ValueError`: ``vocab_size`` differs from the vocabulary's, or ``pad_token_id`` (when set) from [PAD]'s id.
        """
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
        """The rows at global indices ``indices`` of ``split`` (in that order), as dicts of Python lists.

        Args:
            split (`str`):
                One of :attr:`splits`.
            indices (array-like of `int`):
                Global row indices within the split, in [0, :meth:`num_rows`).

        Returns:
            `list[dict[str, Any]]`: one dict per index, column name to value.

        Raises:
            `KeyError`: the corpus has no such split.
            `IndexError`: an index is outside the split.
        """
        table = self.read(split, indices)
        return table.to_pylist()

    def read(self, split: str, indices) -> pa.Table:
        """:meth:`rows` as an Arrow table (no conversion to Python objects).

        Args:
            split (`str`):
                One of :attr:`splits`.
            indices (array-like of `int`):
                Global row indices within the split, in [0, :meth:`num_rows`).

        Returns:
            `pyarrow.Table`: the rows, in the order of ``indices``, with the corpus's schema.

        Raises:
            `KeyError`: the corpus has no such split.
            `IndexError`: an index is outside the split.
        """
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
        least recently used make room) and every column is gathered from them in one pass.

        Args:
            split (`str`):
                One of :attr:`splits`.
            indices (array-like of `int`):
                Global row indices within the split, in [0, :meth:`num_rows`).
            pad_values (`dict[str, int]`, *optional*):
                The padding value of each list column; 0 for a column it does not name.

        Returns:
            `dict[str, np.ndarray]`: the columns, and ``name + "_length"`` for each list column.

        Raises:
            `KeyError`: the corpus has no such split.
            `IndexError`: an index is outside the split.
        """
        split = self._split(split)
        indices = self._check_indices(split, indices)
        with self._lock:
            keys, block_of_row, local = self._locate(split, indices)
            if self._remote is not None:
                self._prefetch(keys)
            slots = self._blocks.slots(keys, self._decode)
            return self._blocks.gather(slots[block_of_row], local, pad_values or {})

    def blocks(self, split: str = "train") -> np.ndarray:
        """Rows per block (Parquet row group) of ``split``, shard after shard, in row order.

        Block ``i`` holds the rows that follow the first ``i`` blocks'. From the manifest alone (no file is opened)
        when it lists each shard's row groups; else from each shard's footer.

        Args:
            split (`str`, *optional*, defaults to `"train"`):
                One of :attr:`splits`.

        Returns:
            `np.ndarray`: int64, the rows of each block.

        Raises:
            `KeyError`: the corpus has no such split.
        """
        split = self._split(split)
        sizes = [np.diff(self._group_ends(split, shard), prepend=0)
                 for shard in range(len(self.manifest.splits[split].shards))]
        return np.concatenate(sizes).astype(np.int64) if sizes else np.zeros(0, dtype=np.int64)

    def set_cache(self, blocks: int) -> None:
        """Keep up to ``blocks`` decoded row groups (least recently used dropped first); at least 1.

        Args:
            blocks (`int`):
                How many decoded row groups to keep.
        """
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
        """Check every shard's bytes against the manifest's sha256 (reads the whole corpus once).

        Raises:
            [`~hfbert.data.PreparedDataError`]: a shard whose sha256 differs from the manifest's.
        """
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
