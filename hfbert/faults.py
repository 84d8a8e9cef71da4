"""Seeded, reversible bit-flip (soft-error) injection for robustness studies of BERT and any ``nn.Module``.

Why: a bit flipped in DRAM, SRAM or a register by radiation, voltage scaling or an aggressive approximate
accelerator does not perturb a weight by a little Gaussian noise: it flips *one bit of its floating-point
pattern*. A mantissa flip changes the value by at most a factor of two; a flip of the top exponent bit turns
0.02 into ~7e36 and poisons every activation downstream. A robustness study therefore has to flip bits in the
bit pattern of the dtype the model really stores (fp32, bf16, fp16), choose which bits can be hit, and be
exactly repeatable (same seed -> same flips) and exactly reversible (weights restored bitwise).

Model of an error
-----------------
Every eligible bit is hit independently with probability ``ber`` (the bit error rate). Eligible bits are the
selected bit positions (``bits``) of every element of every selected tensor. The number of flips is therefore
drawn once from Binomial(n_eligible_bits, ber) and the flipped positions are chosen uniformly *without
replacement* among all eligible bits -- the same distribution as independent per-bit coin tosses, but no mask
of all bits is ever built: while the flips are under ~2% of the eligible bits (every realistic rate), numpy's
set-based sampler costs O(number of flips), so a 1e-9 rate on a billion-parameter model costs nothing. Above
that, numpy permutes all positions (8 bytes per eligible bit): fine for small models, heavy for big ones.

Bit positions count from the least significant bit of the dtype's integer view (fp32: mantissa 0-22,
exponent 23-30, sign 31; bf16: mantissa 0-6, exponent 7-14, sign 15; fp16: mantissa 0-9, exponent 10-14,
sign 15). Note that ``ber`` is per *eligible* bit: at the same rate, "exponent" (8 bits of fp32) sees
8/23 as many flips as "mantissa" (23 bits).

Where errors go
---------------
* Weights (:func:`inject_weight_faults`, :func:`weight_faults`): parameters chosen by name. Named sites follow
  the transformers/hfbert BERT parameter layout (see :data:`WEIGHT_SITES`); ``"re:<regex>"`` selects any
  parameter names (``re.search``), so any ``nn.Module`` works. Tied parameters are visited once, under the
  first name ``named_parameters()`` gives them. Buffers are not touched.
* Activations (:func:`activation_faults`): forward hooks corrupt a copy of a module's output on every call
  (see :data:`ACTIVATION_SITES`). Attention probabilities are only reachable when the model materialises
  them through a module: with SDPA/flash attention they exist only inside a fused kernel, so that site
  requires ``attn_implementation="eager"`` and a model whose eager path passes the probabilities through its
  ``attention.self.dropout`` module (as the original BERT does). When the hook never sees them, the first
  forward pass raises instead of silently injecting nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .unpadding_hfbert import attention_backend

__all__ = [
    "ACTIVATION_SITES",
    "BIT_CLASSES",
    "WEIGHT_SITES",
    "BitFlip",
    "FaultRecord",
    "activation_faults",
    "inject_weight_faults",
    "resolve_bits",
    "resolve_dtype",
    "restore_weights",
    "sample_bit_flips",
    "select_parameters",
    "weight_faults",
]


@dataclass(frozen=True)
class _Layout:
    """How one float dtype is laid out in its same-width integer view."""

    int_dtype: torch.dtype
    np_uint: type
    np_int: type
    n_bits: int
    n_mantissa: int
    n_exponent: int


_LAYOUTS: dict[torch.dtype, _Layout] = {
    torch.float32: _Layout(torch.int32, np.uint32, np.int32, 32, 23, 8),
    torch.bfloat16: _Layout(torch.int16, np.uint16, np.int16, 16, 7, 8),
    torch.float16: _Layout(torch.int16, np.uint16, np.int16, 16, 10, 5),
    torch.float64: _Layout(torch.int64, np.uint64, np.int64, 64, 52, 11),
}

_DTYPE_NAMES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp64": torch.float64,
    "float64": torch.float64,
}

BIT_CLASSES = ("sign", "exponent", "mantissa", "all")

# Parameter-name patterns (re.search) of BERT's parts, in the transformers/hfbert layout:
# bert.embeddings.*, bert.encoder.layer.N.attention.{self,output}.*, .intermediate.* / .output.* (the FFN),
# bert.pooler.*, and the task heads classifier / cls / qa_outputs.
WEIGHT_SITES: dict[str, str] = {
    "embeddings": r"(^|\.)embeddings\.",
    "encoder": r"(^|\.)encoder\.",
    "attention": r"(^|\.)attention\.",
    # The FFN is "intermediate" plus the layer-level "output" (not "attention.output").
    "feed_forward": r"(^|\.)layer\.\d+\.(intermediate|output)\.",
    "layernorm": r"(^|\.)LayerNorm\.",
    "pooler": r"(^|\.)pooler\.",
    "head": r"^(classifier|cls|qa_outputs)\.",
    "all": r"",
}
_SITE_ALIASES = {"ffn": "feed_forward", "heads": "head", "embedding": "embeddings", "layer_norm": "layernorm"}

# Module-name patterns (re.search) whose outputs the activation hooks corrupt.
ACTIVATION_SITES: dict[str, str] = {
    "embeddings": r"(^|\.)embeddings$",
    "attention_probs": r"(^|\.)attention\.self$",  # the hook sits on its child "dropout", see module docstring
    "layer_outputs": r"(^|\.)encoder\.layer\.\d+$",
    "logits": r"^(classifier|cls|qa_outputs)$",
}


@dataclass(frozen=True)
class BitFlip:
    """One flipped bit: the tensor's name, the element's row-major flat index, and the bit position."""

    tensor: str
    index: int
    bit: int


@dataclass
class _Chunk:
    """The flips that hit one tensor (one call of one hook, for activations)."""

    name: str
    elements: np.ndarray  # flat element index of each flip, non-decreasing
    bits: np.ndarray  # bit position of each flip
    # For weights only: what restore_weights needs (unique touched elements and their original int values).
    touched: torch.Tensor | None = None
    original: torch.Tensor | None = None


@dataclass
class FaultRecord:
    """Every flip of one injection, in the order they were applied.

    Flips are stored as arrays per tensor, so a million flips stay cheap; :attr:`flips` expands them.
    """

    ber: float
    bits: tuple[int, ...]
    dtype: torch.dtype | None
    seed: int
    n_eligible_bits: int = 0
    chunks: list[_Chunk] = field(default_factory=list)

    @property
    def n_flips(self) -> int:
        return sum(len(chunk.elements) for chunk in self.chunks)

    @property
    def flips(self) -> list[BitFlip]:
        return [
            BitFlip(chunk.name, int(index), int(bit))
            for chunk in self.chunks
            for index, bit in zip(chunk.elements, chunk.bits, strict=True)
        ]

    def per_tensor(self) -> dict[str, int]:
        """Number of flips per tensor name (tensors without flips are absent)."""
        counts: dict[str, int] = {}
        for chunk in self.chunks:
            counts[chunk.name] = counts.get(chunk.name, 0) + len(chunk.elements)
        return counts

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary with every flip as ``[tensor, index, bit]``."""
        return {
            "ber": self.ber,
            "bits": list(self.bits),
            "dtype": str(self.dtype).removeprefix("torch.") if self.dtype is not None else None,
            "seed": self.seed,
            "n_eligible_bits": self.n_eligible_bits,
            "n_flips": self.n_flips,
            "flips": [[f.tensor, f.index, f.bit] for f in self.flips],
        }


# ----------------------------------------------------------------------------------------------------------
# Argument resolution (all checks happen here, before anything is touched)
# ----------------------------------------------------------------------------------------------------------


def _check_ber(ber: float) -> float:
    if isinstance(ber, bool) or not isinstance(ber, (int, float)):
        raise TypeError(f"ber must be a number in [0, 1], got {type(ber).__name__} {ber!r}")
    ber = float(ber)
    if not 0.0 <= ber <= 1.0:  # also rejects NaN
        raise ValueError(f"bit error rate must be in [0, 1], got {ber!r}")
    return ber


def _check_seed(seed: int) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"seed must be a non-negative int, got {seed!r}")
    return int(seed)


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """Map "fp32" / "bf16" / "fp16" (or a torch float dtype) to the torch dtype whose bits get flipped."""
    if isinstance(dtype, torch.dtype):
        resolved = dtype
    elif isinstance(dtype, str) and dtype.lower() in _DTYPE_NAMES:
        resolved = _DTYPE_NAMES[dtype.lower()]
    else:
        raise ValueError(f"unknown dtype {dtype!r}; use one of fp32, bf16, fp16 (or fp64)")
    if resolved not in _LAYOUTS:
        raise ValueError(f"bit flips are supported for float32, bfloat16, float16 and float64, not {resolved}")
    return resolved


def resolve_bits(bits: str | int | Iterable[str | int], dtype: str | torch.dtype) -> tuple[int, ...]:
    """Bit positions (0 = least significant) for a bit class, a comma list of classes, or explicit indices.

    ``resolve_bits("exponent", "fp32") == (23, ..., 30)``; ``resolve_bits(["sign", 0], "bf16") == (0, 15)``.
    """
    layout = _LAYOUTS[resolve_dtype(dtype)]
    items: list[str | int]
    if isinstance(bits, str):
        items = [part.strip() for part in bits.split(",")]
    elif isinstance(bits, (int, np.integer)) and not isinstance(bits, bool):
        items = [int(bits)]
    else:
        items = list(bits)
    if not items:
        raise ValueError("bits must name at least one bit class or position")
    m, e = layout.n_mantissa, layout.n_exponent
    classes = {
        "mantissa": range(0, m),
        "exponent": range(m, m + e),
        "sign": range(m + e, layout.n_bits),
        "all": range(0, layout.n_bits),
    }
    positions: set[int] = set()
    for item in items:
        if isinstance(item, str) and item.strip().lower() in classes:
            positions.update(classes[item.strip().lower()])
        elif isinstance(item, str) and item.strip().isdigit():
            positions.add(int(item))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            positions.add(int(item))
        else:
            raise ValueError(f"unknown bit selection {item!r}; use {', '.join(BIT_CLASSES)} or bit indices")
    bad = sorted(p for p in positions if not 0 <= p < layout.n_bits)
    if bad:
        raise ValueError(f"bit positions {bad} are outside 0..{layout.n_bits - 1} of {dtype}")
    return tuple(sorted(positions))


def _site_patterns(sites: str | Iterable[str], known: dict[str, str]) -> dict[str, re.Pattern[str]]:
    """Site names (or ``re:<regex>``) -> compiled patterns; unknown names are an error naming the choices."""
    items = [s.strip() for s in sites.split(",")] if isinstance(sites, str) else [str(s).strip() for s in sites]
    if not items or any(not s for s in items):
        raise ValueError(f"sites must be a non-empty list of site names, got {sites!r}")
    patterns: dict[str, re.Pattern[str]] = {}
    for site in items:
        if site.startswith("re:"):
            try:
                patterns[site] = re.compile(site[3:])
            except re.error as err:
                raise ValueError(f"site {site!r} is not a valid regular expression: {err}") from None
            continue
        name = _SITE_ALIASES.get(site.lower(), site.lower())
        if name not in known:
            raise ValueError(f"unknown site {site!r}; use one of {', '.join(known)} or 're:<regex>'")
        patterns[site] = re.compile(known[name])
    return patterns


def _model_float_dtypes(model: nn.Module) -> set[torch.dtype]:
    return {p.dtype for p in model.parameters() if p.is_floating_point()}


def _check_model_uses(model: nn.Module, dtype: torch.dtype) -> None:
    used = _model_float_dtypes(model)
    if dtype not in used:
        names = ", ".join(sorted(str(d).removeprefix("torch.") for d in used)) or "no floating-point"
        raise ValueError(
            f"the model does not use {str(dtype).removeprefix('torch.')}: its parameters are {names}; "
            f"cast it first (model.to(dtype)) or pick one of those"
        )


def select_parameters(
    model: nn.Module, sites: str | Iterable[str] = "all", dtype: str | torch.dtype | None = None
) -> list[tuple[str, nn.Parameter]]:
    """The parameters a weight injection may hit, in ``named_parameters()`` order.

    Every site must match at least one parameter (a site that matches nothing is almost always a typo or the
    wrong model). With ``dtype=None`` the selected parameters must share one float dtype.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    patterns = _site_patterns(sites, WEIGHT_SITES)
    wanted = resolve_dtype(dtype) if dtype is not None else None
    if wanted is not None:
        _check_model_uses(model, wanted)
    named = [(n, p) for n, p in model.named_parameters() if p.is_floating_point()]
    if wanted is not None:
        named = [(n, p) for n, p in named if p.dtype == wanted]
    for site, pattern in patterns.items():
        if not any(pattern.search(n) for n, _ in named):
            raise ValueError(f"site {site!r} matches no {'' if wanted is None else str(wanted) + ' '}parameter of "
                             f"{type(model).__name__}")
    selected = [(n, p) for n, p in named if any(pat.search(n) for pat in patterns.values())]
    dtypes = {p.dtype for _, p in selected}
    if len(dtypes) > 1:
        raise ValueError(f"the selected parameters mix dtypes {sorted(map(str, dtypes))}; pass dtype= to pick one")
    unsupported = dtypes - set(_LAYOUTS)
    if unsupported:
        raise ValueError(f"bit flips are not supported for parameters of dtype {unsupported.pop()}")
    return selected


# ----------------------------------------------------------------------------------------------------------
# Sampling and flipping
# ----------------------------------------------------------------------------------------------------------


def sample_bit_flips(
    numels: Sequence[int], n_bit_positions: int, ber: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw which bits flip among ``sum(numels) * n_bit_positions`` eligible bits at rate ``ber``.

    Returns ``(tensor_ids, element_indices, bit_slots)`` sorted by tensor then element, where ``bit_slots``
    indexes into the caller's tuple of bit positions. The flip count is Binomial(n_bits, ber); positions are
    drawn without replacement (numpy's set-based method while they are under ~2% of the bits: memory O(flips)).
    """
    ber = _check_ber(ber)
    sizes = np.asarray(numels, dtype=np.int64) * int(n_bit_positions)
    total = int(sizes.sum())
    n_flips = int(rng.binomial(total, ber)) if total > 0 else 0
    if n_flips == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    positions = np.sort(rng.choice(total, size=n_flips, replace=False))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    tensor_ids = np.searchsorted(offsets, positions, side="right") - 1
    local = positions - offsets[tensor_ids]
    return tensor_ids, local // n_bit_positions, local % n_bit_positions


def _flip_bits(tensor: torch.Tensor, elements: np.ndarray, bits: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """XOR the given bits into ``tensor`` in place; return (touched flat indices, their original int values).

    Several flips may hit one element (distinct bits, since positions are unique): their masks are OR-ed
    first, because indexed in-place writes with repeated indices are not well defined in torch.
    """
    layout = _LAYOUTS[tensor.dtype]
    unique, starts = np.unique(elements, return_index=True)
    masks = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), bits.astype(np.uint64)), starts)
    # Wrap into the signed integer view (bit 31 of fp32 is the int32 sign bit).
    masks = masks.astype(layout.np_uint).view(layout.np_int)
    ints = tensor.detach().view(layout.int_dtype)
    index = torch.from_numpy(unique.astype(np.int64)).to(tensor.device)
    mask = torch.from_numpy(masks).to(tensor.device)
    with torch.no_grad():
        if ints.is_contiguous():
            flat = ints.view(-1)
            original = flat[index].clone()
            flat[index] = original ^ mask
        else:
            coords = tuple(torch.from_numpy(c).to(tensor.device) for c in np.unravel_index(unique, tuple(ints.shape)))
            original = ints[coords].clone()
            ints[coords] = original ^ mask
    return index, original


def _write_back(tensor: torch.Tensor, index: torch.Tensor, original: torch.Tensor) -> None:
    ints = tensor.detach().view(_LAYOUTS[tensor.dtype].int_dtype)
    with torch.no_grad():
        if ints.is_contiguous():
            ints.view(-1)[index] = original
        else:
            coords = np.unravel_index(index.cpu().numpy(), tuple(ints.shape))
            ints[tuple(torch.from_numpy(c).to(tensor.device) for c in coords)] = original


# ----------------------------------------------------------------------------------------------------------
# Weights
# ----------------------------------------------------------------------------------------------------------


def inject_weight_faults(
    model: nn.Module,
    ber: float,
    *,
    sites: str | Iterable[str] = "all",
    bits: str | int | Iterable[str | int] = "all",
    dtype: str | torch.dtype | None = None,
    seed: int = 0,
) -> FaultRecord:
    """Flip bits of the selected parameters in place and return the record of every flip.

    The weights stay corrupted until :func:`restore_weights` is called with the record (or use the
    :func:`weight_faults` context manager). ``dtype`` restricts injection to parameters of that dtype and is an
    error when the model has none; by default it is the selected parameters' own dtype.
    """
    ber = _check_ber(ber)
    seed = _check_seed(seed)
    selected = select_parameters(model, sites, dtype)
    used = selected[0][1].dtype
    positions = resolve_bits(bits, used)
    rng = np.random.default_rng(seed)
    tensor_ids, elements, slots = sample_bit_flips([p.numel() for _, p in selected], len(positions), ber, rng)
    record = FaultRecord(ber=ber, bits=positions, dtype=used, seed=seed,
                         n_eligible_bits=sum(p.numel() for _, p in selected) * len(positions))
    bit_table = np.asarray(positions, dtype=np.int64)
    for tid in np.unique(tensor_ids):
        hit = tensor_ids == tid
        name, param = selected[int(tid)]
        chunk_bits = bit_table[slots[hit]]
        touched, original = _flip_bits(param, elements[hit], chunk_bits)
        record.chunks.append(_Chunk(name, elements[hit], chunk_bits, touched, original))
    return record


def restore_weights(model: nn.Module, record: FaultRecord) -> None:
    """Write back the exact original bits of every element the record flipped (bitwise restoration).

    Chunks are undone in reverse order, so records of nested injections restore correctly when undone
    innermost first.
    """
    params = dict(model.named_parameters())
    missing = [c.name for c in record.chunks if c.name not in params]
    if missing:
        raise ValueError(f"the record names parameters this model does not have: {missing[:3]}")
    for chunk in reversed(record.chunks):
        if chunk.touched is None or chunk.original is None:
            raise ValueError(f"record chunk {chunk.name!r} is not a weight injection and cannot be restored")
        _write_back(params[chunk.name], chunk.touched, chunk.original)


@contextmanager
def weight_faults(
    model: nn.Module,
    ber: float,
    *,
    sites: str | Iterable[str] = "all",
    bits: str | int | Iterable[str | int] = "all",
    dtype: str | torch.dtype | None = None,
    seed: int = 0,
) -> Iterator[FaultRecord]:
    """``with weight_faults(model, 1e-6, sites="encoder", bits="exponent", seed=3) as record:`` -- the model is
    corrupted inside the block and bitwise identical to before on exit, even if the block raises."""
    record = inject_weight_faults(model, ber, sites=sites, bits=bits, dtype=dtype, seed=seed)
    try:
        yield record
    finally:
        restore_weights(model, record)


# ----------------------------------------------------------------------------------------------------------
# Activations
# ----------------------------------------------------------------------------------------------------------


def _corrupt(value: Any, label: str, state: dict[str, Any]) -> Any:
    """Return ``value`` with bits flipped in (copies of) every float tensor of the dtype under study."""
    if isinstance(value, torch.Tensor):
        if value.dtype != state["dtype"]:
            return value
        # An autograd-tracked copy whose bits are then changed behind autograd's back: gradients pass straight
        # through the flips, so fault-aware training still works.
        copy = value.clone(memory_format=torch.contiguous_format)
        tensor_ids, elements, slots = sample_bit_flips([copy.numel()], len(state["positions"]), state["ber"],
                                                       state["rng"])
        record: FaultRecord = state["record"]
        record.n_eligible_bits += copy.numel() * len(state["positions"])
        if len(elements):
            chunk_bits = np.asarray(state["positions"], dtype=np.int64)[slots]
            _flip_bits(copy, elements, chunk_bits)
            record.chunks.append(_Chunk(f"{label}@call{state['calls']}", elements, chunk_bits))
        return copy
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_corrupt(v, f"{label}.{i}", state) for i, v in enumerate(value))
    if isinstance(value, list):
        return [_corrupt(v, f"{label}.{i}", state) for i, v in enumerate(value)]
    return value  # None, caches, ModelOutput objects: left alone


def _activation_targets(model: nn.Module, patterns: dict[str, re.Pattern[str]]) -> list[tuple[str, str, nn.Module]]:
    """(site, module name, module) for every module a hook goes on; each site must match one at least."""
    named = list(model.named_modules())
    targets: list[tuple[str, str, nn.Module]] = []
    for site, pattern in patterns.items():
        found = [(n, m) for n, m in named if n and pattern.search(n)]
        if site == "attention_probs":
            missing = [n for n, m in found if not isinstance(getattr(m, "dropout", None), nn.Dropout)]
            if missing:
                raise ValueError(f"attention module {missing[0]!r} has no 'dropout' submodule to hook")
            found = [(f"{n}.dropout", m.dropout) for n, m in found]
        if not found:
            raise ValueError(f"site {site!r} matches no module of {type(model).__name__}")
        targets.extend((site, n, m) for n, m in found)
    return targets


def _check_attention_materialised(model: nn.Module) -> None:
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None)
    if impl is not None and not attention_backend(impl).probabilities:
        raise ValueError(
            f"attention probabilities are never materialised with attn_implementation={impl!r} (fused kernel); "
            "load the model with attn_implementation='eager' to inject into them"
        )


@contextmanager
def activation_faults(
    model: nn.Module,
    ber: float,
    *,
    sites: str | Iterable[str] = "layer_outputs",
    bits: str | int | Iterable[str | int] = "all",
    dtype: str | torch.dtype | None = None,
    seed: int = 0,
) -> Iterator[FaultRecord]:
    """Corrupt module outputs through forward hooks while the block runs; yields the live record.

    Each forward call of each hooked module draws fresh flips from one seeded stream, so the same seed and the
    same sequence of inputs give the same flips. The hooks return corrupted copies (the module's own tensors
    and the weights are untouched) and are removed on exit.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    ber = _check_ber(ber)
    seed = _check_seed(seed)
    patterns = _site_patterns(sites, ACTIVATION_SITES)
    if dtype is not None:
        used = resolve_dtype(dtype)
        _check_model_uses(model, used)
    else:
        dtypes = _model_float_dtypes(model)
        if len(dtypes) != 1:
            raise ValueError(f"the model mixes dtypes {sorted(map(str, dtypes))}; pass dtype= to pick one")
        used = resolve_dtype(dtypes.pop())
    if "attention_probs" in patterns:
        _check_attention_materialised(model)
    targets = _activation_targets(model, patterns)
    record = FaultRecord(ber=ber, bits=resolve_bits(bits, used), dtype=used, seed=seed)
    state = {"ber": ber, "positions": record.bits, "dtype": used, "record": record,
             "rng": np.random.default_rng(seed), "calls": 0}
    handles = []
    for site, name, module in targets:
        handles.append(module.register_forward_hook(_make_hook(name, state)))
        if site == "attention_probs":
            parent = name.removesuffix(".dropout")
            owner = model.get_submodule(parent)
            handles.extend(_attention_guard(owner, parent, module, state))
    try:
        yield record
    finally:
        for handle in handles:
            handle.remove()


def _make_hook(name: str, state: dict[str, Any]):
    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        state["calls"] += 1
        state.setdefault("seen", set()).add(name)
        return _corrupt(output, name, state)

    return hook


def _attention_guard(owner: nn.Module, name: str, dropout: nn.Module, state: dict[str, Any]) -> list[Any]:
    """Raise on the first forward in which the attention module never passed its probabilities through
    ``dropout`` (e.g. transformers' own BertSelfAttention applies dropout functionally)."""
    key = f"{name}.dropout"

    def before(module: nn.Module, args: Any) -> None:
        state.setdefault("seen", set()).discard(key)

    def after(module: nn.Module, args: Any, output: Any) -> None:
        if key not in state["seen"]:
            raise RuntimeError(
                f"{type(owner).__name__} at {name!r} computed attention without calling its 'dropout' module, so "
                "its attention probabilities cannot be reached by a hook; use a model whose eager attention "
                "applies self.dropout to the probabilities (hfbert with attn_implementation='eager')"
            )

    return [owner.register_forward_pre_hook(before), owner.register_forward_hook(after)]
