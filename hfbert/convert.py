"""Convert checkpoints both ways between hfbert folders and stock transformers BERT folders.

hfbert's parameter names are transformers' ``BertFor*`` names, so a conversion is a change of config and class with
the same tensors: the target class loads the source weights by name, every head (``cls.*`` MLM/NSP weights
included), and a single missing or unused parameter is an error. A conversion refuses a folder whose weights do not
cover the head it declares (no weight is ever invented or dropped), a setting the other side cannot express, and a
tokenizer that disagrees with the config (vocabulary larger than ``vocab_size``, a special token missing,
``pad_token_id`` not the [PAD] id). hfbert -> transformers -> hfbert reproduces every file byte for byte.

Google's original checkpoint folders (``bert_config.json``, ``vocab.txt``, ``bert_model.ckpt.*``) convert too,
read and written without TensorFlow (:mod:`hfbert.google_checkpoint`): only the model's variables travel (Adam's
slots and ``global_step`` are skipped), and Google -> hfbert -> Google gives back every variable bit for bit. A
conversion writes into a scratch folder beside the destination and moves it in at the end, so a checkpoint found
corrupt halfway leaves nothing that would load.

    hfbert convert ./my-hfbert ./my-bert            # hfbert -> transformers (direction read from config.json)
    hfbert convert ./bert-folder ./my-hfbert        # transformers -> hfbert
    hfbert convert ./uncased_L-12_H-768_A-12 ./bert-base-hfbert    # Google -> hfbert
    hfbert convert ./my-hfbert ./my-google --to google             # hfbert -> Google

Google's code computes its "gelu" as the tanh approximation and has no exact (erf) GELU, hfbert's default. Written
to Google's format, an exact-GELU model would come back computing other outputs, so it is refused unless
``--google_gelu tanh`` accepts the approximation; the conversion then prints how far the outputs move on a probe
batch. A task head (classifier, span or choice head) has no place in Google's layout: its weights are not written,
and a warning names them.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from . import modeling_hfbert
from .arguments import run_command
from .configuration_hfbert import ORIGINAL_VALUES, HfBertConfig
from .convert_settings import HEADS, ConvertArguments, command_parser
from .google_checkpoint import (VOCAB_FILE, google_config_dict, google_model, is_google_folder, unmapped_parameters,
                                vocab_is_cased, write_google_checkpoint)
from .hub import read_config
from .tokenization import bert_tokenizer_from_vocab, load_vocab

__all__ = ["HEADS", "ConvertArguments", "TokenizerInfo", "check_tokenizer", "convert", "detect_flavour", "head_of",
           "main", "read_config", "read_tokenizer"]

FLAVOURS = ("hfbert", "bert")
_PREFIX = {"hfbert": "HfBert", "bert": "Bert"}
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                   "mask_token": "[MASK]"}
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")
# Written by the conversion itself (config, weights); hfbert's remote code (``*_hfbert.py``: the configuration, the
# model and whatever sibling files they import) is written by hfbert's save_pretrained and has no place in BERT's.
_NOT_COPIED = {"config.json", *_WEIGHT_FILES}


def _copied(path: Path) -> bool:
    """Whether a top-level file of the source folder is copied as it is."""
    remote_code = path.suffix == ".py" and path.stem.endswith("_hfbert")
    return path.is_file() and path.name not in _NOT_COPIED and not remote_code and not path.name.startswith("model-")
_CONSTANT_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
# Metadata that legitimately changes in a round trip.
_VOLATILE_KEYS = {"transformers_version", "architectures", "model_type", "auto_map", "_name_or_path", "dtype"}


def detect_flavour(config: Mapping[str, Any], source: str = "config") -> str:
    """``"hfbert"`` or ``"bert"`` from a config dict's ``model_type``.

    Args:
        config (`Mapping[str, Any]`):
            A ``config.json``'s contents.
        source (`str`, *optional*, defaults to `"config"`):
            What the config is, for the error.

    Returns:
        `str`: ``"hfbert"`` or ``"bert"``.

    Raises:
        `ValueError`: any other ``model_type``.
    """
    model_type = config.get("model_type")
    if model_type not in FLAVOURS:
        raise ValueError(
            f"{source} has model_type {model_type!r}: hfbert loads and converts only 'hfbert' and 'bert' "
            "checkpoints (a stock transformers BERT or a folder saved by hfbert)"
        )
    return model_type


def head_of(config: Mapping[str, Any], head: str | None = None, source: str = "config") -> str:
    """The head suffix (e.g. ``"ForMaskedLM"``): ``head`` if given, else read from ``architectures``.

    Args:
        config (`Mapping[str, Any]`):
            A ``config.json``'s contents.
        head (`str`, *optional*):
            The head; an ``HfBert`` or ``Bert`` prefix is dropped.
        source (`str`, *optional*, defaults to `"config"`):
            What the config is, for the error.

    Returns:
        `str`: a key of :data:`HEADS`.

    Raises:
        `ValueError`: ``architectures`` does not name exactly one class (and no ``head`` is given), or the head is not
            supported.
    """
    if head is None:
        archs = config.get("architectures") or []
        if len(archs) != 1:
            raise ValueError(
                f"{source} lists architectures {archs!r}; pass the head explicitly (one of {', '.join(HEADS)})"
            )
        head = archs[0]
        for prefix in _PREFIX.values():
            if head.startswith(prefix):
                head = head[len(prefix):]
                break
    head = head.removeprefix("HfBert").removeprefix("Bert")
    if head not in HEADS:
        raise ValueError(f"{source}: head {head!r} is not supported; expected one of {', '.join(HEADS)}")
    return head


def model_class(flavour: str, head: str) -> type:
    """The class implementing ``head`` on one side: ``transformers.BertForX`` or ``hfbert.HfBertForX``.

    Args:
        flavour (`str`):
            ``"bert"`` for transformers' class; anything else gives hfbert's.
        head (`str`):
            A key of :data:`HEADS`, e.g. ``"ForMaskedLM"``.

    Returns:
        `type`: the model class.
    """
    if flavour == "bert":
        return getattr(transformers, f"Bert{head}")
    return getattr(modeling_hfbert, f"HfBert{head}")


# --- tokenizer checks ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TokenizerInfo:
    """What a conversion must not change: the vocabulary's size and the id of every special token.

    Args:
        size (`int`):
            The number of tokens.
        max_id (`int`):
            The largest token id.
        special_ids (`dict[str, int]`):
            The id of each special token, by its name (``"pad_token"``, ``"unk_token"``, ...).
    """

    size: int
    max_id: int
    special_ids: dict[str, int]


def _token_text(value: Any) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def read_tokenizer(folder: str | Path) -> TokenizerInfo | None:
    """The vocabulary of a saved BERT tokenizer (``vocab.txt`` or ``tokenizer.json``).

    ``tokenizer.json`` is read first; ``vocab.txt`` lines are stripped, as Google's loader reads them. The special
    tokens' names come from ``special_tokens_map.json`` and ``tokenizer_config.json`` when present ([PAD], [UNK], ...
    otherwise).

    Args:
        folder (`str` or `Path`):
            A saved model or tokenizer folder.

    Returns:
        [`TokenizerInfo`] or `None`: `None` if the folder has no tokenizer.

    Raises:
        `ValueError`: ``tokenizer.json`` is not a WordPiece tokenizer, or a special token is not in the vocabulary.
    """
    folder = Path(folder)
    vocab: dict[str, int] = {}
    if (folder / "tokenizer.json").is_file():
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        model_vocab = (data.get("model") or {}).get("vocab")
        if not isinstance(model_vocab, dict):
            raise ValueError(f"{folder / 'tokenizer.json'} is not a WordPiece tokenizer (no vocab mapping)")
        vocab.update(model_vocab)
        vocab.update({t["content"]: t["id"] for t in data.get("added_tokens", [])})
    elif (folder / "vocab.txt").is_file():
        lines = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
        # stripped, as Google's loader (and hfbert.tokenization.load_vocab) reads it
        vocab = {token.strip(): i for i, token in enumerate(lines[:-1] if lines and lines[-1] == "" else lines)}
    else:
        return None
    names = dict(_SPECIAL_TOKENS)
    for meta in ("special_tokens_map.json", "tokenizer_config.json"):
        if (folder / meta).is_file():
            data = json.loads((folder / meta).read_text(encoding="utf-8"))
            names.update({key: _token_text(data[key]) for key in _SPECIAL_TOKENS if data.get(key) is not None})
    missing = {key: token for key, token in names.items() if token not in vocab}
    if missing:
        raise ValueError(f"the tokenizer in {folder} lacks special tokens {missing} in its vocabulary")
    return TokenizerInfo(len(vocab), max(vocab.values()), {key: vocab[token] for key, token in names.items()})


def check_tokenizer(info: TokenizerInfo | None, config: Mapping[str, Any], source: str) -> None:
    """The tokenizer must produce only ids the embedding table has, and [PAD] must be the config's pad id.

    Args:
        info (`TokenizerInfo`, *optional*):
            The tokenizer (:func:`read_tokenizer`); `None` checks nothing.
        config (`Mapping[str, Any]`):
            The model's ``config.json`` contents.
        source (`str`):
            The folder's name, for the error.

    Raises:
        `ValueError`: a token id is ``>= vocab_size``, or [PAD]'s id is not ``pad_token_id``.
    """
    if info is None:
        return
    vocab_size = config.get("vocab_size")
    if info.max_id >= vocab_size:
        raise ValueError(
            f"{source}: the tokenizer has {info.size} tokens (largest id {info.max_id}) but the model's vocab_size is "
            f"{vocab_size}: ids >= {vocab_size} would fall outside the embedding table"
        )
    pad_id = config.get("pad_token_id")
    if pad_id is not None and pad_id != info.special_ids["pad_token"]:
        raise ValueError(
            f"{source}: config pad_token_id is {pad_id} but the tokenizer's pad token has id "
            f"{info.special_ids['pad_token']}"
        )


# --- configs -------------------------------------------------------------------------------------------------------
def _comparable(config: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in config.items() if k not in _VOLATILE_KEYS}
    if out.get("hidden_act") == "gelu_tanh":
        out["hidden_act"] = "gelu_new"  # the same function under transformers' name
    return out


def hfbert_to_bert_config(config: Mapping[str, Any], head: str):
    """A transformers ``BertConfig`` equal in every value; refuses hfbert options BERT cannot express.

    Args:
        config (`Mapping[str, Any]`):
            An hfbert ``config.json``'s contents.
        head (`str`):
            The head suffix; ``architectures`` becomes ``["Bert" + head]``.

    Returns:
        `transformers.BertConfig`: the equivalent config.

    Raises:
        `ValueError`: a setting has no ``BertConfig`` equivalent.
    """
    hf_config = HfBertConfig.from_dict(dict(config))
    bert_config = hf_config.to_bert_config()
    back = HfBertConfig.from_bert_config(bert_config).to_dict()
    before, after = _comparable(hf_config.to_dict()), _comparable(back)
    lost = {k: v for k, v in before.items() if after.get(k) != v}  # a key set to None is not lost when absent
    if lost:
        raise ValueError(f"these hfbert settings have no transformers BertConfig equivalent: {lost}")
    bert_config.architectures = [f"Bert{head}"]
    bert_config.dtype = hf_config.dtype
    return bert_config


def bert_to_hfbert_config(config: Mapping[str, Any], head: str):
    """The equivalent ``HfBertConfig``; refuses BERT variants the original BERT does not have.

    transformers' ``"gelu_new"`` becomes hfbert's ``"gelu_tanh"``.

    Args:
        config (`Mapping[str, Any]`):
            A transformers BERT ``config.json``'s contents.
        head (`str`):
            The head suffix; ``architectures`` becomes ``["HfBert" + head]``.

    Returns:
        [`HfBertConfig`]: the equivalent config.

    Raises:
        `ValueError`: a setting the original BERT does not have (one of ``ORIGINAL_VALUES`` off its value).
    """
    unsupported = {k: config[k] for k, default in ORIGINAL_VALUES.items() if config.get(k, default) != default}
    if unsupported:
        raise ValueError(f"these BERT settings have no hfbert equivalent (the original BERT has none): {unsupported}")

    # transformers' "gelu_new" is hfbert's "gelu_tanh" (hfbert -> BERT writes it that way), so both round trips
    # reproduce the config byte for byte.
    overrides = {"hidden_act": "gelu_tanh"} if config.get("hidden_act") == "gelu_new" else {}
    hf_config = HfBertConfig.from_bert_config(dict(config), **overrides)
    hf_config.architectures = [f"HfBert{head}"]
    hf_config.dtype = config.get("dtype") or config.get("torch_dtype")
    return hf_config


# --- conversion ----------------------------------------------------------------------------------------------------
def _check_destination(src: Path, dst: Path, overwrite: bool) -> bool:
    """True when ``dst`` holds something that must be replaced (only allowed with ``overwrite``)."""
    if dst.resolve() == src.resolve():
        raise ValueError(f"source and destination are the same folder ({src}); convert into a new folder")
    occupied = dst.exists() and (not dst.is_dir() or any(dst.iterdir()))
    if occupied and not overwrite:
        raise FileExistsError(f"{dst} exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    return occupied


def _load_as(cls: type, src: Path, config: Any, head: str):
    """Load ``src``'s weights into ``cls`` by name, refusing to invent missing weights or drop unused ones."""
    model, info = cls.from_pretrained(src, config=config, output_loading_info=True)
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    missing = sorted(k for k in info["missing_keys"] if k not in tied)
    # Old checkpoints also store the constant buffers 0..511 / zeros that BertEmbeddings used to register.
    unexpected = sorted(k for k in info["unexpected_keys"] if not k.endswith(_CONSTANT_BUFFERS))
    mismatched = sorted(str(k) for k in info.get("mismatched_keys", []))
    if missing:
        raise ValueError(
            f"{src} has no weights for {len(missing)} parameters of the {head} head (e.g. {missing[:3]}); "
            "converting would invent them. Convert with the head the checkpoint was saved with."
        )
    if unexpected:
        raise ValueError(
            f"{src} has {len(unexpected)} weights the {head} head does not use (e.g. {unexpected[:3]}); "
            "converting would drop them. Convert with the head the checkpoint was saved with."
        )
    if mismatched:
        raise ValueError(f"{src} has weights whose shapes do not match its config: {mismatched[:3]}")
    return model


def convert(src: str | Path, dst: str | Path, *, to: str | None = None, head: str | None = None,
            overwrite: bool = False, do_lower_case: bool | None = None, google_gelu: str | None = None) -> Path:
    """Convert the model folder ``src`` into ``dst``; returns ``dst``.

    Tokenizer files, the model card and other top-level files are copied byte for byte, except that
    ``tokenizer_config.json``'s ``tokenizer_class`` (and ``auto_map``) is pointed at a class the target side loads,
    without changing the encodings; the weights are written with ``save_pretrained``.

    Args:
        src (`str` or `Path`):
            An hfbert folder, a transformers BERT folder or a Google release folder.
        dst (`str` or `Path`):
            The folder to write.
        to (`str`, *optional*):
            ``"transformers"`` (alias ``"bert"``), ``"hfbert"`` or ``"google"`` (a release folder in Google's format,
            :mod:`hfbert.google_checkpoint`); by default the other side of ``src``, and ``"hfbert"`` for a Google
            folder (which converts to ``"hfbert"`` or ``"transformers"`` only).
        head (`str`, *optional*):
            E.g. ``"ForMaskedLM"``; defaults to the config's ``architectures``.
        overwrite (`bool`, *optional*, defaults to `False`):
            Replace a ``dst`` that exists and is not empty.
        do_lower_case (`bool`, *optional*):
            For a Google folder, whose tokenizer is built from its ``vocab.txt``: its casing; default: read from the
            vocabulary.
        google_gelu (`str`, *optional*):
            ``"tanh"`` lets ``to="google"`` write an exact-GELU model under Google's tanh "gelu" (refused otherwise;
            see the module docstring).

    Returns:
        `Path`: ``dst``.

    Raises:
        `FileNotFoundError`: ``src`` is not a folder, or (to Google's format) has no ``vocab.txt``.
        `FileExistsError`: ``dst`` exists and is not empty, without ``overwrite``.
        `ValueError`: ``src`` is not a model folder or already the target's, ``src`` and ``dst`` are the same folder,
            an option is not valid, a setting or the tokenizer does not fit the other side, or the weights do not
            cover the head exactly.
    """
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise FileNotFoundError(f"source folder {src} does not exist")
    if is_google_folder(src) and not (src / "config.json").is_file():
        return _from_google(src, dst, to=to or "hfbert", overwrite=overwrite, do_lower_case=do_lower_case)
    config = read_config(src)
    flavour = detect_flavour(config, source=str(src / "config.json"))
    target = {None: "bert" if flavour == "hfbert" else "hfbert", "transformers": "bert", "bert": "bert",
              "hfbert": "hfbert", "google": "google"}.get(to)
    if target is None:
        raise ValueError(f"to must be 'transformers', 'hfbert' or 'google', got {to!r}")
    if google_gelu not in (None, "tanh"):
        raise ValueError(f"google_gelu must be 'tanh' (or unset), got {google_gelu!r}")
    if google_gelu is not None and target != "google":
        raise ValueError("google_gelu applies to a conversion to Google's format (--to google) only")
    if target == "google":
        return _to_google(src, dst, config, head=head_of(config, head, source=str(src / "config.json")),
                          overwrite=overwrite, erf_as_tanh=google_gelu == "tanh")
    if target == flavour:
        raise ValueError(f"{src} is already a {flavour} folder; nothing to convert")
    head = head_of(config, head, source=str(src / "config.json"))
    replace = _check_destination(src, dst, overwrite)
    tokenizer = read_tokenizer(src)
    check_tokenizer(tokenizer, config, str(src))

    if target == "bert":
        new_config = hfbert_to_bert_config(config, head)
    else:
        new_config = bert_to_hfbert_config(config, head)
    # The names are the same on both sides: the target class loads the source weights directly, and one missing or
    # unused parameter anywhere (cls.* included) is an error, never a silent re-initialisation.
    target_model = _load_as(model_class(target, head), src, new_config, head)

    if replace:  # only now that the conversion is known to succeed
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    dst.mkdir(parents=True, exist_ok=True)
    target_model.save_pretrained(dst)
    for path in sorted(src.iterdir()):
        if _copied(path):
            shutil.copy2(path, dst / path.name)
    _retarget_tokenizer_config(dst, target)
    after = read_tokenizer(dst)
    if after != tokenizer:  # the copy is byte for byte; a difference means a bug here, not bad input
        raise RuntimeError(f"tokenizer changed during conversion: {tokenizer} -> {after}")
    return dst


@contextlib.contextmanager
def _staged(dst: Path, overwrite: bool):
    """A scratch folder beside ``dst`` that becomes ``dst`` only once everything is written: a failure (a corrupt
    checkpoint found halfway, a full disk) leaves no folder that would load half a model."""
    occupied = dst.exists() and (not dst.is_dir() or any(dst.iterdir()))
    if occupied and not overwrite:
        raise FileExistsError(f"{dst} exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    dst.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{dst.name}.converting-", dir=dst.parent))
    try:
        yield scratch
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if dst.exists():
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
    os.replace(scratch, dst)


def _from_google(src: Path, dst: Path, *, to: str, overwrite: bool, do_lower_case: bool | None) -> Path:
    """A Google release folder -> an hfbert folder (or, ``to="transformers"``, a stock BERT one)."""
    if to not in ("hfbert", "transformers", "bert"):
        raise ValueError(f"{src} is a Google BERT folder: convert it to 'hfbert' or 'transformers', not {to!r}")
    vocab = load_vocab(src / VOCAB_FILE) if (src / VOCAB_FILE).is_file() else None
    model, checkpoint = google_model(src)  # every problem of the checkpoint is found before anything is written
    lower = (not vocab_is_cased(vocab)) if do_lower_case is None and vocab is not None else do_lower_case
    tokenizer = bert_tokenizer_from_vocab(vocab, lowercase=lower, model_max_length=model.config.max_position_embeddings)
    model.config.architectures = [type(model).__name__]
    with _staged(dst, overwrite) as scratch:
        folder = scratch / "hfbert" if to != "hfbert" else scratch
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        if to != "hfbert":
            convert(folder, scratch / "bert", to="bert")
            shutil.rmtree(folder)
            for path in (scratch / "bert").iterdir():
                os.replace(path, scratch / path.name)
            (scratch / "bert").rmdir()
    for note in checkpoint.notes:
        print(f"note: {note}", file=sys.stderr)
    return dst


def _to_google(src: Path, dst: Path, config: Mapping[str, Any], *, head: str, overwrite: bool,
               erf_as_tanh: bool) -> Path:
    """An hfbert or transformers folder -> a Google release folder (the model's variables, no optimizer state)."""
    if not (src / VOCAB_FILE).is_file():
        raise FileNotFoundError(f"{src} has no vocab.txt: Google's format keeps the vocabulary as vocab.txt")
    flavour = detect_flavour(config, source=str(src / "config.json"))
    hf_config = bert_to_hfbert_config(config, head) if flavour == "bert" else HfBertConfig.from_dict(dict(config))
    try:  # before any weight is read
        google_config_dict(hf_config, erf_as_tanh=erf_as_tanh)
    except ValueError as err:
        hint = (". Pass --google_gelu tanh (google_gelu='tanh') to write it under Google's tanh GELU anyway"
                if hf_config.hidden_act == "gelu" else "")
        raise ValueError(f"{src}: {err}{hint}") from None
    model = _load_as(model_class("hfbert", head), src, hf_config, head)
    state = model.state_dict()
    if not any(k.startswith("bert.") for k in state):  # a bare encoder
        state = {f"bert.{k}": v for k, v in state.items()}
    dropped = unmapped_parameters(state, set(getattr(model, "_tied_weights_keys", None) or {}))
    shift = _tanh_gelu_shift(model) if hf_config.hidden_act == "gelu" else None
    with _staged(dst, overwrite) as scratch:
        write_google_checkpoint(state, model.config, scratch, src / VOCAB_FILE, erf_as_tanh=erf_as_tanh)
    if dropped:
        print(f"warning: Google's checkpoint layout has no place for the {head} head: {', '.join(dropped)} "
              f"{'is' if len(dropped) == 1 else 'are'} not written (the encoder is)", file=sys.stderr)
    if shift is not None:
        print(f"note: the exact (erf) GELU is written as Google's 'gelu', the tanh approximation: on a probe batch "
              f"({' x '.join(map(str, _probe_ids(model).shape))} tokens) the outputs move by at most {shift:.2g}",
              file=sys.stderr)
    return dst


def _probe_ids(model):
    """A fixed batch of token ids for :func:`_tanh_gelu_shift` (B, T), or (1, B, T) for a multiple-choice head."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, config.vocab_size, (2, min(16, config.max_position_embeddings)), generator=generator)
    return ids[None] if "MultipleChoice" in type(model).__name__ else ids


def _tanh_gelu_shift(model) -> float:
    """The largest difference between any output (logits; hidden states for a bare encoder) of ``model`` and of the
    same weights computed with the tanh GELU, on the probe batch."""
    tanh_config = copy.deepcopy(model.config)
    tanh_config.hidden_act = "gelu_tanh"
    tanh_model = type(model)(tanh_config)
    tanh_model.load_state_dict(model.state_dict())
    ids = _probe_ids(model)
    with torch.no_grad():
        exact, approximate = model.eval()(input_ids=ids), tanh_model.eval()(input_ids=ids)
    return max(float((exact[key] - approximate[key]).abs().max()) for key in exact.keys()
               if isinstance(exact[key], torch.Tensor) and exact[key].is_floating_point())


def _write_json(path: Path, data: dict) -> None:
    # transformers' own layout for tokenizer_config.json, so that a round trip reproduces the file byte for byte
    path.write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _retarget_tokenizer_config(folder: Path, target: str) -> None:
    """Point ``tokenizer_class`` at a class the target side can load, without changing the encodings.

    hfbert's ``HfBertTokenizer`` (Google's normalisation, 200-character words) lives in ``tokenizer.json``; a stock
    ``BertTokenizer`` would rebuild a different pipeline from the vocabulary, so a transformers folder names
    ``TokenizersBackend``, which runs ``tokenizer.json`` verbatim. Converting back restores ``HfBertTokenizer``
    (recognised by the ``max_input_chars_per_word`` entry only it writes).
    """
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return
    data = json.loads(path.read_text(encoding="utf-8"))
    cls = data.get("tokenizer_class")
    if target == "bert":
        changed = data.pop("auto_map", None) is not None
        if cls is not None and not hasattr(transformers, cls):
            data["tokenizer_class"] = "TokenizersBackend" if (folder / "tokenizer.json").is_file() else "BertTokenizer"
            changed = True
    else:
        changed = cls == "TokenizersBackend" and "max_input_chars_per_word" in data
        if changed:
            data["tokenizer_class"] = "HfBertTokenizer"
    if changed:
        _write_json(path, data)


def main(argv: Sequence[str] | None = None) -> int:
    """``hfbert convert SRC DST``: convert and print where the folder went.

    Args:
        argv (`Sequence[str]`, *optional*):
            The command's arguments (:class:`ConvertArguments`); by default ``sys.argv[1:]``.

    Returns:
        `int`: the exit status: 0 once written, 2 (one line) for a folder that is not a model, a setting the other
        side lacks or an occupied destination.
    """
    prog = "hfbert convert"
    args = command_parser().parse(argv)

    def run() -> int:
        out = convert(args.src, args.dst, to=args.to, head=args.head, overwrite=args.overwrite,
                      do_lower_case=args.do_lower_case, google_gelu=args.google_gelu)
        print(f"wrote {out}")
        return 0

    # ValueError/OSError: a folder that is not a model, a setting the other side lacks, an occupied destination.
    return run_command(prog, run, errors=(ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
