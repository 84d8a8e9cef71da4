"""Fixtures of the fine-tuning tests (hfbert.tasks, hfbert.recipes, hfbert.evaluation, hfbert.metrics and the bit-flip
robustness of a fine-tuned model). Real data and tokenizers come from tests/conftest.py."""

from pathlib import Path

import pytest
import torch

from helpers.evaluation import WORDS

CARD = "---\nlicense: apache-2.0\nlibrary_name: transformers\ntags:\n- hfbert\n---\n\n# tiny\n\nA tiny test model.\n"


@pytest.fixture(scope="module", autouse=True)
def _single_threaded(one_thread):
    """A recipe's own evaluation and a pipeline on the folder it wrote must compute the same numbers: one thread
    keeps the kernels (and their reduction order) the same across the runs a test compares."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A tiny pretrained-model folder (2 layers, hidden 32), as hfbert pretrain leaves one: weights, a tokenizer over
    the words of the tiny suites (helpers.evaluation), a card. Copy it before changing it."""
    import hfbert
    from hfbert.tokenization import SPECIAL_TOKENS, bert_tokenizer_from_vocab

    folder = tmp_path_factory.mktemp("model") / "tiny-bert"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n")
    bert_tokenizer_from_vocab(folder / "vocab.txt").save_pretrained(folder)
    torch.manual_seed(0)
    config = hfbert.HfBertConfig(vocab_size=len(SPECIAL_TOKENS) + len(WORDS), hidden_size=32, num_hidden_layers=2,
                                 num_attention_heads=4, intermediate_size=37, max_position_embeddings=64)
    hfbert.HfBertForPreTraining(config).save_pretrained(folder)
    (folder / "README.md").write_text(CARD)
    return folder
