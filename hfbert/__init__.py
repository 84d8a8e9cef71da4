"""hfbert: the original BERT as a first-class Hugging Face plugin.

``import hfbert`` registers every model class with the transformers Auto classes under ``model_type="hfbert"`` and
marks them for remote code, so ``save_pretrained`` writes ``auto_map`` and copies the config and modeling files.

Two kinds of process import the package without registering, because registering loads torch and transformers'
modeling (seconds) and they may never need either:

* the ``hfbert`` command itself (also run as ``python -m hfbert.cli``): its help, a bad setting and ``hfbert push``
  answer without torch; every other command registers the classes once its settings are read (:mod:`hfbert.cli`);
* a process with ``HFBERT_LAZY_IMPORT=1`` in its environment: the workers of ``hfbert prepare`` (forked with it)
  then import their modules in about a third of the time. A Dask worker started by hand for builds may set it too
  (``HFBERT_LAZY_IMPORT=1 dask worker ...``).

There the first use of one of the names below (``hfbert.HfBertModel``, ...) loads the model code and registers the
classes (PEP 562's module ``__getattr__``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .heads_hfbert import MODEL_CLASSES  # imports nothing

__version__ = "0.1.0"

LAZY_IMPORT_ENV = "HFBERT_LAZY_IMPORT"
COMMAND = "hfbert"  # the console script's name (pyproject.toml)

_MODULE_OF = {
    "AUTO_CLASSES": "auto",
    "register_auto_classes": "auto",
    "HfBertConfig": "configuration_hfbert",
    **dict.fromkeys(["HfBertPreTrainedModel", "HfBertForPreTrainingOutput", *MODEL_CLASSES], "modeling_hfbert"),
    **dict.fromkeys(["HfBertTokenizer", "train_wordpiece", "bert_tokenizer_from_vocab", "tokenize_dataset"],
                    "tokenization"),
    "load_any_bert": "model_source",
    "push_to_hub": "hub",
    "convert": "convert",
}

if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from .auto import AUTO_CLASSES, register_auto_classes
    from .configuration_hfbert import HfBertConfig
    from .convert import convert
    from .hub import push_to_hub
    from .model_source import load_any_bert
    from .modeling_hfbert import *  # noqa: F403  (every head: hfbert.heads_hfbert)
    from .tokenization import HfBertTokenizer, bert_tokenizer_from_vocab, tokenize_dataset, train_wordpiece


def _load() -> None:
    """Import the model code, register the Auto classes (importing :mod:`hfbert.auto` does) and bind every name,
    also over a submodule of the same name that an import bound here (``convert``)."""
    importlib.import_module(".auto", __name__)
    for export, module in _MODULE_OF.items():
        globals()[export] = getattr(importlib.import_module(f".{module}", __name__), export)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load()
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))


def _started_as_the_command() -> bool:
    """The program is the ``hfbert`` console script (``hfbert``; on Windows ``hfbert.exe`` or ``hfbert-script.py``)
    or ``python -m hfbert.cli``. A script of one's own cannot be named ``hfbert.py``: it would be imported in place
    of this package."""
    program = (getattr(sys, "argv", None) or [""])[0]
    if program == "-m":  # python -m MODULE imports MODULE's packages first, with argv[0] "-m"; the interpreter's
        return _module_run() == f"{__name__}.cli"  # own arguments name MODULE
    return Path(program).stem.removesuffix("-script") == COMMAND


def _module_run() -> str | None:
    """MODULE of ``python [options] -m MODULE ...`` (also written ``-mMODULE``)."""
    args = getattr(sys, "orig_argv", [])
    for i, arg in enumerate(args[1:], start=1):
        if arg == "-m":
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith("-m"):
            return arg[2:]
    return None


if os.environ.get(LAZY_IMPORT_ENV) != "1" and not _started_as_the_command():
    _load()

__all__ = [name for name in _MODULE_OF if name not in ("AUTO_CLASSES", "register_auto_classes")]
