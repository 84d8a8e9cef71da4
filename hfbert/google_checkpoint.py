"""Google's original BERT checkpoints: read them into hfbert and write hfbert models back in their format.

A release folder of google-research/bert (BERT-Base/Large, multilingual, Chinese, the 24 small BERTs, the
whole-word-masking models, and the domain BERTs published the same way) holds::

    bert_config.json                          the architecture (transformers' BertConfig keys, hidden_act "gelu")
    vocab.txt                                 the WordPiece vocabulary, one token per line, ids in order
    bert_model.ckpt.index                     a TensorFlow checkpoint (:mod:`hfbert.tf_checkpoint` reads it
    bert_model.ckpt.data-00000-of-00001       without TensorFlow)

The variables map one to one onto hfbert's parameters (which keep the original names): ``layer_3`` is
``layer.3``, a ``kernel`` is the transposed ``weight`` (TensorFlow stores ``[in, out]``, torch ``[out, in]``),
LayerNorm's ``gamma``/``beta`` are ``weight``/``bias``, an embedding table is the embedding's ``weight``, and the
heads are ``cls/predictions/output_bias`` -> ``cls.predictions.bias`` and ``cls/seq_relationship/output_weights``
(already ``[2, hidden]``) -> ``cls.seq_relationship.weight``. What training leaves beside the model (Adam's
``adam_m``/``adam_v`` slots, ``global_step``, NVIDIA's loss-scaling counters) is skipped and counted; any other
variable stops the import, naming it. Google's "gelu" is the tanh approximation, so it becomes ``gelu_tanh``; the
way back, a model with the exact (erf) GELU is written only when the caller accepts the approximation.

NVIDIA's checkpoints pad the vocabulary to a multiple of 8 (30528 rows for 30522 tokens) while their
``bert_config.json`` keeps the real size: the padding rows of the word embeddings and of the MLM output bias are
dropped on import, and said so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .configuration_hfbert import HfBertConfig
from .modeling_hfbert import HfBertForPreTraining, HfBertModel
from .tokenization import load_vocab
from .tf_checkpoint import CheckpointError, checkpoint_prefix, list_variables, read_checkpoint, write_checkpoint

__all__ = ["CONFIG_FILE", "CHECKPOINT_NAME", "GoogleCheckpoint", "google_to_hfbert_name", "hfbert_to_google_name",
           "is_google_folder", "read_google_checkpoint", "read_google_config", "unmapped_parameters",
           "write_google_checkpoint"]

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
CHECKPOINT_NAME = "bert_model.ckpt"

# Variables that training writes beside the model: the optimizer's state and loss-scaling counters.
_TRAINING_STATE = re.compile(r"(.*/(adam_m|adam_v|Adam|Adam_1|Momentum|LAMB(_1)?)$)|global_step|"
                             r"(.*/)?(loss_scale|good_steps|current_loss_scale|bad_steps|beta1_power|beta2_power)$")
# bert_config.json keys that describe the release, not the architecture (multilingual and Chinese releases).
_RELEASE_KEYS = {"directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
                 "pooler_size_per_head", "pooler_type"}
_CONFIG_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
                "type_vocab_size", "initializer_range")
_ACTIVATIONS = {"gelu": "gelu_tanh", "relu": "relu"}  # Google's name -> hfbert's (the same function)

# Whole names of the heads; the encoder's names follow the rules of _parts().
_HEAD_NAMES = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}
_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings")
# Every parameter of BERT (hfbert names); a Google variable that maps to nothing here is not one of BERT's.
_BERT_PARAMETERS = re.compile(
    r"bert\.embeddings\.(word|position|token_type)_embeddings\.weight"
    r"|bert\.embeddings\.LayerNorm\.(weight|bias)"
    r"|bert\.encoder\.layer\.\d+\.(attention\.self\.(query|key|value)|attention\.output\.dense|intermediate\.dense"
    r"|output\.dense)\.(weight|bias)"
    r"|bert\.encoder\.layer\.\d+\.(attention\.output|output)\.LayerNorm\.(weight|bias)"
    r"|bert\.pooler\.dense\.(weight|bias)"
    r"|cls\.predictions\.transform\.(dense|LayerNorm)\.(weight|bias)"
    r"|cls\.predictions\.bias|cls\.seq_relationship\.(weight|bias)")
_LEAVES = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}


def google_to_hfbert_name(name: str) -> tuple[str, bool] | None:
    """The hfbert parameter of a Google variable and whether its value is transposed; None for a name that is not
    one of BERT's (the caller decides whether that is an error)."""
    if name in _HEAD_NAMES:
        return _HEAD_NAMES[name], False
    parts = name.split("/")
    if parts[0] not in ("bert", "cls") or len(parts) < 3:
        return None
    if parts[-1] in _EMBEDDINGS and parts[1] == "embeddings":
        return ".".join(parts) + ".weight", False
    leaf = _LEAVES.get(parts[-1])
    if leaf is None or (parts[-1] in ("gamma", "beta")) != (parts[-2] == "LayerNorm"):
        return None
    body = [re.sub(r"^layer_(\d+)$", r"layer.\1", part) for part in parts[:-1]]
    ours = ".".join(body + [leaf])
    return (ours, parts[-1] == "kernel") if _BERT_PARAMETERS.fullmatch(ours) else None


def hfbert_to_google_name(name: str) -> tuple[str, bool] | None:
    """The inverse of :func:`google_to_hfbert_name`; None for a parameter Google's checkpoints do not have
    (the tied MLM decoder, constant buffers)."""
    for google, ours in _HEAD_NAMES.items():
        if name == ours:
            return google, False
    parts = name.split(".")
    if parts[-1] not in ("weight", "bias") or parts[0] not in ("bert", "cls"):
        return None
    if len(parts) >= 2 and parts[-2] in _EMBEDDINGS:
        return "/".join(parts[:-1]), False
    if parts[-2] == "decoder":
        return None
    body, leaf = parts[:-1], parts[-1]
    if body[-1] == "LayerNorm":
        leaf = "gamma" if leaf == "weight" else "beta"
    elif leaf == "weight":
        leaf = "kernel"
    joined = "/".join(body)
    joined = re.sub(r"layer/(\d+)", r"layer_\1", joined)
    return f"{joined}/{leaf}", leaf == "kernel"


def is_google_folder(folder: str | Path) -> bool:
    """Whether ``folder`` looks like one of Google's release folders (a bert_config.json and a checkpoint)."""
    folder = Path(folder)
    return (folder / CONFIG_FILE).is_file() and any(folder.glob("*.index"))


def read_google_config(folder: str | Path, **overrides: Any) -> HfBertConfig:
    """The :class:`HfBertConfig` of a release folder's ``bert_config.json``."""
    path = Path(folder) / CONFIG_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing: a Google BERT folder needs bert_config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} must hold a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(_CONFIG_KEYS) - _RELEASE_KEYS)
    if unknown:
        raise CheckpointError(f"{path} has settings hfbert cannot map: {', '.join(unknown)}")
    missing = [key for key in _CONFIG_KEYS if key not in data and key not in ("initializer_range",)]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(missing)}")
    values = {key: data[key] for key in _CONFIG_KEYS if key in data}
    act = values["hidden_act"]
    if act not in _ACTIVATIONS:
        raise CheckpointError(f"{path}: hidden_act {act!r} is not one of Google's ({', '.join(_ACTIVATIONS)})")
    values["hidden_act"] = _ACTIVATIONS[act]
    values.update(overrides)
    try:
        return HfBertConfig(**values)
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None


@dataclass
class GoogleCheckpoint:
    """A release folder read into hfbert: the config, the state dict (hfbert names, torch tensors), what was
    skipped and what the import changed."""

    config: HfBertConfig
    state_dict: dict[str, torch.Tensor]
    skipped: int = 0  # optimizer slots, global_step, loss-scaling counters
    notes: list[str] = field(default_factory=list)


def _vocab_size(folder: Path) -> int:
    path = folder / VOCAB_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: a Google BERT folder needs its vocab.txt")
    try:
        return len(load_vocab(path))
    except ValueError as err:
        raise CheckpointError(str(err)) from None


def read_google_checkpoint(folder: str | Path) -> GoogleCheckpoint:
    """Read a release folder (config, vocabulary size, checkpoint) into hfbert names; raises
    :class:`~hfbert.tf_checkpoint.CheckpointError` with one sentence for anything that does not fit."""
    folder = Path(folder)
    config = read_google_config(folder)
    vocab = _vocab_size(folder)
    if vocab != config.vocab_size:
        raise CheckpointError(f"{folder / VOCAB_FILE} has {vocab} tokens but {folder / CONFIG_FILE} says "
                              f"vocab_size {config.vocab_size}")
    prefix = checkpoint_prefix(folder)
    names, skipped = [], 0
    for name in list_variables(prefix):
        if _TRAINING_STATE.fullmatch(name):
            skipped += 1
        elif google_to_hfbert_name(name) is None:
            raise CheckpointError(f"{prefix}.index holds the variable {name!r}, which is not part of BERT; "
                                  "hfbert maps only BERT's own variables")
        else:
            names.append(name)
    tensors = read_checkpoint(prefix, names)
    state, notes = {}, []
    for name, value in tensors.items():
        target, transpose = google_to_hfbert_name(name)
        state[target] = torch.from_numpy(np.ascontiguousarray(value.T if transpose else value))
    rows = state.get("bert.embeddings.word_embeddings.weight")
    if rows is not None and rows.shape[0] > config.vocab_size:
        padding = rows.shape[0] - config.vocab_size
        notes.append(f"the checkpoint pads the vocabulary to {rows.shape[0]} rows (NVIDIA's multiple of 8); the "
                     f"{padding} rows past the {config.vocab_size} tokens of vocab.txt are dropped")
        for key in ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"):
            if key in state and state[key].shape[0] == rows.shape[0]:
                state[key] = state[key][: config.vocab_size].clone()
    return GoogleCheckpoint(config, state, skipped, notes)


def google_config_dict(config: HfBertConfig, *, erf_as_tanh: bool = False) -> dict[str, Any]:
    """``bert_config.json`` of an hfbert config (Google's keys and activation names).

    Google's code computes "gelu" as the tanh approximation and has no exact (erf) GELU, so a model with
    ``hidden_act="gelu"`` (the erf form) is refused with a ``ValueError``, unless ``erf_as_tanh`` accepts writing it
    under Google's "gelu": read back, it computes the tanh form, and its outputs move a little."""
    back = {"gelu_tanh": "gelu", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "relu": "relu"}
    if config.hidden_act == "gelu" and not erf_as_tanh:
        raise ValueError("hidden_act 'gelu' is the exact (erf) GELU, which Google's BERT does not have: its 'gelu' "
                         "is the tanh approximation, so the model read back would compute slightly different outputs")
    back["gelu"] = "gelu"  # accepted: the nearest Google has
    if config.hidden_act not in back:
        raise ValueError(f"hidden_act {config.hidden_act!r} has no name in Google's BERT (gelu = the tanh "
                         "approximation, relu)")
    values = {key: getattr(config, key) for key in _CONFIG_KEYS}
    values["hidden_act"] = back[config.hidden_act]
    return values


def unmapped_parameters(state_dict: Mapping[str, torch.Tensor], tied: Collection[str] = ()) -> list[str]:
    """The parameters of ``state_dict`` (hfbert names) that Google's layout has no variable for: a task head's
    (``classifier.*``, ``qa_outputs.*``). The tied MLM decoder (``tied``: the word embeddings and the MLM bias under
    another name) and the constant buffers are not parameters of their own, and are not listed."""
    return sorted(name for name in state_dict if hfbert_to_google_name(name) is None and name not in tied
                  and not name.endswith(("embeddings.position_ids", "embeddings.token_type_ids")))


def write_google_checkpoint(state_dict: Mapping[str, torch.Tensor], config: HfBertConfig, folder: str | Path,
                            vocab_file: str | Path, *, erf_as_tanh: bool = False) -> Path:
    """Write ``state_dict`` (hfbert names) as a Google release folder: bert_config.json, vocab.txt and
    bert_model.ckpt.* holding the model's variables only (no optimizer state). Parameters Google's layout has no
    variable for (:func:`unmapped_parameters`) are not written. An exact-GELU model is refused unless
    ``erf_as_tanh`` (see :func:`google_config_dict`)."""
    folder = Path(folder)
    google_config = google_config_dict(config, erf_as_tanh=erf_as_tanh)
    tensors = {}
    for name, value in state_dict.items():
        mapped = hfbert_to_google_name(name)
        if mapped is None:
            continue  # the tied decoder (it is the word embeddings), constant buffers, task heads
        target, transpose = mapped
        array = value.detach().cpu().float().numpy() if value.is_floating_point() else value.cpu().numpy()
        tensors[target] = np.ascontiguousarray(array.T if transpose else array)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).write_text(json.dumps(google_config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (folder / VOCAB_FILE).write_bytes(Path(vocab_file).read_bytes())
    write_checkpoint(folder / CHECKPOINT_NAME, tensors)
    return folder


def vocab_is_cased(vocab: Mapping[str, int]) -> bool:
    """Whether a vocabulary keeps case: Google's cased vocabularies hold thousands of tokens with upper-case
    letters, the uncased ones (Chinese included) a handful at most."""
    upper = sum(1 for token in vocab if not re.fullmatch(r"\[[^\]]+\]", token) and token != token.lower())
    return upper >= max(20, len(vocab) // 200)


def google_model(folder: str | Path):
    """The model a release folder holds, every weight loaded: an :class:`~hfbert.HfBertForPreTraining` when it has
    the pretraining heads (Google's releases do), an :class:`~hfbert.HfBertModel` when it has none; raises
    :class:`CheckpointError` for a checkpoint that holds part of a head."""
    checkpoint = read_google_checkpoint(folder)
    heads = {k for k in checkpoint.state_dict if k.startswith("cls.")}
    if heads:
        model, state = HfBertForPreTraining(checkpoint.config), checkpoint.state_dict
    else:
        model = HfBertModel(checkpoint.config)
        state = {k.removeprefix("bert."): v for k, v in checkpoint.state_dict.items()}
    expected = model.state_dict()
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    missing = sorted(k for k in expected if k not in state and k not in tied and not k.endswith(
        ("position_ids", "token_type_ids")))
    if missing:
        raise CheckpointError(f"{folder} has no weights for {', '.join(missing[:4])}"
                              f"{' ...' if len(missing) > 4 else ''}; converting would invent them")
    for name, value in state.items():
        if expected[name].shape != value.shape:
            raise CheckpointError(f"{folder}: {name} has shape {tuple(value.shape)} in the checkpoint but "
                                  f"{tuple(expected[name].shape)} in bert_config.json")
    model.load_state_dict(state, strict=False)
    return model, checkpoint
