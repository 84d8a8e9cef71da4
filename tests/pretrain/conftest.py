"""Fixtures of the pretraining tests (hfbert.pretrain: the job, its data, checkpoints and recovery, the trackers, many
processes). The tiny corpus and its prepared folders (``corpus``, ``prepared``) come from tests/conftest.py, the run
settings and the comparisons of two runs from tests/helpers/pretraining.py."""

import pytest

from hfbert.data import prepare_corpus

from helpers.pretraining import write_corpus_head


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """Runs here are compared bitwise with runs in subprocesses, which compute with single-threaded kernels."""


@pytest.fixture(scope="module")
def prepared_32(tmp_path_factory):
    """The first 300 lines of the shipped corpus prepared at length 32 (a vocabulary of 300): the quickest real
    run, for tests of the loop rather than of what it learns."""
    root = tmp_path_factory.mktemp("length-32")
    corpus = write_corpus_head(root / "austen_head.txt", lines=300)
    return prepare_corpus([str(corpus)], root / "length-32", vocab_size=300, max_seq_length=32, masking="dynamic",
                          input_layout="paragraphs", document_boundary="chapter", eval_fraction=0.2, seed=42)
