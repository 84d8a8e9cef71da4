"""Build shard k of a prepared corpus: its documents -> held-out split -> pools -> rows -> two Parquet files.

This is the unit of work of ``hfbert prepare`` (:func:`build_shard`, run by :mod:`hfbert.data.engines`):

1. read the documents that begin in shard k's part of the input (:mod:`hfbert.data.sources`);
2. hold out whole documents: a document goes to the validation split when a hash of its text keyed by the seed
   falls below ``eval_fraction`` -- a rule per document, so it needs no view of the corpus, and copies of one
   document always land in the same split (no duplicate leaks from training into evaluation);
3. group each split's documents into pools of ``pool_size`` consecutive documents and build them with
   :class:`~hfbert.data.pipeline.PoolBuilder` -- Google's ``create_pretraining_data`` algorithm, each document's
   generator seeded by (seed, split, shard, pass, document), so shard k depends only on the input, the
   settings, the seed and k.  Held-out documents are built once (``dupe_factor`` 1): evaluation needs one copy;
4. shuffle each split's rows with a generator seeded by (seed, split, shard), as the original shuffles its
   instances;
5. write ``data/{split}-{k:05d}-of-{n:05d}.parquet`` (:func:`parquet_bytes`: fixed writer options, so the same
   rows give the same bytes) straight to the output -- a local folder or an fsspec URL -- under a temporary
   name renamed into place, so a task that is retried or runs twice never leaves a mixed file.

It returns what the manifest and the health report need (counts, digests, mergeable summaries), never rows.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import pickle
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .documents import ReadStats
from .pipeline import PoolBuilder, shuffled_table
from .report import line_sketch, summarize_pools, summarize_rows, table_digest
from .sources import DocumentRows, TextFiles

__all__ = ["ROW_GROUP_SIZE", "SPLITS", "ShardTask", "build_shard", "parquet_bytes", "shard_file", "warm_builder"]

SPLITS = ("train", "validation")
_SPLIT_CODE = {"train": 0, "validation": 1}
# Rows per Parquet row group: the unit a reader decodes to reach one row, so small enough that reading a few
# random rows stays cheap, large enough that the per-group overhead of the file stays small.
ROW_GROUP_SIZE = 1024
_SHUFFLE_STREAM = 0x73687566
# Writer options that fix the bytes of a file: every option a pyarrow default could change is given here, and
# pyarrow writes no timestamps.  Page checksums let a reader detect a corrupted page and name its shard.
_PARQUET_OPTIONS = {
    "compression": "zstd",
    "compression_level": 3,
    "use_dictionary": False,  # token ids do not repeat in runs; a dictionary would only be thrown away
    "write_statistics": False,
    "write_page_checksum": True,
    "data_page_version": "1.0",
    "version": "2.6",
    "store_schema": True,
}


def shard_file(split: str, index: int, num_shards: int) -> str:
    """The path of a shard inside the prepared folder (the Hub's naming, which ``load_dataset`` recognises)."""
    return f"data/{split}-{index:05d}-of-{num_shards:05d}.parquet"


@dataclass
class ShardTask:
    """Everything a worker needs to build one shard (picklable; the tokenizer travels as its JSON)."""

    index: int
    num_shards: int
    source: TextFiles | DocumentRows
    builder: PoolBuilder
    output: str  # the prepared folder: a local path or an fsspec URL every worker can reach
    schema: pa.Schema
    seed: int
    pool_size: int
    eval_fraction: float
    mask_token_id: int | None


def held_out(document, seed: int, eval_fraction: float) -> bool:
    """Whether a document belongs to the validation split: its text hashed with the seed as key, below the
    fraction.  A function of the document and the seed only."""
    if eval_fraction <= 0:
        return False
    text = document if isinstance(document, str) else "\n".join(document or ())
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=struct.pack("<Q", seed)).digest()
    return int.from_bytes(digest, "little") / 2.0**64 < eval_fraction


def _split_pools(documents: Iterable, task: ShardTask) -> Iterator[tuple[str, int, list]]:
    """``(split, index of the pool's first document in the split, documents)``: each split's documents grouped
    as :func:`~hfbert.data.pipeline.pool_bounds` groups them, holding at most 1.5 pools per split."""
    buffers: dict[str, list] = {split: [] for split in SPLITS}
    first = dict.fromkeys(SPLITS, 0)
    size = task.pool_size
    for document in documents:
        split = "validation" if held_out(document, task.seed, task.eval_fraction) else "train"
        buffer = buffers[split]
        buffer.append(document)
        if len(buffer) >= size + size // 2:
            yield split, first[split], buffer[:size]
            buffers[split] = buffer[size:]
            first[split] += size
    for split in SPLITS:
        if buffers[split]:
            yield split, first[split], buffers[split]


# The builder a worker process keeps between its tasks, by the digest of its settings.
WARM_BUILDER: dict[bytes, PoolBuilder] = {}


def warm_builder(builder: PoolBuilder) -> PoolBuilder:
    """In a worker process, the first builder it was sent with these settings; else ``builder`` itself.

    Every task travels with its own copy of the builder, unpickled without its tokenizer objects and word cache
    (:class:`~hfbert.data.pipeline.PoolBuilder`); the copy a worker keeps has them built and the cache filled by
    its earlier shards, as the caller's builder has in this process.  Either gives the same rows: the cache only
    remembers each word's pieces."""
    if multiprocessing.parent_process() is None:  # this process: the caller's builder is warm already
        return builder
    key = hashlib.blake2b(pickle.dumps(builder, protocol=pickle.HIGHEST_PROTOCOL), digest_size=16).digest()
    if key not in WARM_BUILDER:
        WARM_BUILDER.clear()  # another build's settings: keep one builder, not one per build
        WARM_BUILDER[key] = builder
    return WARM_BUILDER[key]


def build_shard(task: ShardTask) -> dict:
    """Build and write shard ``task.index`` of both splits; return its manifest entries and summaries."""
    builder = warm_builder(task.builder)
    read_stats = ReadStats()
    tables: dict[str, list] = {split: [] for split in SPLITS}
    pool_stats: dict[str, list] = {split: [] for split in SPLITS}
    hashes: dict[str, list] = {split: [] for split in SPLITS}
    for split, first, documents in _split_pools(task.source.documents(task.index, task.num_shards, read_stats),
                                                task):
        table, stats, line_hashes = builder.build(
            documents, first, task.source.split_units, stream=(_SPLIT_CODE[split], task.index),
            dupe_factor=1 if split == "validation" else None)
        tables[split].append(table)
        pool_stats[split].append(stats)
        hashes[split].append(np.asarray(line_hashes, dtype=np.uint64))
    result = {"index": task.index, "read_stats": read_stats.as_dict() if isinstance(task.source, TextFiles) else None,
              "splits": {}}
    for split in SPLITS if task.eval_fraction > 0 else ("train",):
        table = pa.concat_tables(tables[split]).cast(task.schema) if tables[split] else task.schema.empty_table()
        rng = np.random.default_rng([task.seed, _SPLIT_CODE[split], task.index, _SHUFFLE_STREAM])
        table = shuffled_table(table, rng.permutation(table.num_rows))
        data = parquet_bytes(table)
        name = shard_file(split, task.index, task.num_shards)
        write_atomically(task.output, name, data)
        summary = summarize_rows(table, task.mask_token_id)
        result["splits"][split] = {
            "file": name, "rows": table.num_rows, "tokens": summary["tokens"], "digest": table_digest(table),
            "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
            "row_groups": -(-table.num_rows // ROW_GROUP_SIZE),
            "pools": summarize_pools(pool_stats[split]), "rows_summary": summary,
            "lines": line_sketch(np.concatenate(hashes[split]) if hashes[split] else np.zeros(0, np.uint64)),
        }
    return result


def parquet_bytes(table: pa.Table) -> pa.Buffer:
    """The table as a Parquet file in memory, written with the fixed options above (same rows, same bytes)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=ROW_GROUP_SIZE, **_PARQUET_OPTIONS)
    return sink.getvalue()


def write_atomically(output: str, name: str, data) -> None:
    """Write ``data`` to ``output/name`` through a temporary sibling (a dot-name that ``load_dataset``'s patterns
    skip) renamed into place: readers see the old file or the whole new one, never a part."""
    temporary = f".{Path(name).name}.{uuid.uuid4().hex}.tmp"
    if "://" in output:
        fs, root = fsspec.core.url_to_fs(output)
        target = f"{root.rstrip('/')}/{name}"
        staging = f"{target.rsplit('/', 1)[0]}/{temporary}"
        fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(staging, "wb") as handle:
            handle.write(memoryview(data))
        fs.mv(staging, target)
        return
    target = Path(output) / name
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(temporary)
    try:
        with open(staging, "wb") as handle:
            handle.write(memoryview(data))
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)


def features_metadata(features) -> dict[bytes, bytes]:
    """The schema metadata ``datasets`` writes, so ``load_dataset`` reads the exact column types back."""
    return {b"huggingface": json.dumps({"info": {"features": features.to_dict()}}, sort_keys=True).encode()}
