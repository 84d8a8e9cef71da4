"""Where a model comes from: one place that finds a pretrained BERT, reads its tokenizer and loads its weights.

A run starts its model in one of three ways: from a fresh initialisation (a preset size), from a pretrained
checkpoint (``--init_from``), or from its own checkpoint (``--resume``: the weights and the optimizer's state come
from the run's folder, and the pretrained source is not read again). This module is the pretrained case, shared by
``hfbert pretrain --init_from``, ``hfbert prepare --tokenizer``, the fine-tuning recipes and
:func:`load_any_bert` (``hfbert.load_any_bert``). A source is any of:

- an hfbert folder (``model_type: hfbert``, saved by hfbert),
- a transformers BERT folder (``model_type: bert``), of any head: a bare ``BertModel``, ``BertForMaskedLM``, ...,
- one of Google's release folders (``bert_config.json``, ``vocab.txt``, ``bert_model.ckpt.*``; see
  :mod:`hfbert.google_checkpoint`),
- a Hub repository holding any of these, at a revision (a branch, a tag or a commit), downloaded once per machine
  into the Hub cache under :func:`hfbert.hub.hub_timeout`.

Loading into a head the checkpoint lacks initialises the missing parameters as a fresh model would (seeded), and
names them; weights the head does not use are dropped and named too (:class:`LoadReport`). Every problem is a
:class:`ModelSourceError` of one sentence naming the source.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import (HfHubHTTPError, LocalEntryNotFoundError, OfflineModeIsEnabled,
                                    RepositoryNotFoundError, RevisionNotFoundError)
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from .configuration_hfbert import HfBertConfig
from .convert import detect_flavour, head_of, model_class, read_config
from .hub import download_snapshot, is_repo_id, list_repo_files, read_config_any, resolve_timeout
from .google_checkpoint import VOCAB_FILE, is_google_folder, read_google_checkpoint, read_google_config, vocab_is_cased
from .tf_checkpoint import CheckpointError
from .tokenization import bert_tokenizer_from_vocab, load_vocab

__all__ = ["FORMATS", "LoadReport", "ModelSourceError", "PretrainedSource", "check_same_vocabulary",
           "check_special_ids", "load_any_bert", "load_pretrained", "locate", "source_config", "source_tokenizer"]

FORMATS = {"hfbert": "an hfbert folder", "bert": "a transformers BERT folder", "google": "a Google BERT checkpoint"}
# Files a Hub snapshot of a BERT needs; other frameworks' weights (TF/Flax/ONNX exports) are never downloaded.
_HUB_FILES = ["*.json", "*.safetensors", "*.txt", "*.bin", "*.index", "*.data-*", "README.md"]
_OTHER_WEIGHTS = ["tf_model.h5", "flax_model.msgpack", "*.onnx", "*.ot", "onnx/*", "openvino/*", "coreml/*"]
_CONSTANT_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")

logger = logging.getLogger(__name__)


class ModelSourceError(ValueError):
    """A pretrained source that cannot be used: missing, unreadable, or not a BERT."""


@dataclass(frozen=True)
class PretrainedSource:
    """A pretrained BERT found on this machine: ``name`` as given, the local ``folder`` holding it, its
    ``format`` (a key of :data:`FORMATS`), and for a Hub repository its id and the commit downloaded."""

    name: str
    folder: Path
    format: str
    hub_id: str | None = None
    revision: str | None = None

    def describe(self) -> str:
        where = f"{self.hub_id}@{self.revision[:12]}" if self.hub_id and self.revision else self.name
        return f"{where} ({FORMATS[self.format]})"


def _format_of(folder: Path, name: str) -> str:
    if (folder / "config.json").is_file():
        try:
            return detect_flavour(read_config(folder), source=f"{name}/config.json")
        except ValueError as err:
            raise ModelSourceError(str(err)) from None
    if is_google_folder(folder):
        return "google"
    raise ModelSourceError(f"{name} is neither a model folder (config.json and weights) nor a Google BERT folder "
                           "(bert_config.json, vocab.txt, bert_model.ckpt.index and .data-*)")


def locate(name: str | Path, *, revision: str | None = None, token: str | None = None,
           timeout: float | None = None, endpoint: str | None = None) -> PretrainedSource:
    """Find ``name`` -- a local folder, else a Hub model repository (downloaded at ``revision``) -- and tell its
    format. Raises :class:`ModelSourceError`; a Hub that does not answer in time raises
    :class:`~hfbert.hub.HubDownloadError` naming the endpoint."""
    path = Path(name)
    if path.is_dir():
        if revision is not None:
            raise ModelSourceError(f"{name} is a local folder: a revision only applies to a Hub repository")
        return PretrainedSource(str(name), path, _format_of(path, str(name)))
    if path.exists():
        raise ModelSourceError(f"{name} is a file; a pretrained model is a folder or a Hub repository id")
    if not is_repo_id(str(name)):
        raise ModelSourceError(f"{name}: no such folder, and not a Hub repository id (owner/name)")
    seconds = resolve_timeout(timeout)
    try:
        try:
            files = list_repo_files(str(name), revision=revision, token=token, endpoint=endpoint, timeout=seconds)
        except OfflineModeIsEnabled:  # HF_HUB_OFFLINE: the snapshot below comes from the cache, or not at all
            files = []
        ignore = list(_OTHER_WEIGHTS) + (["*.bin"] if any(f.endswith(".safetensors") for f in files) else [])
        folder = download_snapshot(str(name), revision=revision, token=token, endpoint=endpoint, timeout=seconds,
                                   allow_patterns=_HUB_FILES, ignore_patterns=ignore)
    except RevisionNotFoundError:
        raise ModelSourceError(f"the Hub repository {name} has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise ModelSourceError(f"{name}: no such folder, and no such model on the Hub (or it is private and no "
                               "token was given)") from None
    except LocalEntryNotFoundError:
        raise ModelSourceError(f"{name} is not in the Hub cache, and HF_HUB_OFFLINE is set") from None
    except HfHubHTTPError as err:
        raise ModelSourceError(f"the Hub refused {name}: {str(err).splitlines()[0]}") from None
    return PretrainedSource(str(name), folder, _format_of(folder, str(name)), hub_id=str(name), revision=folder.name)


def load_any_bert(repo_or_dir: str | Path, head: str | None = None, *, revision: str | None = None,
                  token: str | None = None, timeout: float | None = None, **kwargs: Any):
    """Load an hfbert, a stock transformers BERT or a Google BERT checkpoint as the hfbert class for ``head``.

    Parameters the checkpoint lacks (a new task head) start fresh and, with the weights the head does not use, are
    named in a warning.

    Args:
        repo_or_dir (`str` or `Path`):
            A local folder or a Hub repository (:func:`locate`).
        head (`str`, *optional*):
            A class-name suffix ("ForMaskedLM", "Model", ...); by default the checkpoint's ``architectures`` (a Google
            checkpoint: ``ForPreTraining``).
        revision (`str`, *optional*):
            The Hub revision (a branch, a tag or a commit); only for a Hub repository.
        token (`str`, *optional*):
            The Hub token.
        timeout (`float`, *optional*):
            Seconds for the Hub calls, which run under :func:`~hfbert.hub.hub_timeout`.
        **kwargs:
            Passed on to ``from_pretrained`` (``config`` too).

    Returns:
        [`HfBertPreTrainedModel`]: the ``HfBert`` + ``head`` model with the checkpoint's weights.

    Raises:
        [`ModelSourceError`]: the source is missing, unreadable or not a BERT (one sentence naming it).
        `ValueError`: the head cannot be read from the config, or is not supported.
        [`~hfbert.hub.HubDownloadError`]: the Hub does not answer in time.
    """
    source = locate(repo_or_dir, revision=revision, token=token, timeout=timeout)
    if source.format == "google":
        head = head or "ForPreTraining"
    else:
        head = head_of(read_config_any(source.folder), head, source=f"the config of {repo_or_dir}")
    model, report = load_pretrained(source, model_class("hfbert", head), config=kwargs.pop("config", None), **kwargs)
    if report.fresh or report.dropped or report.notes:
        logger.warning("; ".join(report.lines()))
    return model


def source_config(source: PretrainedSource, **overrides: Any) -> HfBertConfig:
    """The source's config as an :class:`HfBertConfig` (a transformers BERT's converted, a Google folder's read from
    bert_config.json), with ``overrides`` applied."""
    try:
        if source.format == "google":
            return read_google_config(source.folder, **overrides)
        if source.format == "bert":
            return HfBertConfig.from_bert_config(read_config(source.folder), **overrides)
        return HfBertConfig.from_pretrained(source.folder, **overrides)
    except (CheckpointError, OSError, TypeError, ValueError) as err:
        raise ModelSourceError(f"{source.name}: {err}") from None


@dataclass
class LoadReport:
    """What loading a source into a head did: tensors loaded, parameters initialised fresh (the head lacked them),
    weights dropped (the head does not use them), training state skipped, and notes (e.g. padding rows)."""

    source: PretrainedSource
    head: str
    loaded: int = 0
    fresh: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The announcement: one line for what was loaded and fresh, one for what was dropped, then the notes."""
        fresh = ", ".join(self.fresh) if self.fresh else "none"
        first = f"init_from {self.source.describe()}: {self.loaded} tensors into {self.head}; fresh: {fresh}"
        if self.skipped:
            first += f"; skipped {self.skipped} optimizer/step variables"
        lines = [first]
        if self.dropped:
            lines.append(f"init_from: {len(self.dropped)} weights of the checkpoint are not used by {self.head} "
                         f"and are dropped: {', '.join(self.dropped)}")
        return lines + [f"init_from: {note}" for note in self.notes]


def _load_google(source: PretrainedSource, cls: type, config: HfBertConfig) -> tuple[Any, LoadReport]:
    try:
        checkpoint = read_google_checkpoint(source.folder)
    except CheckpointError as err:
        raise ModelSourceError(str(err)) from None
    model = cls(config)
    expected = model.state_dict()
    bare = not any(key.startswith(f"{model.base_model_prefix}.") for key in expected)  # HfBertModel itself
    state = {(name.removeprefix("bert.") if bare else name): value for name, value in checkpoint.state_dict.items()}
    for name, value in state.items():
        if name in expected and expected[name].shape != value.shape:
            raise ModelSourceError(f"{source.name}: {name} has shape {tuple(value.shape)} in the checkpoint but "
                                   f"{tuple(expected[name].shape)} in bert_config.json's model")
    missing, unexpected = model.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
    report = LoadReport(source, cls.__name__, loaded=sum(1 for k in state if k in expected),
                        fresh=_untied(model, missing), dropped=sorted(k for k in state if k not in expected),
                        skipped=checkpoint.skipped, notes=checkpoint.notes)
    return model, report


def _untied(model, missing) -> list[str]:
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    return sorted(k for k in missing if k not in tied and not k.endswith(_CONSTANT_BUFFERS))


def load_pretrained(source: PretrainedSource, cls: type, *, config: HfBertConfig | None = None,
                    seed: int | None = None, **kwargs: Any) -> tuple[Any, LoadReport]:
    """``source``'s weights in the hfbert class ``cls`` (e.g. :class:`~hfbert.HfBertForPreTraining`), with the
    source's config unless ``config`` is given (same shapes; other settings may differ). Parameters the source
    lacks start as a fresh model's would (seeded with ``seed``). ``kwargs`` go to ``from_pretrained``."""
    config = config if config is not None else source_config(source)
    if seed is not None:
        torch.manual_seed(seed)
    if source.format == "google":
        return _load_google(source, cls, config)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # the report below replaces transformers' table of missing keys
    try:
        model, info = cls.from_pretrained(source.folder, config=config, output_loading_info=True, **kwargs)
    except (OSError, ValueError, RuntimeError) as err:
        raise ModelSourceError(f"{source.name}: the weights do not load: {str(err).splitlines()[0]}") from None
    finally:
        transformers_logging.set_verbosity(verbosity)
    mismatched = [str(k) for k in info.get("mismatched_keys", [])]
    if mismatched:
        raise ModelSourceError(f"{source.name}: weights whose shapes do not match its config: {mismatched[:3]}")
    loaded = len(model.state_dict()) - len(info["missing_keys"])
    dropped = sorted(k for k in info["unexpected_keys"] if not k.endswith(_CONSTANT_BUFFERS))
    return model, LoadReport(source, cls.__name__, loaded=loaded, fresh=_untied(model, info["missing_keys"]),
                             dropped=dropped)


def _lowercases(tokenizer) -> bool:
    probe = "Ab"
    return tokenizer(probe, add_special_tokens=False)["input_ids"] == \
        tokenizer(probe.lower(), add_special_tokens=False)["input_ids"]


def source_tokenizer(source: PretrainedSource, do_lower_case: bool | None = None) -> tuple[Any, list[str]]:
    """The source's fast tokenizer and the warnings worth printing. A Google folder's ``vocab.txt`` becomes an
    :class:`~hfbert.tokenization.HfBertTokenizer` (Google's algorithm); its casing is ``do_lower_case`` or, by
    default, read from the vocabulary (upper-case tokens mean cased). A folder with a saved tokenizer keeps it,
    rebuilt from its ``vocab.txt`` only when ``do_lower_case`` asks for the other casing."""
    folder, warnings = source.folder, []
    vocab_path = folder / VOCAB_FILE
    has_saved = (folder / "tokenizer.json").is_file() or (folder / "tokenizer_config.json").is_file()
    if source.format == "google" or not has_saved:
        if not vocab_path.is_file():
            raise ModelSourceError(f"{source.name} has no tokenizer: neither tokenizer.json nor vocab.txt")
        try:
            vocab = load_vocab(vocab_path)
        except ValueError as err:
            raise ModelSourceError(str(err)) from None
        cased = vocab_is_cased(vocab)
        lower = not cased if do_lower_case is None else do_lower_case
        if lower and cased:
            warnings.append(f"{vocab_path} is a cased vocabulary (it holds upper-case tokens), but --do_lower_case "
                            "lower-cases the text, so those tokens are never produced")
        try:
            return bert_tokenizer_from_vocab(vocab, lowercase=lower), warnings
        except ValueError as err:
            raise ModelSourceError(f"{vocab_path}: {err}") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    except (OSError, ValueError) as err:
        raise ModelSourceError(f"{source.name}: its tokenizer does not load: {str(err).splitlines()[0]}") from None
    if not tokenizer.is_fast:
        raise ModelSourceError(f"{source.name} has a slow tokenizer; hfbert needs a fast one (tokenizer.json)")
    if do_lower_case is not None and _lowercases(tokenizer) != do_lower_case:
        if not vocab_path.is_file():
            raise ModelSourceError(f"{source.name}: --do_lower_case {str(do_lower_case).lower()} differs from its "
                                   "tokenizer, and it has no vocab.txt to rebuild the tokenizer from")
        tokenizer = bert_tokenizer_from_vocab(load_vocab(vocab_path), lowercase=do_lower_case)
    return tokenizer, warnings


def check_same_vocabulary(tokenizer, expected, *, what: str, expected_what: str) -> None:
    """Raise :class:`ModelSourceError` naming both sides when two tokenizers would give different ids: another
    size, another token at some id, other special tokens, or other casing."""
    ours, theirs = tokenizer.get_vocab(), expected.get_vocab()
    if len(ours) != len(theirs):
        raise ModelSourceError(f"{what} has a vocabulary of {len(ours)} tokens, {expected_what} {len(theirs)}: "
                               "they must be the same vocabulary")
    by_id, their_by_id = {i: t for t, i in ours.items()}, {i: t for t, i in theirs.items()}
    for i in sorted(by_id):
        if by_id[i] != their_by_id.get(i):
            raise ModelSourceError(f"{what} and {expected_what} have different vocabularies: id {i} is "
                                   f"{by_id[i]!r} in one and {their_by_id.get(i)!r} in the other")
    check_special_ids(tokenizer, expected, what, expected_what)
    if _lowercases(tokenizer) != _lowercases(expected):
        cased = lambda t: "lower-cases" if _lowercases(t) else "keeps case"  # noqa: E731
        raise ModelSourceError(f"{what} {cased(tokenizer)} but {expected_what} {cased(expected)}")


def check_special_ids(tokenizer, other, what: str, other_what: str) -> None:
    """[PAD], [UNK], [CLS], [SEP] and [MASK] have the same ids in ``tokenizer`` and ``other``; ModelSourceError (a
    ValueError) naming the first that does not."""
    for name in ("pad", "unk", "cls", "sep", "mask"):
        a, b = getattr(tokenizer, f"{name}_token_id"), getattr(other, f"{name}_token_id")
        if a != b:
            raise ModelSourceError(f"the [{name.upper()}] id is {a} in {what} but {b} in {other_what}")
