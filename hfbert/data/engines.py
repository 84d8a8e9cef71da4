"""Who runs the units of work of a build: this process, a pool of local processes, or a Dask cluster.

A unit of work is a picklable call ``function(task)`` whose result depends on the task alone (for
``hfbert prepare``: build shard k and write it, see :mod:`hfbert.data.shards`), so the three runners give the
same results and any of them may run a task twice (a retry, a worker lost) without changing the output.

* ``engine="local"``, ``num_proc=1``: a loop in this process.
* ``engine="local"``, ``num_proc>1``: ``concurrent.futures.ProcessPoolExecutor``.  Its workers are forked from a
  fresh *forkserver* process that has imported the build code once (``spawn`` where there is no forkserver),
  never from this process: a fork of a process that already runs the tokenizers' or torch's thread pools can
  deadlock.  Importing hfbert (torch, transformers) costs more than building a small corpus, so the server
  pays it once per Python process instead of every worker every time.
* ``engine="dask"``: ``dask.distributed``; ``scheduler=ADDRESS`` joins a running cluster, otherwise a
  ``LocalCluster`` of ``num_proc`` single-threaded worker processes is started for the build and closed after it.
  Dask reschedules the tasks of a worker that dies and retries a task that raised (``retries``).

Results come back in task order; a progress bar counts finished tasks.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_all_start_methods, get_context
from typing import Any

from datasets.utils import tqdm as hf_tqdm

__all__ = ["ENGINES", "run_tasks"]

ENGINES = ("local", "dask")
# A task that raised is tried this many more times on Dask (a worker that died does not count: Dask
# reschedules its tasks by itself).
DASK_RETRIES = 2
# Worker processes run one task at a time each; a tokenizer thread pool inside them would only compete
# with the other workers for the same cores.
_WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


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
    with hf_tqdm(total=len(tasks), desc=desc, unit=unit) as progress:
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
    return context


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
    cluster = None
    if scheduler is None:
        cluster = distributed.LocalCluster(n_workers=max(1, num_proc), threads_per_worker=1, processes=True,
                                           dashboard_address=None, env=_WORKER_ENV)
    try:
        with distributed.Client(cluster if cluster is not None else scheduler) as client:
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
    finally:
        if cluster is not None:
            cluster.close()
