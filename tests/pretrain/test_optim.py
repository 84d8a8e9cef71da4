"""hfbert.optim: parameter groups, Google's Adam, LAMB, the warmup/decay schedule, and use from Trainer."""

import math

import pytest
import torch
from torch import nn

from hfbert import HfBertConfig, HfBertForPreTraining
from hfbert.optim import (
    AdamGoogle,
    Lamb,
    create_optimizer,
    linear_warmup_decay,
    param_groups,
    warmup_steps_for,
)


def tiny_model():
    config = HfBertConfig.from_preset("tiny", vocab_size=99, hidden_size=32, num_attention_heads=4,
                                      intermediate_size=37, num_hidden_layers=2)
    return HfBertForPreTraining(config)


def test_param_groups_exclude_layernorm_and_biases():
    model = tiny_model()
    decay, plain = param_groups(model, weight_decay=0.01)
    assert decay["weight_decay"] == 0.01 and plain["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    decay_names = {names[id(p)] for p in decay["params"]}
    plain_names = {names[id(p)] for p in plain["params"]}
    assert all("LayerNorm" in n or n.endswith("bias") for n in plain_names)
    assert not any("LayerNorm" in n or n.endswith("bias") for n in decay_names)
    assert "bert.embeddings.word_embeddings.weight" in decay_names  # the tied decoder weight, counted once
    assert "cls.predictions.bias" in plain_names
    assert len(decay_names) + len(plain_names) == len(list(model.parameters()))


def test_adam_google_has_no_bias_correction():
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(5))
    start = weight.detach().clone()
    optimizer = AdamGoogle([{"params": [weight], "weight_decay": 0.1}], lr=0.01, eps=1e-6)
    m = torch.zeros(5)
    v = torch.zeros(5)
    expected = start.clone()
    for step in range(3):
        grad = torch.randn(5)
        weight.grad = grad.clone()
        optimizer.step()
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        expected = expected - 0.01 * (m / (v.sqrt() + 1e-6) + 0.1 * expected)
        torch.testing.assert_close(weight.detach(), expected, rtol=1e-6, atol=1e-7)
    # Without bias correction the first update is |0.1 g| / sqrt(0.001 g^2) = 3.16 x lr per coordinate, not lr.
    weight2 = nn.Parameter(torch.zeros(3))
    weight2.grad = torch.tensor([1.0, -2.0, 0.5])
    AdamGoogle([weight2], lr=0.01).step()
    torch.testing.assert_close(weight2.detach().abs(), torch.full((3,), 0.01 * 0.1 / math.sqrt(0.001)), rtol=1e-4,
                               atol=0)


def test_lamb_trust_ratio_and_plain_adam_without_decay():
    torch.manual_seed(0)
    weight = nn.Parameter(torch.randn(4, 4))
    bias = nn.Parameter(torch.randn(4))
    reference_bias = nn.Parameter(bias.detach().clone())
    before = weight.detach().clone()
    lamb = Lamb([{"params": [weight], "weight_decay": 0.01}, {"params": [bias], "weight_decay": 0.0}], lr=0.1)
    adam = torch.optim.Adam([reference_bias], lr=0.1, eps=1e-6)
    weight.grad = torch.randn(4, 4)
    bias.grad = torch.randn(4)
    reference_bias.grad = bias.grad.clone()
    lamb.step()
    adam.step()
    # With decay, the step is rescaled so that ||delta w|| = lr * ||w|| (the layer-wise trust ratio).
    assert (weight.detach() - before).norm().item() == pytest.approx(0.1 * before.norm().item(), rel=1e-5)
    # Without decay (LayerNorm, biases) LAMB is Adam with bias correction, as in NVIDIA's FusedLAMB.
    torch.testing.assert_close(bias.detach(), reference_bias.detach(), rtol=1e-6, atol=1e-7)


def test_create_optimizer_names_and_errors():
    model = tiny_model()
    assert isinstance(create_optimizer(model, "adamw"), torch.optim.AdamW)
    assert isinstance(create_optimizer(model, "adam_google"), AdamGoogle)
    assert isinstance(create_optimizer(model, "lamb"), Lamb)
    with pytest.raises(ValueError, match="unknown optimizer 'sgd'"):
        create_optimizer(model, "sgd")
    with pytest.raises(ValueError, match="learning rate"):
        create_optimizer(model, "adamw", lr=-1.0)


def test_linear_warmup_decay_schedule_and_state_round_trip():
    weight = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = linear_warmup_decay(optimizer, warmup_steps=4, total_steps=12)
    lrs = []
    for _ in range(12):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[:5] == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0])
    assert lrs[8] == pytest.approx(0.5) and lrs[11] == pytest.approx(0.125)
    assert scheduler.get_last_lr()[0] == 0.0  # decays to zero at total_steps
    restored = linear_warmup_decay(torch.optim.SGD([weight], lr=1.0), warmup_steps=4, total_steps=12)
    restored.load_state_dict(scheduler.state_dict())
    assert restored.last_epoch == 12
    assert warmup_steps_for(1000, 0.1) == 100 and warmup_steps_for(1000, 7) == 7
    with pytest.raises(ValueError, match="warmup_steps"):
        linear_warmup_decay(optimizer, warmup_steps=13, total_steps=12)


@pytest.mark.slow
def test_optimizer_and_schedule_plug_into_trainer(tmp_path):
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(0)
    model = tiny_model()
    rows = {
        "input_ids": torch.randint(5, 99, (8, 12)).tolist(),
        "labels": torch.randint(5, 99, (8, 12)).tolist(),
        "next_sentence_label": [0, 1] * 4,
    }
    optimizer = create_optimizer(model, "adam_google", lr=1e-3)
    scheduler = linear_warmup_decay(optimizer, warmup_steps=1, total_steps=3)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True)
    before = model.bert.embeddings.word_embeddings.weight.detach().clone()
    Trainer(model=model, args=args, train_dataset=Dataset.from_dict(rows), optimizers=(optimizer, scheduler)).train()
    assert not torch.equal(before, model.bert.embeddings.word_embeddings.weight.detach())
    assert scheduler.last_epoch == 3 and scheduler.get_last_lr()[0] == 0.0
