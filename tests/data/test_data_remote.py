"""Prepared corpora read on demand from remote storage (hfbert.data.remote): the same rows as the local folder,
only the byte ranges of the row groups that hold them, a cache shared by processes, and faults -- a read that
times out, answers 500 or brings fewer bytes than asked -- retried and then stopped with one line naming the shard
and the URL; tested against the local Hub server (hf://) and a misbehaving fsspec filesystem.  Last, a pretraining
run reading hf:// killed with SIGKILL and resumed ends with the weights of the same run from the local folder.

The corpus: the first 400 lines of the shipped Austen text, prepared once at length 64 (two shards of two row
groups each).
"""

import gzip
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import fsspec
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from hfbert.data import PreparedCorpus, PreparedDataError, prepare_corpus
from hfbert.data import remote
from hfbert.data.writer import push_prepared
from hfbert.data.remote import RangeCache, ShardReadError, parse_size
from hfbert.data.sources import BUILTIN_CORPUS

import helpers.flaky_filesystem  # registers flaky://
from helpers.hub_server import Fault, HubServer, allow_hub_calls
from helpers.pretraining import KILL_AFTER_CHECKPOINT, STEPS, TINY_MODEL, settings

REPO_ID = "user/austen-64"
# Seconds a read may run past its limit: the error's way up and a loaded machine's scheduler. Far below what it would
# take without the limit (a 30-second hang, or a wait per retry).
MARGIN = 5


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(400)]
    root = tmp_path_factory.mktemp("remote")
    (root / "head.txt").write_text("".join(lines), encoding="utf-8")
    with pytest.warns(UserWarning):  # a pool of one document: expected on nine chapters
        return prepare_corpus([str(root / "head.txt")], root / "prepared", vocab_size=400, max_seq_length=64,
                              input_layout="paragraphs", document_boundary="chapter", eval_fraction=0.2, seed=42,
                              masking="static", dupe_factor=5, num_shards=2)


@pytest.fixture(scope="module")
def local(folder) -> PreparedCorpus:
    return PreparedCorpus.open(folder)


def picks(corpus: PreparedCorpus, count: int = 40) -> list[int]:
    return np.random.default_rng(0).choice(corpus.num_rows("train"), count, replace=False).tolist()


# ----------------------------------------------------------------------------------------------------------------
# A misbehaving fsspec filesystem (flaky://, tests/helpers/flaky_filesystem.py)



@pytest.fixture
def flaky(folder):
    fs = fsspec.filesystem("flaky")
    fs.rm("/corpus", recursive=True) if fs.exists("/corpus") else None
    fs.put(str(folder), "/corpus", recursive=True)
    fs.reset()
    yield fs
    fs.released.set()


def test_an_fsspec_url_gives_the_rows_of_the_local_folder_reading_only_their_row_groups(local, flaky, tmp_path):
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache")
    assert flaky.bytes_read == 0  # opening reads the manifest, the tokenizer and a listing: no shard byte
    assert corpus.url == "flaky://corpus" and corpus.manifest == local.manifest
    assert corpus.load_tokenizer().get_vocab() == local.load_tokenizer().get_vocab()
    first_group = list(range(10))  # rows of the first row group of the first shard
    assert corpus.rows("train", first_group) == local.rows("train", first_group)
    shard_bytes = local.manifest.splits["train"].shards[0].bytes
    assert flaky.reads == 2 and flaky.bytes_read < shard_bytes  # the footer, then that row group only
    chosen = picks(local)
    assert corpus.rows("train", chosen) == local.rows("train", chosen)
    assert corpus.rows("validation", [0, 3]) == local.rows("validation", [0, 3])


def test_a_batch_needing_several_row_groups_fetches_them_at_once(local, flaky, tmp_path):
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache")
    flaky.reset(mode="slow")
    chosen = picks(local)  # rows of both shards: the two footers read together, then the row groups together
    blocks = {(shard, group) for _, shard, group in local._locate("train", np.asarray(chosen))[0]}
    assert corpus.rows("train", chosen) == local.rows("train", chosen)
    assert len(blocks) > 2 and flaky.reads == 2 + len(blocks) and flaky.most_in_flight == len(blocks)


@pytest.mark.slow
def test_a_warm_cache_serves_another_process_without_reading_the_remote(local, flaky, tmp_path):
    chosen = picks(local)
    PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache").rows("train", chosen)
    flaky.reset(mode="raise")  # every shard read now fails: only the cache can answer
    code = textwrap.dedent("""
        import json, sys
        sys.path.insert(0, sys.argv[3])
        import fsspec, helpers.flaky_filesystem  # registers flaky:// (an empty in-memory filesystem in this process)
        from hfbert.data import PreparedCorpus
        fs = fsspec.filesystem("flaky")
        fs.put(sys.argv[4], "/corpus", recursive=True)
        fs.reset(mode="raise")
        corpus = PreparedCorpus.open("flaky://corpus", cache_dir=sys.argv[1], timeout=2)
        rows = corpus.rows("train", json.loads(sys.argv[2]))
        print(json.dumps({"rows": rows, "failed": fs.failed}))
    """)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    tests = Path(helpers.flaky_filesystem.__file__).parents[1]  # where the subprocess finds the helpers
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cache"), json.dumps(chosen), str(tests),
                           str(local.path)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["failed"] == 0 and out["rows"] == local.rows("train", chosen)


def _attempt_in_child(attempts, results) -> None:
    try:
        results.put(attempts.run(threading.get_ident, 5.0) != threading.get_ident())
    except BaseException as err:
        results.put(repr(err))


def test_attempts_reuse_their_threads_and_a_call_past_its_limit_does_not_hold_the_next():
    attempts = remote._Attempts()
    threads = {attempts.run(threading.get_ident, 5.0) for _ in range(50)}
    assert len(threads) == 1 and threading.get_ident() not in threads  # one reused thread, not this one
    with pytest.raises(RuntimeError, match="refused"):
        attempts.run(lambda: (_ for _ in ()).throw(RuntimeError("refused")), 5.0)
    release = threading.Event()
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        attempts.run(lambda: release.wait(30), 0.2)
    assert time.monotonic() - began < 0.2 + MARGIN
    assert attempts.run(lambda: 7, 5.0) == 7  # served by another thread meanwhile
    release.set()
    deadline = time.monotonic() + 10
    while attempts._idle.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert attempts._idle.qsize() == 2  # the late one rejoined the idle threads
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    child = context.Process(target=_attempt_in_child, args=(attempts, results))
    child.start()
    assert results.get(timeout=30) is True  # a forked child starts threads of its own
    child.join(30)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hang", "raise", "short"])
def test_a_read_that_fails_a_few_times_is_retried_and_gives_the_right_rows(local, flaky, tmp_path, mode):
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache", timeout=3)
    flaky.reset(mode=mode, failures=2)
    chosen = picks(local, 10)
    assert corpus.rows("train", chosen) == local.rows("train", chosen)
    assert flaky.failed == 2


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["hang", "raise", "short"])
def test_a_read_that_keeps_failing_stops_within_the_limit_naming_shard_and_url(local, flaky, tmp_path, mode):
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache", timeout=1.5)
    flaky.reset(mode=mode)
    began = time.monotonic()
    with pytest.raises(ShardReadError) as caught:
        corpus.rows("train", [0])
    assert time.monotonic() - began < 1.5 + MARGIN  # the limit, not the filesystem's hang
    message = str(caught.value)
    assert "\n" not in message and "data/train-00000-of-00002.parquet" in message and "flaky://corpus" in message
    assert flaky.failed >= 2  # retried before giving up
    assert {"hang": "no answer", "raise": "connection reset", "short": "bytes instead of"}[mode] in message


def test_a_shard_of_the_wrong_size_is_refused_when_opened(flaky, tmp_path):
    name = "/corpus/data/train-00001-of-00002.parquet"
    flaky.pipe_file(name, flaky.cat_file(name)[:-100])
    with pytest.raises(PreparedDataError, match=r"shard data/train-00001-of-00002.parquet of flaky://corpus has "
                                                r"\d+ bytes, the manifest says"):
        PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache")
    flaky.rm("/corpus/data/train-00001-of-00002.parquet")
    with pytest.raises(PreparedDataError, match="train-00001-of-00002.parquet of flaky://corpus is missing"):
        PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache")


def test_wrong_bytes_of_the_right_size_are_found_by_the_page_checksums(local, flaky, tmp_path):
    name = "/corpus/data/train-00000-of-00002.parquet"
    data = bytearray(flaky.cat_file(name))
    data[len(data) // 4] ^= 0xFF  # inside the first row group's pages
    flaky.pipe_file(name, bytes(data))
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache")
    with pytest.raises(PreparedDataError, match="train-00000-of-00002.parquet .*corrupt"):
        corpus.rows("train", list(range(local.num_rows("train") // 8)))


def test_the_explicit_full_download_checks_every_shards_sha256(local, flaky, tmp_path):
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache", download=True)
    assert corpus.url is None and (corpus.path / "data" / "train-00000-of-00002.parquet").is_file()
    assert corpus.rows("train", picks(local)) == local.rows("train", picks(local))
    name = "/corpus/data/train-00001-of-00002.parquet"
    data = bytearray(flaky.cat_file(name))
    data[100] ^= 0x01
    flaky.pipe_file(name, bytes(data))
    with pytest.raises(PreparedDataError, match="train-00001-of-00002.parquet .* sha256 differs"):
        PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "other", download=True)


def test_the_cache_stays_within_its_limit_and_a_damaged_entry_is_fetched_again(local, flaky, tmp_path):
    limit = 120_000  # less than one shard
    corpus = PreparedCorpus.open("flaky://corpus", cache_dir=tmp_path / "cache", cache_limit=limit)
    chosen = list(range(0, local.num_rows("train"), 97))  # every row group of both shards
    assert corpus.rows("train", chosen) == local.rows("train", chosen)
    cache = RangeCache(tmp_path / "cache" / "ranges", limit)
    assert sum(size for _, size, _ in cache.usage()) <= limit * (1 + 1 / 16)
    entries = cache.usage()
    assert entries
    victim = entries[0][2]
    raw = bytearray(victim.read_bytes())
    raw[5] ^= 0xFF
    victim.write_bytes(bytes(raw))
    start, end = map(int, victim.name.split("-"))
    assert cache.get(victim.parent.name, start, end) is None and not victim.exists()


def _hammer_cache(folder: str, failures) -> None:
    """Write and read the same entries again and again (the body of one of several processes)."""
    cache = RangeCache(folder, 1 << 30)
    payload = {k: bytes([k]) * (200_000 + k) for k in range(20)}
    for _ in range(15):
        for k, data in payload.items():
            got = cache.get("ab" * 32, k, k + len(data))
            if got is not None and got != data:
                failures.put((k, len(got)))
            cache.put("ab" * 32, k, k + len(data), data)


@pytest.mark.slow
def test_processes_sharing_a_cache_never_see_a_partial_entry(tmp_path):
    context = multiprocessing.get_context("fork")  # this process has imported everything already
    failures = context.Queue()
    runs = [context.Process(target=_hammer_cache, args=(str(tmp_path / "shared"), failures)) for _ in range(3)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=300)
        assert run.exitcode == 0
    assert failures.empty()
    assert not list((tmp_path / "shared").rglob(".*.tmp"))  # every temporary name was renamed or removed


def test_sizes_and_locations_that_are_not_understood_are_refused_in_one_line(tmp_path):
    assert parse_size("20GB") == 20 * 10**9 and parse_size("1.5GiB") == 3 * 2**29 and parse_size(0) == 0
    with pytest.raises(ValueError, match="cache_limit must be a size"):
        parse_size("lots")
    with pytest.raises(FileNotFoundError, match="prepared folder not found"):
        PreparedCorpus.open(tmp_path / "nothing")
    with pytest.raises(ValueError, match=r"hf://datasets/user/name\[@revision\]"):
        PreparedCorpus.open("hf://models/user/name")


# ----------------------------------------------------------------------------------------------------------------
# The Hub (the local Hub-protocol server)


@pytest.fixture
def hub(folder, hub_server, monkeypatch):  # noqa: F811
    allow_hub_calls(monkeypatch)
    push_prepared(folder, REPO_ID, token=HubServer.WRITE_TOKEN, endpoint=hub_server.url)
    return hub_server


@pytest.mark.parametrize("name", [REPO_ID, f"hf://datasets/{REPO_ID}", f"hf://datasets/{REPO_ID}@main"])
def test_a_hub_dataset_repo_is_read_by_ranges_at_one_commit(local, hub, tmp_path, name):
    corpus = PreparedCorpus.open(name, endpoint=hub.url, cache_dir=tmp_path / "cache")
    commit = hub.repos[("dataset", REPO_ID)].branches["main"]
    assert corpus.url == f"hf://datasets/{REPO_ID}@{commit[:12]}" and corpus.manifest == local.manifest
    chosen = picks(local)
    assert corpus.rows("train", chosen) == local.rows("train", chosen)
    downloads = [(path, status) for method, path, status in hub.requests if "/resolve/" in path and
                 path.endswith(".parquet")]
    assert downloads and all(status == 206 for _, status in downloads)  # ranged reads, never a whole shard
    assert all(f"/resolve/{commit}/" in path for path, _ in downloads)
    assert hub.unknown_routes == []


def test_a_push_during_training_does_not_change_what_an_open_corpus_reads(local, hub, tmp_path):
    from huggingface_hub import HfApi

    corpus = PreparedCorpus.open(REPO_ID, endpoint=hub.url, cache_dir=tmp_path / "cache")
    name = "data/train-00000-of-00002.parquet"
    HfApi(endpoint=hub.url, token=HubServer.WRITE_TOKEN).upload_file(
        path_or_fileobj=b"not the same shard", path_in_repo=name, repo_id=REPO_ID, repo_type="dataset")
    assert corpus.rows("train", [0, 1]) == local.rows("train", [0, 1])  # still the commit it opened
    with pytest.raises(PreparedDataError, match=f"shard {name} of hf://datasets/{REPO_ID}@.* has 18 bytes"):
        PreparedCorpus.open(REPO_ID, endpoint=hub.url, cache_dir=tmp_path / "cache")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["500", "short", "silent"])
def test_hub_faults_are_retried_then_stop_in_one_line_naming_shard_and_url(local, hub, tmp_path, kind):
    corpus = PreparedCorpus.open(REPO_ID, endpoint=hub.url, cache_dir=tmp_path / "cache", timeout=3)
    hub.fault = Fault(kind, times=2, seconds=1.2)
    assert corpus.rows("train", [0, 1]) == local.rows("train", [0, 1])  # after two failed attempts
    assert hub.fault.served == 2
    hub.fault = Fault(kind, seconds=30)
    began = time.monotonic()
    with pytest.raises(ShardReadError) as caught:
        corpus.rows("train", [local.num_rows("train") - 1])
    assert time.monotonic() - began < 3 + MARGIN  # the limit, not the silent server's 30 s
    message = str(caught.value)
    assert "\n" not in message and "data/train-00001-of-00002.parquet" in message
    assert f"hf://datasets/{REPO_ID}@" in message and hub.fault.served >= 2


def test_a_missing_hub_repo_or_revision_is_named(hub, tmp_path):
    with pytest.raises(FileNotFoundError, match="no Hub dataset repo user/nothing"):
        PreparedCorpus.open("user/nothing", endpoint=hub.url, cache_dir=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="has no revision 'v9'"):
        PreparedCorpus.open(f"hf://datasets/{REPO_ID}@v9", endpoint=hub.url, cache_dir=tmp_path / "cache")


# ----------------------------------------------------------------------------------------------------------------
# SIGKILL during a run that reads hf://, then resume: the weights of the same run from the local folder



@pytest.mark.slow
def test_sigkill_while_reading_hf_then_resume_gives_the_weights_of_the_local_run(folder, hub, tmp_path):
    from hfbert.pretrain import PretrainConfig, pretrain
    from hfbert.pretrain.checkpointing import list_checkpoints

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # bitwise comparison with the subprocesses' single-threaded kernels
    try:
        pretrain(PretrainConfig.from_dict(settings([folder], tmp_path / "local")))
    finally:
        torch.set_num_threads(threads)
    output_dir = tmp_path / "remote"
    config = tmp_path / "run.json"
    config.write_text(json.dumps(settings([f"hf://datasets/{REPO_ID}"], output_dir)), encoding="utf-8")
    env = hub.client_env(tmp_path / "home") | {"TOKENIZERS_PARALLELISM": "false"}
    env.pop("HFBERT_CACHE", None)  # the default cache of the machine, under HF_HOME
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(KILL_AFTER_CHECKPOINT), str(config),
                             f"checkpoint-{STEPS // 2:08d}"], capture_output=True, text=True, env=env, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert [step for step, _ in list_checkpoints(output_dir)] == [2, 4]
    config.write_text(json.dumps(settings([f"hf://datasets/{REPO_ID}"], output_dir, resume=True)),
                      encoding="utf-8")
    before = len(hub.requests)
    resumed = subprocess.run([sys.executable, "-c", textwrap.dedent(KILL_AFTER_CHECKPOINT), str(config), "none"],
                             capture_output=True, text=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    left, right = load_file(tmp_path / "local" / "model.safetensors"), load_file(output_dir / "model.safetensors")
    different = [name for name in left if not torch.equal(left[name], right[name])]
    assert left.keys() == right.keys() and not different, f"parameters differ bitwise: {different[:5]}"
    cached = (tmp_path / "home" / "hfbert" / "shards" / "ranges")
    assert any(cached.rglob("*-*"))  # the machine's cache, shared by the killed run and the resumed one
    assert not any(path.endswith(".parquet") and status == 200 for _, path, status in hub.requests[before:])


@pytest.mark.slow
def test_hfbert_pretrain_stops_with_one_line_when_the_hub_keeps_failing(hub, tmp_path):
    hub.fault = Fault("500")
    env = hub.client_env(tmp_path / "home") | {"TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-m", "hfbert.pretrain", "--prepared", f"hf://datasets/{REPO_ID}",
                           "--max_seq_length", "64", "--hub_timeout", "2", "--output_dir", str(tmp_path / "run")],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("hfbert pretrain: error: cannot read data/") and f"hf://datasets/{REPO_ID}@" in last
    assert "HTTP 500" in last and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["wrong bytes", "too few bytes"])
def test_hfbert_pretrain_stops_with_one_line_on_a_damaged_remote_shard(flaky, tmp_path, monkeypatch, capsys, damage):
    """Bytes of the right size but wrong (found by the page checksums while training) and answers one byte short
    (retried, then given up): one line naming the shard and the URL, exit status 1."""
    from hfbert.pretrain import main

    name = "/corpus/data/train-00000-of-00002.parquet"
    if damage == "wrong bytes":
        data = bytearray(flaky.cat_file(name))
        data[len(data) // 4] ^= 0xFF  # inside the first row group's pages
        flaky.pipe_file(name, bytes(data))
    else:
        flaky.reset(mode="short")
    monkeypatch.setenv(remote.CACHE_ENV, str(tmp_path / "cache"))
    status = main(["--prepared", "flaky://corpus", "--max_seq_length", "64", "--preset", "tiny", "--model",
                   json.dumps(TINY_MODEL), "--batch_size", "8", "--max_steps", "6", "--eval_steps", "6",
                   "--max_eval_examples", "8", "--hub_timeout", "2", "--progress_bar", "false", "--mixed_precision",
                   "no", "--next_sentence_prediction", "true", "--output_dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert status == 1 and err.count("\n") == 1, err
    assert err.startswith("hfbert pretrain: error: ") and ".parquet of flaky://corpus" in err
    if damage == "wrong bytes":
        assert "step " in err and "train-00000-of-00002.parquet" in err and "corrupt" in err
    else:
        assert "bytes instead of" in err and "attempt(s)" in err
