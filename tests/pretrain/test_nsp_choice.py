"""Next sentence prediction where it can be learned (hfbert.pretrain.nsp_choice): a corpus of one-sentence documents
(every NSP pair takes a random segment B) trains MLM only, says so, and its card says the NSP head was not trained; a
corpus of real documents trains both; the choice is made per phase from that phase's training rows (counted by the
main process alone); NSP whose held-out accuracy stays at the majority baseline stops; --next_sentence_prediction
overrides the choice either way."""

import gzip
import json
import random
import types

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import hfbert.pretrain.checkpointing
from hfbert.data import PreparedCorpus, prepare_corpus
from hfbert.pretrain import PretrainCallback, pretrain
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.pretrain.corpora import BUILTIN_CORPUS
from hfbert.pretrain.nsp_choice import binomial_tail, check_held_out, choose_nsp, random_next_share

from helpers.pretraining import TINY_MODEL

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


def run(prepared, output_dir, callbacks=None, **overrides):
    values = {"prepared": [str(prepared)] if prepared else None, "preset": "tiny", "model": dict(TINY_MODEL),
              "batch_size": 8, "max_steps": 3, "eval_steps": 3, "save_steps": 3, "max_time_minutes": None,
              "max_eval_examples": 8, "progress_bar": False, "report_to": ["jsonl"], "output_dir": str(output_dir),
              "fill_mask_text": "the film was [MASK].", "mixed_precision": "no", **overrides}
    config = PretrainConfig.from_dict(values)
    pretrain(config, callbacks=callbacks)
    return config, load_file(output_dir / "model.safetensors")


class Pooler(PretrainCallback):
    """The pooler's weight after each step (nothing but the NSP loss moves it)."""

    def __init__(self):
        self.after: dict[int, torch.Tensor] = {}

    def on_train_begin(self, step, model, **kwargs):
        self.after[step] = model.bert.pooler.dense.weight.detach().clone()

    def on_step_end(self, step, model, control, **kwargs):
        self.after[step] = model.bert.pooler.dense.weight.detach().clone()

    def moved(self, first: int, last: int) -> bool:
        return not torch.equal(self.after[first], self.after[last])


@pytest.mark.slow
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


@pytest.mark.slow
def test_real_documents_train_both_unless_told(chapters, tmp_path):
    config, _ = run(chapters, tmp_path / "auto")
    assert config.next_sentence_prediction is True
    config, _ = run(chapters, tmp_path / "off", next_sentence_prediction=False)
    assert "| NSP accuracy | not trained (MLM only) |" in (tmp_path / "off" / "README.md").read_text()


def test_a_folder_prepared_before_the_instance_counts_is_decided_from_its_rows(snippets, tmp_path):
    """An older prepared folder's manifest lacks the report's instance counts: it still opens and trains, and its
    training rows decide NSP as a newer folder's do."""
    import shutil

    older = tmp_path / "older"
    shutil.copytree(snippets, older)
    manifest = json.loads((older / "hfbert_prepare.json").read_text())
    del manifest["report"]["instances"]
    (older / "hfbert_prepare.json").write_text(json.dumps(manifest))
    config, _ = run(older, tmp_path / "run")
    assert config.next_sentence_prediction is False


# ----------------------------------------------------------------------------------------------------------------
# Decided per phase, from that phase's training rows


def long_sentence_documents(path, documents=60, sentences=6, seed=0):
    """Documents of sentences longer than a 32-token chunk: at length 32 every chunk is one sentence and takes a
    random segment B; at length 128 chunks hold several sentences, and about half of the pairs are real."""
    rng = random.Random(seed)
    text = "\n\n".join("\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(34, 40))) + "."
                                  for _ in range(sentences)) for _ in range(documents))
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_nsp_is_decided_per_phase_from_its_own_rows(tmp_path, capsys):
    """Random pairs at length 32, real ones at 128: NSP is off in the 32 phase and on in the 128 phase (a choice read
    from the first phase's folder trained MLM only for the whole run)."""
    source = long_sentence_documents(tmp_path / "long.txt")
    pooler = Pooler()
    config, _ = run(None, tmp_path / "run", callbacks=[pooler], input=[str(source)], vocab_size=90,
                    eval_fraction=0.2, max_steps=6, eval_steps=100, save_steps=100,
                    phases=[{"max_seq_length": 32, "steps": 3}, {"max_seq_length": 128, "steps": 3}])
    assert "next sentence prediction: off at length 32 (100% of the training pairs" in capsys.readouterr().out
    assert not pooler.moved(0, 3)  # no NSP loss at length 32
    assert pooler.moved(3, 6)  # NSP at length 128
    assert config.next_sentence_prediction is None  # neither on nor off for the whole run
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["next_sentence_prediction"] is True
    card = (tmp_path / "run" / "README.md").read_text()
    assert "- Next sentence prediction: off at length 32 (100% of the training pairs" in card
    lines = [json.loads(line) for line in (tmp_path / "run" / "runs" / "metrics.jsonl").read_text().splitlines()]
    for line in (r for r in lines if "mlm_loss" in r and "loss" in r):  # the training loss counts NSP where trained
        trained = line["max_seq_length"] == 128
        assert ("nsp_loss" in line, "nsp_accuracy" in line) == (trained, trained), line  # logged only there
        assert line["loss"] == pytest.approx(line["mlm_loss"] + (line["nsp_loss"] if trained else 0.0)), line


@pytest.mark.slow
def test_only_training_rows_are_counted(chapters, tmp_path):
    """The share of random-B pairs is that of the training rows: a corpus whose report (training and held-out rows
    together) said 95% random still trains NSP when its training rows are real pairs."""
    corpus = PreparedCorpus.open(chapters)
    train = corpus.read_arrays("train", np.arange(corpus.num_rows("train")))["next_sentence_label"]
    held_out = corpus.read_arrays("validation", np.arange(corpus.num_rows("validation")))["next_sentence_label"]
    assert random_next_share(corpus) == train.mean() != held_out.mean()
    assert train.mean() < 0.9
    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(chapters, edited)
    manifest = json.loads((edited / "hfbert_prepare.json").read_text())
    manifest["report"]["instances"]["random_next_fraction"] = 0.95
    (edited / "hfbert_prepare.json").write_text(json.dumps(manifest))
    config, _ = run(edited, tmp_path / "run", eval_steps=100)
    assert config.next_sentence_prediction is True


class Groups:
    """A corpus of 200 row groups of 10 rows: an odd one holds 9 random-next pairs, an even one ``even``."""

    def __init__(self, even=8):
        self.even, self.read = even, 0

    def blocks(self, split):
        assert split == "train"
        return np.full(200, 10)

    def read_arrays(self, split, indices):
        assert split == "train" and len(indices) == 10
        group = int(indices[0]) // 10
        self.read += 1
        return {"next_sentence_label": (np.arange(10) < (9 if group % 2 else self.even)).astype(np.int8)}


def test_a_many_group_corpus_is_counted_on_groups_spread_over_it():
    groups = Groups()
    assert random_next_share(groups) == pytest.approx(0.85, abs=0.01)
    assert groups.read == 64


def test_only_the_main_process_counts_the_labels(monkeypatch):
    """In a run of two processes the main process reads the labels and sends its choice's counts; the other reads
    none (given a corpus that would choose otherwise, it still follows the main process)."""
    sent = []

    def send(accelerator, obj, source):  # the main process's broadcast, in one Python process
        if accelerator.is_main_process:
            sent.append(obj)
        return sent[0]

    monkeypatch.setattr(hfbert.pretrain.checkpointing, "_send", send)
    processes = [types.SimpleNamespace(is_main_process=rank == 0, num_processes=2) for rank in (0, 1)]
    corpora = [Groups(even=8), Groups(even=10)]  # 85% random-next: NSP trains; 95%: it would not
    data = [types.SimpleNamespace(by_length={32: types.SimpleNamespace(corpus=corpus)}) for corpus in corpora]
    choices = [choose_nsp(PretrainConfig(), data[rank], [32], say=lambda line: None, accelerator=processes[rank])
               for rank in (0, 1)]
    assert choices[0] == choices[1] and choices[0].by_length == {32: True}
    assert [corpus.read for corpus in corpora] == [64, 0]


# ----------------------------------------------------------------------------------------------------------------
# One document


def test_a_file_without_blank_lines_is_one_document_and_says_so(tmp_path):
    """One item per line and no blank line: the pipeline reads one document, holds none out and draws NSP's random
    segments from it; the run stops before any work with one line that says so."""
    rng = random.Random(0)
    (tmp_path / "items.txt").write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(8)) + "."
                                                  for _ in range(300)) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="holds a single document.*without blank lines is one document"):
        run(None, tmp_path / "run", input=[str(tmp_path / "items.txt")], vocab_size=90, max_seq_length=32)


# ----------------------------------------------------------------------------------------------------------------
# Held-out NSP at the majority baseline


@pytest.fixture(scope="module")
def unrelated(tmp_path_factory):
    """Unrelated random sentences grouped four to a document: about half of the pairs are real, but a real next
    sentence is as unrelated to A as a random one, so NSP has nothing to learn but the label prior."""
    rng = random.Random(3)
    documents = ["\n".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "." for _ in range(4))
                 for _ in range(600)]
    folder = tmp_path_factory.mktemp("unrelated")
    (folder / "lines.txt").write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    return prepare_corpus([str(folder / "lines.txt")], folder / "prepared", vocab_size=90, max_seq_length=32,
                          eval_fraction=0.3, seed=1, masking="dynamic")


@pytest.mark.slow
def test_nsp_at_the_majority_baseline_stops(unrelated, tmp_path, capsys):
    pooler = Pooler()
    config, _ = run(unrelated, tmp_path / "run", callbacks=[pooler], max_steps=8, eval_steps=4, save_steps=8,
                    max_eval_examples=200)
    assert config.next_sentence_prediction is True  # the data keeps it: its pairs are not all random
    out = capsys.readouterr().out
    assert out.count("next sentence prediction: stopped at step 4, for the rest of the phase at length 32: held-out "
                     "NSP accuracy") == 1
    assert pooler.moved(0, 4) and not pooler.moved(4, 8)  # NSP trained until the check, not after
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    (check,) = metrics["nsp_checks"]
    assert (check["step"], check["stopped"], check["learned"]) == (4, True, False)
    assert check["p_value"] > 0.01 and check["pairs"] == 200
    assert metrics["eval_loss"] == pytest.approx(metrics["eval_mlm_loss"])  # NSP no longer trained
    assert "- Next sentence prediction: stopped at step 4" in (tmp_path / "run" / "README.md").read_text()
    import hfbert  # noqa: F401  (registers the model type)
    from transformers import AutoModelForPreTraining

    assert AutoModelForPreTraining.from_pretrained(tmp_path / "run").cls.seq_relationship.out_features == 2


@pytest.mark.slow
def test_nsp_asked_for_trains_on_and_says_it_learns_nothing(unrelated, tmp_path, capsys):
    pooler = Pooler()
    run(unrelated, tmp_path / "run", callbacks=[pooler], max_steps=8, eval_steps=4, save_steps=8,
        max_eval_examples=200, next_sentence_prediction=True)
    out = capsys.readouterr().out
    assert out.count("is not above the majority baseline") == 1
    assert "trained on, as --next_sentence_prediction true asks" in out
    assert pooler.moved(4, 8)
    assert "trained on, as --next_sentence_prediction true asks" in (tmp_path / "run" / "README.md").read_text()


def test_the_held_out_check_is_a_one_sided_binomial_test():
    assert binomial_tail(0, 10, 0.3) == 1.0 and binomial_tail(11, 10, 0.3) == 0.0
    assert binomial_tail(10, 10, 0.5) == pytest.approx(0.5 ** 10)
    assert binomial_tail(8, 10, 0.5) == pytest.approx(56 / 1024)
    # 1,000 held-out pairs at a 0.507 baseline: 0.504 learned nothing, 0.560 did.
    assert check_held_out(504, 1000, 0.507)["learned"] is False
    assert check_held_out(560, 1000, 0.507)["learned"] is True
    # Too few pairs to see an accuracy 10 points above the baseline: not checked.
    assert check_held_out(5, 5, 0.5) is None and check_held_out(16, 24, 0.667) is None
    assert check_held_out(66, 132, 0.5) is not None and check_held_out(66, 131, 0.5) is None


# ----------------------------------------------------------------------------------------------------------------
# The held-out loss


@pytest.mark.slow
def test_the_held_out_loss_leaves_out_an_nsp_head_not_trained(snippets, tmp_path):
    run(snippets, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["eval_nsp_loss"] > 0.01
    assert metrics["eval_loss"] == pytest.approx(metrics["eval_mlm_loss"])
