"""The FLOP model of a BERT pretraining step (:func:`training_flops`), used for the bench's work ratio and model
FLOPs utilisation and by ``benchmarks/gpu_check.py``: one count, so that the two report the same figure for the same
batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from .contenders import ContenderSpec
from .harness import ratio


def training_flops(config, lengths: Sequence[int], supervised: int, padded_width: int | None = None,
                   logits_everywhere: bool = False) -> float:
    """Model FLOPs of one training step of BERT for pretraining (MLM + NSP) on one batch: 2 FLOPs per multiply-add and
    forward + backward = 3 x forward, so 6 FLOPs per multiply-add of the forward pass.

    ``lengths`` are the real tokens of each row. The encoder computes those positions only or, with
    ``padded_width``, every one of the ``padded_width`` positions of each row (the padded batch). Counted, with
    d = hidden size, I = intermediate size, V = vocabulary size:

    - per layer and computed position: the Q, K, V and output projections (4 d^2) and the feed-forward (2 d I);
    - per layer and row of n computed positions: the attention matmuls QK^T and AV, n^2 d each (all heads
      together). Attention is thus counted over the real tokens of each row (sum of n^2), or over the padded width
      when the encoder runs padded;
    - per row: the pooler (d^2) and the NSP classifier (2 d);
    - per supervised position (per computed position with ``logits_everywhere``, as transformers computes the
      vocabulary logits): the MLM transform (d^2) and the vocabulary projection (d V).

    Embedding lookups, layer norms, softmax, activations, biases and the loss are not counted.
    """
    d, inner, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    lengths = [int(n) for n in lengths]
    computed = lengths if padded_width is None else [padded_width] * len(lengths)
    positions = sum(computed)
    encoder = layers * (positions * (4 * d * d + 2 * d * inner) + sum(n * n for n in computed) * 2 * d)
    head = (positions if logits_everywhere else supervised) * (d * d + d * vocab) + len(lengths) * (d * d + 2 * d)
    return 6.0 * (encoder + head)


def model_flops(config, call: dict) -> float:
    """The model FLOPs of the useful work on one batch (the encoder on the real tokens, the MLM head at the supervised
    positions): the same figure for every contender, so that model FLOPs utilisations compare as speeds do. ``call``
    is what the harness records of a pretraining batch (``lengths``, ``supervised``)."""
    return training_flops(config, call["lengths"], call["supervised"])


def contender_flops(config, spec: ContenderSpec, call: dict) -> float:
    """Model FLOPs of one training step of the contender ``spec`` on the batch ``call`` describes, counted as that
    side computes it: the encoder on every padded position or on the real tokens only, the vocabulary logits at
    every position or at the supervised ones only (see :class:`ContenderSpec`)."""
    return training_flops(config, call["lengths"], call["supervised"],
                          padded_width=call["width"] if spec.padded_encoder else None,
                          logits_everywhere=spec.logits_everywhere)


def work_ratio(config, spec: ContenderSpec, baseline: ContenderSpec, calls: list[dict]) -> float | None:
    """The baseline's model FLOPs over the contender's on the same batches: the speed-up the contender would have
    if both sides turned FLOPs into time equally well."""
    ours = sum(contender_flops(config, spec, c) for c in calls)
    return ratio(sum(contender_flops(config, baseline, c) for c in calls), ours)
