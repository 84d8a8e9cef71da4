"""Attention through transformers' attention interface: eager, sdpa and flex_attention agree with each other and with
transformers' BERT on every head, the backend is chosen exactly as for transformers' BERT, packed rows reach a
variable-length backend in FlashAttention's cu_seqlens form, and gradients reach every returned state.

flex_attention compiles on CPU (slow first call, again for every new shape), so every flex call in this file uses one
config and one input shape (BATCH x LENGTH), and the outputs are computed once per module.
"""

import dataclasses
import warnings

import pytest
import torch
import transformers
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import sdpa_mask

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
from hfbert import unpadding_hfbert

BATCH, LENGTH, VOCAB, CHOICES = 4, 8, 99, 2
TINY = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)
BACKENDS = ("eager", "sdpa", "flex_attention")

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
AUTO = {model: auto for auto, model in hfbert.AUTO_CLASSES.items()}


def padded_batch(cls, seed=0):
    """A padded batch of BATCH rows of LENGTH (multiple choice: BATCH / CHOICES questions of CHOICES rows), every
    row with its own length, and MLM labels with a different supervised count per row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, VOCAB, (BATCH, LENGTH), generator=g)
    mask = (torch.arange(LENGTH) < torch.tensor([LENGTH, 3, 6, 5])[:, None]).long()
    inputs = dict(input_ids=ids, token_type_ids=(torch.arange(LENGTH) >= 2).long().expand(BATCH, -1).clone(),
                  attention_mask=mask)
    labels = torch.where((torch.rand(BATCH, LENGTH, generator=g) < 0.4) & mask.bool(), ids, -100)
    labels[:, 1] = ids[:, 1]
    if cls is HfBertForMultipleChoice:
        inputs = {k: v.view(BATCH // CHOICES, CHOICES, LENGTH) for k, v in inputs.items()}
    return inputs, labels


def compared(cls, out, mask):
    """The outputs that must agree, at real positions only (transformers computes padding positions too)."""
    valid = mask.bool()
    if cls is HfBertModel:
        return {"hidden": out.last_hidden_state[valid], "pooled": out.pooler_output}
    if cls is HfBertForPreTraining:
        return {"mlm": out.prediction_logits[valid], "nsp": out.seq_relationship_logits}
    if cls in (HfBertForMaskedLM, HfBertForTokenClassification):
        return {"logits": out.logits[valid]}
    if cls is HfBertForQuestionAnswering:
        return {"start": out.start_logits[valid], "end": out.end_logits[valid]}
    return {"logits": out.logits}


def twin(cls):
    torch.manual_seed(0)
    config = HfBertConfig(**{**TINY, "num_labels": 2 if cls is HfBertForQuestionAnswering else 3})
    ours = cls(config).eval()
    theirs = PAIRS[cls](config.to_bert_config()).eval()
    theirs.load_state_dict(ours.state_dict(), strict=False)
    return ours, theirs


@pytest.fixture(scope="module")
def backend_outputs():
    """{(class, backend): (hfbert outputs, transformers outputs, hfbert outputs with MLM labels)}, no_grad: flex
    attention has no backward on CPU."""
    results = {}
    for cls in PAIRS:
        ours, theirs = twin(cls)
        inputs, labels = padded_batch(cls)
        for backend in BACKENDS:
            ours.set_attn_implementation(backend)
            theirs.set_attn_implementation(backend)
            with torch.no_grad():
                supervised = ours(**inputs, labels=labels) if cls in (HfBertForPreTraining, HfBertForMaskedLM) else None
                results[cls, backend] = ours(**inputs), theirs(**inputs), supervised
    return results


@pytest.mark.slow
@pytest.mark.parametrize("cls", list(PAIRS), ids=lambda c: c.__name__)
def test_backends_agree_with_each_other_and_with_transformers(cls, backend_outputs):
    mask = padded_batch(cls)[0]["attention_mask"].reshape(BATCH, LENGTH)
    if cls is HfBertForMultipleChoice:
        mask = torch.ones(1)  # logits per question: nothing to restrict
    reference = compared(cls, backend_outputs[cls, "eager"][0], mask)
    for backend in BACKENDS:
        ours, theirs, supervised = backend_outputs[cls, backend]
        atol = 1e-5
        error = kernel_error(backend_outputs, backend)
        if not error <= atol:
            # torch's CPU flex attention gives transformers' own BertModel wrong or NaN outputs on some CPUs
            # (AVX2-only ones among them), differently from call to call: nothing to compare hfbert with there.
            warnings.warn(f"{backend} is inexact on this machine for transformers' BertModel too "
                          f"(max error {error:.1e}); not compared", stacklevel=1)
            continue
        try:
            for name, value in compared(cls, ours, mask).items():
                torch.testing.assert_close(value, reference[name], atol=atol, rtol=1e-5, msg=f"{backend} {name}")
                torch.testing.assert_close(value, compared(cls, theirs, mask)[name], atol=atol, rtol=1e-5,
                                           msg=f"{backend} {name} vs transformers")
        except AssertionError:
            # A mismatch is hfbert's unless the kernel itself answers the same input differently from call to call
            # (then no output of it can be compared): the same model, the same input, called again.
            spread = call_to_call_spread(cls, backend, mask, compared(cls, ours, mask))
            if not spread > atol:
                raise
            warnings.warn(f"{backend} answers the same input differently from call to call on this machine "
                          f"(spread {spread:.1e}); not compared", stacklevel=1)
            continue
        if supervised is not None:  # MLM logits at the supervised rows, from the packed encoder
            logits = supervised.prediction_logits if cls is HfBertForPreTraining else supervised.logits
            full = theirs.prediction_logits if cls is HfBertForPreTraining else theirs.logits
            labels = padded_batch(cls)[1]
            torch.testing.assert_close(logits, full[labels != -100], atol=atol, rtol=1e-5, msg=backend)


def call_to_call_spread(cls, backend: str, mask, first: dict, calls: int = 4) -> float:
    """The largest difference between ``first`` (the outputs compared) and those of ``calls`` more calls of the
    same hfbert model on the same input under ``backend``: zero (or rounding) for a sound kernel."""
    ours, _ = twin(cls)
    ours.set_attn_implementation(backend)
    inputs = padded_batch(cls)[0]
    with torch.no_grad():
        outputs = [compared(cls, ours(**inputs), mask) for _ in range(calls)]
    return max((out[name] - first[name]).abs().max().item() for out in outputs for name in out)


_KERNEL_ERRORS: dict[str, float] = {}


def kernel_error(backend_outputs, backend: str, calls: int = 6) -> float:
    """How far transformers' own BertModel under ``backend`` is from its eager attention on this machine: the
    largest error of ``calls`` fresh calls (where a kernel is inexact, it is so in some calls and not others)."""
    if backend not in _KERNEL_ERRORS:
        mask = padded_batch(HfBertModel)[0]["attention_mask"].bool()
        eager = backend_outputs[HfBertModel, "eager"][1].last_hidden_state[mask]
        _, theirs = twin(HfBertModel)
        theirs.set_attn_implementation(backend)
        with torch.no_grad():
            errors = [(theirs(**padded_batch(HfBertModel)[0]).last_hidden_state[mask] - eager).abs().max().item()
                      for _ in range(calls)]
        first = backend_outputs[HfBertModel, backend][1].last_hidden_state[mask]
        _KERNEL_ERRORS[backend] = max(errors + [(first - eager).abs().max().item()])
    return _KERNEL_ERRORS[backend]


@pytest.mark.parametrize("backend", BACKENDS)
def test_attn_implementation_is_chosen_as_for_transformers_bert(backend, tmp_path):
    HfBertForSequenceClassification(HfBertConfig(**TINY)).save_pretrained(tmp_path)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path, attn_implementation=backend)
    assert loaded.config._attn_implementation == backend
    built = transformers.AutoModel.from_config(HfBertConfig(**TINY), attn_implementation=backend)
    assert built.config._attn_implementation == backend
    other = "eager" if backend != "eager" else "sdpa"
    built.set_attn_implementation(other)
    assert built.config._attn_implementation == other
    assert all(layer.attention.self.config._attn_implementation == other for layer in built.encoder.layer)


def test_flash_attention_without_the_kernel_gives_transformers_error(tmp_path):
    HfBertModel(HfBertConfig(**TINY)).save_pretrained(tmp_path)
    with pytest.raises(ImportError, match="FlashAttention2"):
        transformers.AutoModel.from_pretrained(tmp_path, attn_implementation="flash_attention_2")


def varlen_reference(module, query, key, value, attention_mask, scaling, dropout=0.0, cu_seq_lens_q=None,
                     cu_seq_lens_k=None, max_length_q=None, max_length_k=None, **kwargs):
    """FlashAttention's contract in plain torch: packed (1, N, R, H) rows with cu_seqlens, or a padded batch with a
    boolean mask; returns (batch, length, N, H)."""
    if cu_seq_lens_q is None:
        context = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                                   scale=scaling)
        return context.transpose(1, 2), None
    assert query.shape[0] == 1 and cu_seq_lens_q.dtype == torch.int32 and torch.equal(cu_seq_lens_q, cu_seq_lens_k)
    lengths = cu_seq_lens_q.diff()
    assert max_length_q == max_length_k == int(lengths.max())
    pieces = [torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=scaling)
              for q, k, v in zip(*(x.split(lengths.tolist(), dim=2) for x in (query, key, value)))]
    varlen_reference.calls += 1
    return torch.cat(pieces, dim=2).transpose(1, 2), None


@pytest.mark.parametrize("cls", [HfBertForPreTraining, HfBertForSequenceClassification], ids=lambda c: c.__name__)
def test_packed_rows_reach_a_varlen_backend_as_cu_seqlens(cls, monkeypatch):
    AttentionInterface.register("varlen_reference", varlen_reference)
    AttentionMaskInterface.register("varlen_reference", sdpa_mask)
    # This test's backend stands for FlashAttention: one entry of the table says it takes the rows as they are.
    monkeypatch.setitem(unpadding_hfbert.ATTENTION_BACKENDS, "varlen_reference",
                        unpadding_hfbert.AttentionBackend("varlen"))
    model, _ = twin(cls)
    inputs, labels = padded_batch(cls)
    extra = {"labels": labels} if cls is HfBertForPreTraining else {}
    with torch.no_grad():
        reference = model(**inputs, **extra)
        model.set_attn_implementation("varlen_reference")
        varlen_reference.calls = 0
        packed = model(**inputs, **extra)
    assert varlen_reference.calls == TINY["num_hidden_layers"]  # every layer took the cu_seqlens form
    for name in ("prediction_logits", "seq_relationship_logits", "logits"):
        if name in reference:
            torch.testing.assert_close(packed[name], reference[name], atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("backend", ["eager", "sdpa"])
def test_gradients_reach_every_returned_hidden_state_and_attention(backend):
    model = HfBertForPreTraining(HfBertConfig(**TINY)).train()
    model.set_attn_implementation(backend)
    inputs, labels = padded_batch(HfBertForPreTraining)
    out = model(**inputs, labels=labels, next_sentence_label=torch.tensor([0, 1, 0, 1]), output_hidden_states=True,
                output_attentions=backend == "eager")
    for state in (*out.hidden_states, *(out.attentions or ())):
        state.retain_grad()
    out.loss.backward()
    assert len(out.hidden_states) == TINY["num_hidden_layers"] + 1
    assert all(h.grad is not None and h.grad.abs().sum() > 0 for h in out.hidden_states)
    if backend == "eager":
        assert len(out.attentions) == TINY["num_hidden_layers"]
        assert all(a.grad is not None and a.grad.abs().sum() > 0 for a in out.attentions)
    else:
        assert out.attentions is None  # not asked for


def test_attentions_with_sdpa_say_they_need_eager(caplog):
    model = HfBertModel(HfBertConfig(**TINY)).eval()
    inputs, _ = padded_batch(HfBertModel)
    transformers.utils.logging.get_logger(__name__).warning_once.cache_clear()  # said once per process
    with torch.no_grad(), caplog.at_level("WARNING", logger="hfbert"):
        out = model(**inputs, output_attentions=True)
    assert out.attentions == ()
    assert "computed only with attn_implementation='eager', not 'sdpa'" in caplog.text
    model.set_attn_implementation("eager")
    with torch.no_grad():
        probs = model(**inputs, output_attentions=True).attentions[0]
    assert probs.shape == (BATCH, TINY["num_attention_heads"], LENGTH, LENGTH)


def test_packed_row_counts_come_in_a_few_sizes_and_the_extra_rows_change_nothing():
    """The row count of a packed batch is rounded up to a few sizes (so that a run's memory does not grow with
    every new count); the rounding rows are padding positions, which change no output and get no gradient."""
    assert [unpadding_hfbert.bucket(n) for n in (1, 64, 65, 1000, 1025, 3000, 4096)] == [64, 64, 128, 1024, 1152,
                                                                                          3072, 4096]
    g = torch.Generator().manual_seed(0)
    counts = set()
    for _ in range(200):
        lengths = torch.randint(1, 129, (32,), generator=g)
        rows = unpadding_hfbert.PackedRows.from_mask((torch.arange(128) < lengths[:, None]).long())
        assert rows.real == int(lengths.sum()) <= len(rows.indices) <= rows.real * 9 // 8 + 64
        assert len(set(rows.indices.tolist())) == len(rows.indices)
        counts.add(len(rows.indices))
    assert len(counts) <= 12, sorted(counts)
    model = HfBertForPreTraining(HfBertConfig(**TINY)).train()
    inputs, labels = padded_batch(HfBertForPreTraining)
    nsp = torch.tensor([0, 1, 0, 1])
    packed = model(**inputs, labels=labels, next_sentence_label=nsp)
    assert unpadding_hfbert.PackedRows.from_mask(inputs["attention_mask"]).real < BATCH * LENGTH
    padded = model(**inputs, labels=labels, next_sentence_label=nsp, output_hidden_states=True)  # runs padded
    torch.testing.assert_close(packed.loss, padded.loss, atol=1e-6, rtol=1e-5)
    bare = HfBertModel(HfBertConfig(**TINY, padding_free=True))
    out = bare(**inputs)
    assert (out.last_hidden_state[inputs["attention_mask"] == 0] == 0).all()  # no rounding row is returned


def test_packing_from_the_lengths_on_the_host_is_the_packing_the_mask_gives(monkeypatch):
    """What a collator knows (each row's length) gives the packing the model would find in the mask, and the
    model given it computes bitwise what it computes without, never looking at the mask for it."""
    g = torch.Generator().manual_seed(1)
    for _ in range(100):
        batch, length = int(torch.randint(1, 9, (1,), generator=g)), int(torch.randint(2, 80, (1,), generator=g))
        lengths = torch.randint(1, length + 1, (batch,), generator=g)
        found = unpadding_hfbert.PackedRows.from_mask((torch.arange(length) < lengths[:, None]).long())
        given = unpadding_hfbert.PackedRows.from_lengths(lengths.tolist(), length)
        if found is None:  # no padding: the model runs padded, or on the whole batch as its rows
            assert int(lengths.sum()) == batch * length and torch.equal(given.indices, torch.arange(batch * length))
            assert given.cu_seqlens.tolist() == [k * length for k in range(batch + 1)] + [batch * length]
        else:
            assert torch.equal(found.indices, given.indices) and torch.equal(found.cu_seqlens, given.cu_seqlens)
            assert (found.max_seqlen, found.real, found.batch) == (given.max_seqlen, given.real, given.batch)
    with pytest.raises(ValueError, match="a sequence of 9 tokens does not fit a batch of width 8"):
        unpadding_hfbert.PackedRows.from_lengths([9, 3], 8)
    assert unpadding_hfbert.PackedRows.from_lengths([0, 3], 8) is None  # [CLS] of the first row would be missing
    model = HfBertForPreTraining(HfBertConfig(**TINY)).train()
    inputs, labels = padded_batch(HfBertForPreTraining)
    nsp = torch.tensor([0, 1, 0, 1])
    given = unpadding_hfbert.PackedRows.from_lengths(inputs["attention_mask"].sum(1), LENGTH)
    torch.manual_seed(0)
    found_out = model(**inputs, labels=labels, next_sentence_label=nsp)
    looked = []
    monkeypatch.setattr(unpadding_hfbert.PackedRows, "from_mask", classmethod(lambda cls, mask: looked.append(1)))
    torch.manual_seed(0)
    positions = (labels.flatten() != -100).nonzero().squeeze(1)
    given_out = model(**inputs, labels=labels, next_sentence_label=nsp, packed_rows=given,
                      supervised_positions=positions)
    assert not looked
    assert torch.equal(found_out.loss, given_out.loss)
    assert torch.equal(found_out.prediction_logits, given_out.prediction_logits)
    full = {**inputs, "attention_mask": torch.ones_like(inputs["attention_mask"])}
    whole = unpadding_hfbert.PackedRows.from_lengths([LENGTH] * BATCH, LENGTH)
    monkeypatch.undo()
    padded = model(**full, labels=labels, next_sentence_label=nsp)  # nothing to skip: runs padded
    as_rows = model(**full, labels=labels, next_sentence_label=nsp, packed_rows=whole)
    torch.testing.assert_close(padded.loss, as_rows.loss, atol=1e-6, rtol=1e-5)


def test_packed_rows_reach_flex_attention_as_one_sequence_with_a_document_mask(monkeypatch):
    """flex attention takes the packed rows as they are, with a mask that lets a row see its own sequence only; the
    outputs equal the padded computation's. This is the GPU's path: torch's compiled CPU flex kernel cannot be built
    for the mask (and is inexact on some CPUs, see above), so this runs flex attention uncompiled, on the CPU; what is
    tested is hfbert's packing and mask, not the kernel."""
    import transformers.integrations.flex_attention as flex_integration
    from torch.nn.attention.flex_attention import flex_attention

    monkeypatch.setattr(flex_integration, "compile_friendly_flex_attention",
                        lambda query, key, value, training=False, **kwargs: flex_attention(query, key, value, **kwargs))
    flex = unpadding_hfbert.ATTENTION_BACKENDS["flex_attention"]
    monkeypatch.setitem(unpadding_hfbert.ATTENTION_BACKENDS, "flex_attention",
                        dataclasses.replace(flex, packed_rows_on_cpu=None))  # a GPU's layout
    masks = []
    document_mask = unpadding_hfbert.PackedRows.document_mask
    monkeypatch.setattr(unpadding_hfbert.PackedRows, "document_mask",
                        lambda self: masks.append(document_mask(self)) or masks[-1])
    model, _ = twin(HfBertForPreTraining)
    inputs, labels = padded_batch(HfBertForPreTraining)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that uncompiled flex attention is for debugging
        reference = model(**inputs, labels=labels)
        model.set_attn_implementation("flex_attention")
        packed = model(**inputs, labels=labels)
    assert len(masks) == TINY["num_hidden_layers"] and all(m is masks[0] for m in masks)  # built once per batch
    for name in ("prediction_logits", "seq_relationship_logits"):
        torch.testing.assert_close(packed[name], reference[name], atol=1e-5, rtol=1e-5, msg=name)
    rows = unpadding_hfbert.PackedRows.from_mask(inputs["attention_mask"])
    sequence = torch.repeat_interleave(torch.arange(len(rows.cu_seqlens) - 1), rows.cu_seqlens.diff())
    positions = torch.arange(len(rows.indices))
    dense = masks[0].mask_mod(0, 0, positions[:, None], positions[None, :])
    assert torch.equal(dense, sequence[:, None] == sequence[None, :])  # block diagonal: one block per sequence
