"""Google's original checkpoints, read without TensorFlow: the committed fixture (made by
tests/fixtures/make_google_fixture.py with bert-tensorflow 1.0.4's modeling.py and run_pretraining.py heads, see
tests/fixtures/README.md) reproduces the original's outputs and those of a float64 numpy forward pass, converts to
hfbert and transformers and back bit for bit, and every kind of damage stops `hfbert convert` with one line and exit
status 2, leaving nothing behind."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from hfbert import HfBertForPreTraining
from hfbert.convert import main as convert_main
from hfbert.google_checkpoint import google_to_hfbert_name, hfbert_to_google_name, read_google_checkpoint
from hfbert.model_source import locate, source_tokenizer
from hfbert.tf_checkpoint import list_variables, read_checkpoint, write_checkpoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOOGLE = FIXTURES / "google_bert_tiny"
PADDED = FIXTURES / "google_bert_tiny_padded"
EXPECTED = np.load(GOOGLE / "expected.npz", allow_pickle=False)


def original_outputs(model) -> dict[str, np.ndarray]:
    """The outputs Google's script saved, computed by an hfbert (or transformers) pretraining model."""
    ids, mask, types = (torch.tensor(EXPECTED[k]).long() for k in ("input_ids", "input_mask", "token_type_ids"))
    with torch.no_grad():
        out = model.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
        hidden = out.last_hidden_state
        positions = torch.tensor(EXPECTED["masked_lm_positions"]).long()
        picked = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        return {"sequence_output": hidden.numpy(), "pooled_output": out.pooler_output.numpy(),
                "mlm_logits": model.cls.predictions(picked.reshape(-1, hidden.shape[-1])).numpy(),
                "nsp_logits": model.cls.seq_relationship(out.pooler_output).numpy()}


def assert_original(outputs: dict[str, np.ndarray]) -> None:
    for key, value in outputs.items():
        np.testing.assert_allclose(value, EXPECTED[key], atol=1e-5, rtol=0, err_msg=key)


def convert(*args, capsys=None) -> int:
    return convert_main([str(a) for a in args])


def test_every_google_variable_maps_to_an_hfbert_parameter_and_back():
    model = HfBertForPreTraining(read_google_checkpoint(GOOGLE).config)
    names = [n for n in list_variables(str(GOOGLE / "bert_model.ckpt")) if "adam" not in n and n != "global_step"]
    mapped = {google_to_hfbert_name(n)[0] for n in names}
    tied = set(model._tied_weights_keys)
    assert mapped == set(model.state_dict()) - tied  # every parameter, nothing twice
    for name in names:
        ours, transposed = google_to_hfbert_name(name)
        assert hfbert_to_google_name(ours) == (name, transposed)
        assert transposed == name.endswith("/kernel")
    assert google_to_hfbert_name("bert/encoder/layer_0/attention/self/query/adam_m") is None


@pytest.mark.parametrize("folder", [GOOGLE, PADDED])
def test_the_google_checkpoint_reproduces_the_original_code_within_1e_5(folder):
    source = locate(folder)
    assert source.format == "google"
    checkpoint = read_google_checkpoint(folder)
    assert checkpoint.skipped == 2 * 46 + 1  # adam_m and adam_v of every variable, global_step
    assert checkpoint.config.hidden_act == "gelu_tanh"  # Google's gelu is the tanh approximation
    assert bool(checkpoint.notes) == (folder == PADDED)  # NVIDIA-style padding rows dropped, and said so
    model = HfBertForPreTraining(checkpoint.config).eval()
    missing, unexpected = model.load_state_dict(checkpoint.state_dict, strict=False)
    assert set(missing) <= set(model._tied_weights_keys) and not unexpected
    assert_original(original_outputs(model))
    tokenizer, warnings = source_tokenizer(source)
    assert not warnings
    tokens, ids = EXPECTED["tokens"].tolist(), EXPECTED["input_ids"].tolist()
    masked = {(r, int(p)) for r, row in enumerate(EXPECTED["masked_lm_positions"]) for p in row}
    assert all(tokenizer.convert_tokens_to_ids(t) == ids[r][p] for r, row in enumerate(tokens)  # Google's ids
               for p, t in enumerate(row) if t and (r, p) not in masked)
    words = set(tokenizer.tokenize(" ".join(map(str, [*EXPECTED["text_a"], *EXPECTED["text_b"]]))))
    assert {t for row in tokens for t in row if t and not t.startswith("[")} <= words  # Google's WordPiece pieces


def test_google_to_hfbert_to_google_is_bitwise_and_transformers_reads_the_conversion(tmp_path, capsys):
    assert convert(GOOGLE, tmp_path / "hfbert") == 0
    assert convert(tmp_path / "hfbert", tmp_path / "google", "--to", "google") == 0
    original = read_checkpoint(GOOGLE / "bert_model.ckpt")
    back = read_checkpoint(tmp_path / "google" / "bert_model.ckpt")
    model_vars = {k: v for k, v in original.items() if "adam" not in k and k != "global_step"}
    assert back.keys() == model_vars.keys()
    assert all(back[k].dtype == v.dtype and back[k].tobytes() == v.tobytes() for k, v in model_vars.items())
    for name in ("bert_config.json", "vocab.txt"):
        assert (tmp_path / "google" / name).read_bytes() == (GOOGLE / name).read_bytes()
    # and once more: the written checkpoint converts to the same hfbert weights
    assert convert(tmp_path / "google", tmp_path / "again") == 0
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == \
        (tmp_path / "hfbert" / "model.safetensors").read_bytes()

    hf = transformers.AutoModelForPreTraining.from_pretrained(tmp_path / "hfbert").eval()
    assert type(hf).__name__ == "HfBertForPreTraining"
    assert_original(original_outputs(hf))
    assert convert(GOOGLE, tmp_path / "bert", "--to", "transformers") == 0
    stock = transformers.BertForPreTraining.from_pretrained(tmp_path / "bert").eval()
    assert_original(original_outputs(stock))
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hfbert")
    assert tokenizer.convert_tokens_to_ids("[MASK]") == 8  # Google's ids, read from vocab.txt


def damaged(tmp_path: Path, how: str) -> Path:
    folder = tmp_path / how
    shutil.copytree(GOOGLE, folder)
    index, data = folder / "bert_model.ckpt.index", folder / "bert_model.ckpt.data-00000-of-00001"
    if how == "truncated-data":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif how == "corrupt-index":
        raw = bytearray(index.read_bytes())
        raw[40] ^= 0xFF
        index.write_bytes(bytes(raw))
    elif how == "crc-mismatch":
        raw = bytearray(data.read_bytes())
        raw[2] ^= 0x01  # in the first variable, bert/embeddings/LayerNorm/beta
        data.write_bytes(bytes(raw))
    elif how == "shape-mismatch":
        config = json.loads((folder / "bert_config.json").read_text())
        config["intermediate_size"] = 48
        (folder / "bert_config.json").write_text(json.dumps(config))
    elif how == "missing-vocab":
        (folder / "vocab.txt").unlink()
    elif how == "vocab-size":
        (folder / "vocab.txt").write_text((folder / "vocab.txt").read_text() + "extra\n")
    elif how == "unknown-variable":
        tensors = read_checkpoint(GOOGLE / "bert_model.ckpt")
        tensors["bert/encoder/layer_0/adapter/dense/kernel"] = np.zeros((2, 2), np.float32)
        for path in (index, data):
            path.unlink()
        write_checkpoint(folder / "bert_model.ckpt", tensors)
    return folder


@pytest.mark.parametrize("how, said", [
    ("truncated-data", "runcated"), ("corrupt-index", "orrupt"), ("crc-mismatch", "crc"),
    ("shape-mismatch", "shape"), ("missing-vocab", "vocab.txt"), ("vocab-size", "vocab_size 101"),
    ("unknown-variable", "bert/encoder/layer_0/adapter/dense/kernel"),
])
def test_a_damaged_google_folder_stops_with_one_line_and_leaves_nothing(tmp_path, capsys, how, said):
    folder = damaged(tmp_path, how)
    assert convert(folder, tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("hfbert convert: error: ") and said in err, err
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.*"))  # no loadable half-output


def test_casing_comes_from_the_vocabulary_and_a_contradicting_flag_warns(tmp_path):
    folder = tmp_path / "cased"
    shutil.copytree(GOOGLE, folder)
    words = [f"Word{i}" for i in range(30)]
    with (folder / "vocab.txt").open("a", encoding="utf-8") as handle:
        handle.write("".join(f"{w}\n" for w in words))
    config = json.loads((folder / "bert_config.json").read_text())
    (folder / "bert_config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 30}))
    source = locate(folder)
    cased, warnings = source_tokenizer(source)
    assert not warnings and cased.tokenize("Word3") == ["Word3"]
    lowered, warnings = source_tokenizer(source, do_lower_case=True)
    assert lowered.tokenize("Word3") != ["Word3"]
    assert len(warnings) == 1 and "cased vocabulary" in warnings[0]
    uncased, warnings = source_tokenizer(locate(GOOGLE))
    assert not warnings and uncased.tokenize("The") == ["the"]


def test_the_recipes_and_load_any_bert_take_a_google_folder_directly():
    from hfbert.model_source import load_any_bert
    from hfbert.tasks.loading import load_model, load_tokenizer

    classifier = load_model("sequence-classification", "hfbert", str(GOOGLE), num_labels=3).eval()
    tokenizer = load_tokenizer(str(GOOGLE))
    batch = tokenizer(["the quick brown fox", "she was running"], padding=True, return_tensors="pt")
    assert classifier(**batch).logits.shape == (2, 3)
    pretrained = load_any_bert(GOOGLE).eval()
    assert type(pretrained).__name__ == "HfBertForPreTraining"
    assert torch.equal(classifier.bert.encoder.layer[1].output.dense.weight,
                       pretrained.bert.encoder.layer[1].output.dense.weight)


# ----------------------------------------------------------------------------------------------------------------
# A third computation, sharing no code with either: Google's graph written out in float64 numpy


def numpy_forward(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The fixture's BERT and pretraining heads as Google's modeling.py and run_pretraining.py compute them, in
    float64, from the checkpoint's variables under their Google names (B batch, T length, N heads, H head size)."""
    w = {name: value.astype(np.float64) for name, value in weights.items()}
    config = json.loads((GOOGLE / "bert_config.json").read_text())
    heads = config["num_attention_heads"]

    def dense(x, scope):
        return x @ w[f"{scope}/kernel"] + w[f"{scope}/bias"]

    def layer_norm(x, scope):
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * w[f"{scope}/gamma"] + w[f"{scope}/beta"]

    def gelu(x):  # the tanh form of Google's modeling.py
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    def split(x):  # (B, T, D) -> (B, N, T, H)
        return x.reshape(*x.shape[:2], heads, -1).transpose(0, 2, 1, 3)

    ids, mask, types = EXPECTED["input_ids"], EXPECTED["input_mask"], EXPECTED["token_type_ids"]
    length = ids.shape[1]
    x = (w["bert/embeddings/word_embeddings"][ids] + w["bert/embeddings/token_type_embeddings"][types]
         + w["bert/embeddings/position_embeddings"][:length])
    out = {"embedding_output": layer_norm(x, "bert/embeddings/LayerNorm")}
    x, layers, adder = out["embedding_output"], [], (1.0 - mask[:, None, None, :]) * -10000.0  # (B, 1, 1, T)
    for i in range(config["num_hidden_layers"]):
        scope = f"bert/encoder/layer_{i}"
        q, k, v = (split(dense(x, f"{scope}/attention/self/{name}")) for name in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + adder  # (B, N, T, T)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        context = (probs / probs.sum(-1, keepdims=True)) @ v  # (B, N, T, H)
        context = context.transpose(0, 2, 1, 3).reshape(x.shape)  # (B, T, D)
        x = layer_norm(dense(context, f"{scope}/attention/output/dense") + x, f"{scope}/attention/output/LayerNorm")
        hidden = gelu(dense(x, f"{scope}/intermediate/dense"))
        x = layer_norm(dense(hidden, f"{scope}/output/dense") + x, f"{scope}/output/LayerNorm")
        layers.append(x)
    out |= {"all_encoder_layers": np.stack(layers), "sequence_output": x,
            "pooled_output": np.tanh(dense(x[:, 0], "bert/pooler/dense"))}
    rows = np.arange(len(ids))[:, None] * length + EXPECTED["masked_lm_positions"]  # flat positions, row by row
    picked = x.reshape(-1, x.shape[-1])[rows.reshape(-1)]
    transformed = layer_norm(gelu(dense(picked, "cls/predictions/transform/dense")),
                             "cls/predictions/transform/LayerNorm")
    out["mlm_logits"] = transformed @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    out["nsp_logits"] = out["pooled_output"] @ w["cls/seq_relationship/output_weights"].T \
        + w["cls/seq_relationship/output_bias"]
    return out


def test_a_float64_numpy_forward_agrees_with_the_original_and_with_hfbert():
    reference = numpy_forward(read_checkpoint(GOOGLE / "bert_model.ckpt"))
    for key in ("embedding_output", "all_encoder_layers", "sequence_output", "pooled_output", "mlm_logits",
                "nsp_logits"):
        np.testing.assert_allclose(reference[key], EXPECTED[key], atol=2e-6, rtol=0, err_msg=key)
    checkpoint = read_google_checkpoint(GOOGLE)
    model = HfBertForPreTraining(checkpoint.config).eval()
    model.load_state_dict(checkpoint.state_dict, strict=False)
    for key, value in original_outputs(model).items():
        np.testing.assert_allclose(value, reference[key], atol=2e-6, rtol=0, err_msg=key)
