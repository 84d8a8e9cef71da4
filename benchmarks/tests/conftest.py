"""The benchmarks' tests: offline and quiet, as the product's. ``benchmarks/pytest.ini`` puts benchmarks/ on the
import path, as running ``python benchmarks/NAME.py`` does, so the tests import the benchmarks by the same names."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(0)
