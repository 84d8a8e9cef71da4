"""hfbert <-> stock transformers BERT conversion: every head, cls.* kept, lossless both ways, tokenizer checked."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import transformers

import hfbert
from hfbert.convert import HEADS, convert, main, read_tokenizer
from hfbert.model_source import load_any_bert
from hfbert.tokenization import SPECIAL_TOKENS, bert_tokenizer_from_vocab

from helpers.hub_server import BLOCK_HFBERT, run_client

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "home", "a", "big", "red", "##s", "##ed", ".", ",", "!"]
# Accents, CJK and a 150-character word (Google's limit is 200, the `tokenizers` default 100): a stock
# BertTokenizer rebuilt from vocab.txt would encode this differently from hfbert's tokenizer.
TEXT = "The big réd cats sat on the mat, 你 a dog ran home! " + "a" * 150


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def save_tiny(folder: Path, head: str, seed: int = 0, vocab=None, **config) -> Path:
    folder.mkdir(parents=True)
    vocab = vocab or [*SPECIAL_TOKENS, *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(seed)
    config = {"vocab_size": len(vocab), "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
              "intermediate_size": 37, "max_position_embeddings": 64, "hidden_act": "gelu_tanh"} | config
    getattr(hfbert, f"HfBert{head}")(hfbert.HfBertConfig(**config)).save_pretrained(folder)
    if set(SPECIAL_TOKENS) <= set(vocab):
        bert_tokenizer_from_vocab(folder / "vocab.txt").save_pretrained(folder)
    (folder / "README.md").write_text("# tiny\n")
    return folder


def inputs_for(head: str, ids: torch.Tensor) -> torch.Tensor:
    return ids.unsqueeze(1).expand(-1, 3, -1).contiguous() if head == "ForMultipleChoice" else ids


def outputs(model, ids: torch.Tensor) -> dict[str, list]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            return {k: v.tolist() for k, v in model(ids).items() if isinstance(v, torch.Tensor)}
    finally:
        torch.set_num_threads(threads)


LOAD_WITHOUT_HFBERT = BLOCK_HFBERT + """
import json, sys, torch
torch.set_num_threads(1)
import transformers
from transformers import AutoTokenizer
args = json.loads(sys.argv[1])
auto = {"Model": "AutoModel", "ForPreTraining": "AutoModelForPreTraining", "ForMaskedLM": "AutoModelForMaskedLM",
        "ForNextSentencePrediction": "AutoModelForNextSentencePrediction",
        "ForSequenceClassification": "AutoModelForSequenceClassification",
        "ForTokenClassification": "AutoModelForTokenClassification",
        "ForQuestionAnswering": "AutoModelForQuestionAnswering", "ForMultipleChoice": "AutoModelForMultipleChoice"}
out = {}
for head, folder in args["folders"].items():
    model = getattr(transformers, auto[head]).from_pretrained(folder).eval()
    ids = torch.tensor(args["ids"][head])
    with torch.no_grad():
        out[head] = {k: v.tolist() for k, v in model(ids).items() if isinstance(v, torch.Tensor)}
    out[head]["class"] = type(model).__name__
tokenizer = AutoTokenizer.from_pretrained(args["folders"]["ForPreTraining"])
out["tokens"] = tokenizer(args["text"])["input_ids"]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_head_to_transformers_and_back(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n", encoding="utf-8")
    ids = bert_tokenizer_from_vocab(tmp_path / "vocab.txt")(TEXT, return_tensors="pt")["input_ids"]
    expected, converted, all_ids = {}, {}, {}
    for seed, head in enumerate(HEADS):
        src = save_tiny(tmp_path / "hfbert" / head, head, seed)
        dst = tmp_path / "bert" / head
        if head == "ForPreTraining":
            assert main([str(src), str(dst)]) == 0  # the `hfbert convert` entry point
        else:
            convert(src, dst)
        config = json.loads((dst / "config.json").read_text())
        assert config["model_type"] == "bert" and config["architectures"] == [f"Bert{head}"]
        assert config["hidden_act"] == "gelu_new"  # tanh GELU under transformers' name
        assert "auto_map" not in config and not list(dst.glob("*.py"))
        assert json.loads((dst / "tokenizer_config.json").read_text())["tokenizer_class"] == "TokenizersBackend"

        back = convert(dst, tmp_path / "back" / head)
        assert folder_bytes(back) == folder_bytes(src)  # lossless: every file byte for byte, weights included

        head_ids = inputs_for(head, ids)
        expected[head] = outputs(getattr(hfbert, f"HfBert{head}").from_pretrained(src).eval(), head_ids)
        converted[head], all_ids[head] = str(dst), head_ids.tolist()

    keys = set((tmp_path / "bert" / "ForPreTraining").iterdir())
    assert {p.name for p in keys} >= {"config.json", "model.safetensors", "tokenizer.json", "README.md"}
    state = transformers.BertForPreTraining.from_pretrained(tmp_path / "bert" / "ForPreTraining").state_dict()
    assert {"cls.predictions.transform.dense.weight", "cls.predictions.bias", "cls.seq_relationship.weight"} <= set(
        state)

    out = run_client(LOAD_WITHOUT_HFBERT, dict(os.environ), tmp_path,
                     {"folders": converted, "ids": all_ids, "text": TEXT})
    for head in HEADS:
        assert out[head]["class"] == f"Bert{head}"
        for key, value in expected[head].items():
            torch.testing.assert_close(torch.tensor(out[head][key]), torch.tensor(value), rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{head} {key}: {m}")
    assert out["tokens"] == ids[0].tolist()


@pytest.mark.slow
def test_real_checkpoint_to_hfbert_and_back(minilm_path, tmp_path):
    """all-MiniLM-L6-v2 (a stock BertModel with real weights and the bert-base-uncased vocabulary)."""
    dst = convert(minilm_path, tmp_path / "hf")
    config = json.loads((dst / "config.json").read_text())
    assert config["model_type"] == "hfbert" and config["architectures"] == ["HfBertModel"] and "auto_map" in config
    assert (dst / "vocab.txt").read_bytes() == (minilm_path / "vocab.txt").read_bytes()
    assert read_tokenizer(dst).special_ids == {"unk_token": 100, "sep_token": 102, "pad_token": 0, "cls_token": 101,
                                               "mask_token": 103}

    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    batch = tokenizer(["Converting keeps every weight.", "A short one."], padding=True, return_tensors="pt")
    reference = transformers.BertModel.from_pretrained(minilm_path).eval()
    with torch.no_grad():
        want = reference(**batch).last_hidden_state
        got = hfbert.HfBertModel.from_pretrained(dst).eval()(**batch).last_hidden_state
        loaded = load_any_bert(minilm_path).eval()(**batch).last_hidden_state
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert type(load_any_bert(dst)).__name__ == "HfBertModel"
    torch.testing.assert_close(loaded, want, rtol=1e-4, atol=1e-5)

    back = convert(dst, tmp_path / "bert")
    again = transformers.BertModel.from_pretrained(back).state_dict()
    assert again.keys() == reference.state_dict().keys()
    assert all(torch.equal(again[k], v) for k, v in reference.state_dict().items())
    original = json.loads((minilm_path / "config.json").read_text())
    restored = json.loads((back / "config.json").read_text())
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                "hidden_act", "layer_norm_eps", "pad_token_id", "type_vocab_size", "max_position_embeddings"):
        assert restored[key] == original[key], key


def test_convert_refuses_bad_input(tmp_path, capsys):
    good = save_tiny(tmp_path / "good", "ForPreTraining")

    with pytest.raises(ValueError, match="ids >= 19 would fall outside"):
        convert(save_tiny(tmp_path / "small", "Model", vocab_size=19), tmp_path / "o1")
    with pytest.raises(ValueError, match="pad_token_id is 3 but the tokenizer's pad token has id 0"):
        convert(save_tiny(tmp_path / "pad", "Model", pad_token_id=3), tmp_path / "o2")
    no_mask = save_tiny(tmp_path / "nomask", "Model", vocab=["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS])
    with pytest.raises(ValueError, match=r"lacks special tokens \{'mask_token': '\[MASK\]'\}"):
        convert(no_mask, tmp_path / "o3")
    with pytest.raises(ValueError, match="weights the ForMaskedLM head does not use.*cls.seq_relationship"):
        convert(good, tmp_path / "o4", head="ForMaskedLM")  # would drop the NSP head
    with pytest.raises(ValueError, match="no weights for .* ForSequenceClassification head"):
        convert(good, tmp_path / "o5", head="ForSequenceClassification")  # would invent a classifier
    with pytest.raises(ValueError, match="already a hfbert folder"):
        convert(good, tmp_path / "o6", to="hfbert")
    with pytest.raises(ValueError, match="same folder"):
        convert(good, good)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        convert(good, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "gpt2" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match="model_type 'gpt2'"):
        convert(tmp_path / "gpt2", tmp_path / "o7")
    relative = convert(good, tmp_path / "bert")
    config = json.loads((relative / "config.json").read_text()) | {"position_embedding_type": "relative_key"}
    (relative / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no hfbert equivalent.*relative_key"):
        convert(relative, tmp_path / "o8")
    assert not any((tmp_path / f"o{i}").exists() for i in range(1, 9))  # nothing written on refusal

    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path / "missing"), str(tmp_path / "o9")])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"hfbert convert: error: source folder {tmp_path / 'missing'} does not exist\n"
    with pytest.raises(SystemExit) as exc:
        main([str(good), str(tmp_path / "o9"), "--head", "ForTranslation"])
    assert exc.value.code == 2 and "--head must be one of Model, ForPreTraining" in capsys.readouterr().err
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"model_type": "bert",\n "vocab_size": }')
    assert main([str(tmp_path / "broken"), str(tmp_path / "o9")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hfbert convert: error: {tmp_path / 'broken' / 'config.json'} is not valid JSON")
    assert "line 2" in err and err.count("\n") == 1
    assert main([str(good), str(tmp_path / "full")]) == 2  # occupied destination: one line, nothing replaced
    assert "not empty" in capsys.readouterr().err and (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "o9").exists()


# --- to Google's format: its "gelu" is the tanh approximation, and it has no task heads -----------------------------
def probe_outputs(model) -> dict[str, torch.Tensor]:
    from hfbert.convert import _probe_ids

    with torch.no_grad():
        return {k: v for k, v in model.eval()(input_ids=_probe_ids(model)).items() if isinstance(v, torch.Tensor)}


def test_an_exact_gelu_model_goes_to_google_only_when_the_tanh_approximation_is_accepted(tmp_path, capsys):
    from hfbert.google_checkpoint import google_model

    erf = save_tiny(tmp_path / "erf", "ForPreTraining", hidden_act="gelu", initializer_range=0.5)
    capsys.readouterr()
    assert main([str(erf), str(tmp_path / "refused"), "--to", "google"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"hfbert convert: error: {erf}: hidden_act 'gelu' is the exact "
                                                   "(erf) GELU"), err
    assert "Google's BERT does not have: its 'gelu' is the tanh approximation" in err and "--google_gelu tanh" in err
    assert not (tmp_path / "refused").exists()
    with pytest.raises(ValueError, match="exact \\(erf\\) GELU"):
        convert(erf, tmp_path / "refused", to="google")
    with pytest.raises(ValueError, match=r"google_gelu applies to .*\(--to google\) only"):
        convert(erf, tmp_path / "refused", google_gelu="tanh")

    assert main([str(erf), str(tmp_path / "google"), "--to", "google", "--google_gelu", "tanh"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("note:", "warning:"))]
    assert len(notes) == 1 and notes[0].startswith("note: the exact (erf) GELU is written as Google's 'gelu', the "
                                                   "tanh approximation: on a probe batch (2 x 16 tokens)"), notes
    printed = float(notes[0].rsplit(" ", 1)[1])
    assert json.loads((tmp_path / "google" / "bert_config.json").read_text())["hidden_act"] == "gelu"
    # The number printed is what a user of the Google folder sees: its model (tanh) against the exact one.
    back, _ = google_model(tmp_path / "google")
    assert back.config.hidden_act == "gelu_tanh"
    exact = probe_outputs(hfbert.HfBertForPreTraining.from_pretrained(erf))
    shift = max(float((exact[k] - v).abs().max()) for k, v in probe_outputs(back).items())
    assert 1e-5 < shift and printed == pytest.approx(shift, rel=0.05)


def test_a_tanh_gelu_model_goes_to_google_silently(tmp_path, capsys):
    tanh = save_tiny(tmp_path / "tanh", "ForMaskedLM")  # gelu_tanh
    stock = convert(tanh, tmp_path / "bert")  # transformers calls it gelu_new
    assert json.loads((stock / "config.json").read_text())["hidden_act"] == "gelu_new"
    capsys.readouterr()
    for source in (tanh, stock):
        assert main([str(source), str(tmp_path / f"google-{source.name}"), "--to", "google"]) == 0
        captured = capsys.readouterr()
        assert not [line for line in captured.err.splitlines() if line.startswith(("note:", "warning:"))], captured.err
        assert captured.out == f"wrote {tmp_path / f'google-{source.name}'}\n"


@pytest.mark.parametrize("head, names", [
    ("ForSequenceClassification", "classifier.bias, classifier.weight"),
    ("ForTokenClassification", "classifier.bias, classifier.weight"),
    ("ForQuestionAnswering", "qa_outputs.bias, qa_outputs.weight"),
    ("ForMultipleChoice", "classifier.bias, classifier.weight"),
    ("ForNextSentencePrediction", None),
    ("Model", None),
])
def test_a_task_head_google_cannot_hold_is_named_in_one_warning(tmp_path, capsys, head, names):
    folder = save_tiny(tmp_path / "model", head)
    capsys.readouterr()
    assert main([str(folder), str(tmp_path / "google"), "--to", "google"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("note:", "warning:"))]
    if names is None:
        assert not said
    else:
        assert said == [f"warning: Google's checkpoint layout has no place for the {head} head: {names} are not "
                        "written (the encoder is)"]
    assert (tmp_path / "google" / "bert_model.ckpt.index").is_file()
