"""The hf:// rows of the loader benchmark: hfbert's training order read from a Hub dataset repo, cold cache and warm.

Answered in docs/data.md (the loader).

    python benchmarks/bench_loader_remote.py --prepared DIR [--batches 200] [--batch_size 256] [--startup]

The prepared folder is pushed as a dataset repo to the tests' Hub-protocol server (tests/hub_server.py, run in its
own process on 127.0.0.1, so that serving does not share this process's interpreter), then the same micro-batches
of the training order (``BatchPlan``, one process) are read three ways: from the local folder, from
``hf://datasets/user/NAME`` with an empty cache (every row group fetched over HTTP, one ranged read each), and
again with the cache the cold pass filled (a new ``PreparedCorpus``, as a resumed run or a second process of the
machine would open it).  ``--startup`` also times ``hfbert pretrain --prepared`` from its start to its first
logged optimizer step (BERT-Mini, batch 32), from the folder and from hf:// with an empty cache.

:func:`remote_rows` is the measurement itself, for benchmarks/bench_loader.py to call with its own batches.  The
network is the loopback interface: the figures measure hfbert's side (requests, cache, decode), not a link.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from hfbert.data.manifest import Manifest

os.environ.setdefault("HF_HUB_DISABLE_XET", "1")  # the test server offers plain LFS only; read at import
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.pop("HF_HUB_OFFLINE", None)

REPO = Path(__file__).resolve().parents[1]
WRITE_TOKEN = "hf_write_token"  # the server's default write token
SERVER = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from hub_server import start_hub
    hub, httpd = start_hub()
    print(hub.url, flush=True)
    sys.stdin.read()  # serve until the parent closes the pipe
""")


class HubProcess:
    """The tests' Hub server in a child process; ``url`` once started."""

    def __enter__(self) -> HubProcess:
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, str(REPO / "tests")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.url = self.process.stdout.readline().strip()
        return self

    def __exit__(self, *exc) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _read_all(corpus, batches: Sequence, read: Callable) -> tuple[float, int]:
    began, rows = time.perf_counter(), 0
    for indices in batches:
        read(corpus, indices)
        rows += len(indices)
    return time.perf_counter() - began, rows


def default_read(corpus, indices):
    """What the training loop does with a micro-batch's rows: gathered into padded arrays."""
    return corpus.read_arrays("train", indices, {"input_ids": 0})


def remote_rows(folder: str | Path, batches: Sequence, *, cache_blocks: int | None = None,
                read: Callable = default_read, repo_id: str = "user/bench-loader", hub_url: str | None = None) -> dict:
    """Rows per second reading ``batches`` (index arrays, in order) from ``folder`` and from its Hub copy.

    Returns ``{"local", "hf_cold", "hf_warm"}`` rows/s, the seconds of the hf:// open (manifest, tokenizer,
    listing) and of its first batch, and the bytes and requests of the cold pass.  ``cache_blocks``: decoded row
    groups each corpus keeps (``BatchPlan.cache_blocks``, as the training loop sets it).  ``hub_url``: a running
    server (the folder is pushed there); by default one is started for the call."""
    from hfbert.data import PreparedCorpus, push_prepared

    if hub_url is None:
        with HubProcess() as hub:
            return remote_rows(folder, batches, cache_blocks=cache_blocks, read=read, repo_id=repo_id,
                               hub_url=hub.url)
    from huggingface_hub import constants

    def opened(location, **kwargs):
        corpus = PreparedCorpus.open(location, **kwargs)
        if cache_blocks is not None:
            corpus.set_cache(cache_blocks)
        return corpus

    constants.HF_HUB_OFFLINE = False
    began = time.perf_counter()
    push_prepared(folder, repo_id, token=WRITE_TOKEN, endpoint=hub_url)
    pushed = time.perf_counter() - began
    _read_all(opened(folder), batches, read)  # the files in the page cache, as the warm cache's are
    local_seconds, rows = _read_all(opened(folder), batches, read)
    with tempfile.TemporaryDirectory(prefix="hfbert-bench-cache-") as cache_dir:
        began = time.perf_counter()
        cold = opened(f"hf://datasets/{repo_id}", endpoint=hub_url, cache_dir=cache_dir)
        open_seconds = time.perf_counter() - began
        first, _ = _read_all(cold, batches[:1], read)
        rest, _ = _read_all(cold, batches[1:], read)
        cold_seconds = first + rest
        fetched = sum(path.stat().st_size for path in Path(cache_dir, "ranges").rglob("*-*"))
        requests = cold.remote.cache.misses
        warm = opened(f"hf://datasets/{repo_id}", endpoint=hub_url, cache_dir=cache_dir)
        warm_seconds, _ = _read_all(warm, batches, read)
    return {"rows": rows, "local": rows / local_seconds, "hf_cold": rows / cold_seconds,
            "hf_warm": rows / warm_seconds, "hf_open_seconds": open_seconds, "hf_first_batch_seconds": first,
            "hf_cold_bytes_fetched": fetched, "hf_cold_ranges_fetched": requests, "push_seconds": pushed}


def training_order(folder: str | Path, count: int, batch_size: int, seed: int = 42) -> tuple[list, int]:
    """The first ``count`` micro-batches of hfbert's training order on one process, and the decoded row groups
    the training loop keeps for that order."""
    from hfbert.data import PreparedCorpus
    from hfbert.pretrain.batches import BatchPlan

    corpus = PreparedCorpus.open(folder)
    plan = BatchPlan(corpus.blocks("train"), batch_size, 1, seed, 0)
    return [plan.rows(micro, 0) for micro in range(count)], plan.cache_blocks


def pretrain_startup(prepared: str, hub_url: str, work: Path, length: int) -> float:
    """Seconds from starting ``hfbert pretrain --prepared PREPARED`` (a folder, or hf://datasets/... on the server
    at ``hub_url``, with an empty cache) to its first logged optimizer step."""
    output = work / "startup-run"
    shutil.rmtree(output, ignore_errors=True)
    env = {**os.environ, "HF_ENDPOINT": hub_url, "HF_HOME": str(work / "startup-home"), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "NO_PROXY": "127.0.0.1,localhost"}
    env.pop("HFBERT_CACHE", None)
    shutil.rmtree(env["HF_HOME"], ignore_errors=True)
    command = [sys.executable, "-m", "hfbert.pretrain", "--prepared", prepared, "--preset", "mini",
               "--max_seq_length", str(length), "--batch_size", "32", "--max_steps", "1000", "--logging_steps", "1",
               "--save_steps", "100000", "--eval_steps", "100000", "--progress_bar", "false", "--report_to", "jsonl",
               "--output_dir", str(output), "--max_time_minutes", "5"]
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = output / "runs" / "metrics.jsonl"
    try:
        while process.poll() is None:
            if log.is_file() and any('"step"' in line for line in log.read_text().splitlines()):
                return time.perf_counter() - began
            time.sleep(0.1)
        raise RuntimeError(f"hfbert pretrain ended before its first step:\n{process.stderr.read()[-3000:]}")
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", required=True, help="a prepared folder (hfbert prepare)")
    parser.add_argument("--batches", type=int, default=200, help="micro-batches of the training order to read")
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--startup", action="store_true", help="also time hfbert pretrain's first step over hf://")
    parser.add_argument("--work", default=None, help="scratch folder for --startup (default: a temporary one)")
    args = parser.parse_args()
    batches, cache_blocks = training_order(args.prepared, args.batches, args.batch_size)
    with HubProcess() as hub:
        result = remote_rows(args.prepared, batches, cache_blocks=cache_blocks, hub_url=hub.url)
        if args.startup:
            with tempfile.TemporaryDirectory(prefix="hfbert-bench-") as scratch:
                length = Manifest.read(args.prepared).settings["max_seq_length"]
                work = Path(args.work or scratch)
                for name, prepared in (("local", args.prepared), ("hf", "hf://datasets/user/bench-loader")):
                    result[f"pretrain_first_step_seconds_{name}"] = pretrain_startup(prepared, hub.url, work, length)
    result["load_average"] = os.getloadavg()
    print(json.dumps({key: round(value, 3) if isinstance(value, float) else value for key, value in result.items()},
                     indent=1))


if __name__ == "__main__":
    main()
