"""Next sentence prediction left to the data: a corpus of one-sentence documents (every NSP pair takes a random
segment B) trains MLM only, says so, and its card says the NSP head was not trained; a corpus of real documents
trains both, and --next_sentence_prediction overrides the choice either way."""

import gzip
import random

import pytest
import torch
from safetensors.torch import load_file
from test_pretrain import TINY_MODEL  # noqa: F401

from hfbert.data import prepare_corpus
from hfbert.pretrain import pretrain
from hfbert.pretrain.config import PretrainConfig
from hfbert.pretrain.corpora import BUILTIN_CORPUS

WORDS = "the a film movie plot was is good bad great dull fine long short story actors music ending".split()


@pytest.fixture(scope="module")
def snippets(tmp_path_factory):
    """Short reviews, one per document (a blank line between lines): NSP pairs are all random-next."""
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "." for _ in range(300)]
    folder = tmp_path_factory.mktemp("snippets")
    (folder / "reviews.txt").write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    return prepare_corpus([str(folder / "reviews.txt")], folder / "prepared", vocab_size=90, max_seq_length=32,
                          eval_fraction=0.1, seed=1, masking="dynamic")


@pytest.fixture(scope="module")
def chapters(tmp_path_factory):
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(400)]
    folder = tmp_path_factory.mktemp("chapters")
    (folder / "austen.txt").write_text("".join(lines), encoding="utf-8")
    return prepare_corpus([str(folder / "austen.txt")], folder / "prepared", vocab_size=400, max_seq_length=32,
                          input_layout="paragraphs", document_boundary="chapter", eval_fraction=0.2, seed=1,
                          masking="dynamic")


def run(prepared, output_dir, **overrides):
    values = {"prepared": [str(prepared)], "preset": "tiny", "model": dict(TINY_MODEL), "batch_size": 8,
              "max_steps": 3, "eval_steps": 3, "save_steps": 3, "max_time_minutes": None, "max_eval_examples": 8,
              "progress_bar": False, "report_to": ["jsonl"], "output_dir": str(output_dir),
              "fill_mask_text": "the film was [MASK].", "mixed_precision": "no", **overrides}
    config = PretrainConfig.from_dict(values)
    pretrain(config)
    return config, load_file(output_dir / "model.safetensors")


def test_one_sentence_documents_train_mlm_only(snippets, tmp_path, capsys):
    config, weights = run(snippets, tmp_path / "auto")
    assert config.next_sentence_prediction is False
    assert "next sentence prediction: off (100% of the training pairs" in capsys.readouterr().out
    assert "| NSP accuracy | not trained (MLM only) |" in (tmp_path / "auto" / "README.md").read_text()
    # Nothing but NSP reads the pooler: without its loss the pooler and the NSP head keep their first values.
    _, longer = run(snippets, tmp_path / "longer", max_steps=6, eval_steps=6, save_steps=6)
    for name in ("bert.pooler.dense.weight", "cls.seq_relationship.weight"):
        assert torch.equal(weights[name], longer[name]), name
    assert not torch.equal(weights["bert.encoder.layer.0.output.dense.weight"],
                           longer["bert.encoder.layer.0.output.dense.weight"])
    forced, _ = run(snippets, tmp_path / "forced", next_sentence_prediction=True)
    assert forced.next_sentence_prediction is True


def test_real_documents_train_both_unless_told(chapters, tmp_path):
    config, _ = run(chapters, tmp_path / "auto")
    assert config.next_sentence_prediction is True
    config, _ = run(chapters, tmp_path / "off", next_sentence_prediction=False)
    assert "| NSP accuracy | not trained (MLM only) |" in (tmp_path / "off" / "README.md").read_text()


def test_a_folder_prepared_before_the_instance_counts_trains_with_nsp(snippets, tmp_path):
    """An older prepared folder's manifest lacks the report's instance counts: it still opens and trains, and NSP is
    trained (the original), since nothing says its pairs are random."""
    import json
    import shutil

    older = tmp_path / "older"
    shutil.copytree(snippets, older)
    manifest = json.loads((older / "hfbert_prepare.json").read_text())
    del manifest["report"]["instances"]
    (older / "hfbert_prepare.json").write_text(json.dumps(manifest))
    config, _ = run(older, tmp_path / "run")
    assert config.next_sentence_prediction is True
