"""The model against transformers' BERT (parity), on a real checkpoint, and the common checks over every head.

Tiny tester sizes are google-research/bert's modeling_test.py: batch 13, length 7, vocab 99, hidden 32, 2 layers,
4 heads, intermediate 37.
"""

import pytest
import torch
import transformers

import hfbert
from hfbert import (
    HfBertConfig,
    HfBertForMaskedLM,
    HfBertForMultipleChoice,
    HfBertForNextSentencePrediction,
    HfBertForPreTraining,
    HfBertForQuestionAnswering,
    HfBertForSequenceClassification,
    HfBertForTokenClassification,
    HfBertModel,
)

BATCH, LENGTH, VOCAB = 13, 7, 99
TESTER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
              max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)

# hfbert class -> transformers class with the same head.
PAIRS = {
    HfBertModel: transformers.BertModel,
    HfBertForPreTraining: transformers.BertForPreTraining,
    HfBertForMaskedLM: transformers.BertForMaskedLM,
    HfBertForNextSentencePrediction: transformers.BertForNextSentencePrediction,
    HfBertForSequenceClassification: transformers.BertForSequenceClassification,
    HfBertForMultipleChoice: transformers.BertForMultipleChoice,
    HfBertForTokenClassification: transformers.BertForTokenClassification,
    HfBertForQuestionAnswering: transformers.BertForQuestionAnswering,
}
ALL_HEADS = list(PAIRS)


def make_inputs(cls, batch=BATCH, length=LENGTH, vocab=VOCAB, seed=0, num_labels=3, pad_tail=True):
    """Random inputs with ragged padding and the labels each head takes. Ids start at 1 so that transformers'
    padding_idx (which zeroes the [PAD] row's gradient, unlike the original) does not enter the comparison."""
    g = torch.Generator().manual_seed(seed)
    shape = (batch, 4, length) if cls is HfBertForMultipleChoice else (batch, length)
    ids = torch.randint(1, vocab, shape, generator=g)
    types = torch.randint(0, 2, shape, generator=g)
    mask = torch.ones(shape, dtype=torch.long)
    if pad_tail:
        lengths = torch.randint(2, length + 1, shape[:-1], generator=g)
        mask = (torch.arange(length) < lengths[..., None]).long()
    inputs = dict(input_ids=ids, token_type_ids=types, attention_mask=mask)
    labels = {}
    if cls in (HfBertForPreTraining, HfBertForMaskedLM):
        mlm = torch.where(torch.rand(shape, generator=g) < 0.3, torch.randint(0, vocab, shape, generator=g), -100)
        mlm[:, 1] = torch.randint(0, vocab, (batch,), generator=g)  # at least one supervised position per row
        labels["labels"] = mlm
        if cls is HfBertForPreTraining:
            labels["next_sentence_label"] = torch.randint(0, 2, (batch,), generator=g)
    elif cls is HfBertForNextSentencePrediction:
        labels["labels"] = torch.randint(0, 2, (batch,), generator=g)
    elif cls is HfBertForSequenceClassification:
        labels["labels"] = torch.randint(0, num_labels, (batch,), generator=g)
    elif cls is HfBertForMultipleChoice:
        labels["labels"] = torch.randint(0, 4, (batch,), generator=g)
    elif cls is HfBertForTokenClassification:
        labels["labels"] = torch.randint(0, num_labels, shape, generator=g)
    elif cls is HfBertForQuestionAnswering:
        labels["start_positions"] = torch.randint(0, length, (batch,), generator=g)
        labels["end_positions"] = torch.randint(0, length, (batch,), generator=g)
    return inputs, labels


def twin(cls, config):
    """An hfbert model and the transformers model of the same head holding the same weights."""
    ours = cls(config)
    bert_config = config.to_bert_config()
    bert_config._attn_implementation = config._attn_implementation
    theirs = PAIRS[cls](bert_config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected, unexpected
    assert all("decoder" in k for k in missing), missing  # tied weights only
    return ours, theirs


def outputs_to_compare(cls, out, labels):
    if cls is HfBertModel:
        return {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output}
    if cls in (HfBertForPreTraining, HfBertForMaskedLM):
        logits = out.prediction_logits if cls is HfBertForPreTraining else out.logits
        result = {"mlm_logits": logits}
        if cls is HfBertForPreTraining:
            result["nsp_logits"] = out.seq_relationship_logits
        return result
    if cls is HfBertForQuestionAnswering:
        return {"start": out.start_logits, "end": out.end_logits}
    return {"logits": out.logits}


CONFIGS = [
    dict(hidden_act="gelu", attn="sdpa", seed=1),
    dict(hidden_act="gelu_tanh", attn="eager", seed=2, hidden_size=48, num_attention_heads=6, intermediate_size=64),
    dict(hidden_act="gelu", attn="eager", seed=3, num_hidden_layers=3, hidden_size=24, num_attention_heads=2),
]


@pytest.mark.parametrize("variant", CONFIGS, ids=lambda v: f"{v['hidden_act']}-{v['attn']}-{v['seed']}")
@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda c: c.__name__)
def test_parity_with_transformers(cls, variant):
    variant = dict(variant)
    attn, seed = variant.pop("attn"), variant.pop("seed")
    torch.manual_seed(seed)
    # transformers sizes qa_outputs by num_labels; the start/end head always has 2 outputs
    config = HfBertConfig(**{**TESTER, **variant}, num_labels=2 if cls is HfBertForQuestionAnswering else 3)
    config._attn_implementation = attn
    ours, theirs = twin(cls, config)
    inputs, labels = make_inputs(cls, seed=seed)

    ours.eval(), theirs.eval()
    with torch.no_grad():
        a, b = ours(**inputs), theirs(**inputs)
    for name, value in outputs_to_compare(cls, a, labels).items():
        torch.testing.assert_close(value, outputs_to_compare(cls, b, labels)[name], atol=1e-5, rtol=1e-5, msg=name)

    if not labels:
        return
    a, b = ours(**inputs, **labels), theirs(**inputs, **labels)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-5, rtol=1e-5)
    if cls in (HfBertForPreTraining, HfBertForMaskedLM):
        # With labels hfbert computes vocabulary logits only at supervised positions: compare those rows.
        supervised = labels["labels"] != -100
        full = b.prediction_logits if cls is HfBertForPreTraining else b.logits
        mine = a.prediction_logits if cls is HfBertForPreTraining else a.logits
        assert mine.shape == (int(supervised.sum()), config.vocab_size)
        torch.testing.assert_close(mine, full[supervised], atol=1e-5, rtol=1e-5)
    a.loss.backward(), b.loss.backward()
    theirs_grads = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        if param.grad is None:
            assert theirs_grads[name].grad is None or not theirs_grads[name].grad.any(), name
            continue
        torch.testing.assert_close(param.grad, theirs_grads[name].grad, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("problem", ["single_label_classification", "multi_label_classification", "regression"])
def test_sequence_classification_problem_types(problem):
    num_labels = 1 if problem == "regression" else 3
    config = HfBertConfig(**TESTER, num_labels=num_labels, problem_type=problem)
    ours, theirs = twin(HfBertForSequenceClassification, config)
    inputs, _ = make_inputs(HfBertForSequenceClassification)
    if problem == "single_label_classification":
        labels = torch.randint(0, 3, (BATCH,))
    elif problem == "multi_label_classification":
        labels = torch.randint(0, 2, (BATCH, 3)).float()
    else:
        labels = torch.randn(BATCH)
    ours.eval(), theirs.eval()
    a, b = ours(**inputs, labels=labels), theirs(**inputs, labels=labels)
    assert a.logits.shape == (BATCH, num_labels)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-6, rtol=1e-5)


def test_problem_type_inferred_like_transformers():
    regression = HfBertForSequenceClassification(HfBertConfig(**TESTER, num_labels=1))
    inputs, _ = make_inputs(HfBertForSequenceClassification)
    regression(**inputs, labels=torch.randn(BATCH))
    assert regression.config.problem_type == "regression"
    multi = HfBertForSequenceClassification(HfBertConfig(**TESTER, num_labels=3))
    multi(**inputs, labels=torch.randint(0, 2, (BATCH, 3)).float())
    assert multi.config.problem_type == "multi_label_classification"


# ----------------------------------------------------------------------------------------------- real checkpoint


def test_real_minilm_checkpoint_matches_transformers(minilm_path):
    sentences = [
        "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife.",
        "The quick brown fox jumps over the lazy dog.",
        "BERT reads text in both directions at once.",
        "Short.",
    ]
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path)
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    ours = HfBertModel.from_pretrained(minilm_path).eval()
    theirs = transformers.BertModel.from_pretrained(minilm_path).eval()
    assert ours.config.model_type == "hfbert" and ours.config.num_hidden_layers == 6
    with torch.no_grad():
        a, b = ours(**batch), theirs(**batch)
    valid = batch["attention_mask"].bool()
    torch.testing.assert_close(a.last_hidden_state[valid], b.last_hidden_state[valid], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-5, rtol=1e-5)
    # the embeddings are meaningful: the two paraphrase-free sentences are less similar than a sentence to itself
    assert a.last_hidden_state.abs().sum() > 0


# ----------------------------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda c: c.__name__)
def test_save_load_and_auto_classes(cls, tmp_path):
    model = cls(HfBertConfig(**TESTER, num_labels=3)).eval()
    model.save_pretrained(tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, HfBertConfig)
    assert config.auto_map["AutoModelForPreTraining"] == "modeling_hfbert.HfBertForPreTraining"
    for sibling in ("modeling_hfbert.py", "configuration_hfbert.py", "unpadding_hfbert.py", "heads_hfbert.py"):
        assert (tmp_path / sibling).exists(), sibling
    auto = {v: k for k, v in hfbert.AUTO_CLASSES.items()}[cls]
    loaded = auto.from_pretrained(tmp_path).eval()
    assert type(loaded) is cls
    inputs, _ = make_inputs(cls)
    with torch.no_grad():
        a, b = model(**inputs), loaded(**inputs)
    for name, value in outputs_to_compare(cls, a, {}).items():
        assert torch.equal(value, outputs_to_compare(cls, b, {})[name]), name
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_tied_decoder_survives_save_load_and_resize(tmp_path):
    model = HfBertForPreTraining(HfBertConfig(**TESTER))
    model.save_pretrained(tmp_path)
    loaded = HfBertForPreTraining.from_pretrained(tmp_path)
    for m in (model, loaded):
        assert m.cls.predictions.decoder.weight is m.bert.embeddings.word_embeddings.weight
        assert m.cls.predictions.decoder.bias is m.cls.predictions.bias
    loaded.resize_token_embeddings(VOCAB + 5)
    assert loaded.config.vocab_size == VOCAB + 5
    assert loaded.cls.predictions.decoder.weight is loaded.bert.embeddings.word_embeddings.weight
    assert loaded.cls.predictions.bias.shape == (VOCAB + 5,)
    out = loaded(input_ids=torch.tensor([[VOCAB + 4, 3]]))
    assert out.prediction_logits.shape == (1, 2, VOCAB + 5)


def test_untied_decoder_is_a_separate_parameter():
    model = HfBertForMaskedLM(HfBertConfig(**TESTER, tie_word_embeddings=False))
    assert model.cls.predictions.decoder.weight is not model.bert.embeddings.word_embeddings.weight


def test_export_to_transformers_layout_and_back_is_lossless(tmp_path):
    model = HfBertForPreTraining(HfBertConfig(**TESTER)).eval()
    exported = transformers.BertForPreTraining(model.config.to_bert_config())
    exported.load_state_dict(model.state_dict(), strict=False)
    exported.save_pretrained(tmp_path / "bert")
    assert transformers.AutoConfig.from_pretrained(tmp_path / "bert").model_type == "bert"
    back = HfBertForPreTraining.from_pretrained(tmp_path / "bert").eval()
    assert back.config.model_type == "hfbert"
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, back.state_dict()[name]), name


REMOTE_SCRIPT = r"""
import importlib.abc, sys
class _Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "hfbert" or name.startswith("hfbert."):
            raise ImportError("hfbert is blocked in this process")
sys.meta_path.insert(0, _Refuse())
try:
    import hfbert  # noqa
    raise SystemExit("hfbert was importable")
except ImportError:
    pass
import torch, transformers
folder = sys.argv[1]
model = transformers.AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
ids = torch.load(sys.argv[2])
with torch.no_grad():
    out = model(**ids)
torch.save({"mlm": out.prediction_logits, "nsp": out.seq_relationship_logits}, sys.argv[3])
"""


@pytest.mark.slow
def test_remote_code_loads_without_hfbert(tmp_path):
    import os
    import subprocess
    import sys

    model = HfBertForPreTraining(HfBertConfig(**TESTER)).eval()
    model.save_pretrained(tmp_path / "model")
    inputs, _ = make_inputs(HfBertForPreTraining)
    torch.save(inputs, tmp_path / "inputs.pt")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    subprocess.run(
        [sys.executable, "-c", REMOTE_SCRIPT, str(tmp_path / "model"), str(tmp_path / "inputs.pt"),
         str(tmp_path / "out.pt")],
        check=True, cwd=tmp_path, env=env, timeout=300,
    )
    remote = torch.load(tmp_path / "out.pt")
    with torch.no_grad():
        out = model(**inputs)
    assert torch.equal(remote["mlm"], out.prediction_logits)
    assert torch.equal(remote["nsp"], out.seq_relationship_logits)


# ----------------------------------------------------------------------------------------------- common checks


def test_truncated_normal_init():
    config = HfBertConfig(**{**TESTER, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 512})
    model = HfBertForPreTraining(config)
    std = config.initializer_range
    weights = torch.cat([p.detach().flatten() for n, p in model.named_parameters()
                         if n.endswith("weight") and "LayerNorm" not in n])
    assert weights.abs().max() <= 2 * std + 1e-7  # cut at two standard deviations, as Google's initializer
    # the standard deviation of a normal truncated at +-2 sigma is 0.8796 sigma
    assert abs(weights.std().item() - 0.8796 * std) < 0.03 * std
    for name, param in model.named_parameters():
        if "LayerNorm" in name:
            expected = torch.ones_like(param) if name.endswith("weight") else torch.zeros_like(param)
            assert torch.equal(param, expected), name
        elif name.endswith("bias"):
            assert not param.any(), name


def _valid_outputs(cls, out, mask):
    """Outputs that must not depend on padding, restricted to valid positions."""
    valid = mask.bool()
    if cls is HfBertModel:
        return [out.last_hidden_state[valid], out.pooler_output]
    if cls is HfBertForPreTraining:
        return [out.prediction_logits[valid], out.seq_relationship_logits]
    if cls is HfBertForMaskedLM:
        return [out.logits[valid]]
    if cls in (HfBertForTokenClassification,):
        return [out.logits[valid]]
    if cls is HfBertForQuestionAnswering:
        return [out.start_logits[valid], out.end_logits[valid]]
    return [out.logits]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda c: c.__name__)
def test_padding_invariance(cls, attn):
    """Appending padding must not change the valid positions."""
    config = HfBertConfig(**TESTER, num_labels=3)
    config._attn_implementation = attn
    model = cls(config).eval()
    inputs, _ = make_inputs(cls, pad_tail=True)
    extra = 5
    padded = {k: torch.cat([v, torch.zeros(*v.shape[:-1], extra, dtype=v.dtype)], dim=-1) for k, v in inputs.items()}
    padded["input_ids"][..., -extra:] = 7  # garbage under the padding must not matter either
    with torch.no_grad():
        a, b = model(**inputs), model(**padded)
    mask = inputs["attention_mask"]
    if cls is HfBertForMultipleChoice:
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
        return
    trimmed = [x for x in _valid_outputs(cls, b, torch.cat([mask, torch.zeros(mask.shape[0], extra)], dim=-1))]
    for x, y in zip(_valid_outputs(cls, a, mask), trimmed):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda c: c.__name__)
def test_batching_equivalence_and_inputs_embeds(cls):
    model = cls(HfBertConfig(**TESTER, num_labels=3)).eval()
    inputs, _ = make_inputs(cls, batch=4, pad_tail=False)
    with torch.no_grad():
        batched = model(**inputs)
        for i in range(4):
            single = model(**{k: v[i : i + 1] for k, v in inputs.items()})
            for x, y in zip(outputs_to_compare(cls, batched, {}).values(), outputs_to_compare(cls, single, {}).values()):
                torch.testing.assert_close(x[i : i + 1], y, atol=1e-5, rtol=1e-5)
        embeds = model.get_input_embeddings()(inputs["input_ids"])
        via_embeds = model(inputs_embeds=embeds, **{k: v for k, v in inputs.items() if k != "input_ids"})
    for x, y in zip(outputs_to_compare(cls, batched, {}).values(), outputs_to_compare(cls, via_embeds, {}).values()):
        torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-6)


def test_fully_padded_row_is_finite():
    model = HfBertForPreTraining(HfBertConfig(**TESTER)).eval()
    inputs, _ = make_inputs(HfBertForPreTraining, batch=3)
    inputs["attention_mask"][1] = 0
    for attn in ("sdpa", "eager"):
        model.config._attn_implementation = attn
        with torch.no_grad():
            out = model(**inputs, output_attentions=(attn == "eager"))
        assert torch.isfinite(out.prediction_logits).all() and torch.isfinite(out.seq_relationship_logits).all()


def test_attention_outputs_hidden_states_and_eager_equals_sdpa():
    config = HfBertConfig(**TESTER)
    model = HfBertModel(config).eval()
    inputs, _ = make_inputs(HfBertModel)
    with torch.no_grad():
        sdpa = model(**inputs)
        model.set_attn_implementation("eager")
        eager = model(**inputs)
        out = model(**inputs, output_attentions=True, output_hidden_states=True)
    assert model.config._attn_implementation == "eager"
    torch.testing.assert_close(sdpa.last_hidden_state, eager.last_hidden_state, atol=1e-5, rtol=1e-5)
    assert len(out.hidden_states) == config.num_hidden_layers + 1
    assert len(out.attentions) == config.num_hidden_layers
    probs = out.attentions[0]
    assert probs.shape == (BATCH, config.num_attention_heads, LENGTH, LENGTH)
    torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))
    # padding keys get no attention at all
    pad = inputs["attention_mask"] == 0
    assert pad.any()
    assert (probs * pad[:, None, None, :]).abs().max() < 1e-6
    torch.testing.assert_close(out.hidden_states[-1], out.last_hidden_state)


@pytest.mark.parametrize("cls", ALL_HEADS, ids=lambda c: c.__name__)
def test_outputs_are_recorded_by_capture_outputs_once_per_call(cls, monkeypatch):
    """transformers' common check of the output-capturing mechanism: the model declares what it records, only the
    encoder records (a head calling a recording encoder must not record again: its outputs would be split between the
    two), and every head returns them, matching what the config asks for when no keyword does."""
    from transformers.utils import output_capturing

    config = HfBertConfig(**TESTER, num_labels=3)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    assert model._can_record_outputs.keys() >= {"hidden_states", "attentions"}
    context_var = output_capturing.CompileableContextVar
    active, set_value, reset = [0], context_var.set, context_var.reset

    def counting_set(self, value):
        active[0] += 1
        assert active[0] == 1, "capture_outputs is entered twice in one call"
        return set_value(self, value)

    def counting_reset(self, token):
        active[0] -= 1
        return reset(self, token)

    monkeypatch.setattr(context_var, "set", counting_set)
    monkeypatch.setattr(context_var, "reset", counting_reset)
    inputs, labels = make_inputs(cls)
    with torch.no_grad():
        out = model(**inputs, **labels, output_attentions=True, output_hidden_states=True)
        model.config.output_hidden_states = True
        from_config = model(**inputs, **labels)
        as_tuple = model(**inputs, **labels, output_hidden_states=True, return_dict=False)
    rows = inputs["input_ids"].reshape(-1, LENGTH).shape[0]
    assert len(out.hidden_states) == config.num_hidden_layers + 1
    assert all(h.shape == (rows, LENGTH, config.hidden_size) for h in out.hidden_states)
    assert len(out.attentions) == config.num_hidden_layers
    assert all(a.shape == (rows, config.num_attention_heads, LENGTH, LENGTH) for a in out.attentions)
    assert len(from_config.hidden_states) == config.num_hidden_layers + 1 and from_config.attentions is None
    assert isinstance(as_tuple, tuple) and any(isinstance(x, tuple) and len(x) == config.num_hidden_layers + 1
                                               for x in as_tuple)
    assert active[0] == 0


def test_gradient_checkpointing_gives_the_same_gradients():
    config = HfBertConfig(**{**TESTER, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    model = HfBertForPreTraining(config)
    inputs, labels = make_inputs(HfBertForPreTraining)
    model.train()
    model(**inputs, **labels).loss.backward()
    reference = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    assert model.is_activation_checkpointing
    model(**inputs, **labels).loss.backward()
    for name, grad in reference.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-6, rtol=1e-5)


def test_load_with_dtype_and_device_map(tmp_path):
    HfBertForSequenceClassification(HfBertConfig(**TESTER)).save_pretrained(tmp_path)
    model = HfBertForSequenceClassification.from_pretrained(tmp_path, dtype=torch.bfloat16, device_map="cpu")
    assert model.bert.embeddings.word_embeddings.weight.dtype == torch.bfloat16
    inputs, _ = make_inputs(HfBertForSequenceClassification)
    out = model(**inputs)
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.logits.float()).all()


@pytest.mark.slow
def test_torch_compile_matches_eager():
    model = HfBertForPreTraining(HfBertConfig(**TESTER)).eval()
    inputs, labels = make_inputs(HfBertForPreTraining, pad_tail=False)
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        a, b = model(**inputs, **labels), compiled(**inputs, **labels)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-6, rtol=1e-6)


def test_mlm_loss_with_nothing_supervised_is_zero_not_nan():
    model = HfBertForPreTraining(HfBertConfig(**TESTER))
    inputs, labels = make_inputs(HfBertForPreTraining)
    labels["labels"][:] = -100
    out = model(**inputs, **labels)
    assert out.mlm_loss.item() == 0.0 and torch.isfinite(out.loss)
    out.loss.backward()


# ----------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(hidden_size=30, num_attention_heads=4), "not a multiple"),
        (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob"),
        (dict(attention_probs_dropout_prob=-0.1), "attention_probs_dropout_prob"),
        (dict(classifier_dropout=1.5), "classifier_dropout"),
        (dict(pad_token_id=99), "pad_token_id"),
        (dict(hidden_act="swish"), "hidden_act"),
        (dict(num_hidden_layers=0), "num_hidden_layers"),
        (dict(vocab_size=-5), "vocab_size"),
    ],
)
def test_config_accepts_any_value_and_the_model_refuses_bad_ones(overrides, message):
    config = HfBertConfig(**{**TESTER, **overrides})  # as BertConfig: a config may be filled in field by field
    with pytest.raises(ValueError, match=message):
        HfBertForMaskedLM(config)
    with pytest.raises(ValueError, match=message):
        transformers.AutoModel.from_config(config)


def test_a_config_built_field_by_field():
    config = HfBertConfig(hidden_size=37)  # 12 heads by default: not a valid model yet
    with pytest.raises(ValueError, match=r"hidden size \(37\) is not a multiple of the number of attention heads "
                                         r"\(12\)"):
        HfBertModel(config)
    config.num_attention_heads = 1
    config.intermediate_size, config.num_hidden_layers, config.vocab_size = 16, 1, 50
    assert HfBertModel(config).config.hidden_size == 37


@pytest.mark.parametrize("overrides", [dict(position_embedding_type="relative_key"), dict(is_decoder=True),
                                       dict(model_type="roberta")])
def test_config_refuses_another_architecture(overrides):
    with pytest.raises(ValueError, match="not the original BERT|loads only"):
        HfBertConfig(**{**TESTER, **overrides})


def test_legacy_bert_keys_at_their_original_values_are_dropped(tmp_path):
    """Older BERT folders (e.g. MiniLM's) write position_embedding_type="absolute" and gradient_checkpointing; they
    load, and an hfbert folder saved from them converts back to BertConfig (which no longer has those keys)."""
    bert = transformers.BertConfig(**TESTER, position_embedding_type="absolute", gradient_checkpointing=False)
    bert.save_pretrained(tmp_path / "bert")
    config = HfBertConfig.from_pretrained(tmp_path / "bert")
    saved = config.to_dict()
    assert "position_embedding_type" not in saved and "gradient_checkpointing" not in saved
    HfBertModel(config).save_pretrained(tmp_path / "hfbert")
    hfbert.convert(tmp_path / "hfbert", tmp_path / "back", to="transformers")
    assert transformers.BertConfig.from_pretrained(tmp_path / "back").hidden_size == TESTER["hidden_size"]
    with pytest.raises(ValueError, match="not the original BERT"):  # the converter path checks them too
        HfBertConfig.from_bert_config({**bert.to_dict(), "position_embedding_type": "relative_key"})


def test_presets():
    for name, (layers, hidden) in {"tiny": (2, 128), "mini": (4, 256), "small": (4, 512), "medium": (8, 512),
                                   "base": (12, 768), "large": (24, 1024)}.items():
        config = HfBertConfig.from_preset(name, vocab_size=1000)
        assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
                config.intermediate_size, config.vocab_size) == (layers, hidden, hidden // 64, 4 * hidden, 1000)
    with pytest.raises(ValueError, match="unknown preset"):
        HfBertConfig.from_preset("huge")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda x: x.update(input_ids=torch.randint(1, VOCAB, (2, 65))), "longer than max_position_embeddings"),
        (lambda x: x["input_ids"].__setitem__((0, 0), VOCAB), "outside the vocabulary"),
        (lambda x: x["input_ids"].__setitem__((0, 0), -1), "outside the vocabulary"),
        (lambda x: x["token_type_ids"].__setitem__((0, 0), 2), "token type id 2"),
        (lambda x: x.update(attention_mask=torch.ones(2, 5)), "attention_mask has shape"),
        (lambda x: x.update(token_type_ids=torch.zeros(3, 7, dtype=torch.long)), "token_type_ids has shape"),
        (lambda x: x.update(inputs_embeds=torch.zeros(2, 7, 32)), "exactly one of"),
        (lambda x: x.pop("input_ids"), "exactly one of"),
    ],
)
def test_forward_rejects_bad_input(mutate, message):
    model = HfBertModel(HfBertConfig(**TESTER))
    inputs = dict(input_ids=torch.randint(1, VOCAB, (2, 7)), token_type_ids=torch.zeros(2, 7, dtype=torch.long),
                  attention_mask=torch.ones(2, 7))
    mutate(inputs)
    with pytest.raises(ValueError, match=message):
        model(**inputs)


def test_classification_label_out_of_range():
    model = HfBertForSequenceClassification(HfBertConfig(**TESTER, num_labels=3))
    inputs, _ = make_inputs(HfBertForSequenceClassification)
    with pytest.raises(ValueError, match="label 3 is outside"):
        model(**inputs, labels=torch.full((BATCH,), 3))


def test_missing_weights(tmp_path):
    with pytest.raises(OSError):
        HfBertModel.from_pretrained(tmp_path / "nowhere")


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
def test_corrupt_weights_file_is_named(tmp_path, damage, safe):
    model = HfBertModel(HfBertConfig(**TESTER))
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    if not safe:  # the legacy pickle format transformers still reads
        weights.unlink()
        weights = tmp_path / "pytorch_model.bin"
        torch.save(model.state_dict(), weights)
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 3] if damage == "truncated" else b"not a weights file" * 50)
    with pytest.raises(OSError, match=rf"{weights.name} is corrupt or truncated") as caught:
        HfBertModel.from_pretrained(tmp_path)
    assert str(weights) in str(caught.value)
    with pytest.raises(OSError, match="corrupt"):
        transformers.AutoModel.from_pretrained(tmp_path)


def test_registration_is_idempotent():
    import importlib

    importlib.reload(hfbert)
    hfbert.register_auto_classes()
    config = HfBertConfig(**TESTER)
    assert type(transformers.AutoModel.from_config(config)).__name__ == "HfBertModel"


# ----------------------------------------------------------------------------------------------- skipping padding
# The pretraining heads (with labels) and the sequence-level heads run the encoder on the real tokens only. Asking for
# hidden states turns that off, which gives the plain padded computation of the same model to compare against.


def _ragged_batch(cls, seed=0, awkward=False):
    """make_inputs with trailing all-padding columns; ``awkward`` adds the cases packing cannot reproduce, which
    must fall back to the padded computation: an all-padding row, a supervised padding position."""
    inputs, labels = make_inputs(cls, batch=6, length=11, seed=seed)
    mask = inputs["attention_mask"]
    mask[:, 8:] = 0  # columns 8.. are padding in every row
    mask[0, :8] = 1
    if awkward:
        mask[2] = 0  # an all-padding row
        if cls in (HfBertForPreTraining, HfBertForMaskedLM):
            labels["labels"][4, 9] = 5  # supervised although padding: must be computed as transformers does
    return inputs, labels


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


PACKING_CASES = [(cls, attn, False) for cls in ALL_HEADS for attn in ("sdpa", "eager")] + [
    (HfBertForPreTraining, "sdpa", True), (HfBertForMaskedLM, "eager", True), (HfBertForSequenceClassification,
                                                                             "sdpa", True)]


@pytest.mark.parametrize("cls, attn, awkward", PACKING_CASES,
                         ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_packed_rows_equal_padded_outputs_and_gradients(cls, attn, awkward):
    config = HfBertConfig(**{**TESTER, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
                          num_labels=3)
    config._attn_implementation = attn
    model = cls(config).train()
    inputs, labels = (make_inputs(cls) if cls is HfBertForMultipleChoice else _ragged_batch(cls, awkward=awkward))
    for with_labels in (False, True) if labels else (False,):
        extra = labels if with_labels else {}
        model.zero_grad()
        packed = model(**inputs, **extra)
        if with_labels:
            packed.loss.backward()
        packed_grads = _grads(model)
        model.zero_grad()
        padded = model(**inputs, **extra, output_hidden_states=True)  # hidden states: every position, every layer
        if with_labels:
            padded.loss.backward()
        for name, value in outputs_to_compare(cls, packed, extra).items():
            torch.testing.assert_close(value, outputs_to_compare(cls, padded, extra)[name], atol=1e-5, rtol=1e-5,
                                       msg=name)
        if with_labels:
            torch.testing.assert_close(packed.loss, padded.loss, atol=1e-6, rtol=1e-5)
            assert packed_grads.keys() == _grads(model).keys()
            for name, grad in _grads(model).items():
                torch.testing.assert_close(packed_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("cls", [HfBertForPreTraining, HfBertForSequenceClassification])
def test_padding_never_enters_a_layer(cls):
    model = cls(HfBertConfig(**TESTER, num_labels=3)).eval()
    inputs, labels = make_inputs(cls)
    if cls is HfBertForPreTraining:
        labels["labels"][inputs["attention_mask"] == 0] = -100
    rows = []
    for layer in model.bert.encoder.layer:
        layer.output.dense.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[0]))
    with torch.no_grad():
        model(**inputs, **labels)
    valid = int(inputs["attention_mask"].sum())
    # The real tokens, rounded up to one of a few row counts (unpadding_hfbert.bucket), fewer than the padded batch's.
    packed = hfbert.unpadding_hfbert.bucket(valid)
    assert valid <= packed < BATCH * LENGTH and rows == [packed] * TESTER["num_hidden_layers"]


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_padding_free_model_zeroes_padding_and_keeps_valid_positions(attn):
    config = HfBertConfig(**{**TESTER, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    config._attn_implementation = attn
    model = HfBertModel(config).train()
    inputs, _ = _ragged_batch(HfBertModel)
    valid = inputs["attention_mask"].bool()
    weights = torch.randn(*valid.shape, config.hidden_size)
    results = []
    for padding_free in (False, True):
        model.config.padding_free = padding_free
        model.zero_grad()
        out = model(**inputs)
        ((out.last_hidden_state * weights)[valid].sum() + out.pooler_output[[0, 1, 3, 4, 5]].sum()).backward()
        results.append((out, _grads(model)))
    (full, full_grads), (free, free_grads) = results
    assert free.last_hidden_state.shape == full.last_hidden_state.shape
    assert not free.last_hidden_state[:, 8:].any()  # cut columns come back as zeros
    padding = ~valid
    padding[:, 0] = False  # [CLS] is always computed (the pooler reads it)
    assert not free.last_hidden_state[padding].any()
    torch.testing.assert_close(free.last_hidden_state[valid], full.last_hidden_state[valid], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(free.pooler_output[[0, 1, 3, 4, 5]], full.pooler_output[[0, 1, 3, 4, 5]],
                               atol=1e-5, rtol=1e-5)
    for name, grad in full_grads.items():
        torch.testing.assert_close(free_grads[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("cls", [HfBertForTokenClassification, HfBertForQuestionAnswering, HfBertForPreTraining])
def test_padding_free_heads_match_at_valid_positions(cls):
    config = HfBertConfig(**TESTER, num_labels=2 if cls is HfBertForQuestionAnswering else 3)
    model = cls(config).eval()
    inputs, _ = make_inputs(cls)
    with torch.no_grad():
        full = model(**inputs)
        model.config.padding_free = True
        free = model(**inputs)
    for x, y in zip(_valid_outputs(cls, free, inputs["attention_mask"]),
                    _valid_outputs(cls, full, inputs["attention_mask"])):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_torch_compile_with_padding_and_labels():
    model = HfBertForPreTraining(HfBertConfig(**TESTER)).eval()
    inputs, labels = make_inputs(HfBertForPreTraining)
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        a, b = model(**inputs, **labels), compiled(**inputs, **labels)
    torch.testing.assert_close(a.loss, b.loss, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(a.prediction_logits, b.prediction_logits, atol=1e-5, rtol=1e-5)


def test_labels_of_the_wrong_shape_are_rejected():
    model = HfBertForMaskedLM(HfBertConfig(**TESTER))
    inputs, labels = make_inputs(HfBertForMaskedLM)
    with pytest.raises(ValueError, match="labels have shape"):
        model(**inputs, labels=labels["labels"][:, :-1])


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_fully_padded_row_is_finite_in_bfloat16(attn):
    model = HfBertForSequenceClassification(HfBertConfig(**TESTER, num_labels=3)).to(torch.bfloat16).eval()
    model.set_attn_implementation(attn)
    inputs, _ = make_inputs(HfBertForSequenceClassification, batch=3)
    inputs["attention_mask"][1] = 0
    with torch.no_grad():
        assert torch.isfinite(model(**inputs).logits.float()).all()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")  # the input checks read values; expected in a trace
def test_traced_and_exported_graphs():
    """TorchScript tracing (the classic ONNX export) and torch.export record plain aten ops."""
    model = HfBertModel(HfBertConfig(**TESTER)).eval()
    inputs, _ = make_inputs(HfBertModel, pad_tail=False)
    with torch.no_grad():
        traced = torch.jit.trace(model, (inputs["input_ids"],), strict=False)
        torch.testing.assert_close(traced(inputs["input_ids"])["last_hidden_state"],
                                   model(inputs["input_ids"]).last_hidden_state, atol=1e-5, rtol=1e-5)
    assert "aten::linear" in str(traced.inlined_graph)
    exported = torch.export.export(model, (inputs["input_ids"],))
    torch.testing.assert_close(exported.module()(inputs["input_ids"])["last_hidden_state"],
                               model(inputs["input_ids"]).last_hidden_state, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [HfBertForPreTraining, HfBertForMaskedLM], ids=lambda c: c.__name__)
def test_the_pretraining_step_traces_as_one_graph(cls):
    """What ``hfbert pretrain --torch_compile`` compiles: the forward with labels (loss included) is one graph, no
    break, with dynamo tracing the data-dependent count of supervised rows as a symbol (as the job configures it)."""
    model = cls(HfBertConfig(**TESTER))
    inputs, labels = make_inputs(cls)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        explained = torch._dynamo.explain(lambda **batch: model(**batch).loss)(**inputs, **labels)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


@pytest.mark.slow
def test_the_compiled_pretraining_step_is_traced_once_for_every_batch_width():
    """As ``hfbert pretrain --torch_compile`` compiles (dynamic shapes, data-dependent counts traced as symbols):
    batches of new widths, paddings and supervised counts reuse the graph instead of tracing a new one each step.
    dynamo's "eager" backend counts the graphs it hands over without inductor's minutes of compiling."""
    graphs = []

    def counting_backend(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    model = HfBertForPreTraining(HfBertConfig(**TESTER))
    compiled = torch.compile(model, backend=counting_backend, dynamic=True)
    losses = []
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        for seed, length in enumerate((16, 24, 32, 40, 16, 48)):
            inputs, labels = make_inputs(HfBertForPreTraining, length=length, seed=seed)
            loss = compiled(**inputs, **labels).loss
            loss.backward()
            losses.append(loss.detach())
    torch._dynamo.reset()
    assert len(graphs) == 1, f"{len(graphs)} graphs for 6 batches"
    assert all(torch.isfinite(loss) for loss in losses)
