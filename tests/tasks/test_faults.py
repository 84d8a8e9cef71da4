"""Bit-flip injection (hfbert.faults) and the robustness command (hfbert robustness: hfbert.robustness).

Tiny BERTs (hidden 32, 2 layers, 4 heads, intermediate 37, vocab 99) so the statistics run in milliseconds.
"""

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

from hfbert import HfBertConfig, HfBertForSequenceClassification
from hfbert.faults import (
    activation_faults,
    inject_weight_faults,
    resolve_bits,
    restore_weights,
    sample_bit_flips,
    select_parameters,
    weight_faults,
)
from hfbert.robustness import main as robustness_main

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=16, num_labels=2)


def _hfbert(**overrides) -> HfBertForSequenceClassification:
    return HfBertForSequenceClassification(HfBertConfig(**{**TINY, **overrides})).eval()


def _int_view(t: torch.Tensor) -> torch.Tensor:
    """The raw bit pattern: comparing these is bitwise, NaN-safe equality."""
    return t.detach().view({4: torch.int32, 2: torch.int16, 8: torch.int64}[t.element_size()]).clone()


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: _int_view(p) for name, p in model.named_parameters()}


def _assert_bitwise_equal(model: nn.Module, snapshot: dict[str, torch.Tensor]) -> None:
    for name, p in model.named_parameters():
        assert torch.equal(_int_view(p), snapshot[name]), f"{name} was not restored bitwise"


@pytest.fixture
def model():
    return _hfbert()


# ---------------------------------------------------------------------------------------------- statistics


@pytest.mark.slow
def test_flip_count_matches_binomial_expectation(model):
    """200 injections at ber=2e-3 over N eligible bits: K ~ Binomial(N, p).

    Tolerances: the mean of 200 draws within 4 standard errors of N*p, and the sample variance within 40% of
    N*p*(1-p) (its relative standard deviation is sqrt(2/199) = 0.10, so 4 sigma).
    """
    ber, draws = 2e-3, 200
    counts = []
    for seed in range(draws):
        with weight_faults(model, ber, sites="all", bits="all", seed=seed) as record:
            counts.append(record.n_flips)
    n_bits = sum(p.numel() for p in model.parameters()) * 32
    assert record.n_eligible_bits == n_bits
    expected, variance = n_bits * ber, n_bits * ber * (1 - ber)
    counts = np.asarray(counts, dtype=np.float64)
    assert abs(counts.mean() - expected) <= 4 * math.sqrt(variance / draws), (counts.mean(), expected)
    assert 0.6 <= counts.var(ddof=1) / variance <= 1.4


def test_flipped_bits_are_uniform_over_positions_and_tensors():
    """With bits="all", each of the 32 positions is equally likely (chi-square, 31 dof, p < 1e-4 cutoff 70)
    and a tensor's share of flips matches its share of elements (4 sigma)."""
    rng = np.random.default_rng(0)
    numels = [1000, 3000, 6000]
    tensor_ids, elements, slots = sample_bit_flips(numels, 32, 0.05, rng)
    n = len(slots)
    observed = np.bincount(slots, minlength=32)
    chi2 = float(((observed - n / 32) ** 2 / (n / 32)).sum())
    assert chi2 < 70.0
    share = float(np.mean(tensor_ids == 2))
    assert abs(share - 0.6) <= 4 * math.sqrt(0.6 * 0.4 / n)
    assert np.all(elements < np.asarray(numels)[tensor_ids])
    # Without replacement: no bit is hit twice.
    assert len({(t, e, s) for t, e, s in zip(tensor_ids, elements, slots, strict=True)}) == n


def test_sampling_cost_does_not_grow_with_the_number_of_bits():
    """10^12 eligible bits at 1e-8: ~10^4 flips, drawn without ever allocating anything of size 10^12."""
    rng = np.random.default_rng(1)
    tensor_ids, elements, slots = sample_bit_flips([10**11, 10**11 // 2], 8, 1e-8, rng)
    expected = 1.5e11 * 8 * 1e-8
    assert abs(len(elements) - expected) <= 5 * math.sqrt(expected)
    assert np.all(slots < 8) and np.all(elements < 10**11)


# ---------------------------------------------------------------------------------- determinism and undo


def test_same_seed_same_flips_and_other_seed_other_flips(model):
    with weight_faults(model, 1e-3, sites="encoder", bits="mantissa", seed=7) as first:
        pass
    with weight_faults(model, 1e-3, sites="encoder", bits="mantissa", seed=7) as again:
        pass
    with weight_faults(model, 1e-3, sites="encoder", bits="mantissa", seed=8) as other:
        pass
    assert first.n_flips > 0
    assert first.flips == again.flips
    assert first.flips != other.flips


def test_record_names_exactly_the_bits_that_changed(model):
    before = _snapshot(model)
    record = inject_weight_faults(model, 1e-3, sites="embeddings,head", bits="exponent", seed=3)
    try:
        expected = {name: torch.zeros_like(v).view(-1) for name, v in before.items()}
        for flip in record.flips:
            expected[flip.tensor][flip.index] ^= 1 << flip.bit
        for name, p in model.named_parameters():
            assert torch.equal((_int_view(p) ^ before[name]).view(-1), expected[name]), name
        assert {f.tensor for f in record.flips} <= {n for n, _ in select_parameters(model, "embeddings,head")}
        assert all(23 <= f.bit <= 30 for f in record.flips)
        json.dumps(record.to_dict())  # the record is JSON-ready
    finally:
        restore_weights(model, record)
    _assert_bitwise_equal(model, before)


def test_exit_restores_every_parameter_bitwise_even_after_nans_and_errors(model):
    before = _snapshot(model)
    x = torch.randint(0, 99, (2, 5))
    with weight_faults(model, 0.3, sites="all", bits="all", seed=0) as record:
        assert not torch.isfinite(model(input_ids=x).logits).all()  # 30% of all bits: the model is destroyed
    assert record.n_flips > 1000
    _assert_bitwise_equal(model, before)
    with pytest.raises(KeyError):
        with weight_faults(model, 0.01, sites="encoder", bits="sign", seed=1):
            raise KeyError("boom")
    _assert_bitwise_equal(model, before)


def test_nested_injections_restore_in_order(model):
    before = _snapshot(model)
    with weight_faults(model, 0.02, sites="encoder", seed=1):
        with weight_faults(model, 0.02, sites="all", seed=2):
            pass
    _assert_bitwise_equal(model, before)


@pytest.mark.parametrize(("dtype", "n_bits"), [(torch.float32, 32), (torch.bfloat16, 16), (torch.float16, 16)])
def test_flips_happen_in_the_bit_pattern_of_the_dtype(dtype, n_bits):
    layer = nn.Linear(8, 8).to(dtype)
    original = layer.weight.detach().clone()
    # Every sign bit (the top bit of the dtype's pattern) at rate 1: each value is negated, exactly.
    with weight_faults(layer, 1.0, sites="re:weight", bits="sign", dtype=dtype, seed=0) as record:
        assert torch.equal(layer.weight, -original)
        assert record.n_flips == 64 and {f.bit for f in record.flips} == {n_bits - 1}
    assert torch.equal(_int_view(layer.weight), _int_view(original))
    # The lowest exponent bit at rate 1 halves or doubles every normal value.
    exponent_lsb = resolve_bits("exponent", dtype)[0]
    with weight_faults(layer, 1.0, sites="re:weight", bits=[exponent_lsb], seed=0):
        ratio = (layer.weight.float() / original.float()).abs()
        assert bool(((ratio == 2.0) | (ratio == 0.5)).all())


def test_bit_classes_per_dtype():
    assert resolve_bits("mantissa", "fp32") == tuple(range(23))
    assert resolve_bits("exponent", "bf16") == tuple(range(7, 15))
    assert resolve_bits("exponent", "fp16") == tuple(range(10, 15))
    assert resolve_bits("sign,0", "fp16") == (0, 15)
    assert resolve_bits([31, "mantissa"], torch.float32) == (*range(23), 31)


# ---------------------------------------------------------------------------------------------- sites


def test_named_sites_follow_the_bert_parameter_layout(model):
    def names(site):
        return [n for n, _ in select_parameters(model, site)]

    assert names("embeddings") and all(n.startswith("bert.embeddings.") for n in names("embeddings"))
    assert names("head") == ["classifier.weight", "classifier.bias"]
    assert all(".attention." in n for n in names("attention"))
    ffn = names("feed_forward")
    assert ffn and all(".intermediate." in n or ".output." in n for n in ffn)
    assert not any(".attention." in n for n in ffn)
    assert all("LayerNorm" in n for n in names("layernorm")) and len(names("layernorm")) == 2 * (1 + 2 * 2)
    assert names("re:query\\.weight$") == [f"bert.encoder.layer.{i}.attention.self.query.weight" for i in range(2)]
    # The same names on transformers' own BERT: the sites are not tied to hfbert's classes.
    reference = BertForSequenceClassification(BertConfig(**TINY))
    assert [n for n, _ in select_parameters(reference, "ffn")] == ffn


def test_any_module_works_with_regex_sites():
    net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    before = _snapshot(net)
    with weight_faults(net, 0.05, sites="re:^2\\.", seed=0) as record:
        assert {f.tensor for f in record.flips} <= {"2.weight", "2.bias"} and record.n_flips > 0
        assert torch.equal(_int_view(net[0].weight), before["0.weight"])
    _assert_bitwise_equal(net, before)


# --------------------------------------------------------------------------------------------- activations


def test_activation_faults_are_seeded_and_leave_no_hooks_behind(model):
    x = torch.randint(0, 99, (3, 6))
    hooked = ("bert.embeddings", "bert.encoder.layer.0", "bert.encoder.layer.1")
    sizes = []  # what the hooks will see: the model may unpad tokens or keep only [CLS] in the last layer
    counters = [model.get_submodule(name).register_forward_hook(
        lambda module, args, out: sizes.extend(t.numel() for t in (out if isinstance(out, tuple) else (out,))
                                               if isinstance(t, torch.Tensor))) for name in hooked]
    with torch.no_grad():
        clean = model(input_ids=x).logits
        for handle in counters:
            handle.remove()
        with activation_faults(model, 0.0, sites="embeddings,layer_outputs,logits", seed=0) as zero:
            assert torch.equal(model(input_ids=x).logits, clean)
        outs = []
        for _ in range(2):
            with activation_faults(model, 0.01, sites="embeddings,layer_outputs", bits="mantissa", seed=4) as rec:
                outs.append(model(input_ids=x).logits)
        assert torch.equal(model(input_ids=x).logits, clean)  # hooks removed
    assert zero.n_flips == 0 and zero.n_eligible_bits > 0
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], clean)
    assert rec.n_eligible_bits == sum(sizes) * 23  # every float output element, 23 mantissa bits each
    assert all(name.startswith(hooked) and "@call" in name for name in rec.per_tensor())


def test_gradients_pass_straight_through_activation_flips():
    net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    x = torch.randn(5, 4, requires_grad=True)
    net(x).sum().backward()
    clean_grad = net[2].weight.grad.clone()
    net.zero_grad()
    with activation_faults(net, 0.05, sites="re:^2$", bits="mantissa", seed=0) as record:
        out = net(x)
    out.sum().backward()
    assert record.n_flips > 0
    # d(sum of logits)/d(last weight) does not depend on the logits, so the straight-through gradient is exact.
    assert torch.equal(net[2].weight.grad, clean_grad)


def test_attention_probabilities_need_materialised_probabilities():
    x = torch.randint(0, 99, (2, 6))
    eager = _hfbert(attn_implementation="eager")
    with torch.no_grad():
        clean = eager(input_ids=x).logits
        with activation_faults(eager, 0.05, sites="attention_probs", seed=0) as record:
            corrupted = eager(input_ids=x).logits
    assert record.n_flips > 0 and not torch.equal(clean, corrupted)
    assert all(".attention.self.dropout@" in name for name in record.per_tensor())
    with pytest.raises(ValueError, match="attn_implementation='eager'"):
        with activation_faults(_hfbert(attn_implementation="sdpa"), 0.05, sites="attention_probs"):
            pass
    # transformers' own eager attention applies dropout functionally: the hook would see nothing -> loud error.
    reference = BertForSequenceClassification(BertConfig(**TINY, attn_implementation="eager")).eval()
    with pytest.raises(RuntimeError, match="cannot be reached"):
        with activation_faults(reference, 0.05, sites="attention_probs"), torch.no_grad():
            reference(input_ids=x)


# ----------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("ber", [-0.1, 1.5, float("nan")])
def test_rate_outside_unit_interval_is_rejected(model, ber):
    with pytest.raises(ValueError, match="bit error rate must be in \\[0, 1\\]"):
        with weight_faults(model, ber):
            pass
    with pytest.raises(ValueError, match="bit error rate"):
        with activation_faults(model, ber):
            pass


def test_bad_inputs_are_clear_errors(model):
    before = _snapshot(model)
    with pytest.raises(TypeError, match="ber must be a number"):
        inject_weight_faults(model, "1e-3")
    with pytest.raises(ValueError, match="unknown site 'decoder'"):
        inject_weight_faults(model, 1e-3, sites="embeddings,decoder")
    with pytest.raises(ValueError, match="unknown site 'softmax'"):
        with activation_faults(model, 1e-3, sites="softmax"):
            pass
    with pytest.raises(ValueError, match="matches no"):
        inject_weight_faults(nn.Linear(2, 2), 1e-3, sites="embeddings")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        inject_weight_faults(model, 1e-3, sites="re:(")
    with pytest.raises(ValueError, match="does not use float16"):
        inject_weight_faults(model, 1e-3, dtype="fp16")
    with pytest.raises(ValueError, match="does not use bfloat16"):
        with activation_faults(model, 1e-3, dtype="bf16"):
            pass
    with pytest.raises(ValueError, match="unknown dtype"):
        inject_weight_faults(model, 1e-3, dtype="int8")
    with pytest.raises(ValueError, match="outside 0..31"):
        inject_weight_faults(model, 1e-3, bits=[32])
    with pytest.raises(ValueError, match="unknown bit selection 'fraction'"):
        inject_weight_faults(model, 1e-3, bits="fraction")
    with pytest.raises(TypeError, match="torch.nn.Module"):
        inject_weight_faults({"w": torch.zeros(2)}, 1e-3)
    _assert_bitwise_equal(model, before)  # every check ran before anything was touched


# ---------------------------------------------------------------------------------------- robustness CLI


WORDS = ["good", "great", "fine", "bad", "awful", "dull", "movie", "film", "plot", "the"]


@pytest.fixture
def classifier_dir(tmp_path):
    vocab = tmp_path / "tok"
    vocab.mkdir()
    (vocab / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    tokenizer = BertTokenizerFast.from_pretrained(vocab)
    model = _hfbert(vocab_size=len(WORDS) + 5)
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    rng = np.random.default_rng(0)
    rows = [{"text": " ".join(rng.choice(WORDS, size=5)), "label": int(rng.integers(2))} for _ in range(24)]
    data = tmp_path / "eval.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "model", data


@pytest.mark.slow
def test_robustness_cli_writes_table_json_and_plot(classifier_dir, tmp_path, capsys):
    model_dir, data = classifier_dir
    argv = ["--model", str(model_dir), "--data", str(data), "--ber", "1e-3,0.05", "--trials", "2",
            "--sites", "embeddings,head", "--bits", "exponent,mantissa", "--batch-size", "8"]
    assert robustness_main([*argv, "--output", str(tmp_path / "a")]) == 0
    assert robustness_main([*argv, "--output", str(tmp_path / "b")]) == 0
    lines = (tmp_path / "a" / "robustness.csv").read_text().strip().splitlines()
    assert lines[0].startswith("site,bits,ber,trials,accuracy_mean,accuracy_std")
    assert len(lines) == 1 + 2 * 2 * 2  # sites x bit classes x rates
    result = json.loads((tmp_path / "a" / "robustness.json").read_text())
    assert len(result["trials"]) == 2 * 2 * 2 * 2 and result["settings"]["n_examples"] == 24
    assert 0.0 <= result["clean"]["accuracy"] <= 1.0
    # Same seed, same flips, same numbers.
    assert result["trials"] == json.loads((tmp_path / "b" / "robustness.json").read_text())["trials"]
    assert (tmp_path / "a" / "robustness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # 5% of the 8 exponent bits of the embedding tables: every trial really flipped bits.
    heavy = [r for r in result["trials"] if r["site"] == "embeddings" and r["bits"] == "exponent" and r["ber"] == 0.05]
    assert all(r["n_flips"] > 0 for r in heavy)
    assert "clean: accuracy" in capsys.readouterr().out


def test_robustness_cli_rejects_bad_settings_in_one_line(classifier_dir, tmp_path, capsys):
    model_dir, data = classifier_dir
    base = ["--model", str(model_dir), "--data", str(data), "--output", str(tmp_path / "out")]
    for extra, message in ((["--ber", "2.0"], "--ber values must be in (0, 1]"),
                           (["--ber", "1e-3,x"], "argument --ber: invalid float value: 'x'"),
                           (["--trials", "0"], "--trials must be >= 1, got 0"),
                           (["--sites", ","], "argument --sites: expected at least one argument")):
        with pytest.raises(SystemExit) as exc:
            robustness_main([*base, *extra])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("hfbert robustness: error: ") and message in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit) as exc:
        robustness_main(["--model", str(tmp_path / "no-such-model"), "--data", str(data), "--output", str(tmp_path)])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"hfbert robustness: error: --model {tmp_path / 'no-such-model'}: no such folder\n"
    assert not (tmp_path / "out").exists()  # nothing was written


def test_robustness_cli_names_a_missing_column_in_one_line(classifier_dir, tmp_path, capsys):
    model_dir, data = classifier_dir
    base = ["--model", str(model_dir), "--data", str(data), "--output", str(tmp_path / "out"), "--trials", "1"]
    for spelling in ("--text-column", "--text_column"):
        assert robustness_main([*base, spelling, "sentence"]) == 2
        assert capsys.readouterr().err == (f"hfbert robustness: error: {data}:1 has no column 'sentence' "
                                           "(columns: ['label', 'text'])\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "good film", "label": 1}\n{"text": "dull"\n')
    assert robustness_main([*base, "--data", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"hfbert robustness: error: {bad}:2 is not a JSON line")
    assert not (tmp_path / "out").exists()


def test_error_bars_stay_within_zero_and_one(monkeypatch, tmp_path):
    from matplotlib.axes import Axes

    from hfbert.robustness import clipped_error_bars, plot_curves

    bars = clipped_error_bars(np.array([0.05, 0.5, 0.97]), np.array([0.2, 0.1, 0.2]))
    assert np.allclose(bars, [[0.05, 0.1, 0.2], [0.2, 0.1, 0.03]])  # (lower, upper) per point
    drawn = []
    errorbar = Axes.errorbar
    monkeypatch.setattr(Axes, "errorbar", lambda ax, x, y, yerr=None, **kw: drawn.append((y, yerr)) or
                        errorbar(ax, x, y, yerr=yerr, **kw))
    summary = [{"site": "head", "bits": "exponent", "ber": ber, "accuracy_mean": mean, "accuracy_std": 0.3}
               for ber, mean in ((1e-4, 0.9), (1e-3, 0.1))]
    plot_curves(summary, {"accuracy": 0.95}, tmp_path / "plot.png")
    (y, yerr), = drawn
    assert np.all(y - yerr[0] >= 0.0) and np.all(y + yerr[1] <= 1.0)
    assert np.allclose(yerr, [[0.3, 0.1], [0.1, 0.3]])
