"""Model FLOPs of a training step, for ``hfbert bench``'s work ratio and model FLOPs utilisation."""

from __future__ import annotations

from .contenders import ContenderSpec
from .harness import ratio


def train_flops(config, tokens: int, width: int, rows: int, supervised: int, vocab_logits_everywhere: bool) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward, 2 FLOPs per multiply-add)."""
    d, layers, inner = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    per_token = layers * (4 * d * d + 2 * d * inner + 2 * width * d)  # projections, FFN, attention scores + mix
    head_rows = rows * width if vocab_logits_everywhere else supervised
    return 3 * 2 * (tokens * per_token + head_rows * (d * d + d * config.vocab_size))


def contender_flops(config, spec: ContenderSpec, call: dict) -> float:
    """Model FLOPs of one training step of the contender ``spec`` on the batch ``call`` describes, counted as that
    side computes it: the encoder on every padded position or on the real tokens only, the vocabulary logits at
    every position or at the supervised ones only (see :class:`ContenderSpec`)."""
    encoder = call["rows"] * call["width"] if spec.padded_encoder else call["tokens"]
    return train_flops(config, encoder, call["width"], call["rows"], call["supervised"],
                       vocab_logits_everywhere=spec.logits_everywhere)


def work_ratio(config, spec: ContenderSpec, baseline: ContenderSpec, calls: list[dict]) -> float | None:
    """The baseline's model FLOPs over the contender's on the same batches: the speed-up the contender would have
    if both sides turned FLOPs into time equally well."""
    ours = sum(contender_flops(config, spec, c) for c in calls)
    return ratio(sum(contender_flops(config, baseline, c) for c in calls), ours)
