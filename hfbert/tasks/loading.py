"""What every fine-tuning recipe loads: local data files, a tokenizer and a task model of either family.

The ``model_family`` switch compares the two libraries: the same recipe, seed and data
trained once with hfbert's classes and once with transformers' own ``BertFor*`` classes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import datasets
import transformers
from transformers import AutoTokenizer

from .. import modeling_hfbert
from ..configuration_hfbert import HfBertConfig
from ..google_checkpoint import is_google_folder
from ..model_source import load_pretrained, locate, source_config, source_tokenizer
from ..tokenization import bert_tokenizer_from_vocab
from .registry import MODEL_HEADS, head_classes

#: load_model's task -> (hfbert class, transformers class), from the heads of the task kinds (hfbert.tasks.registry).
TASK_CLASSES = {head: head_classes(head)[:2] for head in MODEL_HEADS}
MODEL_FAMILIES = ("hfbert", "transformers")
logger = logging.getLogger(__name__)
_BUILDERS = {".csv": ("csv", {}), ".tsv": ("csv", {"delimiter": "\t"}), ".json": ("json", {}), ".jsonl": ("json", {})}


def load_data(
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    dataset_dir: str | None = None,
):
    """A ``DatasetDict`` from local CSV/TSV/JSON/JSONL files or a ``save_to_disk`` folder (offline).

    Splits are named ``train``/``validation``/``test``. A ``Dataset`` saved alone becomes ``train``.
    """
    if dataset_dir is not None:
        if any(f is not None for f in (train_file, validation_file, test_file)):
            raise ValueError("give either dataset_dir or data files, not both")
        if not Path(dataset_dir).is_dir():
            raise FileNotFoundError(f"dataset folder not found: {dataset_dir}")
        loaded = datasets.load_from_disk(dataset_dir)
        return loaded if isinstance(loaded, datasets.DatasetDict) else datasets.DatasetDict({"train": loaded})
    files = {k: v for k, v in (("train", train_file), ("validation", validation_file), ("test", test_file)) if v}
    if not files:
        raise ValueError("no data: give train_file/validation_file/test_file or dataset_dir")
    suffixes = set()
    for split, path in files.items():
        if not Path(path).is_file():
            raise FileNotFoundError(f"{split} file not found: {path}")
        suffix = Path(path).suffix.lower()
        if suffix not in _BUILDERS:
            raise ValueError(f"{split} file {path}: unsupported extension {suffix!r}; use one of {sorted(_BUILDERS)}")
        suffixes.add(suffix)
    if len({(_BUILDERS[s][0], tuple(_BUILDERS[s][1].items())) for s in suffixes}) > 1:
        raise ValueError(f"all data files must have the same format, got {sorted(suffixes)}")
    builder, kwargs = _BUILDERS[suffixes.pop()]
    return datasets.load_dataset(builder, data_files=files, **kwargs)


def load_tokenizer(name_or_path: str, lowercase: bool = True):
    """A fast BERT tokenizer from a model folder, or an :class:`hfbert.tokenization.HfBertTokenizer` built
    over a bare ``vocab.txt`` (``lowercase`` only applies to the latter)."""
    path = Path(name_or_path)
    if path.is_file():
        return bert_tokenizer_from_vocab(path, lowercase=lowercase)
    if is_google_folder(path):  # vocab.txt, casing read from it
        return source_tokenizer(locate(path))[0]
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if not tokenizer.is_fast:
        raise TypeError(f"{name_or_path} gives a slow tokenizer; fine-tuning needs offsets from a fast one")
    return tokenizer


def load_model(
    task: str,
    model_family: str = "hfbert",
    model_name_or_path: str | None = None,
    preset: str | None = None,
    config_overrides: Mapping[str, Any] | None = None,
    from_scratch: bool = False,
    **head_kwargs: Any,
):
    """A task model, pretrained (``model_name_or_path``: for hfbert, any BERT :func:`hfbert.model_source.locate`
    finds) or freshly initialised from an hfbert ``preset``. With ``from_scratch``, the architecture of
    ``model_name_or_path`` (its config) with fresh weights: the random-weights baseline of that model.

    ``head_kwargs`` (``num_labels``, ``id2label``, ``label2id``, ``problem_type``) go into the config. A
    transformers-family model built from a preset gets the equivalent ``BertConfig`` (same sizes), but its
    own initialiser (plain normal instead of truncated normal), so fresh models of the two families start
    from different weights even with the same seed.
    """
    if task not in TASK_CLASSES:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(TASK_CLASSES)}")
    if model_family not in MODEL_FAMILIES:
        raise ValueError(f"model_family must be one of {MODEL_FAMILIES}, got {model_family!r}")
    if (model_name_or_path is None) == (preset is None):
        raise ValueError("give exactly one of model_name_or_path (pretrained) or preset (fresh initialisation)")
    ours, theirs = TASK_CLASSES[task]
    cls = getattr(modeling_hfbert, ours) if model_family == "hfbert" else getattr(transformers, theirs)
    overrides = dict(config_overrides or {})
    if from_scratch:
        if model_name_or_path is None:
            raise ValueError("from_scratch needs model_name_or_path: the model whose architecture is drawn afresh")
        config = source_config(locate(model_name_or_path), **overrides, **head_kwargs)
        if model_family == "transformers":
            config = config.to_bert_config()
        return cls(config)
    if model_name_or_path is not None and model_family == "hfbert":
        # any BERT (hfbert, transformers or Google's format, a folder or a Hub id); the task head starts fresh
        source = locate(model_name_or_path)
        config = source_config(source, **overrides, **head_kwargs)
        model, report = load_pretrained(source, cls, config=config)
        logger.info("; ".join(report.lines()))
        return model
    if model_name_or_path is not None:
        return cls.from_pretrained(model_name_or_path, **overrides, **head_kwargs)
    config = HfBertConfig.from_preset(preset, **overrides, **head_kwargs)
    if model_family == "transformers":
        config = config.to_bert_config()
    return cls(config)


def reinitialize(model, *, pooler: bool = False, top_layers: int = 0) -> list[str]:
    """Draw the pooler and/or the top ``top_layers`` encoder layers of ``model`` afresh with the model's own
    initialiser, before fine-tuning (Zhang et al. 2021, "Revisiting few-sample BERT fine-tuning").

    Args:
        model: an hfbert or transformers BERT task model. hfbert's draws Google's initialiser (truncated normal, std
            ``initializer_range``, cut at two std), transformers' a plain normal; biases zero, LayerNorm 1 and 0.
        pooler: re-draw the pooler.
        top_layers: re-draw this many encoder layers, from the top.

    Returns:
        The names of the modules re-drawn (``encoder.layer.N``, ``pooler``).
    """
    encoder = model.base_model
    layers = encoder.encoder.layer
    if top_layers > len(layers):
        raise ValueError(f"cannot re-draw the top {top_layers} layers of a model of {len(layers)}")
    modules = {f"encoder.layer.{i}": layers[i] for i in range(len(layers) - top_layers, len(layers))}
    if pooler:
        if getattr(encoder, "pooler", None) is None:
            raise ValueError("the model has no pooler to re-draw")
        modules["pooler"] = encoder.pooler
    for module in modules.values():
        for part in module.modules():
            # transformers' init functions skip a tensor marked initialised (as loading marks every weight)
            for tensor in part.parameters(recurse=False):
                tensor._is_hf_initialized = False
            model._init_weights(part)
    return list(modules)
