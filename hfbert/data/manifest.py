"""The manifest of a prepared folder (``hfbert_prepare.json``): one writer, one reader.

:class:`Manifest` is the file as a record: its fields are the file's top-level keys in the file's order,
and the nested records (:class:`TokenizerRecord`, :class:`SplitRecord`, :class:`ShardRecord`) are its
objects. The build settings, the description of the input, the column types and the health report stay plain
dicts: they are written by :class:`~hfbert.data.settings.ExampleSettings`, the input and
:mod:`hfbert.data.report`, and the manifest only carries them.

The file's bytes are an interface: shard digests and whole manifests are compared across builds and machines,
and folders already on disks and on the Hub must keep loading. :meth:`Manifest.to_json` therefore writes the
keys in the fields' order with ``indent=2``, exactly as every earlier hfbert did, so that reading a manifest
and writing it again gives the same bytes. A field may be added at the end of its record with a default (an
optional value is left out of the file while it is ``None``); keys that a newer hfbert wrote and this one does
not know are ignored when reading.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import MISSING, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from ..settings import settings_marked
from .settings import ExampleSettings

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "Manifest", "PreparedDataError", "ShardRecord", "SplitRecord",
           "TokenizerRecord",
           "dataset_card"]

MANIFEST = "hfbert_prepare.json"
FORMAT = "hfbert-prepared"
FORMAT_VERSION = 1


class PreparedDataError(ValueError):
    """A prepared folder that cannot be read as its manifest describes it; the message names the file."""


class MalformedManifest(ValueError):
    """Raised inside :meth:`Manifest.from_dict`; :meth:`Manifest.read` turns it into a PreparedDataError."""


@dataclass(frozen=True)
class ShardRecord:
    """One Parquet shard: its path in the folder, rows and tokens, content digest, sha256 and size of its bytes."""

    file: str
    rows: int
    tokens: int
    digest: str
    sha256: str
    bytes: int
    row_groups: int | None = None  # None: not listed (the reader takes the row groups from the footer)


@dataclass(frozen=True)
class SplitRecord:
    """One split: its rows and tokens, and its shards in row order."""

    rows: int
    tokens: int
    shards: list[ShardRecord]

    @classmethod
    def from_dict(cls, data: Any, where: str) -> SplitRecord:
        shards = _require(cls, data, where)["shards"]
        if not isinstance(shards, list):
            raise MalformedManifest(f"{where}.shards is not a JSON array")
        listed = [_record(ShardRecord, shard, f"{where}.shards[{k}]") for k, shard in enumerate(shards)]
        return _record(cls, {**data, "shards": listed}, where)


@dataclass(frozen=True)
class TokenizerRecord:
    """The tokenizer the rows were built with: sha256 of its ``tokenizer.json``, vocabulary size, the ids of
    ``pad``/``unk``/``cls``/``sep``/``mask``, and the names of its files in the folder."""

    sha256: str
    vocab_size: int
    special_token_ids: dict[str, int]
    files: list[str]


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """``hfbert_prepare.json`` (see the module docstring); :meth:`read` it, :meth:`write` it.

    Args:
        format (`str`, *optional*, defaults to `"hfbert-prepared"`):
            The file's format.
        format_version (`int`, *optional*, defaults to 1):
            The format's version.
        settings (`dict[str, Any]`):
            ``ExampleSettings.recorded()`` plus ``num_shards``, ``validation_dupe_factor`` and ``row_group_size``.
        input (`dict[str, Any]`):
            The input's description (files or dataset, layout, rows).
        tokenizer (`TokenizerRecord`):
            The tokenizer the rows were built with.
        columns (`dict[str, str]`):
            Column name -> Arrow type.
        splits (`dict[str, SplitRecord]`):
            Each split's rows, tokens and shards.
        report (`dict[str, Any]`):
            The health report (:mod:`hfbert.data.report`).
    """

    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    settings: dict[str, Any]  # ExampleSettings.recorded() plus num_shards, validation_dupe_factor, row_group_size
    input: dict[str, Any]  # the input's description (files or dataset, layout, rows)
    tokenizer: TokenizerRecord
    columns: dict[str, str]  # column name -> Arrow type
    splits: dict[str, SplitRecord]
    report: dict[str, Any]  # the health report (hfbert.data.report)

    # -- reading --------------------------------------------------------------------------------------------
    @classmethod
    def read(cls, source: str | Path | bytes, name: str | None = None) -> Manifest:
        """The manifest of the prepared folder ``source``, or the manifest file's bytes.

        Args:
            source (`str`, `Path` or `bytes`):
                The prepared folder, or the manifest file's bytes.
            name (`str`, *optional*):
                Names the folder in messages (default: ``source``).

        Returns:
            [`Manifest`]: the manifest.

        Raises:
            [`PreparedDataError`]: one line naming the file, when the folder has no manifest, or it is not JSON, not
                of this hfbert's format, or lacks a key this format requires.
        """
        if isinstance(source, (bytes, bytearray, memoryview)):
            shown, data = name or "<bytes>", bytes(source)
        else:
            path, shown = Path(source) / MANIFEST, name or str(source)
            if not path.is_file():
                raise PreparedDataError(f"{shown} is not a prepared folder: it has no {MANIFEST} (build it with "
                                        "`hfbert prepare`)")
            data = path.read_bytes()
        try:
            parsed = json.loads(data)
        except ValueError as err:  # not JSON, or not UTF-8
            raise PreparedDataError(f"{shown}/{MANIFEST}: not valid JSON ({err})") from None
        found = parsed if isinstance(parsed, dict) else {}
        if found.get("format") != FORMAT or found.get("format_version") != FORMAT_VERSION:
            raise PreparedDataError(f"{shown}/{MANIFEST}: format {found.get('format')!r} version "
                                    f"{found.get('format_version')!r}; this hfbert reads {FORMAT!r} version "
                                    f"{FORMAT_VERSION}")
        try:
            return cls.from_dict(parsed)
        except MalformedManifest as err:
            raise PreparedDataError(f"{shown}/{MANIFEST}: {err}; rebuild the folder with `hfbert prepare`") from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        """The manifest from the file's parsed JSON.

        Args:
            data (`dict[str, Any]`):
                The file's parsed JSON.

        Returns:
            [`Manifest`]: the manifest.

        Raises:
            `MalformedManifest`: naming the first key missing.
        """
        splits = _object(_require(cls, data, "the manifest")["splits"], "splits")
        splits = {split: SplitRecord.from_dict(info, f"splits.{split}") for split, info in splits.items()}
        tokenizer = _record(TokenizerRecord, data["tokenizer"], "tokenizer")
        return _record(cls, {**data, "tokenizer": tokenizer, "splits": splits}, "the manifest")

    # -- writing --------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object.

        Returns:
            `dict[str, Any]`: keys in the fields' order, optional values that are None left out.
        """
        return _plain(self)

    def to_json(self) -> str:
        """The file's text.

        Returns:
            `str`: byte for byte what :meth:`write` writes.
        """
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def write(self, folder: str | Path) -> None:
        """Write ``folder/hfbert_prepare.json`` atomically.

        Args:
            folder (`str` or `Path`):
                A local folder or an fsspec URL.
        """
        from .shards import write_atomically  # the shard builder: reading a manifest (or a setting) needs none of it

        write_atomically(str(folder), MANIFEST, self.to_json().encode())

    # -- what it says ---------------------------------------------------------------------------------------
    def shards(self) -> list[ShardRecord]:
        """Every shard, split after split.

        Returns:
            `list[ShardRecord]`: the shards, each split's in row order.
        """
        return [shard for info in self.splits.values() for shard in info.shards]

    @property
    def splits_digest(self) -> str:
        """sha256 of the splits' JSON (keys sorted): two builds agree on it when their shards are byte-identical."""
        return hashlib.sha256(json.dumps(self.to_dict()["splits"], sort_keys=True).encode()).hexdigest()


def dataset_card(manifest: Manifest) -> str:
    """The README.md of a prepared folder: its YAML names the splits' files for the Hub and ``load_dataset``."""
    settings, splits = manifest.settings, manifest.splits
    files = "\n".join(f"  - split: {split}\n    path: data/{split}-*" for split in splits)
    rows = "\n".join(f"| {split} | {info.rows:,} | {info.tokens:,} | {len(info.shards)} |"
                     for split, info in splits.items())
    table = "\n".join(f"| `{key}` | `{json.dumps(settings[key])}` |"
                      for key in settings_marked(ExampleSettings, "dataset_card") if key in settings)
    return f"""---
configs:
- config_name: default
  data_files:
{files}
tags:
- hfbert
- bert-pretraining
---

# BERT pretraining examples (hfbert)

Next-sentence-prediction pairs and masked-LM examples built by `hfbert prepare` with the algorithm of Google's
`create_pretraining_data.py`, one sequence length per folder. `hfbert_prepare.json` holds every build setting,
the tokenizer's fingerprint and a digest of every shard; `report.txt` is the health report of the build.

| split | rows | tokens | shards |
|---|---|---|---|
{rows}

| setting | value |
|---|---|
{table}

```python
from hfbert.data import PreparedCorpus

corpus = PreparedCorpus.open("path/or/user-name/repo")
batch = corpus.rows("train", [0, 1, 2])
```

`datasets.load_dataset("path/or/user-name/repo")` reads the same Parquet files.
"""


def _object(data: Any, where: str) -> dict:
    if not isinstance(data, dict):
        raise MalformedManifest(f"{where} is not a JSON object")
    return data


def _require(cls, data: Any, where: str) -> dict:
    """``data``, checked to be a JSON object with every field of ``cls`` that has no default."""
    for spec in fields(cls):
        if spec.name not in _object(data, where) and spec.default is MISSING:
            raise MalformedManifest(f"{where} has no {spec.name!r}")
    return data


def _record(cls, data: Any, where: str):
    """``cls`` from the JSON object ``data``; keys it does not know (a newer hfbert's additions) are ignored."""
    known = {spec.name for spec in fields(cls)}
    return cls(**{key: value for key, value in _require(cls, data, where).items() if key in known})


def _plain(value: Any) -> Any:
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)
                if not (getattr(value, f.name) is None and f.default is None)}
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value
