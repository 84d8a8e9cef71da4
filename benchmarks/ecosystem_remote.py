"""Rows per second reading a prepared corpus from a Hub dataset repo: hfbert's ranged reads with their disk cache
(hfbert.data.remote) against huggingface_hub's ``HfFileSystem`` with fsspec's caches.

Answered in docs/ecosystem.md (remote shards).

    python benchmarks/ecosystem_remote.py --prepared DIR [--batches 300] [--batch_size 256] [--repeats 3]

The folder is pushed as a dataset repo to the tests' Hub-protocol server (its own process on 127.0.0.1), then the
first ``--batches`` micro-batches of hfbert's training order are read, as benchmarks/bench_loader_remote.py reads
them, by the same ``PreparedCorpus`` (the same row-group decode and gather, the same number of decoded row groups
kept), changing only where a shard's bytes come from:

* ``hfbert``: ``PreparedCorpus.open("hf://datasets/...")`` -- one ranged GET per row group, several in flight when a
  window starts, kept in the machine's range cache on disk; ``cold`` with an empty cache, ``warm`` with the cache
  the cold pass filled (a new corpus object, as a resumed run or a second process opens it);
* ``HfFileSystem, <cache_type>``: each shard opened with ``HfFileSystem().open(path, cache_type=..., block_size=...)``
  (in memory, per open file: a new process starts empty, so there is no warm row);
* ``fsspec blockcache``: ``fsspec.filesystem("blockcache", fs=HfFileSystem(), cache_storage=DIR)`` -- blocks kept
  on disk, ``cold`` and ``warm`` as for hfbert.

Cases take turns, ``--repeats`` times; the median rows/s of each is printed (the local folder's figure too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")  # the test server offers plain LFS only; read at import
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.pop("HF_HUB_OFFLINE", None)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the loader benchmark's helpers; a study script

import fsspec  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from bench_loader_remote import WRITE_TOKEN, HubProcess, default_read, training_order  # noqa: E402

from hfbert.data import PreparedCorpus, push_prepared  # noqa: E402

REPO_ID = "user/bench-ecosystem"
BLOCK = 256 << 10  # about one row group of the corpora measured; fsspec's default blocks are 5 MB


def ecosystem_corpus(folder: Path, fs, open_kwargs: dict) -> PreparedCorpus:
    """The corpus at ``folder`` (its manifest, checks and block layout), whose shards are read through ``fs``."""

    class ThroughFilesystem(PreparedCorpus):
        def _open_parquet(self, name: str) -> pq.ParquetFile:
            handle = fs.open(f"datasets/{REPO_ID}/{name}", "rb", **open_kwargs)
            return pq.ParquetFile(handle, page_checksum_verification=True)

    return ThroughFilesystem.open(folder)


def rows_per_second(corpus, batches, cache_blocks: int) -> float:
    corpus.set_cache(cache_blocks)
    began, rows = time.perf_counter(), 0
    for indices in batches:
        default_read(corpus, indices)
        rows += len(indices)
    return rows / (time.perf_counter() - began)


def one_repeat(folder: Path, batches, cache_blocks: int, url: str) -> dict[str, float]:
    from huggingface_hub import HfFileSystem

    out = {}
    with tempfile.TemporaryDirectory(prefix="hfbert-eco-") as tmp:
        out["local folder"] = rows_per_second(PreparedCorpus.open(folder), batches, cache_blocks)
        hf = f"hf://datasets/{REPO_ID}"
        out["hfbert, cold"] = rows_per_second(PreparedCorpus.open(hf, endpoint=url, cache_dir=f"{tmp}/ours"), batches,
                                              cache_blocks)
        out["hfbert, warm"] = rows_per_second(PreparedCorpus.open(hf, endpoint=url, cache_dir=f"{tmp}/ours"), batches,
                                              cache_blocks)
        for cache_type, block in (("readahead", None), ("blockcache", BLOCK), ("bytes", BLOCK), ("none", None)):
            fs = HfFileSystem(endpoint=url, skip_instance_cache=True)
            kwargs = {"cache_type": cache_type} | ({"block_size": block} if block else {})
            name = f"HfFileSystem, {cache_type}" + (f", {block >> 10} KB blocks" if block else "")
            out[name] = rows_per_second(ecosystem_corpus(folder, fs, kwargs), batches, cache_blocks)
        for label in ("cold", "warm"):
            fs = fsspec.filesystem("blockcache", fs=HfFileSystem(endpoint=url, skip_instance_cache=True),
                                   cache_storage=f"{tmp}/blockcache", skip_instance_cache=True)
            out[f"fsspec blockcache on disk, {label}"] = rows_per_second(
                ecosystem_corpus(folder, fs, {"block_size": BLOCK}), batches, cache_blocks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", required=True, help="a prepared folder (hfbert prepare)")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    folder = Path(args.prepared)
    batches, cache_blocks = training_order(folder, args.batches, args.batch_size)
    runs = []
    with HubProcess() as hub:
        from huggingface_hub import constants

        constants.HF_HUB_OFFLINE = False
        push_prepared(folder, REPO_ID, token=WRITE_TOKEN, endpoint=hub.url)
        for _ in range(args.repeats):
            runs.append(one_repeat(folder, batches, cache_blocks, hub.url))
    print(json.dumps({"rows": sum(len(b) for b in batches), "load_average": os.getloadavg(),
                      "median_rows_per_second": {name: round(statistics.median(r[name] for r in runs))
                                                 for name in runs[0]},
                      "runs": [{k: round(v) for k, v in r.items()} for r in runs]}, indent=1))


if __name__ == "__main__":
    main()
