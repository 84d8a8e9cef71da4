"""The original BERT (Devlin et al., 2019) as a transformers model: the encoder and every head.

References: the paper; google-research/bert ``modeling.py`` (the architecture, the truncated-normal initializer, the
parameter scopes); transformers ``models/bert/modeling_bert.py`` (the module layout and the attention interface);
MosaicBERT ``bert_layers.py`` (skipping padding); FlashAttention's variable-length kernels.

The modules read top-down as the paper draws them: embeddings -> self-attention -> attention output -> feed-forward
-> layer -> encoder -> pooler -> heads, then the task models. Parameter names follow the original checkpoint layout
(``bert.embeddings.word_embeddings``, ``bert.encoder.layer.N.attention.self.query``, ``cls.predictions.transform``,
``cls.seq_relationship``), so weights move to and from every BERT in the ecosystem without renaming.

Shape legend: B batch, T sequence length, N heads, H head size, D hidden size (= N * H), V vocabulary, R real (not
padding) tokens in a batch, R' packed rows (R rounded up to a few fixed sizes), M supervised (masked) positions.

Attention goes through transformers' attention interface: ``attn_implementation="eager" | "sdpa" | "flex_attention" |
"flash_attention_2" | "flash_attention_3"`` or a kernels-hub backend, chosen in ``from_pretrained`` / ``from_config``
or with ``set_attn_implementation``, exactly as for ``transformers.BertModel``. What each backend takes and returns is
one entry of ``unpadding_hfbert.ATTENTION_BACKENDS``.

Deliberate differences from ``transformers.BertModel`` (outputs and losses are otherwise the same):

* Initialisation is a truncated normal (std ``initializer_range``, cut at two standard deviations) as in Google's
  ``create_initializer``; transformers uses a plain normal. The [PAD] embedding row is not special (no
  ``padding_idx``): the original gives it no special treatment either.
* When ``labels`` are passed, the masked-LM heads compute vocabulary logits only at the supervised positions (labels
  != -100), as Google, NVIDIA, MosaicBERT and Cramming do: ``prediction_logits`` is then (M, V) instead of
  (B, T, V). This removes most of the head's cost and never builds B x T x V logits.
* Every loss honours ``num_items_in_batch`` (Trainer's count of supervised items over an accumulated step): the sum
  of per-item losses divided by it, else the mean over the batch. The MLM loss of a batch with no supervised
  position is 0 (transformers: NaN). NSP in :class:`HfBertForPreTraining` stays the mean over the batch's pairs.
* Padding is skipped where nothing returned depends on it (``unpadding_hfbert.PackedRows``): the pretraining and
  masked-LM heads with labels, and the sequence-level heads, run the encoder on the R real tokens only (rounded up
  to one of a few row counts, so that a long run meets a small fixed set of shapes). The rows stay packed from the
  embeddings to the last layer. FlashAttention takes them as they are (``cu_seqlens``) and flex attention as one
  sequence with a document mask; eager and sdpa get them back in the padded (B, N, T, H) layout for the attention
  product alone and pack its output again (flex too on CPU).
  ``config.padding_free = True`` (default False) does the same for the bare encoder and the per-token heads, whose
  outputs are then 0 at padding positions; by default they compute padding positions as transformers does.
  Asking for hidden states or attentions, or compiling the model, runs the padded computation.
* Inputs are checked up front (length, vocabulary range, token types, shapes), with errors that name the problem.
  The ids' values are read by the host only when they are on it (a CPU): on a GPU the device asserts them itself
  (``torch._assert_async``), so that a forward never makes the host wait for it, and a bad id fails as a device-side
  assertion instead of a ValueError. A caller that checked its batch on the host (:func:`check_inputs`, as ``hfbert
  pretrain``'s reader does) passes ``inputs_checked=True``. With ``packed_rows`` from the host, the attention mask is
  built without reading it on the device either.
* Attention probabilities are returned with ``attn_implementation="eager"`` only; other backends do not compute them,
  and asking for them says so.

This file travels to the Hub as remote code: it imports only torch, transformers and its siblings
``configuration_hfbert`` and ``unpadding_hfbert``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.masking_utils import create_bidirectional_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPooling,
    MaskedLMOutput,
    ModelOutput,
    MultipleChoiceModelOutput,
    NextSentencePredictorOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple, logging
from transformers.utils.output_capturing import capture_outputs

from .configuration_hfbert import HfBertConfig
from .heads_hfbert import HEADS, MODEL_CLASSES
from .unpadding_hfbert import PackedRows, attention_backend

logger = logging.get_logger(__name__)

IGNORE_INDEX = -100


def _activation(name: str) -> nn.Module:
    if name == "gelu":
        return nn.GELU()  # exact erf form, as the checkpoints published for PyTorch
    if name in ("gelu_tanh", "gelu_new", "gelu_pytorch_tanh"):
        return nn.GELU(approximate="tanh")  # Google's TensorFlow code
    if name == "relu":
        return nn.ReLU()
    raise ValueError(f"unknown hidden_act {name!r}")


# ----------------------------------------------------------------------------------------------- embeddings


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
        if position_ids is None:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
        if token_type_ids is None:  # a single segment: every token belongs to sentence A
            segments = self.token_type_embeddings.weight[0]
        else:
            segments = self.token_type_embeddings(token_type_ids)
        embeddings = inputs_embeds + segments + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(embeddings))


# ----------------------------------------------------------------------------------------------- attention


def eager_attention_forward(module: nn.Module, query, key, value, attention_mask, scaling: float,
                            dropout: float = 0.0, **kwargs):
    """softmax(Q K^T * scaling + mask) V, written out. ``query``/``key``/``value`` (B, N, T, H); ``attention_mask``
    additive (B, 1, T, T): 0 where a key is a token, the dtype's minimum at padding keys. Returns the context
    (B, T, N, H) and the attention probabilities (B, N, T, T)."""
    scores = query @ key.transpose(-1, -2) * scaling  # (B, N, T, T)
    if attention_mask is not None:
        scores = scores + attention_mask
    probs = scores.softmax(dim=-1)
    # The module's own Dropout (its p is the ``dropout`` the interface passes): a hook on it sees the probabilities,
    # which is where hfbert.faults injects attention faults, as the original applies dropout to them.
    context = module.dropout(probs) @ value  # (B, N, T, H)
    return context.transpose(1, 2).contiguous(), probs


class HfBertSelfAttention(nn.Module):
    """Bidirectional multi-head scaled dot-product attention; the mask hides padding keys only."""

    is_causal = False  # read by the sdpa and flash backends: every token sees every token of its sequence

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.scaling = self.head_size**-0.5
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(self, hidden_states, attention_mask=None, packed: PackedRows | None = None, **kwargs):
        """``hidden_states`` (B, T, D), or (R', D) when ``packed``. Returns the context in the same shape and the
        attention probabilities (B, N, T, T) where the backend computes them (eager), else None."""
        heads = (*hidden_states.shape[:-1], self.num_heads, self.head_size)
        query = self.query(hidden_states).view(heads)  # (B, T, N, H) or (R', N, H)
        key = self.key(hidden_states).view(heads)
        value = self.value(hidden_states).view(heads)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        options = dict(dropout=self.dropout.p if self.training else 0.0, scaling=self.scaling, **kwargs)
        if packed is None:
            query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # (B, N, T, H)
            context, probs = attention(self, query, key, value, attention_mask, **options)  # (B, T, N, H)
        else:
            context, probs = packed.attention(attention, self, query, key, value, attention_mask, **options)
        return context.reshape(hidden_states.shape), probs


class HfBertSelfOutput(nn.Module):
    """Projection, dropout, then the Post-LN residual: LayerNorm(x + sublayer(x))."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, hidden_states, residual):
        return self.LayerNorm(self.dropout(self.dense(hidden_states)) + residual)


class HfBertAttention(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.self = HfBertSelfAttention(config)
        self.output = HfBertSelfOutput(config)

    def forward(self, hidden_states, attention_mask=None, packed: PackedRows | None = None, **kwargs):
        context, probs = self.self(hidden_states, attention_mask, packed, **kwargs)
        return self.output(context, hidden_states), probs


# ----------------------------------------------------------------------------------------------- feed-forward, layer


class HfBertIntermediate(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = _activation(config.hidden_act)

    def forward(self, hidden_states):
        return self.intermediate_act_fn(self.dense(hidden_states))


class HfBertOutput(HfBertSelfOutput):
    """The feed-forward's second projection with its Post-LN residual."""

    def __init__(self, config: HfBertConfig):
        super().__init__(config)
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)


class HfBertLayer(GradientCheckpointingLayer):
    """One Post-LN block: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.attention = HfBertAttention(config)
        self.intermediate = HfBertIntermediate(config)
        self.output = HfBertOutput(config)

    def forward(self, hidden_states, attention_mask=None, packed: PackedRows | None = None, **kwargs):
        attention_output, probs = self.attention(hidden_states, attention_mask, packed, **kwargs)
        return self.output(self.intermediate(attention_output), attention_output), probs


class HfBertEncoder(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.layer = nn.ModuleList([HfBertLayer(config) for _ in range(config.num_hidden_layers)])

    def forward(self, hidden_states, attention_mask=None, packed: PackedRows | None = None,
                **kwargs) -> BaseModelOutput:
        # Each layer's output and its attention probabilities are recorded, when asked for, by the hooks of
        # transformers' ``capture_outputs`` on HfBertLayer and HfBertSelfAttention (``_can_record_outputs``).
        for layer in self.layer:
            hidden_states, _ = layer(hidden_states, attention_mask, packed=packed, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class HfBertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level representation that NSP and classification read."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states):
        return self.activation(self.dense(hidden_states[:, 0]))  # (B, T, D) -> (B, D)


# ----------------------------------------------------------------------------------------------- heads


class HfBertPredictionHeadTransform(nn.Module):
    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform_act_fn = _activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, hidden_states):
        return self.LayerNorm(self.transform_act_fn(self.dense(hidden_states)))


class HfBertLMPredictionHead(nn.Module):
    """dense + GELU + LayerNorm, then a decoder tied to the word embeddings with its own vocabulary bias."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.transform = HfBertPredictionHeadTransform(config)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=True)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states):
        return self.decoder(self.transform(hidden_states))


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
    """The MLM and NSP heads side by side; :class:`HfBertForPreTraining` calls each on what it reads."""

    def __init__(self, config: HfBertConfig):
        super().__init__()
        self.predictions = HfBertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


# The supervised rows are padded up to a multiple of this before the vocabulary projection: their count changes every
# batch, and buffers of a few sizes are reused by the CPU allocator where ever-new sizes make the process grow.
MLM_ROW_BUCKET = 64


def _masked_lm(predictions: HfBertLMPredictionHead, sequence_output, labels, num_items_in_batch=None,
               positions=None):
    """Vocabulary logits (M, V) at the supervised positions only, and their cross-entropy.

    A (M, D) x (D, V) product instead of (B*T, D) x (D, V): about 15% of the head's work at the usual masking rate,
    and B x T x V logits are never built. ``positions`` (M,): the supervised positions in the flattened batch, in
    row-major order, when the caller knows them; else they are found in ``labels``.
    """
    _check_labels_shape(labels, sequence_output.shape[:2])
    if positions is None:
        supervised = labels != IGNORE_INDEX  # (B, T)
        states, targets = sequence_output[supervised], labels[supervised]  # (M, D), (M,) in row-major order
    else:
        states = sequence_output.flatten(0, 1).index_select(0, positions)
        targets = labels.flatten().index_select(0, positions)
    count = targets.shape[0]
    extra = -count % MLM_ROW_BUCKET
    logits = predictions(F.pad(states, (0, 0, 0, extra)))  # (M + extra, V); the extra rows are not supervised
    total = F.cross_entropy(logits.float(), F.pad(targets, (0, extra), value=IGNORE_INDEX), reduction="sum")
    return logits[:count], _normalise(total, count, num_items_in_batch)


def _normalise(total, count, num_items_in_batch=None):
    """A summed loss over ``num_items_in_batch`` when given (transformers' convention for gradient accumulation),
    else the mean over the ``count`` items of this batch; 0, not NaN, when there is nothing to average."""
    if num_items_in_batch is None:
        return total / max(count, 1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(total.device)
    return total / num_items_in_batch


def _check_labels_shape(labels, shape):
    if tuple(labels.shape) != tuple(shape):
        raise ValueError(f"labels have shape {tuple(labels.shape)} but the inputs have shape {tuple(shape)}")


def _padding_unread(labels, attention_mask) -> bool | None:
    """With MLM labels the heads read only the supervised positions, so padding need not be computed; a label on a
    padding position (computed there, as transformers does) keeps every position. None: as configured."""
    if labels is None:
        return None
    if attention_mask is None:
        return True
    _check_labels_shape(labels, attention_mask.shape)
    if torch.compiler.is_compiling():
        return False  # reading the labels would break the graph, and a compiled graph runs padded anyway
    return not bool(((labels != IGNORE_INDEX) & (attention_mask == 0)).any())


# ----------------------------------------------------------------------------------------------- base classes


class HfBertPreTrainedModel(PreTrainedModel):
    config_class = HfBertConfig
    config: HfBertConfig
    base_model_prefix = "bert"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _no_split_modules = ["HfBertEmbeddings", "HfBertLayer"]
    # What ``output_hidden_states`` / ``output_attentions`` record (transformers' ``capture_outputs`` hooks): the
    # output of every layer (after the embeddings, the input of the first) and the probabilities of every attention.
    _can_record_outputs = {"hidden_states": HfBertLayer, "attentions": HfBertSelfAttention}

    def __init__(self, config: HfBertConfig, *args, **kwargs):
        config.check_values()  # any value is accepted while a config is built; a model needs consistent ones
        super().__init__(config, *args, **kwargs)

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

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loader; a weights file that cannot be read is named, and said to be corrupt."""
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except Exception as error:
            corrupt = _unreadable_weights(pretrained_model_name_or_path)
            if corrupt is None:
                raise
            raise OSError(f"the weights file {corrupt} is corrupt or truncated ({type(error).__name__}: {error}); "
                          "save or download it again") from error

    def save_pretrained(self, save_directory, *args, **kwargs):
        # Write the whole auto_map, not only this class's entry, so that any AutoModel* class (and the pipelines)
        # can load the folder as remote code where hfbert is not installed.
        if type(self)._auto_class is not None:
            self.config.auto_map = {**AUTO_MAP, **(getattr(self.config, "auto_map", None) or {})}
        return super().save_pretrained(save_directory, *args, **kwargs)


def _unreadable_weights(folder) -> Path | None:
    """The first weights file in a local ``folder`` that does not open, or None."""
    if not isinstance(folder, (str, Path)) or not Path(folder).is_dir():
        return None
    folder = Path(folder)
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(path, framework="pt") as f:
                f.keys()
        except Exception:
            return path
    for path in sorted(folder.glob("pytorch_model*.bin")):
        try:
            torch.load(path, map_location="meta", weights_only=True)
        except Exception:
            return path
    return None


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


# Devices whose kernels assert on a tensor's values without the host waiting for them (``torch._assert_async``).
_ASYNC_ASSERT_DEVICES = ("cuda", "mps")


def check_inputs(config: HfBertConfig, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                 inputs_embeds=None, *, values: bool = True) -> None:
    """Fail early, naming the problem, instead of deep inside an embedding lookup or a broadcast: the shapes, the
    length and, with ``values``, the ids against the vocabulary, the token types and the positions.

    The values are read on the host where the tensors are (a CPU): a ValueError names the offending id. On a GPU,
    reading them would make the host wait for the device at every forward; the device asserts them itself instead
    (``torch._assert_async``), and a bad id fails as a device-side assertion when the host next waits. A caller that
    builds its batches on the host checks them there with this function, before moving them."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass exactly one of input_ids or inputs_embeds")
    if input_ids is not None and input_ids.dim() != 2:
        raise ValueError(f"input_ids must have shape (batch, length), got {tuple(input_ids.shape)}")
    if inputs_embeds is not None and (inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != config.hidden_size):
        raise ValueError(f"inputs_embeds must have shape (batch, length, {config.hidden_size}), "
                         f"got {tuple(inputs_embeds.shape)}")
    shape = tuple((input_ids if input_ids is not None else inputs_embeds).shape[:2])
    if shape[1] > config.max_position_embeddings:
        raise ValueError(f"sequence length {shape[1]} is longer than max_position_embeddings "
                         f"({config.max_position_embeddings})")
    for name, tensor in (("attention_mask", attention_mask), ("token_type_ids", token_type_ids)):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but the inputs have shape {shape}")
    if position_ids is not None and position_ids.shape[-1] != shape[1]:
        raise ValueError(f"position_ids has length {position_ids.shape[-1]} but the inputs have length {shape[1]}")
    if not values or torch.compiler.is_compiling() or 0 in shape:
        return  # the value checks read the data; a compiled graph leaves them out
    for name, ids, option, limit in (("input id", input_ids, "vocab_size", config.vocab_size),
                                     ("token type id", token_type_ids, "type_vocab_size", config.type_vocab_size),
                                     ("position id", position_ids, "max_position_embeddings",
                                      config.max_position_embeddings)):
        if ids is None:
            continue
        where = "the vocabulary " if name == "input id" else ""
        if ids.device.type in _ASYNC_ASSERT_DEVICES:
            inside = ((ids >= 0) & (ids < limit)).all()
            torch._assert_async(inside, f"an {name} is outside {where}[0, {option}={limit})")
            continue
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= limit:
            raise ValueError(f"{name} {low if low < 0 else high} is outside {where}[0, {option}={limit})")


def _attention_mask(config: HfBertConfig, embeddings, attention_mask, packed: PackedRows | None,
                    known: PackedRows | None):
    """The 2D mask in the form the attention backend takes (additive, boolean, block mask), built once; None where
    nothing reads it: packed rows that go into attention as they are (FlashAttention's variable-length form, flex
    attention's document mask) carry their own sequence boundaries. ``known``: the batch's packing found on the host,
    which says whether the batch has padding -- transformers' sdpa and flash masks would read the mask on the device
    to find out (a mask without padding is left out)."""
    if packed is not None and attention_backend(config._attn_implementation).layout(embeddings.device) != "padded":
        return None
    if known is None:
        return create_bidirectional_mask(config=config, inputs_embeds=embeddings, attention_mask=attention_mask)
    padded = known.real < known.batch * known.length
    return create_bidirectional_mask(config=config, inputs_embeds=embeddings,
                                     attention_mask=attention_mask if padded else None,
                                     allow_is_bidirectional_skip=not padded)


class HfBertModel(HfBertPreTrainedModel):
    """The bare encoder: ``last_hidden_state`` (B, T, D) and ``pooler_output`` (B, D)."""

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

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        *,
        padding_free: bool | None = None,
        packed_rows: PackedRows | None = None,
        inputs_checked: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPooling:
        r"""The encoder over the embeddings, and the pooled [CLS] state.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            padding_free (`bool`, *optional*):
                Run the encoder on the real tokens only; ``last_hidden_state`` is then 0 at padding positions.
                `None`: ``config.padding_free``. Asking for hidden states or attentions runs the padded computation.
            packed_rows (`PackedRows`, *optional*):
                Where those tokens are, when the caller knows (``PackedRows.from_lengths``, on the host); else they are
                found in ``attention_mask``.
            inputs_checked (`bool`, *optional*, defaults to `False`):
                The caller checked the ids' values on the host (:func:`check_inputs`), so the model does not look at
                them again (every head passes it on).
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (default: the config's) are recorded by
                ``capture_outputs`` from the layers; they are the tensors the layers computed with (gradients reach
                them). Attentions come only with ``attn_implementation="eager"``.

        Returns:
            [`~modeling_outputs.BaseModelOutputWithPooling`]: ``last_hidden_state`` (batch_size, sequence_length,
            hidden_size), ``pooler_output`` (batch_size, hidden_size; `None` without the pooling layer), and
            ``hidden_states`` / ``attentions`` when asked for.

        Raises:
            `ValueError`: the inputs' shapes disagree, the sequence is longer than ``max_position_embeddings``, or
                (on the CPU) an id is out of range; on a GPU a bad id fails as a device-side assertion instead.
        """
        check_inputs(self.config, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds,
                     values=not inputs_checked)
        output_attentions = kwargs.get("output_attentions", self.config.output_attentions)
        output_hidden_states = kwargs.get("output_hidden_states", self.config.output_hidden_states)
        if output_attentions and not attention_backend(self.config._attn_implementation).probabilities:
            logger.warning_once(f"attention probabilities are computed only with attn_implementation='eager', not "
                                f"{self.config._attn_implementation!r}: no attentions are returned. Load the model "
                                "with attn_implementation='eager' or call model.set_attn_implementation('eager').")
        if padding_free is None:
            padding_free = self.config.padding_free

        embeddings = self.embeddings(input_ids, token_type_ids, position_ids, inputs_embeds)  # (B, T, D)
        packed = None
        if padding_free and not (output_attentions or output_hidden_states):  # those return every (B, T) position
            packed = packed_rows if packed_rows is not None else PackedRows.from_mask(attention_mask)
        mask = _attention_mask(self.config, embeddings, attention_mask, packed, packed_rows or packed)
        hidden_states = embeddings if packed is None else packed.pack(embeddings)  # (B, T, D) or (R', D)
        encoded = self.encoder(hidden_states, mask, packed, **kwargs)
        sequence_output = encoded.last_hidden_state
        if packed is not None:
            sequence_output = packed.unpack(sequence_output, real_only=True)  # (R', D) -> (B, T, D)
        pooled_output = self.pooler(sequence_output) if self.pooler is not None else None
        return BaseModelOutputWithPooling(last_hidden_state=sequence_output, pooler_output=pooled_output)


# ----------------------------------------------------------------------------------------------- task models


class HfBertForPreTraining(HfBertPreTrainedModel):
    """MLM + NSP. Loss = MLM cross-entropy over the supervised positions + mean NSP cross-entropy over the pairs."""

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
        packed_rows: PackedRows | None = None,
        supervised_positions: torch.LongTensor | None = None,
        inputs_checked: bool = False,
        **kwargs: Unpack[TransformersKwargs],
    ) -> HfBertForPreTrainingOutput:
        r"""Masked-LM and next-sentence logits, and their losses when labels are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                The original token (in [0, ``vocab_size``)) at supervised positions, -100 elsewhere.
            next_sentence_label (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                0 when B is the actual next segment, 1 when it is random.
            packed_rows (`PackedRows`, *optional*):
                What a caller knows of the batch, so that the model need not find it on the device: where the real
                tokens are (``PackedRows.from_lengths``; the labels must then be on real tokens only, as the
                pretraining collator's are).
            supervised_positions (`torch.LongTensor` of shape `(M,)`, *optional*):
                Where ``labels`` is not -100 in the flattened (batch_size * sequence_length) batch, in order.
            inputs_checked (`bool`, *optional*, defaults to `False`):
                The ids were checked on the host (:func:`check_inputs`).
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`HfBertForPreTrainingOutput`]: ``prediction_logits`` (M, vocab_size) at the supervised positions with
            ``labels``, (batch_size, sequence_length, vocab_size) without; ``seq_relationship_logits``
            (batch_size, 2); ``mlm_loss`` and ``nsp_loss`` for the labels given, and ``loss`` (their sum) when both
            are.
        """
        padding_free = True if packed_rows is not None else _padding_unread(labels, attention_mask)
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, padding_free=padding_free,
                            packed_rows=packed_rows, inputs_checked=inputs_checked, **kwargs)
        sequence_output, pooled_output = outputs.last_hidden_state, outputs.pooler_output
        nsp_logits = self.cls.seq_relationship(pooled_output)  # (B, 2)
        mlm_loss = nsp_loss = loss = None
        if labels is not None:
            prediction_logits, mlm_loss = _masked_lm(self.cls.predictions, sequence_output, labels,
                                                     kwargs.get("num_items_in_batch"), supervised_positions)
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
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        r"""Vocabulary logits, and the masked-LM loss when labels are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                The original token (in [0, ``vocab_size``)) at supervised positions, -100 elsewhere.
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`~modeling_outputs.MaskedLMOutput`]: ``logits`` (M, vocab_size) at the supervised positions with
            ``labels``, (batch_size, sequence_length, vocab_size) without; ``loss`` with ``labels`` (0 when no
            position is supervised).
        """
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds,
                            padding_free=_padding_unread(labels, attention_mask), **kwargs)
        loss = None
        if labels is not None:
            logits, loss = _masked_lm(self.cls.predictions, outputs.last_hidden_state, labels,
                                      kwargs.get("num_items_in_batch"))
        else:
            logits = self.cls(outputs.last_hidden_state)  # (B, T, V)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                              attentions=outputs.attentions)


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
        **kwargs: Unpack[TransformersKwargs],
    ) -> NextSentencePredictorOutput:
        r"""Is-next / is-random logits from the pooled output, and their loss when labels are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                0 = B follows A, 1 = B is random; -100 is not scored.
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`~modeling_outputs.NextSentencePredictorOutput`]: ``logits`` (batch_size, 2) and, with ``labels``,
            ``loss``.
        """
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, padding_free=True, **kwargs)
        logits = self.cls(outputs.pooler_output)  # (B, 2)
        loss = None
        if labels is not None:
            loss = _cross_entropy(logits, labels.view(-1), kwargs.get("num_items_in_batch"))
        return NextSentencePredictorOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                           attentions=outputs.attentions)


def _cross_entropy(logits, targets, num_items_in_batch=None, ignore_index=IGNORE_INDEX):
    """Cross-entropy (N, C) x (N,) normalised as :func:`_normalise`: the mean, or the sum over num_items_in_batch."""
    total = F.cross_entropy(logits.float(), targets, ignore_index=ignore_index, reduction="sum")
    return _normalise(total, int((targets != ignore_index).sum()), num_items_in_batch)


def _classifier_dropout(config: HfBertConfig) -> nn.Dropout:
    rate = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
    return nn.Dropout(rate)


def _sequence_loss(config: HfBertConfig, logits, labels, num_items_in_batch=None):
    """Regression (MSE) when num_labels == 1, softmax cross-entropy for integer labels, BCE for multi-label; the
    problem type is inferred as transformers does. Every kind is normalised by ``num_items_in_batch`` when given
    (Trainer counts labels: one per row, one per row and class for multi-label)."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "single_label_classification":
        labels = labels.view(-1)
        if not torch.compiler.is_compiling():
            bad = labels[(labels != IGNORE_INDEX) & ((labels < 0) | (labels >= config.num_labels))]
            if bad.numel():
                raise ValueError(f"label {int(bad[0])} is outside [0, num_labels={config.num_labels})")
        return _cross_entropy(logits.view(-1, config.num_labels), labels, num_items_in_batch)
    if config.problem_type == "regression":
        if config.num_labels == 1:
            logits, labels = logits.squeeze(-1), labels.view(-1)
        total = F.mse_loss(logits.float(), labels.float(), reduction="sum")
    elif config.problem_type == "multi_label_classification":
        total = F.binary_cross_entropy_with_logits(logits.float(), labels.float(), reduction="sum")
    else:
        raise ValueError(f"unknown problem_type {config.problem_type!r}")
    return _normalise(total, labels.numel(), num_items_in_batch)


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
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        r"""Logits over the labels from the pooled output, and the loss when labels are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            labels (`torch.Tensor`, *optional*):
                Single-label: integer classes (batch_size,) in [0, ``num_labels``), -100 not scored. Regression
                (``num_labels == 1``): floats (batch_size,). Multi-label: floats (batch_size, num_labels) of 0 and 1.
                The problem type, unless ``config.problem_type`` says, is inferred as transformers does.
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`~modeling_outputs.SequenceClassifierOutput`]: ``logits`` (batch_size, num_labels) and, with
            ``labels``, ``loss`` (cross-entropy, MSE or binary cross-entropy).

        Raises:
            `ValueError`: a single-label label outside [0, ``num_labels``) (not checked in a compiled graph).
        """
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, padding_free=True, **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output))  # (B, num_labels)
        loss = None
        if labels is not None:
            loss = _sequence_loss(self.config, logits, labels, kwargs.get("num_items_in_batch"))
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)


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
        **kwargs: Unpack[TransformersKwargs],
    ) -> MultipleChoiceModelOutput:
        r"""One score per choice, softmax over the choices, and the loss when labels are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, num_choices, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape
            `(batch_size, num_choices, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            labels (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                The right choice, in [0, num_choices); -100 is not scored.
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`~modeling_outputs.MultipleChoiceModelOutput`]: ``logits`` (batch_size, num_choices) and, with
            ``labels``, ``loss``.

        Raises:
            `ValueError`: the inputs are not (batch_size, num_choices, sequence_length).
        """
        reference = input_ids if input_ids is not None else inputs_embeds
        if reference is None or reference.dim() < 3:
            raise ValueError("multiple choice inputs must have shape (batch, num_choices, length)")
        num_choices = reference.shape[1]

        def flat(x):  # (B, C, T, ...) -> (B*C, T, ...)
            return None if x is None else x.reshape(-1, *x.shape[2:])

        outputs = self.bert(input_ids=flat(input_ids), attention_mask=flat(attention_mask),
                            token_type_ids=flat(token_type_ids), position_ids=flat(position_ids),
                            inputs_embeds=flat(inputs_embeds), padding_free=True, **kwargs)
        logits = self.classifier(self.dropout(outputs.pooler_output)).view(-1, num_choices)  # (B, C)
        loss = _cross_entropy(logits, labels, kwargs.get("num_items_in_batch")) if labels is not None else None
        return MultipleChoiceModelOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                         attentions=outputs.attentions)


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
        **kwargs: Unpack[TransformersKwargs],
    ) -> TokenClassifierOutput:
        r"""A label's logits per token, and the loss when labels are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            labels (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                A class in [0, ``num_labels``) per token; -100 (specials, padding, later sub-tokens) is not scored.
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`~modeling_outputs.TokenClassifierOutput`]: ``logits`` (batch_size, sequence_length, num_labels) and,
            with ``labels``, ``loss``.
        """
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = _cross_entropy(logits.view(-1, self.num_labels), labels.view(-1), kwargs.get("num_items_in_batch"))
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                     attentions=outputs.attentions)


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
        **kwargs: Unpack[TransformersKwargs],
    ) -> QuestionAnsweringModelOutput:
        r"""Start and end logits per token, and the span loss when both positions are given.

        Args:
            input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`):
                Token ids, in [0, ``vocab_size``); pass exactly one of ``input_ids`` and ``inputs_embeds``.
            attention_mask (`torch.Tensor` of shape `(batch_size, sequence_length)`, *optional*):
                1 = token, 0 = padding; by default every position is a token.
            token_type_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Segment ids in [0, ``type_vocab_size``): 0 for sentence A, 1 for sentence B; by default all 0.
            position_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
                Positions in [0, ``max_position_embeddings``); by default 0, 1, ..., sequence_length - 1.
            inputs_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, hidden_size)`, *optional*):
                Word embeddings in place of ``input_ids``.
            start_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                The token index where the answer starts. A position at or past sequence_length (the answer lies in
                another window) is ignored, as in the original; a negative one counts as 0.
            end_positions (`torch.LongTensor` of shape `(batch_size,)`, *optional*):
                The token index where the answer ends, likewise.
            **kwargs:
                ``output_hidden_states`` / ``output_attentions`` (as for :class:`HfBertModel`) and
                ``num_items_in_batch`` (the loss is the sum over the items divided by it; else the mean).

        Returns:
            [`~modeling_outputs.QuestionAnsweringModelOutput`]: ``start_logits`` and ``end_logits``
            (batch_size, sequence_length) and, with both positions, ``loss``: the mean of the start and end
            cross-entropies.
        """
        outputs = self.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            position_ids=position_ids, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.qa_outputs(outputs.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = (x.squeeze(-1).contiguous() for x in logits.split(1, dim=-1))  # (B, T) each
        loss = None
        if start_positions is not None and end_positions is not None:
            # A position outside the window (the answer lies in another window) is ignored, as in the original.
            length, count = start_logits.shape[1], kwargs.get("num_items_in_batch")
            start = start_positions.view(-1).clamp(0, length)
            end = end_positions.view(-1).clamp(0, length)
            loss = (_cross_entropy(start_logits, start, count, ignore_index=length)
                    + _cross_entropy(end_logits, end, count, ignore_index=length)) / 2
        return QuestionAnsweringModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits,
                                            hidden_states=outputs.hidden_states, attentions=outputs.attentions)


# Auto class -> "module.Class", written into every saved config so any Auto class loads the folder as remote code.
AUTO_MAP = {"AutoConfig": "configuration_hfbert.HfBertConfig",
            **{auto: f"modeling_hfbert.HfBert{suffix}" for suffix, auto in HEADS.items()}}

__all__ = ["HfBertPreTrainedModel", "HfBertForPreTrainingOutput", *MODEL_CLASSES]
