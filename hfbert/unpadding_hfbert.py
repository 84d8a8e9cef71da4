"""Skipping padding: the real tokens of a padded batch packed into rows (MosaicBERT's unpadding).

A padded batch (B, T) holds R <= B * T real tokens. Packed, the encoder's linear layers, LayerNorms and feed-forward
run on (R, D) rows instead of (B, T, D), so a batch costs about its real tokens. Attention is the one place that needs
to know where each row came from, and each attention backend takes the rows in one of three layouts
(:data:`ATTENTION_BACKENDS`): FlashAttention as they are (its variable-length form, with ``cu_seqlens`` marking where
each sequence starts); flex attention on a GPU as one packed sequence with a document mask (a row sees the rows of its
own sequence, :meth:`PackedRows.document_mask`; torch's compiled CPU flex kernel cannot be built for that mask); eager
and sdpa back as (B, N, T, H) with zeros at the padding positions, which the padding mask hides, their output packed
again: eager because it returns (B, N, T, T) probabilities, sdpa because transformers' sdpa function takes dense
tensors only. The re-padding is three scatters and a gather per layer, forward and backward.

Where the rows sit is known on the host when a batch is made from its sequences' lengths: :meth:`PackedRows.
from_lengths` computes the packing there, and the model takes it as ``packed_rows``, so that the device is not asked
(and waited for) to find it again in the mask, as :meth:`PackedRows.from_mask` does for a batch that comes without.

The number of rows is rounded up to one of a few sizes (at most 1/8 more rows, :func:`bucket`) by adding padding
positions as rows: their rows are computed like any padding position, hidden from attention as keys (for
FlashAttention they form a sequence of their own), and never returned. Without that, every batch has a new row
count, and every size the allocator and the kernels have seen stays in the process, which then grows with its steps.

This file travels to the Hub as remote code with ``modeling_hfbert.py``: it imports only torch and transformers.
"""
from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from transformers.utils.generic import is_flash_attention_requested


def bucket(rows: int) -> int:
    """``rows`` rounded up to a multiple of 64, or of 1/8 of its power of two when that is larger: eight sizes per
    doubling, at most 1/8 extra."""
    step = max(64, 1 << max(rows.bit_length() - 4, 0))
    return -(-rows // step) * step


# How a backend takes the packed (R', N, H) rows: "varlen" as they are, with ``cu_seqlens`` (FlashAttention's
# variable-length form); "document_mask" as one sequence of R' rows with a mask that keeps each row to its own
# sequence; "padded" scattered back to (B, N, T, H), with the padded batch's mask.
Layout = Literal["varlen", "document_mask", "padded"]


@dataclass(frozen=True)
class AttentionBackend:
    """What hfbert needs to know about one of transformers' attention backends (``config._attn_implementation``)."""

    packed_rows: Layout
    packed_rows_on_cpu: Layout | None = None  # where torch's CPU kernel needs another layout (None: the same)
    probabilities: bool = False  # computes the (B, N, T, T) attention probabilities, through the module's dropout
    dropout_in_training: bool = True  # takes attention-probability dropout in training
    backward_on_cpu: bool = True  # torch can train with it on a CPU
    compiles_per_shape: bool = False  # compiles a kernel for the first shapes it meets
    kernel: str | None = None  # the package its kernel comes from, when that is not torch

    def layout(self, device: torch.device) -> Layout:
        """How the packed rows go into attention on ``device``."""
        if device.type == "cpu" and self.packed_rows_on_cpu is not None:
            return self.packed_rows_on_cpu
        return self.packed_rows


ATTENTION_BACKENDS: dict[str, AttentionBackend] = {
    "eager": AttentionBackend("padded", probabilities=True),
    "sdpa": AttentionBackend("padded"),
    "flex_attention": AttentionBackend("document_mask", packed_rows_on_cpu="padded", dropout_in_training=False,
                                       backward_on_cpu=False, compiles_per_shape=True),
    "flash_attention_2": AttentionBackend("varlen", kernel="flash_attn"),
    "flash_attention_3": AttentionBackend("varlen", kernel="flash_attn_interface"),
}


def attention_backend(name: str) -> AttentionBackend:
    """The entry of :data:`ATTENTION_BACKENDS` for ``name``. A backend the table does not list (a kernels-hub one,
    say) takes the rows as FlashAttention does if transformers counts it as FlashAttention (its name says
    "flash"), else padded."""
    if name in ATTENTION_BACKENDS:
        return ATTENTION_BACKENDS[name]
    if is_flash_attention_requested(requested_attention_implementation=name):
        return AttentionBackend("varlen")
    return AttentionBackend("padded")


@dataclass
class PackedRows:
    """Where the rows of a (B, T) batch sit: ``indices`` (R',) into the flattened batch, the R real tokens first,
    then R' - R padding positions that round the count up (:func:`bucket`); ``cu_seqlens`` (B + 2,) the offsets of
    each sequence's first row and of the extra rows; ``max_seqlen`` the longest of them."""

    indices: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    batch: int
    length: int
    real: int  # R
    _document_mask: BlockMask | None = field(default=None, init=False, repr=False)  # built on first use, then reused

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
        flat = real.flatten()
        count = int(lengths.sum())
        extra = min(bucket(count), flat.numel()) - count
        indices = torch.cat([flat.nonzero().squeeze(1), (~flat).nonzero().squeeze(1)[:extra]])  # (R',)
        ends = torch.cat([lengths.cumsum(0, dtype=torch.int32), lengths.new_tensor([count + extra])])
        return cls(
            indices=indices,
            cu_seqlens=F.pad(ends, (1, 0)),
            max_seqlen=max(int(lengths.max()), extra),
            batch=real.shape[0],
            length=real.shape[1],
            real=count,
        )

    @classmethod
    def from_lengths(cls, lengths: Sequence[int] | torch.Tensor, length: int) -> PackedRows | None:
        """The packing of a right-padded (B, ``length``) batch whose sequences hold ``lengths`` tokens: what
        :meth:`from_mask` finds in its mask, computed on the host (move it with :meth:`to`). A batch without
        padding is packed too (its rows are the whole batch), so that a model given it need not look at the mask;
        None only where packing cannot reproduce the padded computation (an empty sequence)."""
        lengths = torch.as_tensor(lengths, dtype=torch.int64, device="cpu")
        if lengths.numel() and int(lengths.max()) > length:
            raise ValueError(f"a sequence of {int(lengths.max())} tokens does not fit a batch of width {length}")
        if lengths.numel() == 0 or int(lengths.min()) < 1:
            return None
        rows = len(lengths) * length
        if int(lengths.sum()) == rows:  # no padding
            ends = torch.arange(1, len(lengths) + 1, dtype=torch.int32) * length
            return cls(indices=torch.arange(rows), cu_seqlens=F.pad(torch.cat([ends, ends[-1:]]), (1, 0)),
                       max_seqlen=length, batch=len(lengths), length=length, real=rows)
        return cls.from_mask(torch.arange(length) < lengths[:, None])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PackedRows:
        """The same packing with its index tensors on ``device``."""
        return replace(self, indices=self.indices.to(device, non_blocking=non_blocking),
                       cu_seqlens=self.cu_seqlens.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> PackedRows:
        return replace(self, indices=self.indices.pin_memory(), cu_seqlens=self.cu_seqlens.pin_memory())

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (R', ...)."""
        return x.flatten(0, 1).index_select(0, self.indices)

    def unpack(self, x: torch.Tensor, real_only: bool = False) -> torch.Tensor:
        """(R', ...) -> (B, T, ...); zeros at the padding positions (all of them with ``real_only``, else those that
        are not rows)."""
        indices = self.indices[: self.real] if real_only else self.indices
        x = x[: self.real] if real_only else x
        padded = x.new_zeros(self.batch * self.length, *x.shape[1:])
        return padded.index_copy(0, indices, x).view(self.batch, self.length, *x.shape[1:])

    def document_mask(self) -> BlockMask:
        """flex attention's mask over the R' packed rows as one sequence: a row attends to the rows of its own
        sequence only (the rounding rows form a sequence of their own). Built once per batch, shared by the layers."""
        if self._document_mask is None:
            rows = len(self.indices)
            sequence = torch.repeat_interleave(  # (R',) which sequence each row belongs to
                torch.arange(len(self.cu_seqlens) - 1, device=self.indices.device), self.cu_seqlens.diff(),
                output_size=rows)

            def same_sequence(batch, head, query_row, key_row):
                return sequence[query_row] == sequence[key_row]

            # Compiled, as transformers builds its flex masks: block by block, never an R' x R' tensor (on a CPU,
            # which takes this path only in tests, it is evaluated whole).
            self._document_mask = create_block_mask(same_sequence, None, None, rows, rows, device=sequence.device,
                                                    _compile=sequence.device.type != "cpu")
        return self._document_mask

    def attention(self, attention: Callable, module, query, key, value, attention_mask, **kwargs):
        """``attention`` (a transformers attention function) over packed (R', N, H) rows -> context (R', N, H), and the
        attention probabilities if the backend returns them. ``attention_mask`` is the padded batch's mask."""
        layout = attention_backend(module.config._attn_implementation).layout(query.device)
        if layout == "padded":
            query, key, value = (self.unpack(x).transpose(1, 2) for x in (query, key, value))  # (B, N, T, H)
            context, probs = attention(module, query, key, value, attention_mask, **kwargs)  # (B, T, N, H)
            return self.pack(context), probs
        query, key, value = (x.transpose(0, 1).unsqueeze(0) for x in (query, key, value))  # (1, N, R', H)
        if layout == "varlen":
            context, probs = attention(
                module, query, key, value, None,
                cu_seq_lens_q=self.cu_seqlens, cu_seq_lens_k=self.cu_seqlens,
                max_length_q=self.max_seqlen, max_length_k=self.max_seqlen, **kwargs,
            )
        else:
            context, probs = attention(module, query, key, value, self.document_mask(), **kwargs)
        return context.squeeze(0), probs  # (1, R', N, H) -> (R', N, H)

__all__ = ["ATTENTION_BACKENDS", "AttentionBackend", "PackedRows", "attention_backend", "bucket"]
