"""Skipping padding: the real tokens of a padded batch packed into rows (MosaicBERT's unpadding).

A padded batch (B, T) holds R <= B * T real tokens. Packed, the encoder's linear layers, LayerNorms and feed-forward
run on (R, D) rows instead of (B, T, D), so a batch costs about its real tokens. Attention is the one place that needs
to know where each row came from: FlashAttention takes the packed rows as they are (its variable-length form, with
``cu_seqlens`` marking where each sequence starts); every other backend gets them back as (B, N, T, H) with zeros at
the padding positions, which the padding mask hides, and returns its output packed again.

This file travels to the Hub as remote code with ``modeling_hfbert.py``: it imports only torch and transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.utils.generic import is_flash_attention_requested


@dataclass
class PackedRows:
    """Where the R real tokens of a (B, T) batch sit: ``indices`` (R,) into the flattened batch, ``cu_seqlens``
    (B + 1,) the offsets of each sequence's first row, ``max_seqlen`` the longest sequence."""

    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    batch: int
    length: int

    @classmethod
    def from_mask(cls, attention_mask: torch.Tensor | None) -> PackedRows | None:
        """The packing of ``attention_mask`` (B, T), 1 = token, 0 = padding; None when there is nothing to skip, or
        when packing cannot reproduce the padded computation: a sequence whose first position is padding ([CLS],
        which the pooler reads, would be missing) or a compiled graph (the row count depends on the data)."""
        if attention_mask is None or torch.compiler.is_compiling():
            return None
        real = attention_mask.bool()
        if bool(real.all()) or not bool(real[:, 0].all()):
            return None
        lengths = real.sum(1, dtype=torch.int32)  # (B,)
        return cls(
            indices=real.flatten().nonzero().squeeze(1),
            cu_seqlens=F.pad(lengths.cumsum(0, dtype=torch.int32), (1, 0)),
            max_seqlen=int(lengths.max()),
            batch=real.shape[0],
            length=real.shape[1],
        )

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (R, ...)."""
        return x.flatten(0, 1).index_select(0, self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """(R, ...) -> (B, T, ...), zeros at the padding positions."""
        padded = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return padded.index_copy(0, self.indices, x).view(self.batch, self.length, *x.shape[1:])

    def attention(self, attention: Callable, module, query, key, value, attention_mask, **kwargs):
        """``attention`` (a transformers attention function) over packed (R, N, H) rows -> context (R, N, H), and the
        attention probabilities if the backend returns them. ``attention_mask`` is the padded batch's mask."""
        if is_flash_attention_requested(module.config):
            query, key, value = (x.transpose(0, 1).unsqueeze(0) for x in (query, key, value))  # (1, N, R, H)
            context, probs = attention(
                module, query, key, value, None,
                cu_seq_lens_q=self.cu_seqlens, cu_seq_lens_k=self.cu_seqlens,
                max_length_q=self.max_seqlen, max_length_k=self.max_seqlen, **kwargs,
            )
            return context.squeeze(0), probs  # (1, R, N, H) -> (R, N, H)
        query, key, value = (self.unpack(x).transpose(1, 2) for x in (query, key, value))  # (B, N, T, H)
        context, probs = attention(module, query, key, value, attention_mask, **kwargs)  # (B, T, N, H)
        return self.pack(context), probs


__all__ = ["PackedRows"]
