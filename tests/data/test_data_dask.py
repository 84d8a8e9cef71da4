"""`hfbert prepare --engine dask`: a LocalCluster of 2 workers writes the bytes of the in-process build, and so does
a build that loses a worker process mid-way (Dask reschedules its shards; each shard lands atomically).  The
cluster a build starts forks its workers with the build's settings, and a worker reuses its builder."""

import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
from pathlib import Path

import distributed  # the optional extra hfbert[distributed]; the test extra installs it
import pytest
from datasets.utils.logging import disable_progress_bar

from hfbert.data import prepare_corpus, shards, writer
from hfbert.data.engines import run_tasks
from hfbert.data.shards import warm_builder

disable_progress_bar()
# Small shards leave some held-out pools with one document; the build warns about it, which is not under test here.
pytestmark = pytest.mark.filterwarnings("ignore:.*single non-empty document:UserWarning")
# Many small shards of the whole built-in corpus: the build lasts long enough to lose a worker in the middle.
SETTINGS = dict(input_layout="paragraphs", document_boundary="chapter", num_shards=24, dupe_factor=3,
                max_seq_length=64, eval_fraction=0.05, seed=11)


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def austen(shared_data):
    return shared_data / "en_austen_6novels.txt"


@pytest.fixture(scope="module")
def reference(austen, en_tok, tmp_path_factory):
    return folder_bytes(prepare_corpus(austen, tmp_path_factory.mktemp("one") / "out", tokenizer=en_tok,
                                       **SETTINGS))


@pytest.mark.slow
def test_a_local_cluster_of_two_workers_writes_the_in_process_bytes(reference, austen, en_tok, tmp_path):
    folder = prepare_corpus(austen, tmp_path / "dask", tokenizer=en_tok, engine="dask", num_proc=2, **SETTINGS)
    assert folder_bytes(folder) == reference


@pytest.mark.slow
def test_killing_a_worker_mid_build_leaves_the_output_unchanged(reference, austen, en_tok, tmp_path):
    out = tmp_path / "dask"
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        client.wait_for_workers(2)
        before = client.run(os.getpid)
        outcome = {}

        def build():
            try:
                outcome["folder"] = prepare_corpus(austen, out, tokenizer=en_tok, engine="dask",
                                                   scheduler=cluster.scheduler_address, **SETTINGS)
            except BaseException as error:  # noqa: BLE001 -- re-raised by the test below
                outcome["error"] = error

        thread = threading.Thread(target=build, daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not list((out / "data").glob("train-*.parquet")) and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.01)
        landed = len(list((out / "data").glob("train-*.parquet")))
        victim = next(iter(before.values()))
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=240)
        assert not thread.is_alive(), "the build did not finish after a worker was killed"
        if "error" in outcome:
            raise outcome["error"]
        after = client.run(os.getpid)
    assert 1 <= landed < SETTINGS["num_shards"], "the worker was not killed mid-build"
    assert victim not in after.values()  # the nanny started a new worker process
    assert folder_bytes(out) == reference
    assert not list((out / "data").glob(".*"))  # no temporary file left by the killed task


def test_without_dask_the_error_says_how_to_install_it(austen, en_tok, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'hfbert\[distributed\]'"):
        prepare_corpus(austen, tmp_path / "x", tokenizer=en_tok, engine="dask", **SETTINGS)


def _worker_facts(_task) -> dict:
    import dask

    return {"parent": os.getppid(), "profile": dask.config.get("distributed.worker.profile.enabled"),
            "trim": os.environ.get("MALLOC_TRIM_THRESHOLD_"), "build_code": "hfbert.data.shards" in sys.modules}


@pytest.mark.slow
def test_the_local_cluster_forks_its_workers_with_the_build_settings(monkeypatch):
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    facts = run_tasks(_worker_facts, [0, 1], engine="dask", num_proc=2)
    for worker in facts:
        assert worker["parent"] != os.getpid()  # forked from the forkserver, not spawned by this process
        assert worker["profile"] is False
        assert worker["trim"] is None  # glibc keeps its own memory settings
        assert worker["build_code"]  # imported by the forkserver (or by this test's module, which imports it)


class _Captured(Exception):
    pass


def _builder(austen, en_tok, tmp_path, monkeypatch, **settings):
    """The builder a build sends with its tasks (the build stops there)."""
    def capture(function, tasks, **kwargs):
        raise _Captured(tasks[0].builder)

    monkeypatch.setattr(writer, "run_tasks", capture)
    with pytest.raises(_Captured) as captured:
        prepare_corpus(austen, tmp_path / f"out-{len(list(tmp_path.iterdir()))}", tokenizer=en_tok,
                       **{**SETTINGS, **settings})
    return captured.value.args[0]


def test_a_worker_keeps_its_first_builder_for_the_same_settings(austen, en_tok, tmp_path, monkeypatch):
    first = _builder(austen, en_tok, tmp_path, monkeypatch)
    other = _builder(austen, en_tok, tmp_path, monkeypatch, max_seq_length=32)
    again = pickle.loads(pickle.dumps(first))  # the copy the next task brings
    assert warm_builder(again) is again  # in this process: the caller's builder, as it is
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())  # as in a worker process
    monkeypatch.setattr(shards, "WARM_BUILDER", {})
    assert warm_builder(again) is again
    assert warm_builder(pickle.loads(pickle.dumps(first))) is again
    assert warm_builder(first) is again  # the client's own copy has the same settings
    assert warm_builder(other) is other  # other settings: a builder of their own
    assert warm_builder(pickle.loads(pickle.dumps(first))) is not again  # ... which replaced the first


PROBE = '''
import os, sys
import hfbert.data.shards  # the build code, as a build's workers import it


def facts(_task):
    return {"lazy": os.environ.get("HFBERT_LAZY_IMPORT"), "torch": "torch" in sys.modules,
            "transformers": "transformers" in sys.modules, "build_code": "hfbert.data.shards" in sys.modules}
'''
RUN = '''
import json, os, sys
import hfbert  # this process has the model code and the Auto classes; its workers need neither
from hfbert.data.engines import run_tasks
import probe

facts = {engine: run_tasks(probe.facts, [0, 1], engine=engine, num_proc=2) for engine in ("local", "dask")}
print(json.dumps({"facts": facts, "own_env": os.environ.get("HFBERT_LAZY_IMPORT"),
                  "registered": hfbert.HfBertConfig.__name__}))
'''


@pytest.mark.slow
def test_build_workers_import_the_build_code_without_torch_and_transformers(tmp_path):
    """A fresh interpreter (this one's forkserver may already run): its pool's and its cluster's workers import hfbert
    lazily, the build code without torch and transformers (seconds of start per build), while the building process
    keeps its own full import and environment."""
    import json
    import subprocess

    (tmp_path / "probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "HFBERT_LAZY_IMPORT"}
    done = subprocess.run([sys.executable, "-c", RUN], cwd=tmp_path, env={**env, "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["own_env"] is None and out["registered"] == "HfBertConfig"
    for engine, workers in out["facts"].items():
        for worker in workers:
            assert worker == {"lazy": "1", "torch": False, "transformers": False, "build_code": True}, (engine, worker)


@pytest.mark.slow
def test_a_lazy_import_registers_the_classes_on_first_use():
    import subprocess

    code = ("import sys, transformers, hfbert.data.shards; assert 'torch' not in sys.modules; "
            "import hfbert.hub; "  # binds the submodules hub and convert on the package before any name is used
            "from hfbert import HfBertConfig, HfBertModel; "
            "assert type(transformers.AutoModel.from_config(HfBertConfig(hidden_size=32, num_hidden_layers=1, "
            "num_attention_heads=2, intermediate_size=37))) is HfBertModel; "
            "import hfbert; assert all(callable(getattr(hfbert, name)) for name in hfbert.__all__)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "HFBERT_LAZY_IMPORT": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
