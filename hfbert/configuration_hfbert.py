"""Configuration of the original BERT (Devlin et al., 2019) for the hfbert plugin.

This file travels to the Hub as remote code next to ``modeling_hfbert.py``: it imports nothing from the rest of the
hfbert package.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

# Google's released BERT sizes (github.com/google-research/bert, "BERT-Tiny" ... "BERT-Large"):
# (num_hidden_layers, hidden_size). Heads = hidden / 64 and intermediate = 4 * hidden, as in the release.
_PRESETS: dict[str, tuple[int, int]] = {
    "tiny": (2, 128),
    "mini": (4, 256),
    "small": (4, 512),
    "medium": (8, 512),
    "base": (12, 768),
    "large": (24, 1024),
}

# BertConfig options whose only value in the original BERT is this one (older BERT folders still write them).
ORIGINAL_VALUES = {"position_embedding_type": "absolute", "is_decoder": False, "add_cross_attention": False}

SUPPORTED_ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_tanh", "relu")

# Keys of a transformers ``BertConfig`` that mean the same thing here.
_BERT_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "pad_token_id",
    "classifier_dropout",
    "tie_word_embeddings",
)


class HfBertConfig(PretrainedConfig):
    r"""Every hyper-parameter of the original BERT encoder and its heads.

    The defaults are BERT-Base (uncased vocabulary). ``hidden_act="gelu"`` is the exact erf form used by the
    checkpoints published for PyTorch; ``"gelu_tanh"`` (alias ``"gelu_new"``) is the tanh approximation of Google's
    TensorFlow code. ``HfBertConfig.from_preset("mini")`` gives one of Google's released sizes.

    Any values are accepted while a config is built (as ``BertConfig`` accepts them, so a config can be filled in
    field by field); :meth:`check_values`, which every model runs when it is built, raises ``ValueError`` naming the
    first bad one. Only a different architecture (another ``model_type``, relative positions, a decoder) is refused
    at once, since those keys are not kept.

    Args:
        vocab_size (`int`, *optional*, defaults to 30522):
            Vocabulary size of the model: the number of different tokens ``input_ids`` can hold.
        hidden_size (`int`, *optional*, defaults to 768):
            Dimensionality of the encoder layers and the pooler layer; a multiple of ``num_attention_heads``.
        num_hidden_layers (`int`, *optional*, defaults to 12):
            Number of hidden layers in the Transformer encoder.
        num_attention_heads (`int`, *optional*, defaults to 12):
            Number of attention heads for each attention layer in the Transformer encoder.
        intermediate_size (`int`, *optional*, defaults to 3072):
            Dimensionality of the "intermediate" (feed-forward) layer in the Transformer encoder.
        hidden_act (`str`, *optional*, defaults to `"gelu"`):
            The non-linear activation function in the encoder and pooler: `"gelu"` (the exact erf form),
            `"gelu_tanh"` (alias `"gelu_new"`, `"gelu_pytorch_tanh"`: the tanh approximation of Google's TensorFlow
            code) or `"relu"`.
        hidden_dropout_prob (`float`, *optional*, defaults to 0.1):
            The dropout probability for all fully connected layers in the embeddings, encoder, and pooler; in [0, 1).
        attention_probs_dropout_prob (`float`, *optional*, defaults to 0.1):
            The dropout ratio for the attention probabilities; in [0, 1).
        max_position_embeddings (`int`, *optional*, defaults to 512):
            The maximum sequence length that this model can be used with (the number of learned positions).
        type_vocab_size (`int`, *optional*, defaults to 2):
            The vocabulary size of the ``token_type_ids``.
        initializer_range (`float`, *optional*, defaults to 0.02):
            The standard deviation of the truncated normal initializer (cut at two standard deviations, Google's
            ``create_initializer``) for all weight matrices.
        layer_norm_eps (`float`, *optional*, defaults to 1e-12):
            The epsilon used by the layer normalization layers.
        pad_token_id (`int`, *optional*, defaults to 0):
            The id of [PAD]; inside the vocabulary when set. Its embedding row is not special (no ``padding_idx``).
        classifier_dropout (`float`, *optional*):
            The dropout ratio for the classification heads; `None` uses ``hidden_dropout_prob``.
        tie_word_embeddings (`bool`, *optional*, defaults to `True`):
            Tie the masked-LM decoder's weights to the word embeddings.
        padding_free (`bool`, *optional*, defaults to `False`):
            Run the bare encoder and the per-token heads on the real tokens only (their outputs are 0 at padding).
            Off by default so that outputs equal transformers' at every position; the pretraining heads (with labels)
            and the sequence-level heads skip padding regardless, since nothing they return depends on it.
        **kwargs:
            The options of [`~transformers.PretrainedConfig`] (``id2label``, ``problem_type``, ...). Of transformers'
            ``BertConfig`` options the original BERT lacks (``position_embedding_type``, ``is_decoder``,
            ``add_cross_attention``), only the original's value is accepted, and dropped.

    Raises:
        `ValueError`: another ``model_type`` than ``"hfbert"`` or ``"bert"``, or an option of ``BertConfig`` off the
            original BERT's value.
    """

    model_type = "hfbert"

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int | None = 0
    classifier_dropout: float | None = None
    tie_word_embeddings: bool = True
    # Run the bare encoder and the per-token heads on the real tokens only (their outputs are 0 at padding). Off by
    # default so that outputs equal transformers' at every position; the pretraining heads (with labels) and the
    # sequence-level heads skip padding regardless, since nothing they return depends on it.
    padding_free: bool = False

    def __post_init__(self, **kwargs: Any) -> None:
        # A transformers BERT folder (model_type "bert") loads as is: the keys mean the same thing. Anything else is
        # a different architecture and must not be read as BERT.
        source_type = kwargs.pop("model_type", None)
        if source_type not in (None, "bert", self.model_type):
            raise ValueError(
                f"this config has model_type {source_type!r}; hfbert loads only 'hfbert' and 'bert' configurations"
            )
        # Options of transformers' BertConfig that the original BERT lacks: another value is another network, and
        # the original's value is dropped so that it is not carried into saved configs (BertConfig no longer has it).
        for key, original in ORIGINAL_VALUES.items():
            value = kwargs.pop(key, None)
            if value not in (original, None):
                raise ValueError(f"{key}={value!r} is not the original BERT architecture; hfbert supports only "
                                 f"{key}={original!r}")
        kwargs.pop("gradient_checkpointing", None)  # a transformers 3/4 flag; use model.gradient_checkpointing_enable()
        super().__post_init__(**kwargs)

    def check_values(self) -> None:
        """Raise ``ValueError`` naming the first value a model cannot be built with."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"hidden size ({self.hidden_size}) is not a multiple of the number of attention heads "
                f"({self.num_attention_heads})"
            )
        if self.hidden_act not in SUPPORTED_ACTIVATIONS:
            raise ValueError(f"unknown hidden_act {self.hidden_act!r}; expected one of {SUPPORTED_ACTIVATIONS}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"):
            value = getattr(self, name)
            if value is None and name == "classifier_dropout":
                continue
            if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value!r}")
        if not self.initializer_range > 0:
            raise ValueError(f"initializer_range must be positive, got {self.initializer_range!r}")
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be positive, got {self.layer_norm_eps!r}")
        if self.pad_token_id is not None and not 0 <= self.pad_token_id < self.vocab_size:
            raise ValueError(
                f"pad_token_id ({self.pad_token_id}) is outside the vocabulary (size {self.vocab_size})"
            )

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "HfBertConfig":
        """One of Google's released sizes: tiny (2/128), mini (4/256), small (4/512), medium (8/512), base (12/768),
        large (24/1024), as (layers/hidden size); heads = hidden / 64 and intermediate = 4 * hidden.

        Args:
            name (`str`):
                The size's name.
            **overrides:
                Replace any value (e.g. ``vocab_size=8000``).

        Returns:
            [`HfBertConfig`]: the config.

        Raises:
            `ValueError`: an unknown ``name``.
        """
        if name not in _PRESETS:
            raise ValueError(f"unknown preset {name!r}; expected one of {sorted(_PRESETS)}")
        layers, hidden = _PRESETS[name]
        values: dict[str, Any] = {
            "num_hidden_layers": layers,
            "hidden_size": hidden,
            "num_attention_heads": hidden // 64,
            "intermediate_size": 4 * hidden,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_bert_config(cls, bert_config: Any, **overrides: Any) -> "HfBertConfig":
        """Convert a transformers ``BertConfig`` (or its dict), keeping labels and problem type.

        Args:
            bert_config (`transformers.BertConfig` or `dict`):
                The config to convert; its ``architectures`` are kept too.
            **overrides:
                Replace any value.

        Returns:
            [`HfBertConfig`]: the equivalent config.

        Raises:
            `ValueError`: a ``model_type`` other than ``"bert"`` or ``"hfbert"``, or an option the original BERT does
                not have.
        """
        data = bert_config.to_dict() if hasattr(bert_config, "to_dict") else dict(bert_config)
        model_type = data.get("model_type")
        if model_type not in (None, "bert", cls.model_type):
            raise ValueError(f"cannot convert a config of model_type {model_type!r}: expected 'bert' or 'hfbert'")
        values = {key: data[key] for key in _BERT_KEYS if key in data}
        values.update({key: data[key] for key in ORIGINAL_VALUES if key in data})  # checked, then dropped, on init
        for key in ("id2label", "label2id", "problem_type", "architectures"):
            if data.get(key) is not None:
                values[key] = data[key]
        values.update(overrides)
        return cls(**values)

    def to_bert_config(self) -> Any:
        """The equivalent transformers ``BertConfig`` (for exporting to a stock BERT folder)."""
        from transformers import BertConfig

        values = {key: getattr(self, key) for key in _BERT_KEYS}
        if self.hidden_act == "gelu_tanh":  # the same function under transformers' older name
            values["hidden_act"] = "gelu_new"
        return BertConfig(
            **values, id2label=self.id2label, label2id=self.label2id, problem_type=self.problem_type
        )


__all__ = ["ORIGINAL_VALUES", "HfBertConfig"]
