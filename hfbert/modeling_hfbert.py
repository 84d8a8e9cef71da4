"""The original BERT (Devlin et al., 2019) as a transformers model: encoder and every head.

References: the paper; google-research/bert ``modeling.py`` (the architecture, truncated-normal init, parameter
scopes); the specification in ``seeds/000`` sections 2.2-2.4 (summed embeddings + LayerNorm + dropout, bidirectional
attention with a padding-only key mask, Post-LN blocks, GELU feed-forward, tanh pooler over [CLS]).

The modules read bottom-up: embeddings -> self-attention -> layer -> encoder -> pooler -> heads, then the task
models. Parameter names follow the original checkpoint layout (``bert.embeddings.word_embeddings``,
``bert.encoder.layer.N.attention.self.query``, ``cls.predictions.transform``, ``cls.seq_relationship``), so weights
move to and from every BERT in the ecosystem without renaming.

Shape legend: B batch, T sequence length, N heads, H head size, D hidden size (= N * H), V vocabulary, M number of
supervised (masked) positions in a batch.

Deliberate differences from ``transformers.BertModel`` (outputs and losses are otherwise identical):

* Initialisation is a truncated normal (std ``initializer_range``, cut at two standard deviations) as in Google's
  ``create_initializer``; transformers uses a plain normal. The [PAD] embedding row is not special (no
  ``padding_idx``): the original gives it no special treatment either.
* When ``labels`` are passed, the masked-LM heads compute vocabulary logits only at supervised positions (labels
  != -100), as Google, NVIDIA, MosaicBERT and Cramming do: ``prediction_logits`` is then (M, V) instead of
  (B, T, V). This removes most of the head's cost and never materialises B x T x V logits.
* With no supervised position in a batch the MLM loss is 0 (transformers returns NaN).
* Only what is read is computed (MosaicBERT's unpadding, without changing any returned value): each head tells the
  encoder which final states it reads (``select_positions``: the supervised positions, or only [CLS]). Padding
  positions that nothing reads are then left out of every linear layer, LayerNorm and feed-forward (the encoder
  works on packed (R, D) rows; attention alone runs on a (B, L, D) view, L cut to the last kept column), and the
  last layer computes queries only for the rows that are read. Query/key/value are one GEMM over the three
  concatenated weights (the parameters keep their names).
* ``config.padding_free = True`` (default False) extends that to the bare encoder and the per-token heads:
  padding positions are not computed and ``last_hidden_state`` is 0 there, so a mixed-length batch costs about its
  real tokens. transformers computes padding positions; by default hfbert does too, so outputs match everywhere.
* On CPU, float32 linear layers run through oneDNN (with GELU/tanh applied in the same pass at inference) instead of
  the default MKL GEMM: same products, ~1.2-1.7x faster here, float32-rounding differences only (~1e-6 relative).
  ``HFBERT_ONEDNN=0`` switches it off; wrapped or hooked layers (LoRA, offloading) always run their own forward.
* Inputs are validated up front (length, vocabulary range, token types, shapes) with errors that name the problem.

This file travels to the Hub as remote code: it imports only torch, transformers and its sibling
``configuration_hfbert``.
"""

from __future__ import annotations

import math
import os
import platform
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    ModelOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple

from .configuration_hfbert import HfBertConfig

IGNORE_INDEX = -100


def _activation(name: str):
    if name == "gelu":
        return nn.GELU()  # exact erf form, as the checkpoints published for PyTorch
    if name in ("gelu_tanh", "gelu_new", "gelu_pytorch_tanh"):
        return nn.GELU(approximate="tanh")  # Google's TensorFlow code
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unknown hidden_act {name!r}")


# --- Linear layers on CPU: oneDNN instead of the default GEMM -----------------------------------------------------
# On CPU, float32 ``nn.Linear`` runs MKL's GEMM. oneDNN's matmul (the op torch.compile's CPU backend uses for linear
# layers) does the same products 1.2-1.7x faster on our 2-core AVX-512 machine (forward and input gradient; not the
# weight gradient), and can apply the activation in the same pass. It sums in a different order, so results differ
# from ``F.linear`` by float32 rounding (~1e-6 relative); ``HFBERT_ONEDNN=0`` keeps the default kernels. Anything
# that is not a plain float32 ``nn.Linear`` on CPU (LoRA and other wrapped or hooked modules, autocast,
# torch.compile and torch.export, tracing, torch.func transforms, tensor subclasses) takes the module's own
# forward.
ONEDNN_LINEAR = os.environ.get("HFBERT_ONEDNN", "1") != "0"


def _onednn_ready() -> bool:
    """oneDNN is built in, has the op, and the CPU is x86-64: measured with AVX-512 and with AVX2 only (1.1-1.3x at
    the model's shapes); other CPUs (ARM) keep PyTorch's default."""
    ready = getattr(_onednn_ready, "cached", None)
    if ready is None:
        ready = _onednn_ready.cached = (
            platform.machine().lower() in ("x86_64", "amd64")
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise")
        )
    return ready


def _in_functorch_transform() -> bool:
    """Inside ``torch.func.grad`` / ``vmap`` / ``jacrev``...: the oneDNN op has no batching or functorch rules."""
    peek = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return peek is not None and peek() is not None


def _onednn_linear(x, weight, bias, post_op: str = "none", algorithm: str = ""):
    """oneDNN sets up a kernel for each new input shape (~1 ms here, then cached). Packed rows, masked positions and
    padded batches change the row count from batch to batch; padding the rows to a few bucket sizes instead was
    measured and lost more to the copies than it saved (mini pretraining steps on varying batches: 1.10-1.28x over
    MKL as they are, 0.93-1.17x bucketed), so shapes go through unchanged."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, post_op, [], algorithm)


class _OneDnnLinearFunction(torch.autograd.Function):
    """``F.linear`` with oneDNN for the forward and the input gradient; the weight gradient stays a plain GEMM
    (oneDNN is not faster at that shape)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn_linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        flat = grad.reshape(-1, grad.shape[-1])
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            # With create_graph the backward is itself differentiated: plain ops there, whose gradients autograd knows.
            grad_x = grad @ weight if torch.is_grad_enabled() else _onednn_linear(grad.contiguous(), weight.t(), None)
        if ctx.needs_input_grad[1]:
            grad_weight = flat.t() @ x.reshape(-1, x.shape[-1])
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = flat.sum(0)
        return grad_x, grad_weight, grad_bias


def _post_op(activation):
    """The oneDNN post-op that computes the same function as ``activation``, or None (then it runs separately)."""
    if activation is None:
        return "none", ""
    if type(activation) is nn.GELU:
        return "gelu", activation.approximate  # "none" = erf, "tanh"
    if type(activation) is nn.ReLU:
        return "relu", ""
    if type(activation) is nn.Tanh:
        return "tanh", ""
    return None


def _plain(module) -> bool:
    """An ``nn.Linear`` whose forward is nothing but ``F.linear``: not a subclass (LoRA, quantised layers), no hooks,
    no patched forward (accelerate's offloading)."""
    return (
        type(module) is nn.Linear
        and not module._forward_hooks
        and not module._forward_pre_hooks
        and "forward" not in module.__dict__
    )


def _dense(x: torch.Tensor, *modules: nn.Linear, activation: nn.Module | None = None) -> torch.Tensor:
    """``activation(cat([m(x) for m in modules], -1))``: several plain layers run as one GEMM over their
    concatenated weights (the parameters keep their checkpoint names), on CPU through oneDNN (see above)."""
    plain = all(_plain(m) for m in modules)
    if plain and len(modules) > 1:
        weight = torch.cat([m.weight for m in modules])
        bias = None if any(m.bias is None for m in modules) else torch.cat([m.bias for m in modules])
    elif plain:
        weight, bias = modules[0].weight, modules[0].bias
    fast = (
        plain
        and ONEDNN_LINEAR
        and x.device.type == "cpu"
        and x.dtype == weight.dtype == torch.float32
        and type(x) is torch.Tensor
        and type(weight) in (torch.Tensor, nn.Parameter)
        and not nn.modules.module._global_forward_hooks
        and not nn.modules.module._global_forward_pre_hooks
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()  # a traced graph (TorchScript, ONNX export) keeps the portable aten::linear
        and not torch.is_autocast_enabled("cpu")
        and _onednn_ready()
        and not _in_functorch_transform()
    )
    if fast:
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
        )
        if not needs_grad:
            post_op = _post_op(activation)
            if post_op is not None:
                return _onednn_linear(x, weight, bias, *post_op)
            out = _onednn_linear(x, weight, bias)
        else:
            out = _OneDnnLinearFunction.apply(x, weight, bias)
    elif plain:
        out = F.linear(x, weight, bias)
    else:
        out = torch.cat([m(x) for m in modules], -1) if len(modules) > 1 else modules[0](x)
    return out if activation is None else activation(out)


def _check_inputs(config: HfBertConfig, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids):
    """Fail early, naming the problem, instead of deep inside an embedding lookup or a broadcast."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    if input_ids is not None:
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must have shape (batch, length), got {tuple(input_ids.shape)}")
        shape = tuple(input_ids.shape)
    else:
        if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.hidden_size:
            raise ValueError(
                f"inputs_embeds must have shape (batch, length, {config.hidden_size}), got {tuple(inputs_embeds.shape)}"
            )
        shape = tuple(inputs_embeds.shape[:2])
    if shape[1] > config.max_position_embeddings:
        raise ValueError(
            f"sequence length {shape[1]} is longer than max_position_embeddings ({config.max_position_embeddings})"
        )
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but the inputs have shape {shape}")
    if position_ids is not None and position_ids.shape[-1] != shape[1]:
        raise ValueError(f"position_ids has length {position_ids.shape[-1]} but the inputs have length {shape[1]}")
    if torch.compiler.is_compiling() or 0 in shape:
        return  # value checks are data dependent; a compiled graph keeps them out
    if input_ids is not None:
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= config.vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"input id {bad} is outside the vocabulary [0, {config.vocab_size})")
    if token_type_ids is not None:
        low, high = int(token_type_ids.min()), int(token_type_ids.max())
        if low < 0 or high >= config.type_vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token type id {bad} is outside [0, type_vocab_size={config.type_vocab_size})")
    if position_ids is not None:
        low, high = int(position_ids.min()), int(position_ids.max())
        if low < 0 or high >= config.max_position_embeddings:
            raise ValueError(f"position ids must lie in [0, {config.max_position_embeddings}), got [{low}, {high}]")


class HfBertEmbeddings(nn.Module):
    """Token + segment + learned absolute position embeddings, summed, then LayerNorm and dropout."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.word_embeddings(input_ids)  # (B, T, D)
        length = inputs_embeds.shape[1]
        if position_ids is None:
            position_ids = torch.arange(length, device=inputs_embeds.device)
        if token_type_ids is None:  # a single segment: every token belongs to sentence A
            segments = self.token_type_embeddings.weight[0]
        else:
            segments = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + segments + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


@dataclass
class _Layout:
    """Where the encoder's packed rows sit in the batch.

    The encoder keeps its hidden states packed as (R, D): only the R tokens whose output can matter (MosaicBERT's
    unpadding). Every linear layer, LayerNorm and the feed-forward — nearly all the FLOPs — run on those rows; only
    attention needs the (B, L, D) view, L <= T being the last column any row keeps. ``index`` is None when that view
    holds no dropped position: packing and padding are then free reshapes.
    """

    batch: int
    length: int  # L
    index: torch.Tensor | None  # (R,) position of each packed row in the flattened (B * L) view
    bias: torch.Tensor | None  # (B, 1, 1, L) additive key mask
    queries: torch.Tensor | None = None  # (Q,) packed rows the last layer computes; None = all of them

    def positions(self, rows: torch.Tensor | None) -> torch.Tensor | None:
        """Where packed rows ``rows`` (None = all) sit in the flattened view."""
        if rows is None or self.index is None:
            return self.index if rows is None else rows
        return self.index[rows]

    def scatter(self, x: torch.Tensor, at: torch.Tensor | None) -> torch.Tensor:
        """(rows, C) -> (B, L, C), zeros where no row lands."""
        if at is None:
            return x.view(self.batch, self.length, -1)
        view = x.new_zeros(self.batch * self.length, x.shape[-1])
        return view.index_copy_(0, at, x).view(self.batch, self.length, -1)  # in place: no copy of the zeros

    def gather(self, x: torch.Tensor, at: torch.Tensor | None) -> torch.Tensor:
        """(B, L, C) -> (rows, C)."""
        x = x.reshape(self.batch * self.length, -1)
        return x if at is None else x.index_select(0, at)


class HfBertSelfAttention(nn.Module):
    """Bidirectional multi-head scaled dot-product attention; the mask hides padding keys only."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def _split_heads(self, x: torch.Tensor, parts: int) -> tuple[torch.Tensor, ...]:
        batch, length, _ = x.shape
        x = x.view(batch, length, parts, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)  # (parts, B, N, L, H)
        return x.unbind(0)

    def forward(self, hidden_states, layout: _Layout, queries=None, output_attentions: bool = False):
        """``hidden_states`` (R, D) packed rows; ``queries`` (Q,) the rows to compute outputs for (None = all).
        Returns the context (Q, D) and, when asked, the attention probabilities (B, N, L, L)."""
        at = layout.positions(queries)
        if queries is None:
            qkv = layout.scatter(_dense(hidden_states, self.query, self.key, self.value), at)  # (B, L, 3D)
            query, key, value = self._split_heads(qkv, 3)  # (B, N, L, H) each
        else:  # keys and values for every row, queries only where an output is read
            key, value = self._split_heads(layout.scatter(_dense(hidden_states, self.key, self.value),
                                                          layout.index), 2)
            (query,) = self._split_heads(layout.scatter(_dense(hidden_states[queries], self.query), at), 1)
        probs = None
        if output_attentions or self.config._attn_implementation == "eager":
            scores = query @ key.transpose(-1, -2) / math.sqrt(self.head_size)  # (B, N, L, L)
            if layout.bias is not None:
                scores = scores + layout.bias
            probs = torch.softmax(scores, dim=-1)
            context = self.dropout(probs) @ value  # (B, N, L, H)
        else:
            context = F.scaled_dot_product_attention(
                query, key, value, attn_mask=layout.bias, dropout_p=self.dropout.p if self.training else 0.0
            )
        context = layout.gather(context.transpose(1, 2), at)  # (B, L, N, H) -> (Q, D)
        return context, (probs if output_attentions else None)


class HfBertSelfOutput(nn.Module):
    """Projection, dropout, then the Post-LN residual: LayerNorm(x + sublayer(x))."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, residual):
        return self.LayerNorm(self.dropout(_dense(hidden_states, self.dense)) + residual)


class HfBertAttention(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.self = HfBertSelfAttention(config)
        self.output = HfBertSelfOutput(config)

    def forward(self, hidden_states, layout: _Layout, queries=None, output_attentions: bool = False):
        context, probs = self.self(hidden_states, layout, queries, output_attentions)
        residual = hidden_states if queries is None else hidden_states[queries]
        return self.output(context, residual), probs


class HfBertIntermediate(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = _activation(config.hidden_act)

    def forward(self, hidden_states):
        return _dense(hidden_states, self.dense, activation=self.intermediate_act_fn)


class HfBertOutput(HfBertSelfOutput):
    """The feed-forward's second projection with its Post-LN residual."""

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)


class HfBertLayer(GradientCheckpointingLayer):
    """One Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x)), on packed rows (R, D) -> (Q, D)."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.attention = HfBertAttention(config)
        self.intermediate = HfBertIntermediate(config)
        self.output = HfBertOutput(config)

    def forward(self, hidden_states, layout: _Layout, queries=None, output_attentions: bool = False):
        attention_output, probs = self.attention(hidden_states, layout, queries, output_attentions)
        return self.output(self.intermediate(attention_output), attention_output), probs


class HfBertEncoder(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.layer = nn.ModuleList([HfBertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, layout: _Layout, output_attentions=False, output_hidden_states=False):
        """(R, D) packed rows -> (Q, D): the last layer computes only ``layout.queries`` (keys and values still come
        from every row), since nothing reads the other rows' final states."""
        def full(x):  # returned hidden states are only asked for with an unpacked layout
            return x.view(layout.batch, layout.length, -1)

        all_hidden = (full(hidden_states),) if output_hidden_states else None
        all_attentions = () if output_attentions else None
        last = len(self.layer) - 1
        for i, layer in enumerate(self.layer):
            queries = layout.queries if i == last else None
            hidden_states, probs = layer(hidden_states, layout, queries, output_attentions)
            if output_hidden_states:
                all_hidden += (full(hidden_states),)
            if output_attentions:
                all_attentions += (probs,)
        return hidden_states, all_hidden, all_attentions


class HfBertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level representation that NSP and classification read."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        """``hidden_states`` (B, T, D), or already the [CLS] states (B, D)."""
        cls_states = hidden_states[:, 0] if hidden_states.dim() == 3 else hidden_states
        return _dense(cls_states, self.dense, activation=self.activation)  # (B, D)


class HfBertPredictionHeadTransform(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = _activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        return self.LayerNorm(_dense(hidden_states, self.dense, activation=self.transform_act_fn))


class HfBertLMPredictionHead(nn.Module):
    """dense + GELU + LayerNorm, then a decoder tied to the word embeddings with its own vocabulary bias."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.transform = HfBertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states):
        return _dense(self.transform(hidden_states), self.decoder)


class HfBertOnlyMLMHead(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.predictions = HfBertLMPredictionHead(config)

    def forward(self, hidden_states):
        return self.predictions(hidden_states)


class HfBertOnlyNSPHead(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled_output):
        return self.seq_relationship(pooled_output)


class HfBertPreTrainingHeads(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.predictions = HfBertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)

    def forward(self, sequence_output, pooled_output):
        return self.predictions(sequence_output), self.seq_relationship(pooled_output)


class HfBertPreTrainedModel(PreTrainedModel):
    config_class = HfBertConfig
    config: HfBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _no_split_modules = ["HfBertEmbeddings", "HfBertLayer"]
    # Attention reads ``config._attn_implementation`` on every call ("eager" or "sdpa"), so switching it at run time
    # with ``set_attn_implementation`` is safe; transformers otherwise guesses this from the source text.
    _can_set_attn_implementation_cached_value = True

    def _init_weights(self, module):
        """Google's ``create_initializer``: truncated normal, std ``initializer_range``, cut at two std."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.trunc_normal_(module.weight, mean=0.0, std=std, a=-2 * std, b=2 * std)
            if getattr(module, "bias", None) is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, HfBertLMPredictionHead):
            init.zeros_(module.bias)

    def save_pretrained(self, save_directory, *args, **kwargs):
        # Write the whole auto_map, not only this class's entry, so that any AutoModel* class (and the pipelines)
        # can load the folder as remote code where hfbert is not installed.
        if type(self)._auto_class is not None:
            self.config.auto_map = {**AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        return super().save_pretrained(save_directory, *args, **kwargs)


@dataclass
class HfBertForPreTrainingOutput(ModelOutput):
    """Output of :class:`HfBertForPreTraining`.

    ``prediction_logits`` is (M, V) over the supervised positions in row-major (batch, position) order when
    ``labels`` were passed, and (B, T, V) otherwise. ``seq_relationship_logits`` is (B, 2).
    """

    loss: torch.FloatTensor | None = None
    prediction_logits: torch.FloatTensor | None = None
    seq_relationship_logits: torch.FloatTensor | None = None
    mlm_loss: torch.FloatTensor | None = None
    nsp_loss: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None


class HfBertModel(HfBertPreTrainedModel):
    """The bare encoder: ``last_hidden_state`` (B, T, D) and ``pooler_output`` (B, D).

    Only the tokens whose output can be read are computed. The heads tell the encoder which final states they read
    (``select_positions``): padding positions are then dropped from every linear layer, LayerNorm and feed-forward,
    trailing all-padding columns are cut, and the last layer computes only the selected rows. None of this changes a
    returned value. Outputs at padding positions are part of ``last_hidden_state``, so they are computed, as
    transformers computes them, unless ``config.padding_free`` is True: ``last_hidden_state`` (and per-token logits)
    are then 0 at padding positions and a mixed-length batch costs about its real tokens instead of B x T.
    """

    def __init__(self, config: HfBertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = HfBertEmbeddings(config)
        self.encoder = HfBertEncoder(config)
        self.pooler = HfBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def _attention_bias(self, attention_mask, dtype):
        """1 = attend, 0 = padding -> an additive (B, 1, 1, T) bias on the attention scores, built once here.

        The smallest finite value (not -inf) keeps a fully padded row finite: its scores are all equal and softmax
        spreads evenly instead of producing NaN.
        """
        if attention_mask is None:
            return None
        if not torch.compiler.is_compiling() and bool(attention_mask.all()):
            return None  # nothing to hide: lets SDPA pick its fastest kernel
        keep = attention_mask[:, None, None, :].to(dtype)
        # bfloat16's smallest value is finite in float32 too: under CUDA's bf16 autocast SDPA casts the bias down, and
        # float32's smallest value would become -inf there (a fully padded row would turn NaN).
        floor = torch.finfo(torch.float16 if dtype == torch.float16 else torch.bfloat16).min
        return (1.0 - keep) * floor

    def _needed(self, attention_mask, select, shape, device):
        """Positions to compute in every layer (``keep``) and in the last one (``final``), (B, T) bool; None = all.

        Keys come only from attend positions, so a padding position matters only if its own output is read.
        """
        padding_free = bool(getattr(self.config, "padding_free", False))
        if select is None and not padding_free:
            return None, None  # every position is an output
        cls = torch.zeros(shape, dtype=torch.bool, device=device)
        cls[:, 0] = True  # the pooler reads [CLS]; keeping column 0 also keeps every row non-empty
        if select is None:
            final = None
        elif isinstance(select, str):
            final = cls
        else:
            final = select | cls if self.pooler is not None else select
        if attention_mask is None:
            return None, final
        valid = attention_mask.bool()
        keep = valid | cls if final is None else valid | final | cls
        if not padding_free:
            # transformers spreads an all-padding row's attention evenly over every position: keep them all to match
            keep = keep | ~valid.any(1, keepdim=True)
        return keep, final

    def _layout(self, attention_mask, keep, final, shape, dtype) -> _Layout:
        batch, length = shape
        index = queries = None
        if keep is not None:
            length = int(keep.any(0).nonzero().max()) + 1  # cut trailing columns that no row keeps
            keep = keep[:, :length]
            if not bool(keep.all()):
                index = keep.flatten().nonzero().squeeze(1)
        if final is not None:
            final = final[:, :length].flatten()
            slot = torch.arange(final.numel(), device=final.device) if index is None else keep.flatten().cumsum(0) - 1
            queries = slot[final]  # packed row of every final position, row-major
        mask = attention_mask[:, :length] if attention_mask is not None else None
        return _Layout(batch, length, index, self._attention_bias(mask, dtype), queries)

    def _read_out(self, states, layout: _Layout, final, select, shape):
        """The encoder's final rows -> (sequence output as ``select`` asks, [CLS] states (B, D))."""
        batch, length = shape[0], layout.length
        if layout.queries is None:  # states: every kept row
            sequence_output = layout.scatter(states, layout.index)  # (B, L, D), zeros at dropped positions
            if length < shape[1]:
                sequence_output = F.pad(sequence_output, (0, 0, 0, shape[1] - length))  # (B, T, D)
            cls_states = sequence_output[:, 0]
            if isinstance(select, torch.Tensor):
                return sequence_output[select], cls_states  # (M, D)
            return (sequence_output if select is None else None), cls_states
        # states: the last layer's rows (``final``), row-major
        final = final[:, :length].flatten()
        first = torch.zeros(batch, length, dtype=torch.bool, device=states.device)
        first[:, 0] = True
        cls_states = states[first.flatten()[final]] if self.pooler is not None else None  # (B, D)
        if isinstance(select, torch.Tensor):
            return states[select[:, :length].flatten()[final]], cls_states  # (M, D)
        return None, cls_states

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        *,
        select_positions: torch.Tensor | str | None = None,
    ) -> BaseModelOutputWithPooling:
        r"""``select_positions`` (for the heads) says which final states are read: None, every position
        (``last_hidden_state`` (B, T, D)); a bool (B, T) tensor, only those positions (``last_hidden_state`` (M, D),
        row-major); ``"pooled"``, none but [CLS] (``last_hidden_state`` None)."""
        _check_inputs(self.config, input_ids, inputs_embeds, attention_mask, token_type_ids, position_ids)
        shape = tuple(input_ids.shape) if input_ids is not None else tuple(inputs_embeds.shape[:2])
        if isinstance(select_positions, torch.Tensor) and tuple(select_positions.shape) != shape:
            raise ValueError(f"labels have shape {tuple(select_positions.shape)} but the inputs have shape {shape}")
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        device = (input_ids if input_ids is not None else inputs_embeds).device

        if output_attentions or output_hidden_states or torch.compiler.is_compiling():
            keep = final = None  # every layer's full (B, T) output is returned, or shapes must not depend on data
        else:
            keep, final = self._needed(attention_mask, select_positions, shape, device)
        dtype = self.embeddings.word_embeddings.weight.dtype if inputs_embeds is None else inputs_embeds.dtype
        layout = self._layout(attention_mask, keep, final, shape, dtype)
        length = layout.length

        def cut(x):
            return None if x is None else x[..., :length] if x.dim() < 3 else x[:, :length]

        embeddings = self.embeddings(cut(input_ids), cut(token_type_ids), cut(position_ids), cut(inputs_embeds))
        packed = layout.gather(embeddings, layout.index)  # (B, L, D) -> (R, D)
        states, hidden_states, attentions = self.encoder(packed, layout, output_attentions, output_hidden_states)

        sequence_output, cls_states = self._read_out(states, layout, final, select_positions, shape)
        pooled_output = self.pooler(cls_states) if self.pooler is not None else None
        return BaseModelOutputWithPooling(
            last_hidden_state=sequence_output,
            pooler_output=pooled_output,
            hidden_states=hidden_states,
            attentions=attentions,
        )


def _masked_lm(predictions: HfBertLMPredictionHead, supervised_states, labels):
    """Vocabulary logits and mean cross-entropy at the supervised positions only.

    The heads ask the encoder for the M supervised rows only, so the transform and the decoder are a (M, D) x (D, V)
    product instead of (B*T, D) x (D, V) — about 15% of the work at the usual masking rate — and (B, T, V) logits
    are never built.
    """
    logits = predictions(supervised_states)  # (M, V)
    targets = labels[labels != IGNORE_INDEX]  # (M,)
    if targets.numel() == 0:
        return logits, logits.sum() * 0.0  # nothing to predict in this batch: zero loss, zero gradient
    return logits, F.cross_entropy(logits.float(), targets)


class HfBertForPreTraining(HfBertPreTrainedModel):
    """MLM + NSP. Loss = mean MLM cross-entropy over supervised positions + NSP cross-entropy."""

    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.bert = HfBertModel(config)
        self.cls = HfBertPreTrainingHeads(config)
        self.post_init()

    def get_output_embeddings(self):
        return self.cls.predictions.decoder

    def set_output_embeddings(self, new_embeddings):
        self.cls.predictions.decoder = new_embeddings
        self.cls.predictions.bias = new_embeddings.bias

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        next_sentence_label: torch.LongTensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> HfBertForPreTrainingOutput:
        r"""``labels`` (B, T): the original token at supervised positions, -100 elsewhere. ``next_sentence_label``
        (B,): 0 when B is the actual next segment, 1 when it is random."""
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            select_positions=None if labels is None else labels != IGNORE_INDEX,
        )
        sequence_output, pooled_output = outputs.last_hidden_state, outputs.pooler_output
        nsp_logits = self.cls.seq_relationship(pooled_output)  # (B, 2)
        mlm_loss = nsp_loss = loss = None
        if labels is not None:
            prediction_logits, mlm_loss = _masked_lm(self.cls.predictions, sequence_output, labels)
        else:
            prediction_logits = self.cls.predictions(sequence_output)  # (B, T, V)
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(nsp_logits.float(), next_sentence_label.view(-1))
        if mlm_loss is not None and nsp_loss is not None:
            loss = mlm_loss + nsp_loss
        return HfBertForPreTrainingOutput(
            loss=loss,
            prediction_logits=prediction_logits,
            seq_relationship_logits=nsp_logits,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class HfBertForMaskedLM(HfBertPreTrainedModel):
    """MLM only. ``logits`` is (M, V) at supervised positions when ``labels`` are given, (B, T, V) otherwise."""

    # A pretraining checkpoint also holds the pooler and the NSP head; this model has no use for them.
    _keys_to_ignore_on_load_unexpected = [r"bert\.pooler", r"cls\.seq_relationship"]
    _tied_weights_keys = {
        "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias",
    }

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.bert = HfBertModel(config, add_pooling_layer=False)
        self.cls = HfBertOnlyMLMHead(config)
        self.post_init()

    get_output_embeddings = HfBertForPreTraining.get_output_embeddings
    set_output_embeddings = HfBertForPreTraining.set_output_embeddings

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> MaskedLMOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            select_positions=None if labels is None else labels != IGNORE_INDEX,
        )
        loss = None
        if labels is not None:
            logits, loss = _masked_lm(self.cls.predictions, outputs.last_hidden_state, labels)
        else:
            logits = self.cls(outputs.last_hidden_state)
        return MaskedLMOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfBertForNextSentencePrediction(HfBertPreTrainedModel):
    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.bert = HfBertModel(config)
        self.cls = HfBertOnlyNSPHead(config)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> NextSentencePredictorOutput:
        r"""``labels`` (B,): 0 = B follows A, 1 = B is random."""
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            select_positions="pooled",
        )
        logits = self.cls(outputs.pooler_output)
        loss = F.cross_entropy(logits, labels.view(-1)) if labels is not None else None
        return NextSentencePredictorOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


def _classifier_dropout(config: HfBertConfig) -> nn.Dropout:
    rate = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    return nn.Dropout(rate)


def _sequence_loss(config: HfBertConfig, logits, labels):
    """Regression (MSE) when num_labels == 1, softmax cross-entropy for integer labels, BCE for multi-label."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        if config.num_labels == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if config.problem_type == "single_label_classification":
        labels = labels.view(-1)
        if not torch.compiler.is_compiling():
            bad = labels[(labels != IGNORE_INDEX) & ((labels < 0) | (labels >= config.num_labels))]
            if bad.numel():
                raise ValueError(f"label {int(bad[0])} is outside [0, num_labels={config.num_labels})")
        return F.cross_entropy(logits.view(-1, config.num_labels), labels)
    if config.problem_type == "multi_label_classification":
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    raise ValueError(f"unknown problem_type {config.problem_type!r}")


class HfBertForSequenceClassification(HfBertPreTrainedModel):
    """Dropout + linear over the pooled [CLS] output; single-label, multi-label or regression (num_labels == 1)."""

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = HfBertModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.Tensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> SequenceClassifierOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
            select_positions="pooled",
        )
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        loss = _sequence_loss(self.config, logits, labels) if labels is not None else None
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfBertForMultipleChoice(HfBertPreTrainedModel):
    """Inputs (B, C, T); one score per choice from the pooled output; softmax over the C choices."""

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.bert = HfBertModel(config)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> MultipleChoiceModelOutput:
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None or reference.dim() < 3:
            raise ValueError("multiple choice inputs must have shape (batch, num_choices, length)")
        num_choices = reference.shape[1]

        def flat(x):  # (B, C, T, ...) -> (B*C, T, ...)
            return None if x is None else x.reshape(-1, *x.shape[2:])

        outputs = self.bert(
            flat(input_ids), flat(attention_mask), flat(token_type_ids), flat(position_ids), flat(inputs_embeds),
            output_attentions=output_attentions, output_hidden_states=output_hidden_states, select_positions="pooled",
        )
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)  # (B, C)
        loss = F.cross_entropy(logits, labels) if labels is not None else None
        return MultipleChoiceModelOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfBertForTokenClassification(HfBertPreTrainedModel):
    """A label per token (NER); positions labelled -100 (specials, padding, later sub-tokens) are not scored."""

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = HfBertModel(config, add_pooling_layer=False)
        self.dropout = _classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels: torch.LongTensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> TokenClassifierOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
        )
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


class HfBertForQuestionAnswering(HfBertPreTrainedModel):
    """Extractive QA: start and end logits per token; loss = mean of the start and end cross-entropies."""

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = HfBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        output_attentions=None,
        output_hidden_states=None,
    ) -> QuestionAnsweringModelOutput:
        outputs = self.bert(
            input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
            output_attentions=output_attentions, output_hidden_states=output_hidden_states,
        )
        logits = self.qa_outputs(outputs.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1))  # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            # A position outside the window (the answer lies in another window) is ignored, as in the original.
            length = start_logits.shape[1]
            start = start_positions.view(-1).clamp(0, length)
            end = end_positions.view(-1).clamp(0, length)
            loss = (
                F.cross_entropy(start_logits, start, ignore_index=length)
                + F.cross_entropy(end_logits, end, ignore_index=length)
            ) / 2
        return QuestionAnsweringModelOutput(
            loss=loss,
            start_logits=start_logits,
            end_logits=end_logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


# Auto class -> "module.Class", written into every saved config so any Auto class loads the folder as remote code.
AUTO_MAP = {
    "AutoConfig": "configuration_hfbert.HfBertConfig",
    "AutoModel": "modeling_hfbert.HfBertModel",
    "AutoModelForPreTraining": "modeling_hfbert.HfBertForPreTraining",
    "AutoModelForMaskedLM": "modeling_hfbert.HfBertForMaskedLM",
    "AutoModelForNextSentencePrediction": "modeling_hfbert.HfBertForNextSentencePrediction",
    "AutoModelForSequenceClassification": "modeling_hfbert.HfBertForSequenceClassification",
    "AutoModelForMultipleChoice": "modeling_hfbert.HfBertForMultipleChoice",
    "AutoModelForTokenClassification": "modeling_hfbert.HfBertForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_hfbert.HfBertForQuestionAnswering",
}

__all__ = [
    "HfBertPreTrainedModel",
    "HfBertModel",
    "HfBertForPreTraining",
    "HfBertForPreTrainingOutput",
    "HfBertForMaskedLM",
    "HfBertForNextSentencePrediction",
    "HfBertForSequenceClassification",
    "HfBertForMultipleChoice",
    "HfBertForTokenClassification",
    "HfBertForQuestionAnswering",
]
