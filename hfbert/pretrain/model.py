"""Where the run's model comes from: a fresh initialisation, a pretrained checkpoint, or the run's own checkpoint.

- Fresh (no ``--init_from``): an :class:`~hfbert.HfBertForPreTraining` of the ``--preset`` size over the corpus's
  vocabulary, seeded with ``--seed``.
- Pretrained (``--init_from MODEL``, a fresh start): MODEL is found once per machine
  (:func:`hfbert.model_source.locate`: a Hub id at ``--init_revision``, an hfbert or transformers folder, a Google
  folder); its size, vocabulary and casing are the run's. Without ``--prepared`` the input is prepared with MODEL's
  tokenizer; a ``--prepared`` corpus must have been built with the same vocabulary. ``--tokenizer DIR`` may name a
  vocabulary that extends MODEL's (:func:`hfbert.vocabulary.check_extension`): the embeddings and the MLM bias then
  grow by its new entries (:func:`hfbert.vocabulary.grow_embeddings`, ``--new_embeddings``), and DIR is the run's
  tokenizer. Heads MODEL lacks start fresh (seeded), weights the pretraining model does not use are dropped, and
  both are announced. As with Google's ``run_pretraining.py --init_checkpoint``, only the model's weights are taken:
  the optimizer and the learning-rate schedule start anew. What was loaded is recorded in
  ``output_dir/init_from.json``.
- Resumed (``--resume``): the weights, the optimizer and the schedule come from the run's checkpoint; a run that
  started from a pretrained model rebuilds its architecture from ``init_from.json``, so MODEL need not be
  reachable any more.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..configuration_hfbert import HfBertConfig
from ..hub import HubDownloadError
from ..model_source import (
    FORMATS,
    ModelSourceError,
    PretrainedSource,
    check_same_vocabulary,
    load_pretrained,
    locate,
    source_config,
    source_tokenizer,
)
from ..modeling_hfbert import HfBertForPreTraining
from ..vocabulary import grow_embeddings, load_extension
from .checkpointing import from_main
from .config import ConfigError, PretrainConfig

__all__ = ["ORIGIN_FILE", "Origin", "build_model", "find_origin", "record_origin"]

ORIGIN_FILE = "init_from.json"


@dataclass
class Origin:
    """How the run's model starts: ``kind`` is "fresh", "pretrained" or "resumed"; a pretrained run carries its
    architecture (``model_config``), and on a fresh start also the ``source``, its ``tokenizer`` and the loaded
    ``model``; ``record``
    describes the source (for ``init_from.json`` and the model card)."""

    kind: str
    model_config: HfBertConfig | None = None
    source: PretrainedSource | None = None
    tokenizer: Any = None
    record: dict | None = None
    model: Any = None  # the pretrained model, loaded (fresh heads seeded) when the source was found


def _read_record(output_dir: Path) -> dict:
    path = output_dir / ORIGIN_FILE
    if not path.is_file():
        raise ConfigError(f"resume: the run in {output_dir} did not start from --init_from (it has no {ORIGIN_FILE})"
                          "; resume it without --init_from")
    return json.loads(path.read_text(encoding="utf-8"))


def find_origin(config: PretrainConfig, accelerator, resuming: bool, lengths: list[int]) -> Origin:
    """Decide where the model comes from (see the module docstring); raises :class:`ConfigError` with one
    sentence for a source that cannot be used, the same on every process."""
    output_dir = Path(config.output_dir)
    if config.init_from is None:
        if resuming and accelerator.is_main_process and (output_dir / ORIGIN_FILE).is_file():
            raise ConfigError(f"resume: the run in {output_dir} started from --init_from "
                              f"{_read_record(output_dir)['init_from']}; resume it with the same --init_from")
        return Origin("resumed" if resuming else "fresh")
    if resuming:
        record = from_main(accelerator, lambda: _read_record(output_dir))
        return Origin("resumed", model_config=HfBertConfig.from_dict(record["config"]), record=record)

    def find() -> tuple[PretrainedSource, HfBertConfig, Any, Any, list[str]]:
        source = locate(config.init_from, revision=config.init_revision, timeout=config.hub_timeout)
        model_config = source_config(source, **config.model)
        tokenizer, warnings = source_tokenizer(source, config.do_lower_case)
        extended = None if config.tokenizer is None else _extension(config, tokenizer)  # before any weight is read
        return source, model_config, tokenizer, extended, warnings

    found = error = None
    with accelerator.local_main_process_first():  # one download per machine; the others read its cache
        try:
            found = find()
        except Exception as err:  # raised once every process has left the barrier, so that none waits forever
            error = err
    if isinstance(error, ModelSourceError):  # a source that is not there (the message names it)
        raise ConfigError(f"init_from: {error}") from None
    if isinstance(error, HubDownloadError):  # a silent Hub (the message names the endpoint)
        raise ConfigError(f"init_from {config.init_from}: {error}") from None
    if error is not None:
        raise error
    source, model_config, tokenizer, extended, warnings = found
    too_long = [n for n in lengths if n > model_config.max_position_embeddings]
    if too_long:
        raise ConfigError(f"max_seq_length {max(too_long)} exceeds the {model_config.max_position_embeddings} "
                          f"positions of --init_from {config.init_from}")
    for warning in warnings:
        accelerator.print(f"warning: {warning}")
    try:  # now, so that a corrupt checkpoint stops the run before any data is prepared
        model, report = load_pretrained(source, HfBertForPreTraining, config=model_config, seed=config.seed)
    except ModelSourceError as err:
        raise ConfigError(f"init_from: {err}") from None
    for line in report.lines():
        accelerator.print(line)
    vocabulary = None
    if extended is not None:  # a vocabulary that extends the checkpoint's: one new row per new entry
        try:
            growth = grow_embeddings(model, tokenizer, extended, method=config.new_embeddings, seed=config.seed)
        except ValueError as err:
            raise ConfigError(f"tokenizer: {err}") from None
        accelerator.print(f"init_from: --tokenizer {config.tokenizer}: {growth.line()}")
        vocabulary = {"tokenizer": config.tokenizer, **growth.record()}
        model_config, tokenizer = model.config, extended
    accelerator.print(f"init_from: the optimizer and the learning-rate schedule start fresh (learning_rate "
                      f"{config.learning_rate:g}; Google advises a smaller one for continued pretraining than "
                      "from scratch)")
    record = {"init_from": config.init_from, "hub_id": source.hub_id, "revision": source.revision,
              "format": source.format, "format_name": FORMATS[source.format], "config": model_config.to_dict(),
              "loaded": {"tensors": report.loaded, "fresh": report.fresh, "dropped": report.dropped,
                         "skipped": report.skipped, "notes": report.notes}}
    if vocabulary is not None:
        record["vocabulary"] = vocabulary
    return Origin("pretrained", model_config, source, tokenizer, record, model)


def _extension(config: PretrainConfig, tokenizer):
    """``--tokenizer``'s tokenizer, which must extend the checkpoint's vocabulary (one line, naming both, if not)."""
    try:
        return load_extension(config.tokenizer, tokenizer, base_what=f"--init_from {config.init_from}")
    except ValueError as err:
        raise ConfigError(f"tokenizer: {err}") from None


def record_origin(origin: Origin, output_dir: str | Path) -> None:
    """Write ``init_from.json`` for a run that starts from a pretrained model (main process, fresh start)."""
    if origin.kind == "pretrained":
        path = Path(output_dir) / ORIGIN_FILE
        path.write_text(json.dumps(origin.record, indent=1) + "\n", encoding="utf-8")


def build_model(origin: Origin, config: PretrainConfig, data, model_init=None):
    """The model for the corpora's tokenizer, checked against every manifest (vocabulary size, special ids): a
    fresh one (``model_init(model_config)`` when given, else :class:`HfBertForPreTraining`), the pretrained one, or
    (resuming) the architecture the checkpoint's weights are loaded into."""
    tokenizer = data.tokenizer
    if origin.model_config is None:
        model_config = config.model_config(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    else:
        model_config = origin.model_config
    for corpus in data.corpora:
        try:
            if origin.tokenizer is not None:
                check_same_vocabulary(corpus.load_tokenizer(), origin.tokenizer, what=f"the corpus in {corpus.path}",
                                      expected_what=f"--init_from {config.init_from}")
            corpus.check_model_config(model_config)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    torch.manual_seed(config.seed)  # the same initial (and fresh-head) weights on every process and every start
    if origin.model is None:
        return (model_init or HfBertForPreTraining)(model_config)
    if model_init is not None:
        raise ConfigError("model_init builds a fresh model; it cannot be combined with --init_from")
    return origin.model
