"""The input of a prepared corpus, cut into shards of whole documents without reading it first.

Text files (local paths, globs, fsspec URLs, ``.gz``) are cut by *bytes*: the files are laid end to end and the
total is cut into ``num_shards`` equal ranges; shard k reads the documents that begin in its range
(:func:`~hfbert.data.documents.read_document_range`), so the client only needs the file sizes, every worker
finds its own documents, and no document is split or read twice.  A ``datasets.Dataset`` (or a list of
documents) is cut by rows.  Either way shard k is a function of the input and k alone.
"""

from __future__ import annotations

import gzip
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import fsspec

if TYPE_CHECKING:
    from datasets import Dataset

from ..settings import UsageError
from ..inputs import Rows, Stream, is_url, open_binary, pick_column, text_source
from .documents import (
    CHAPTER_HEADING,
    LINE_LAYOUTS,
    CorpusError,
    ReadStats,
    read_document_range,
    read_people_daily,
)

__all__ = ["BUILTIN_CORPUS", "DocumentRows", "DocumentStream", "TextFiles", "boundary_pattern", "load_dataset_split",
           "resolve_input"]

#: Jane Austen's six novels (public domain), one paragraph per line, "CHAPTER ..." lines between chapters.
BUILTIN_CORPUS = Path(__file__).resolve().parents[1] / "corpora" / "en_austen_6novels.txt.gz"
#: Every input layout of text files: the line layouts, and People's Daily (segmented, POS-tagged Chinese, whose
#: document rule needs a whole file).
LAYOUTS = (*LINE_LAYOUTS, "people-daily")
_DATASET_BATCH = 1024  # rows read from a Dataset at a time


def _size(path: str) -> int:
    """Bytes of text in the file; for ``.gz`` the uncompressed size from its trailer (only used to place the cut
    points, so a multi-member or >4 GiB file, whose trailer is wrong, still reads correctly)."""
    if is_url(path):
        fs, root = fsspec.core.url_to_fs(path)
        size = fs.size(root)
    else:
        size = os.path.getsize(path)
    if not path.endswith(".gz") or size < 18:
        return size
    with open_binary(path) as handle:
        raw = handle.fileobj if isinstance(handle, gzip.GzipFile) else handle
        raw.seek(-4, os.SEEK_END)
        return struct.unpack("<I", raw.read(4))[0]


@dataclass(frozen=True)
class TextFiles:
    """Text files laid end to end, cut by bytes; each file also starts a document."""

    paths: tuple[str, ...]
    sizes: tuple[int, ...]
    layout: str
    boundary: str | None

    @property
    def split_units(self) -> bool:  # paragraphs are split into sentences by the builder
        return self.layout == "paragraphs"

    def pieces(self, shard: int, num_shards: int) -> list[tuple[str, int, int | None]]:
        """``(path, start, end)`` ranges of shard ``shard``; ``end=None`` reads to the end of the file."""
        total = sum(self.sizes)
        lo, hi = total * shard // num_shards, total * (shard + 1) // num_shards
        pieces, offset = [], 0
        for path, size in zip(self.paths, self.sizes):
            if size and lo < offset + size and hi > offset:
                pieces.append((path, max(lo - offset, 0), None if hi >= offset + size else hi - offset))
            offset += size
        return pieces

    def documents(self, shard: int, num_shards: int, stats: ReadStats) -> Iterator:
        for path, start, end in self.pieces(shard, num_shards):
            yield from read_document_range(path, start, end, layout=self.layout, boundary=self.boundary,
                                           stats=stats)

    def describe(self) -> dict:
        return {"files": list(self.paths), "bytes": sum(self.sizes), "input_layout": self.layout,
                "document_boundary": self.boundary}


@dataclass(frozen=True)
class DocumentRows:
    """Documents held by a ``datasets.Dataset`` column (one document per row: a list of sentences, or raw text
    split into sentences by the builder) or by a Python list; cut by rows."""

    rows: Any
    column: str | None
    name: str

    split_units = False

    def documents(self, shard: int, num_shards: int, stats: ReadStats) -> Iterator:
        count = len(self.rows)
        lo, hi = count * shard // num_shards, count * (shard + 1) // num_shards
        for start in range(lo, hi, _DATASET_BATCH):
            stop = min(start + _DATASET_BATCH, hi)
            yield from self.rows[start:stop] if self.column is None else self.rows[start:stop][self.column]

    def describe(self) -> dict:
        return {"dataset": self.name, "rows": len(self.rows), "column": self.column}


@dataclass(frozen=True)
class DocumentStream:
    """Documents of an ``IterableDataset``, read in order, one row at a time (``column`` None: the row's
    ``sentences`` or ``text``, chosen on the first row)."""

    dataset: Any
    column: str | None

    split_units = False

    def __iter__(self) -> Iterator:
        column = self.column
        for row in self.dataset:
            column = column or pick_column(list(row), None, "the dataset")
            yield row[column]


def load_dataset_split(name: str, split: str) -> Dataset:
    """A ``save_to_disk`` folder or a ``load_dataset`` name, reduced to ``split`` when it holds several."""
    import datasets  # here, not above: the settings this module checks are read without datasets

    loaded = datasets.load_from_disk(name) if Path(name).is_dir() else datasets.load_dataset(name)
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise UsageError(f"dataset {name} has no split {split!r} (it has {list(loaded)}); set --dataset_split")
        loaded = loaded[split]
    return loaded


def boundary_pattern(document_boundary: str | None) -> str | None:
    """``"chapter"`` -> :data:`~hfbert.data.documents.CHAPTER_HEADING`; any other value is a regular expression
    for heading lines that start a document (checked here, so a bad one is named before any work)."""
    if document_boundary == "chapter":
        return CHAPTER_HEADING
    if document_boundary:
        try:
            re.compile(document_boundary)
        except re.error as err:
            raise ValueError(f"document_boundary {document_boundary!r} is not a regular expression: {err}") from None
    return document_boundary or None


def resolve_input(source, *, input_layout: str | None = None, document_boundary: str | None = None,
                  text_column: str | None = None, streaming: bool = False) -> TextFiles | DocumentRows | DocumentStream:
    """What to read: ``None`` (the built-in corpus) or any text source :func:`hfbert.inputs.text_source` reads (a
    path / glob / URL or a list of them, a ``datasets.Dataset`` or ``IterableDataset``, a list of documents: lists
    of sentences or raw texts).  ``input_layout`` and ``document_boundary`` apply to text files (defaults:
    ``sentences`` and none; for the built-in corpus ``paragraphs`` and chapter headings).  ``streaming``: a
    ``Dataset`` is read as a stream too (a :class:`DocumentStream`); an ``IterableDataset`` always is."""
    if input_layout is not None and input_layout not in LAYOUTS:
        raise ValueError(f"input_layout must be one of {LAYOUTS}, got {input_layout!r}")
    document_boundary = boundary_pattern(document_boundary)
    if source is None:
        paths = [str(BUILTIN_CORPUS)]
        input_layout = input_layout or "paragraphs"
        document_boundary = document_boundary or CHAPTER_HEADING
    else:
        meant = text_source(source, text_column=text_column)
        if isinstance(meant, Stream) or (streaming and isinstance(meant, Rows) and meant.name == "dataset"):
            if isinstance(meant, Rows):
                meant = Stream(meant.rows.to_iterable_dataset(), meant.column)
            from datasets import IterableDataset  # a stream of rows is made of datasets' objects

            if not isinstance(meant.items, IterableDataset):
                raise TypeError("source must be None (the built-in corpus), a path, glob or URL, a list of them, a "
                                f"datasets.Dataset or IterableDataset or a list of documents; got "
                                f"{type(source).__name__}")
            return DocumentStream(meant.items, meant.column)
        if isinstance(meant, Rows):
            return DocumentRows(meant.rows, meant.column, meant.name)
        paths = list(meant.paths)
    if input_layout == "people-daily":  # its document rule needs a whole file: read here, cut by documents
        documents = [doc for path in paths for doc in read_people_daily(path)]
        return DocumentRows(documents, None, ", ".join(paths))
    sizes = [_size(path) for path in paths]
    for path, size in zip(paths, sizes):
        if size == 0:
            raise CorpusError(f"{path}: the file is empty")
    return TextFiles(tuple(paths), tuple(sizes), input_layout or "sentences", document_boundary)
