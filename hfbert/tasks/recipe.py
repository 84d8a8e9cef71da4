"""The parts every fine-tuning recipe shares: argument parsing, run notes, and the final save.

Kept in the library so the four recipes cannot drift apart on how they read arguments or what a finished
run folder holds: weights + config (with ``id2label``/``label2id``), tokenizer, ``all_results.json``,
predictions, and ``README.md`` rendered from the packaged ``finetuned.md`` card template.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import Trainer

from ..arguments import CommandParser, UsageError
from ..settings import setting
from ..modelcard import template_path, write_model_card
from .loading import load_data, load_model, load_tokenizer, reinitialize

DEFAULT_CARD_TEMPLATE = template_path("finetuned.md")


@dataclass
class DataFiles:
    """Where a recipe's examples come from and how many it uses (shared by the recipes that read tables)."""

    train_file: str | None = setting(None, "training data: CSV, TSV, JSON or JSONL")
    validation_file: str | None = setting(None, "evaluation data, in the format of --train_file")
    test_file: str | None = setting(None, "held-out data, in the format of --train_file: predicted and scored "
                                          "(test_* metrics) after training, never used to choose anything")
    dataset_dir: str | None = setting(None, "a datasets save_to_disk folder instead of --train_file/--validation_file")
    max_train_samples: int | None = setting(None, "use only the first N training rows")
    max_eval_samples: int | None = setting(None, "use only the first N evaluation rows")

    def load(self):
        """The ``DatasetDict`` (``train``, ``validation``), cut to ``--max_train_samples``/``--max_eval_samples``."""
        raw = load_data(self.train_file, self.validation_file, self.test_file, dataset_dir=self.dataset_dir)
        for split, limit in (("train", self.max_train_samples), ("validation", self.max_eval_samples)):
            if split in raw and limit is not None:
                raw[split] = raw[split].select(range(min(limit, len(raw[split]))))
        return raw


@dataclass
class ModelArguments:
    """Which model to fine-tune (shared by every recipe)."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "pretrained folder (hfbert or transformers BERT) or Hub id"})
    preset: str | None = field(
        default=None, metadata={"help": "fresh hfbert preset (tiny/mini/small/...) instead of a checkpoint"})
    config_overrides: str | None = field(
        default=None, metadata={"help": 'JSON object of config values, e.g. \'{"hidden_size": 32}\''})
    tokenizer: str | None = field(
        default=None, metadata={"help": "tokenizer folder or a vocab.txt; default: model_name_or_path",
                                "aliases": ["--tokenizer_name"]})  # transformers' examples' spelling
    lowercase: bool = field(default=True, metadata={"help": "lower-case (only for a bare vocab.txt)"})
    model_family: str = field(
        default="hfbert", metadata={"help": "hfbert, or transformers (its own BertFor* classes) to compare"})
    from_scratch: bool = field(default=False, metadata={
        "help": "fresh weights of --model_name_or_path's architecture, with its tokenizer (drawn with --seed): the "
                "random-weights baseline of that model"})
    reinit_pooler: bool = field(default=False, metadata={
        "help": "draw the pooler afresh before fine-tuning (it was trained for next sentence prediction)"})
    reinit_layers: int = field(default=0, metadata={
        "help": "draw the top N encoder layers afresh before fine-tuning (Zhang et al. 2021, small data)"})

    def __post_init__(self):
        if self.model_family not in ("hfbert", "transformers"):
            raise UsageError(f"--model_family must be 'hfbert' or 'transformers', got {self.model_family!r}")
        if (self.model_name_or_path is None) == (self.preset is None):
            raise UsageError("give exactly one of --model_name_or_path or --preset")
        if self.from_scratch and self.model_name_or_path is None:
            raise UsageError("--from_scratch draws fresh weights of --model_name_or_path's architecture; give it")
        if self.reinit_layers < 0:
            raise UsageError(f"--reinit_layers must be >= 0, got {self.reinit_layers}")
        if self.tokenizer is None and self.model_name_or_path is None:
            raise UsageError("a fresh --preset model needs --tokenizer (a tokenizer folder or vocab.txt)")
        self.overrides  # a malformed --config_overrides stops the run here, before any data is read

    @property
    def overrides(self) -> dict[str, Any]:
        if not self.config_overrides:
            return {}
        try:
            value = json.loads(self.config_overrides)
        except json.JSONDecodeError as err:
            raise UsageError(f"--config_overrides is not valid JSON ({err}): {self.config_overrides!r}") from None
        if not isinstance(value, dict):
            raise UsageError(f"--config_overrides must be a JSON object, got {self.config_overrides!r}")
        return value

    def load(self, task: str, **head_kwargs: Any):
        """(tokenizer, model) for ``task``; a fresh model gets the tokenizer's vocabulary size."""
        tokenizer = load_tokenizer(self.tokenizer or self.model_name_or_path, lowercase=self.lowercase)
        overrides = self.overrides
        if self.preset is not None:
            overrides.setdefault("vocab_size", len(tokenizer))
        model = load_model(task, self.model_family, self.model_name_or_path, self.preset, overrides,
                           from_scratch=self.from_scratch, **head_kwargs)
        if self.reinit_pooler or self.reinit_layers:
            reinitialize(model, pooler=self.reinit_pooler, top_layers=self.reinit_layers)
        return tokenizer, model


def parse_args(dataclass_types: Sequence[type], argv: Sequence[str] | None = None, prog: str | None = None) -> tuple:
    """The recipe's settings (``hfbert.arguments.CommandParser``): ``--key value`` options over a ``--config``
    JSON/YAML file; a lone ``.json``/``.yaml`` argument is read as that file. A bad value exits with status 2 and
    one line naming it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith((".json", ".yaml", ".yml")):
        argv = ["--config", argv[0]]
    prog = prog or f"python {Path(sys.argv[0]).name}"
    parsed = CommandParser(prog, list(dataclass_types)).parse(argv)
    return parsed if isinstance(parsed, tuple) else (parsed,)


def wants_training(args) -> bool:
    """Whether a recipe trains: unless only ``--do_eval`` was asked for (an evaluation of a fine-tuned model). An
    ``--eval_strategy`` other than "no" turns ``do_eval`` on by itself, and means evaluations during training."""
    return args.do_train or not args.do_eval or args.eval_strategy != "no"


def note(notes: list[str], message: str) -> None:
    """Record a data note for the card/results and warn now, so nothing is altered silently."""
    notes.append(message)
    warnings.warn(message, stacklevel=2)


def write_jsonl(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def card_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The evaluation scores worth a card: ``eval_*``/``test_*`` numbers, without timings."""
    return {
        k: v for k, v in metrics.items()
        if k.startswith(("eval_", "test_")) and isinstance(v, (int, float))
        and not k.endswith(("_runtime", "_per_second"))
    }


def finish_run(
    trainer,
    tokenizer,
    metrics: Mapping[str, Any],
    *,
    task: str,
    recipe: str,
    pipeline_task: str,
    model_args,
    data_description: Mapping[str, str],
    notes: Sequence[str] = (),
    max_length: int | None = None,
    labels: Mapping[int, str] | None = None,
    card_template: str | Path | None = None,
    language: str | None = None,
) -> Path:
    """Save the Hub-format folder, results and model card; push when ``--push_to_hub`` was given."""
    args = trainer.args
    out = Path(args.output_dir)
    trainer.save_model(str(out))
    tokenizer.save_pretrained(str(out))
    results = {**metrics, "notes": list(notes)}
    (out / "all_results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))
    write_model_card(
        out, card_template or DEFAULT_CARD_TEMPLATE,
        language=language, base_model=model_args.model_name_or_path,
        metrics=card_metrics(metrics),
        pipeline_tag=pipeline_task if pipeline_task != "extractive-question-answering" else "question-answering",
        model_name=args.hub_model_id or out.name, task=task, recipe=recipe, pipeline_task=pipeline_task,
        model_family=model_args.model_family, preset=model_args.preset,
        train_data=data_description.get("train", "-"), eval_data=data_description.get("eval", "-"),
        seed=args.seed, epochs=args.num_train_epochs, learning_rate=args.learning_rate,
        batch_size=args.per_device_train_batch_size, max_length=max_length, labels=labels, notes=list(notes),
    )
    if args.push_to_hub:
        trainer.push_to_hub(commit_message=f"hfbert {recipe}")
    return out


class CardKeepingTrainer(Trainer):
    """A ``Trainer`` whose ``push_to_hub`` uploads the hfbert card instead of overwriting it.

    ``Trainer.push_to_hub`` always calls ``create_model_card``, which replaces ``README.md`` with a generic
    card; when the recipe has already written its card, keep it.
    """

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        if (Path(self.args.output_dir) / "README.md").is_file():
            return None
        return super().create_model_card(*args, **kwargs)
