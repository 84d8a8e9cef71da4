"""Fixtures of the fine-tuning tests (hfbert.tasks, hfbert.recipes, hfbert.evaluation, hfbert.metrics and the bit-flip
robustness of a fine-tuned model). Real data and tokenizers come from tests/conftest.py."""

import pytest


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """A recipe's own evaluation and a pipeline on the folder it wrote must compute the same numbers: one thread
    keeps the kernels (and their reduction order) the same across the runs a test compares."""
