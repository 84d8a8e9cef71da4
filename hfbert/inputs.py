"""What a text source means: one reading of "a path, a glob, a URL, a dataset or texts", for every reader.

:func:`text_source` is the one place that decides it; ``hfbert prepare`` (:func:`hfbert.data.sources.resolve_input`,
which adds the built-in corpus and the file layouts), the in-memory builder
(:func:`hfbert.data.build_pretraining_dataset`) and tokenizer training (:func:`hfbert.train_wordpiece`) all ask it:

* a ``str`` or ``os.PathLike``: a local path, a glob (``corpus/*.txt``) or an fsspec URL (``s3://bucket/*.txt.gz``),
  expanded to the files it names, sorted; naming no file is an error that names it;
* a list of them: their files, in order (see :func:`names_files` for when a list of strings names files);
* a ``datasets.Dataset``: its rows, one column of them; an ``IterableDataset`` or any other iterable: a stream;
* any other list: its items (documents, or texts), in memory.

It sits below the tokenizer and the data pipeline (it imports nothing of hfbert), so both can use it.
"""

from __future__ import annotations

import glob
import gzip
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import fsspec

__all__ = ["Files", "Rows", "Stream", "expand_paths", "names_files", "open_binary", "pick_column", "text_source"]

# Suffixes that make a lone word a file name rather than a text ("corpus.txt" that does not exist is a typo).
_TEXT_SUFFIXES = (".txt", ".gz", ".text", ".tsv", ".csv", ".jsonl", ".json")


@dataclass(frozen=True)
class Files:
    """Text files, local paths or fsspec URLs, in reading order."""

    paths: tuple[str, ...]


@dataclass(frozen=True)
class Rows:
    """Items held in memory: a ``Dataset`` column (``column`` names it) or a Python list (``column`` None)."""

    rows: Any
    column: str | None
    name: str  # what it is, for messages and manifests: "dataset" or "documents"


@dataclass(frozen=True)
class Stream:
    """Items read once, in order: an ``IterableDataset`` (its rows are mappings; ``column`` None: chosen on the
    first row) or any iterable of items."""

    items: Iterable
    column: str | None


def is_url(path: str) -> bool:
    return "://" in path


def open_binary(path: str | Path) -> BinaryIO:
    """A binary stream over a local file or an fsspec URL (``s3://``, ``gs://``, ...); ``.gz`` is decompressed."""
    path = str(path)
    if is_url(path):
        handle = fsspec.open(path, "rb").open()
    else:
        handle = open(path, "rb")  # noqa: SIM115 -- the caller closes it
    return gzip.GzipFile(fileobj=handle, mode="rb") if path.endswith(".gz") else handle


def expand_paths(pattern: str | os.PathLike) -> list[str]:
    """The files a path, glob or URL names (sorted); naming none is a ``FileNotFoundError`` naming it."""
    pattern = str(pattern)
    if is_url(pattern):
        fs, root = fsspec.core.url_to_fs(pattern)
        protocol = pattern.split("://", 1)[0]
        found = sorted(fs.glob(root)) if glob.has_magic(root) else ([root] if fs.isfile(root) else [])
        paths = [f"{protocol}://{p.split('://', 1)[-1]}" for p in found]
    else:
        paths = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else (
            [pattern] if os.path.isfile(pattern) else [])
    if not paths:
        what = "no file matches" if glob.has_magic(pattern) else "input file not found:"
        raise FileNotFoundError(f"{what} {pattern}")
    return paths


def names_files(items: Sequence) -> bool:
    """Whether a non-empty list names files rather than holding texts or documents.

    ``os.PathLike`` items always name files. Strings do when the first one is a file, or looks like a path, glob or
    URL (a path separator, a text-file suffix, ``*?[`` or ``://``, and no white space), so a mistyped file name is
    reported missing instead of being read as a text of one word. Anything else (sentences, lists of sentences) is
    content.
    """
    if not isinstance(items, (list, tuple)) or not items:
        return False
    if all(isinstance(item, os.PathLike) for item in items):
        return True
    if not all(isinstance(item, str) for item in items):
        return False
    first = items[0]
    if os.path.isfile(first):
        return True
    looks_like_path = ("/" in first or os.sep in first or first.lower().endswith(_TEXT_SUFFIXES)
                       or glob.has_magic(first) or is_url(first))
    return looks_like_path and not any(char.isspace() for char in first.strip())


def pick_column(columns: Sequence[str], text_column: str | None, name: str,
                defaults: Sequence[str] = ("sentences", "text")) -> str:
    """``text_column`` when ``columns`` has it, else the first of ``defaults`` it has; an error names the columns."""
    columns = list(columns)
    if text_column is not None:
        if text_column not in columns:
            raise ValueError(f"text_column {text_column!r} is not a column of {name} (columns: {columns})")
        return text_column
    for column in defaults:
        if column in columns:
            return column
    wanted = " or ".join(repr(column) for column in defaults)
    raise ValueError(f"{name} needs a {wanted} column (or pass text_column=...); got {columns}")


def text_source(source, *, text_column: str | None = None,
                columns: Sequence[str] = ("sentences", "text")) -> Files | Rows | Stream:
    """What ``source`` means (see the module docstring): its files, its rows in memory, or a stream. A dataset's
    column is ``text_column``, else the first of ``columns`` it has."""
    from datasets import Dataset, IterableDataset  # here, not above: reading settings never needs datasets

    if isinstance(source, Dataset):
        return Rows(source, pick_column(source.column_names, text_column, "the dataset", columns), "dataset")
    if isinstance(source, IterableDataset):
        known = source.column_names
        column = pick_column(known, text_column, "the dataset", columns) if known is not None else text_column
        return Stream(source, column)
    if isinstance(source, (str, os.PathLike)):
        return Files(tuple(expand_paths(source)))
    if isinstance(source, (list, tuple)):
        if not source:
            raise ValueError("the input is an empty list")
        if names_files(source):
            return Files(tuple(path for pattern in source for path in expand_paths(pattern)))
        return Rows(list(source), None, "documents")
    if isinstance(source, Iterable) and not isinstance(source, (bytes, dict)):
        return Stream(source, None)  # items, not rows: no column
    raise TypeError("a text source is a path, glob or URL, a list of them, a datasets.Dataset or IterableDataset, "
                    f"or a list or iterable of texts; got {type(source).__name__}")
