"""Trainer and num_items_in_batch: with gradient accumulation the loss is normalised over the supervised tokens of the
whole optimizer step, so accumulating two batches of B rows makes the same update as one batch of 2B rows, even when
the rows hold different numbers of masked positions."""

import pytest
import torch
import transformers
from datasets import Dataset

from hfbert import HfBertConfig, HfBertForMaskedLM, HfBertForSequenceClassification, HfBertForTokenClassification

TINY = dict(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
            max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
ROWS, LENGTH = 8, 12


def mlm_rows() -> Dataset:
    """Row i supervises i + 1 positions: micro-batches of one optimizer step hold different masked counts."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, TINY["vocab_size"], (ROWS, LENGTH), generator=g)
    labels = torch.full_like(ids, -100)
    for row in range(ROWS):
        positions = torch.randperm(LENGTH, generator=g)[: row + 1]
        labels[row, positions] = ids[row, positions]
        ids[row, positions] = 3  # [MASK]
    return Dataset.from_dict({"input_ids": ids.tolist(), "attention_mask": [[1] * LENGTH] * ROWS,
                              "labels": labels.tolist()})


def trained(tmp_path, batch_size, accumulation, optim):
    torch.manual_seed(0)
    model = HfBertForMaskedLM(HfBertConfig(**TINY))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / f"{batch_size}x{accumulation}"), per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation, max_steps=2, learning_rate=0.1, optim=optim, weight_decay=0.0,
        lr_scheduler_type="constant", warmup_steps=0, max_grad_norm=0.0, seed=0, data_seed=0, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=mlm_rows())
    assert trainer.model_accepts_loss_kwargs  # Trainer passes num_items_in_batch and does not rescale the loss
    trainer.train()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.slow
def test_accumulating_two_batches_equals_one_twice_as_large(tmp_path):
    # SGD: the update is the gradient itself, so the comparison holds to float32 rounding (Adam divides by the
    # gradient's own magnitude, which turns rounding noise in near-zero gradients into full-size steps).
    optim = "sgd"
    initial = {name: p.detach().clone() for name, p in
               (torch.manual_seed(0), HfBertForMaskedLM(HfBertConfig(**TINY)))[1].named_parameters()}
    accumulated = trained(tmp_path, batch_size=2, accumulation=2, optim=optim)
    single = trained(tmp_path, batch_size=4, accumulation=1, optim=optim)
    moved = max((accumulated[name] - initial[name]).abs().max().item() for name in initial)
    assert moved > 1e-3  # the steps did move the weights
    for name, value in single.items():
        torch.testing.assert_close(accumulated[name], value, atol=1e-6, rtol=0, msg=name)


def test_losses_are_sums_over_num_items_in_batch():
    """Each head: the loss with num_items_in_batch=n is the per-item sum over n; without it, the mean."""
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, TINY["vocab_size"], (3, 6), generator=g)
    mlm_labels = torch.where(torch.rand(3, 6, generator=g) < 0.5, ids, -100)
    mlm_labels[:, 0] = ids[:, 0]
    cases = [
        (HfBertForMaskedLM(HfBertConfig(**TINY)), mlm_labels, int((mlm_labels != -100).sum())),
        (HfBertForSequenceClassification(HfBertConfig(**TINY, num_labels=3)), torch.tensor([0, 2, 1]), 3),
        (HfBertForSequenceClassification(HfBertConfig(**TINY, num_labels=1)), torch.randn(3), 3),
        (HfBertForTokenClassification(HfBertConfig(**TINY, num_labels=3)), mlm_labels.clamp(-100, 2), None),
    ]
    for model, labels, count in cases:
        count = count or int((labels != -100).sum())
        mean = model(input_ids=ids, labels=labels).loss
        summed = model(input_ids=ids, labels=labels, num_items_in_batch=torch.tensor(4 * count)).loss
        torch.testing.assert_close(summed * 4, mean, msg=type(model).__name__)
