"""Who runs the units of work of a build: this process, a pool of local processes, or a Dask cluster.

A unit of work is a picklable call ``function(task)`` whose result depends on the task alone (for
``hfbert prepare``: build shard k and write it, see :mod:`hfbert.data.shards`), so the three runners give the
same results and any of them may run a task twice (a retry, a worker lost) without changing the output.

* ``engine="local"``, ``num_proc=1``: a loop in this process.
* ``engine="local"``, ``num_proc>1``: ``concurrent.futures.ProcessPoolExecutor``.  Its workers are forked from a
  fresh *forkserver* process that has imported the build code once (``spawn`` where there is no forkserver),
  never from this process: a fork of a process that already runs the tokenizers' or torch's thread pools can
  deadlock.  The server imports hfbert with ``HFBERT_LAZY_IMPORT=1`` (the build code without torch and the
  model code: a third of the time of a full import, which costs more than building a small corpus), once per
  Python process instead of every worker every time.
* ``engine="dask"``: ``dask.distributed``; ``scheduler=ADDRESS`` joins a running cluster, otherwise a
  ``LocalCluster`` of ``num_proc`` single-threaded worker processes is started for the build and closed after it.
  Dask reschedules the tasks of a worker that dies and retries a task that raised (``retries``).  The local
  cluster's workers are forked from a forkserver that has imported the build code, as the pool's are, keep
  glibc's own memory settings, and Dask's diagnostics there run at a slower pace (``_LOCAL_CLUSTER_CONFIG``): a
  worker then spends the CPU on a shard that this process would.

Results come back in task order; a progress bar counts finished tasks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_all_start_methods, get_context
from typing import Any

from .progress import Progress

__all__ = ["ENGINES", "local_cluster", "run_tasks"]

ENGINES = ("local", "dask")
# A task that raised is tried this many more times on Dask (a worker that died does not count: Dask
# reschedules its tasks by itself).
DASK_RETRIES = 2
# Worker processes run one task at a time each; a tokenizer thread pool inside them would only compete
# with the other workers for the same cores.
_WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
# A worker imports hfbert's model code (torch, transformers' modeling) only when a task uses it.
_LAZY_IMPORT = {"HFBERT_LAZY_IMPORT": "1"}
# Dask settings of the LocalCluster a build starts for itself (not of a cluster it joins).
_LOCAL_CLUSTER_CONFIG = {
    # Dask starts its workers with MALLOC_TRIM_THRESHOLD_=65536, so that they hand freed memory back to the system
    # at once; glibc then also stops raising its mmap threshold, and every large array of a build is mapped,
    # faulted in and unmapped again: the same shard cost 17-33% more CPU in a worker than in this process, and
    # 0.91-1.04x without it (paired runs).  A worker holds one shard's rows, so its memory stays bounded anyway.
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    # Idle, Dask's defaults cost a 2-worker cluster about 16% of one core (the scheduler's and nannies' event loop
    # in this process 7%, each worker 5%); with the settings below, 2%.  Nothing reads what they slow down: the
    # dashboard is off.
    # The statistical profiler walks the running task's stack every 10 ms, for the dashboard's profile page.
    "distributed.worker.profile.enabled": False,
    # The event-loop watchdog (every 20 ms in every scheduler, nanny and worker) only logs a blocked loop.
    "distributed.admin.tick.interval": "1s",
    # psutil readings for the dashboard (every 0.5 s) and the nanny's memory check (every 0.1 s; its limit still
    # holds, checked every second).
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}


def run_tasks(function: Callable[[Any], Any], tasks: Sequence, *, engine: str = "local", num_proc: int = 1,
              scheduler: str | None = None, desc: str = "Building", unit: str = " shards",
              on_result: Callable[[Any], Any] | None = None) -> list:
    """``[function(task) for task in tasks]``, run by the chosen engine (see the module docstring).

    ``on_result`` is applied in this process to each result as it arrives, and what it returns is kept: a caller
    folds large parts of the results into running totals there, so memory does not grow with the task count."""
    keep = on_result or (lambda result: result)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    if scheduler is not None and engine != "dask":
        raise ValueError("scheduler is the address of a Dask scheduler: it needs engine='dask'")
    from datasets.utils import are_progress_bars_disabled
    from datasets.utils import tqdm as hf_tqdm  # datasets' bar (its verbosity settings); ENGINES is read without it

    # A bar on a terminal; in a log file a plain line every tenth of the tasks instead of a redraw per task.
    shown = False if are_progress_bars_disabled() else None
    with Progress(desc, len(tasks), unit=unit, show=shown, every=max(1, len(tasks) // 10), bar=hf_tqdm) as progress:
        if engine == "dask":
            return _run_dask(function, tasks, num_proc, scheduler, progress, keep)
        if num_proc <= 1 or len(tasks) <= 1:
            results = []
            for task in tasks:
                results.append(keep(function(task)))
                progress.update(1)
            return results
        return _run_pool(function, tasks, num_proc, progress, keep)


def _worker_setup() -> None:
    os.environ.update(_WORKER_ENV)  # this is the spawned worker's own environment


def _context(function):
    if "forkserver" not in get_all_start_methods():
        return get_context("spawn")
    context = get_context("forkserver")
    # Takes effect when this Python process starts its forkserver; a server started earlier without it still
    # works, its workers import the module themselves.
    context.set_forkserver_preload([function.__module__])
    _start_forkserver()
    return context


def _start_forkserver() -> None:
    """Start this process's forkserver, if it is not running, with ``HFBERT_LAZY_IMPORT=1`` in its environment (its
    preload and every worker forked from it import hfbert that way); this process's own environment is restored."""
    from multiprocessing import forkserver

    saved = {name: os.environ.get(name) for name in _LAZY_IMPORT}
    os.environ.update(_LAZY_IMPORT)
    try:
        forkserver.ensure_running()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _run_pool(function, tasks: Sequence, num_proc: int, progress, keep) -> list:
    results: list = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(num_proc, len(tasks)), mp_context=_context(function),
                             initializer=_worker_setup) as pool:
        futures = {pool.submit(function, task): number for number, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                results[futures[future]] = keep(future.result())
                progress.update(1)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return results


def _dask():
    try:
        import distributed
    except ImportError:
        raise ImportError("engine='dask' needs Dask: pip install 'hfbert[distributed]' (dask and distributed)") from None
    return distributed


def _run_dask(function, tasks: Sequence, num_proc: int, scheduler: str | None, progress, keep) -> list:
    distributed = _dask()
    with contextlib.ExitStack() as stack:
        if scheduler is None:
            scheduler = stack.enter_context(local_cluster(num_proc, function))
        client = stack.enter_context(distributed.Client(scheduler))
        futures = [client.submit(function, task, pure=False, retries=DASK_RETRIES) for task in tasks]
        number = {future.key: n for n, future in enumerate(futures)}
        results: list = [None] * len(tasks)
        try:
            for future in distributed.as_completed(futures):
                results[number[future.key]] = keep(future.result())
                future.release()  # the worker may forget it
                progress.update(1)
        except BaseException:
            client.cancel(futures)
            raise
        return results


@contextlib.contextmanager
def local_cluster(num_proc: int, function: Callable):
    """The ``LocalCluster`` that ``engine="dask"`` starts when it is given no scheduler: ``num_proc`` single-threaded
    worker processes, forked from a forkserver that imported ``function``'s module, with the settings of
    ``_LOCAL_CLUSTER_CONFIG`` (held until it is closed: a nanny that restarts a lost worker reads them then)."""
    distributed = _dask()
    import dask

    with contextlib.ExitStack() as stack:
        stack.enter_context(dask.config.set(_LOCAL_CLUSTER_CONFIG))
        if "forkserver" in get_all_start_methods():
            stack.enter_context(dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}))
            _preload_build_code(function)
        yield stack.enter_context(distributed.LocalCluster(
            n_workers=max(1, num_proc), threads_per_worker=1, processes=True, dashboard_address=None,
            env={**_WORKER_ENV, **_LAZY_IMPORT}))


def _preload_build_code(function) -> None:
    """Have the forkserver that Dask's nannies fork workers from import ``function``'s module (and Dask) once, with
    hfbert's lazy import: a spawned worker imports hfbert itself, seconds of CPU per worker and build.

    Takes effect when this Python process starts its forkserver; one started earlier (by a previous build or the
    process pool) is used as it is, and its workers import what it lacks themselves."""
    from distributed.utils import get_mp_context

    context = get_mp_context()  # Dask sets its own preload list on the first call; this one replaces it
    context.set_forkserver_preload(["distributed", function.__module__])
    _start_forkserver()
