"""How fast training rows come out of a prepared corpus, side by side with the same shards read in file order and
with MosaicML Streaming on the same rows.

Answered in docs/data.md (the loader).

    python benchmarks/bench_loader.py [--work /tmp/hfbert-corpora] [--megabytes 1000] [--lengths 128 512]
                                   [--rows 300000] [--batch_size 256] [--output figures.json]

For each length, the corpus (``corpus-1gb.txt`` from benchmarks/make_corpus.py, made when missing) is prepared once
into ``WORK/prepared-LENGTH`` (static masks, one duplication pass, reused when present). Each reader then yields
``--rows`` rows in batches of ``--batch_size``, as numpy arrays collated into the batch the model takes (padding,
attention mask, labels), and reports rows per second:

* ``hfbert order, 1 process``: :class:`hfbert.pretrain.batches.BatchPlan`'s order (the default shuffle window), the
  global batch read by one process;
* ``hfbert order, 2 processes``: two processes at once, each reading its half of every global batch (per process);
* ``file order``: the same shards read front to back (the ceiling: one decode per row group, nothing skipped);
* ``streaming``: MosaicML Streaming (``mosaicml-streaming`` 0.13.0, in its own virtual environment under
  ``WORK/streaming-venv``, since it pins its own torch) reading the same rows written as MDS
  (``WORK/mds-LENGTH``), ``StreamingDataset(shuffle=True)`` with its default shuffle, one process, no workers,
  the rows collated the same way.

It also reports the shuffle's quality: distinct shards and distinct row groups per global batch in hfbert's order,
and the same for a batch drawn uniformly from the whole corpus. Figures from a shared machine move with its load:
the script prints the load average next to them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np

from hfbert.data.manifest import MANIFEST, Manifest

REPO = Path(__file__).resolve().parents[1]
STREAMING = "mosaicml-streaming==0.13.0"


# ---------------------------------------------------------------------------------------------------------
# Corpora


def corpus_file(work: Path, megabytes: float) -> Path:
    path = work / ("corpus-1gb.txt" if megabytes == 1000 else f"corpus-{megabytes:g}mb.txt")
    if not path.is_file():
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "make_corpus.py"), str(path), "--megabytes",
                        str(megabytes)], check=True)
    return path


def prepared_folder(work: Path, corpus: Path, megabytes: float, length: int, tokenizer: Path | None) -> Path:
    suffix = "" if megabytes == 1000 else f"-{megabytes:g}mb"
    folder = work / f"prepared-{length}{suffix}"
    if not (folder / MANIFEST).is_file():
        command = [sys.executable, "-m", "hfbert.cli", "prepare", "--input", str(corpus), "--output_dir",
                   str(folder), "--overwrite_output_dir", "--input_layout", "paragraphs", "--masking", "static",
                   "--dupe_factor", "1", "--max_seq_length", str(length), "--seed", "42",
                   "--num_proc", str(os.cpu_count() or 1)]
        if tokenizer is not None:
            command += ["--tokenizer", str(tokenizer)]
        started = time.monotonic()
        subprocess.run(command, check=True)
        print(f"prepared {folder.name} in {time.monotonic() - started:.0f} s", flush=True)
    return folder


# ---------------------------------------------------------------------------------------------------------
# Readers: each returns rows per second over ``rows`` rows


def _open(folder: Path):
    from hfbert.data import DataCollatorForBertPretraining, PreparedCorpus

    corpus = PreparedCorpus.open(folder)
    collator = DataCollatorForBertPretraining(corpus.load_tokenizer(), pad_to_multiple_of=8)
    return corpus, collator


def hfbert_order(folder: Path, rows: int, batch_size: int, world: int = 1, rank: int = 0) -> float:
    """BatchPlan's order; process ``rank`` of ``world`` reads its slice of each global batch of ``batch_size``."""
    from hfbert.pretrain.batches import BatchPlan

    corpus, collator = _open(folder)
    plan = BatchPlan(corpus.blocks("train"), batch_size // world, world, 42, 0)
    corpus.set_cache(plan.cache_blocks)
    pad = {"input_ids": collator.pad_token_id}
    started, done, micro = time.perf_counter(), 0, 0
    while done < rows // world:
        arrays = corpus.read_arrays("train", plan.rows(micro, rank), pad)
        collator.collate_arrays(arrays)
        done, micro = done + len(arrays["input_ids"]), micro + 1
    return done / (time.perf_counter() - started)


def hfbert_order_processes(folder: Path, rows: int, batch_size: int, world: int = 2) -> float:
    """``world`` processes at once, each reading its slices; the mean of their rows per second (per process)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from bench_loader import hfbert_order; from pathlib "
            "import Path; print(hfbert_order(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), "
            "int(sys.argv[5]), int(sys.argv[6])))")
    processes = [subprocess.Popen([sys.executable, "-c", code, str(REPO / "benchmarks"), str(folder), str(rows),
                                   str(batch_size), str(world), str(rank)], stdout=subprocess.PIPE, text=True)
                 for rank in range(world)]
    figures = [float(p.communicate()[0].strip().splitlines()[-1]) for p in processes]
    return float(np.mean(figures))


def file_order(folder: Path, rows: int, batch_size: int) -> float:
    """The same shards front to back: batch k is rows [k*B, (k+1)*B)."""
    corpus, collator = _open(folder)
    pad = {"input_ids": collator.pad_token_id}
    total = corpus.num_rows("train")
    started, done = time.perf_counter(), 0
    while done < rows:
        start = done % max(total - batch_size, 1)
        arrays = corpus.read_arrays("train", np.arange(start, start + batch_size), pad)
        collator.collate_arrays(arrays)
        done += batch_size
    return done / (time.perf_counter() - started)


STREAMING_SCRIPT = textwrap.dedent("""
    import glob, sys, time
    from pathlib import Path
    import numpy as np

from hfbert.data.manifest import MANIFEST, Manifest
    import pyarrow.parquet as pq
    from streaming import MDSWriter, StreamingDataset

    folder, mds, rows, batch_size, pad = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    if not (mds / "index.json").is_file():
        columns = {"input_ids": "ndarray:int32", "token_type_ids": "ndarray:int8", "next_sentence_label": "int",
                   "masked_lm_positions": "ndarray:int32", "masked_lm_ids": "ndarray:int32"}
        with MDSWriter(out=str(mds), columns=columns, size_limit="64mb") as writer:
            for path in sorted(glob.glob(str(folder / "data" / "train-*.parquet"))):
                table = pq.read_table(path)
                data = {name: table.column(name).to_pylist() for name in columns}
                for i in range(table.num_rows):
                    writer.write({name: (np.asarray(data[name][i], dtype=kind.split(":")[1]) if ":" in kind
                                         else int(data[name][i])) for name, kind in columns.items()})
    dataset = StreamingDataset(local=str(mds), shuffle=True, batch_size=batch_size)

    def collate(samples):
        lengths = np.array([len(s["input_ids"]) for s in samples])
        width = -(-int(lengths.max()) // 8) * 8
        ids = np.full((len(samples), width), pad, dtype=np.int64)
        types = np.zeros((len(samples), width), dtype=np.int64)
        labels = np.full((len(samples), width), -100, dtype=np.int64)
        for row, s in enumerate(samples):
            ids[row, :lengths[row]] = s["input_ids"]
            types[row, :lengths[row]] = s["token_type_ids"]
            labels[row, s["masked_lm_positions"]] = s["masked_lm_ids"]
        return ids, types, np.arange(width) < lengths[:, None], labels

    started, done, batch = time.perf_counter(), 0, []
    for sample in dataset:
        batch.append(sample)
        if len(batch) == batch_size:
            collate(batch)
            done += batch_size
            batch = []
            if done >= rows:
                break
    print(done / (time.perf_counter() - started))
""")


def _torch_version() -> str:
    from importlib.metadata import version

    return version("torch").split("+")[0]


def streaming_venv(work: Path) -> Path:
    venv = work / "streaming-venv"
    python = venv / "bin" / "python"
    if not python.is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        # torch pinned in the same command to this environment's build: left to pip, Streaming's requirements
        # pull the newest torch (a multi-GB CUDA build).
        subprocess.run([str(python), "-m", "pip", "install", "-q", STREAMING, "pyarrow", f"torch=={_torch_version()}"],
                       check=True)
    return python


def streaming(folder: Path, rows: int, batch_size: int, work: Path) -> float:
    """MosaicML Streaming, default shuffle, one process, no workers, on the same rows written as MDS."""
    python = streaming_venv(work)
    pad = Manifest.read(folder).tokenizer.special_token_ids["pad"]
    mds = work / f"mds-{folder.name.removeprefix('prepared-')}"
    done = subprocess.run([str(python), "-c", STREAMING_SCRIPT, str(folder), str(mds), str(rows), str(batch_size),
                           str(pad)], capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


# The rows of the table: (name, function(folder, rows, batch_size, work) -> rows/s). Readers of remote shards
# (hf:// against a local Hub-protocol server, cold and warm cache) are further rows of this table.
READERS = [
    ("hfbert order, 1 process", lambda f, n, b, w: hfbert_order(f, n, b)),
    ("hfbert order, 2 processes (per process)", lambda f, n, b, w: hfbert_order_processes(f, n, b)),
    ("file order (ceiling)", lambda f, n, b, w: file_order(f, n, b)),
    ("MosaicML Streaming, shuffle=True", lambda f, n, b, w: streaming(f, n, b, w)),
]


# ---------------------------------------------------------------------------------------------------------
# Shuffle quality


def shuffle_quality(folder: Path, batch_size: int, batches: int = 200) -> dict:
    """Mean distinct shards and row groups per global batch: hfbert's order against a uniform draw."""
    from hfbert.data import PreparedCorpus
    from hfbert.pretrain.batches import BatchPlan

    corpus = PreparedCorpus.open(folder)
    sizes = corpus.blocks("train")
    starts = np.cumsum(sizes) - sizes
    groups_per_shard = [shard.row_groups for shard in corpus.manifest.splits["train"].shards]
    shard_of_block = np.repeat(np.arange(len(groups_per_shard)), groups_per_shard)
    plan = BatchPlan(sizes, batch_size, 1, 42, 0)
    rng = np.random.default_rng(0)
    figures = {"hfbert": [], "uniform": []}
    for k in range(batches):
        micro = int(rng.integers(plan.batches_per_epoch))
        for name, rows in (("hfbert", np.asarray(plan.rows(micro, 0))),
                           ("uniform", rng.choice(corpus.num_rows("train"), batch_size, replace=False))):
            blocks = np.searchsorted(starts, rows, side="right") - 1
            figures[name].append((len(np.unique(shard_of_block[blocks])), len(np.unique(blocks))))
    return {name: {"shards": float(np.mean([a for a, _ in v])), "row_groups": float(np.mean([b for _, b in v]))}
            for name, v in figures.items()} | {"shards": len(groups_per_shard), "row_groups": len(sizes),
                                               "window": plan.window}


# ---------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/hfbert-corpora"))
    parser.add_argument("--megabytes", type=float, default=1000.0)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512])
    parser.add_argument("--rows", type=int, default=300_000)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--tokenizer", type=Path, default=None, help="a tokenizer folder (default: trained once)")
    parser.add_argument("--readers", nargs="*", default=None, help="names (prefixes) of the readers to run")
    parser.add_argument("--output", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = corpus_file(args.work, args.megabytes)
    results: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "rows": args.rows,
                     "batch_size": args.batch_size, "lengths": {}}
    tokenizer = args.tokenizer
    for length in args.lengths:
        folder = prepared_folder(args.work, corpus, args.megabytes, length, tokenizer)
        tokenizer = tokenizer or folder
        figures = {"load_before": os.getloadavg()[0], "quality": shuffle_quality(folder, args.batch_size)}
        for name, read in READERS:
            if args.readers and not any(name.startswith(prefix) for prefix in args.readers):
                continue
            try:
                figures[name] = read(folder, args.rows, args.batch_size, args.work)
            except (subprocess.CalledProcessError, OSError) as err:
                figures[name] = f"failed: {err}"
            print(f"length {length:4d}  {name:42s} {figures[name] if isinstance(figures[name], str) else f'{figures[name]:>10,.0f} rows/s'}",
                  flush=True)
        figures["load_after"] = os.getloadavg()[0]
        streaming_figure = figures.get("MosaicML Streaming, shuffle=True")
        if isinstance(streaming_figure, float):
            figures["hfbert / streaming"] = figures["hfbert order, 1 process"] / streaming_figure
        results["lengths"][length] = figures
        print(json.dumps(figures, indent=1), flush=True)
    if args.output:
        args.output.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
