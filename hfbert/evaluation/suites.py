"""Evaluation suites: a small YAML/JSON file of downstream tasks, and its schema (:class:`Suite`, :class:`SuiteTask`).

A suite names its tasks and, for each, where the data is, which columns hold what, which recipe score to report
and the fine-tuning settings::

    name: local
    defaults: {epochs: 3, learning_rate: 5.0e-5, batch_size: 32, max_length: 128}
    tasks:
      - name: sentiment
        type: classification                 # classification, regression or ner (hfbert.tasks.registry)
        file: en_vader_movieReviewSnippets.jsonl
        validation_rows: 1000                # held out from `file` (shuffled with split_seed)
        columns: {text: sentence, label: label}
        metrics: [eval_accuracy, eval_f1]    # the first is the task's score in the average
        max_train_samples: 2000

Data comes from local files (``train_file`` + ``validation_file``, or one ``file`` split with ``validation_rows``;
CSV, TSV, JSON or JSONL; relative paths are read from ``--data_dir`` when it is given, else from the suite file's
folder) or from a Hub dataset (``dataset``, ``config``, ``train_split``, ``validation_split``). A Hub dataset is read
from a local copy when ``--data_dir`` holds one at ``<data_dir>/<dataset>/<config>`` (a ``DatasetDict`` written by
``save_to_disk``), and from the Hub otherwise.

:func:`load_suite` reads a suite and checks its settings; :func:`~hfbert.evaluation.suite_checks.check_suite`
then checks its data before any training (a file, a split, a column), raising :class:`~hfbert.settings.UsageError`
naming the task and the setting; :func:`~hfbert.evaluation.task_files.write_task_files` writes a task's rows (the
named columns, capped) as the JSONL files that the recipes read.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..settings import UsageError
from ..tasks.registry import KINDS, TaskKind

__all__ = ["SUITE_DIR", "TASK_TYPES", "Suite", "SuiteTask", "TaskType", "find_suite", "known_metrics", "load_suite",
           "packaged_suites"]

#: The suites that ship in the package (``glue``, ``local``).
SUITE_DIR = Path(__file__).resolve().parent / "suites"


#: A suite task's type: a task kind (hfbert.tasks.registry), by the older name.
TaskType = TaskKind
#: The task types a suite may name: the task kinds with suite columns.
TASK_TYPES: dict[str, TaskKind] = {name: kind for name, kind in KINDS.items() if kind.columns}


@dataclass(frozen=True)
class SuiteTask:
    """One task of a suite, with the suite's defaults applied (see the module docstring for the settings)."""

    name: str
    type: str
    columns: dict[str, str]
    metrics: list[str]
    epochs: float = 3.0
    learning_rate: float = 2e-5
    batch_size: int = 32
    max_length: int = 128
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    training: dict[str, Any] = field(default_factory=dict)  # more settings of the recipe or TrainingArguments, by name
    train_file: str | None = None
    validation_file: str | None = None
    file: str | None = None
    validation_rows: int | None = None
    split_seed: int = 0
    dataset: str | None = None
    config: str | None = None
    train_split: str = "train"
    validation_split: str = "validation"
    dataset_name: str | None = None  # how cards and tables name the data (default: the dataset id or file name)
    reference: float | None = None  # a published score of the first metric, shown beside ours
    reference_note: str | None = None

    @property
    def metric(self) -> str:
        """The task's score: the first of its metrics."""
        return self.metrics[0]

    @property
    def kind(self) -> TaskKind:
        """The task's kind (:data:`hfbert.tasks.registry.KINDS`): what it trains, runs and scores."""
        return TASK_TYPES[self.type]

    def settings(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Suite:
    name: str
    path: Path
    tasks: list[SuiteTask]
    description: str = ""
    reference: str | None = None  # where the tasks' reference scores come from


_TASK_FIELDS = {f.name: f for f in dataclasses.fields(SuiteTask)}
_SUITE_KEYS = {"name", "description", "reference", "defaults", "tasks"}


def packaged_suites() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.yaml"))


def find_suite(suite: str | Path) -> Path:
    """A suite file: the name of a packaged suite (``glue``, ``local``) or a path."""
    path = Path(suite)
    if path.is_file():
        return path
    if str(suite) in packaged_suites():
        return SUITE_DIR / f"{suite}.yaml"
    raise UsageError(f"suite {str(suite)!r} is neither a file nor a packaged suite ({', '.join(packaged_suites())})")


def load_suite(suite: str | Path) -> Suite:
    """Read a suite file and check its settings (types, values, known task types, columns and metrics); the data
    is not read (that is :func:`~hfbert.evaluation.suite_checks.check_suite`)."""
    path = find_suite(suite)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML too
    except yaml.YAMLError as err:
        raise UsageError(f"cannot parse suite {path}: {' '.join(str(err).split())}") from None
    if not isinstance(raw, dict):
        raise UsageError(f"suite {path} must hold a mapping (name, tasks, ...), got {type(raw).__name__}")
    unknown = sorted(set(raw) - _SUITE_KEYS)
    if unknown:
        raise UsageError(f"suite {path}: unknown key(s) {unknown}; known: {sorted(_SUITE_KEYS)}")
    defaults = raw.get("defaults") or {}
    tasks = raw.get("tasks")
    if not isinstance(defaults, dict):
        raise UsageError(f"suite {path}: defaults must be a mapping of task settings")
    if not isinstance(tasks, list) or not tasks:
        raise UsageError(f"suite {path}: tasks must be a non-empty list of tasks")
    parsed = []
    for number, entry in enumerate(tasks, 1):
        if not isinstance(entry, dict):
            raise UsageError(f"suite {path}: task {number} must be a mapping, got {entry!r}")
        parsed.append(_task({**defaults, **entry}, number))
    names = [t.name for t in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UsageError(f"suite {path}: task name(s) {twice} used more than once")
    return Suite(name=str(raw.get("name") or path.stem), path=path, tasks=parsed,
                 description=" ".join(str(raw.get("description") or "").split()), reference=raw.get("reference"))


def _task(values: dict[str, Any], number: int) -> SuiteTask:
    name = values.get("name")
    where = f"task {name!r}" if isinstance(name, str) and name else f"task {number}"
    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise UsageError(f"{where}: name must be a non-empty string without '/', got {name!r}")

    def bad(setting: str, message: str) -> UsageError:
        return UsageError(f"{where}: {setting} {message}")

    if "metric" in values:  # one metric, spelled alone
        if "metrics" in values:
            raise bad("metric", "and metrics are both given; give one")
        values["metrics"] = [values.pop("metric")]
    unknown = sorted(set(values) - set(_TASK_FIELDS))
    if unknown:
        raise bad("setting(s)", f"{unknown} unknown; known: {sorted(_TASK_FIELDS)}")
    for key in ("type", "columns", "metrics"):
        if key not in values:
            raise bad(key, "is missing")
    if values["type"] not in TASK_TYPES:
        raise bad("type", f"{values['type']!r} is unknown; known: {sorted(TASK_TYPES)}")
    values = {key: _typed(key, value, bad) for key, value in values.items()}
    kind = TASK_TYPES[values["type"]]
    columns = values["columns"]
    unknown = sorted(set(columns) - set(kind.columns))
    if unknown:
        raise bad("columns", f"{unknown} are not roles of a {values['type']} task; its roles: {sorted(kind.columns)}")
    missing = [role for role, (_, required) in kind.columns.items() if required and role not in columns]
    if missing:
        raise bad("columns", f"need {missing} for a {values['type']} task")
    known = known_metrics(values["type"])
    for metric in values["metrics"]:
        if metric not in known and not (kind.per_label_scores and metric.startswith("eval_")
                                        and metric.endswith("_f1")):  # per entity type: eval_person_f1
            raise bad("metric", f"{metric!r} is not a score the {kind.recipe} recipe reports for {values['type']}; "
                                f"known: {sorted(known)}")
    _check_location(values, bad)
    return SuiteTask(**values)


def _typed(key: str, value: Any, bad) -> Any:
    """A task setting checked against its type; a float written as YAML reads it (``2e-5`` is a string) is
    converted."""
    if key in ("learning_rate", "epochs", "reference") and isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    positive_int = {"batch_size", "max_length", "validation_rows", "max_train_samples", "max_eval_samples"}
    if key in positive_int and value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise bad(key, f"must be an integer >= 1, got {value!r}")
        if key == "max_length" and value < 8:
            raise bad(key, f"must be >= 8 tokens, got {value}")
    elif key in ("learning_rate", "epochs"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise bad(key, f"must be a number > 0, got {value!r}")
        value = float(value)
    elif key == "reference" and value is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad(key, f"must be a number, got {value!r}")
        value = float(value)
    elif key == "split_seed":
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad(key, f"must be an integer, got {value!r}")
    elif key == "metrics":
        if not isinstance(value, list) or not value or not all(isinstance(m, str) for m in value):
            raise bad(key, f"must be a metric name or a non-empty list of them, got {value!r}")
        value = list(value)
    elif key in ("columns", "training"):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise bad(key, f"must be a mapping, got {value!r}")
        if key == "columns" and not all(isinstance(v, str) and v for v in value.values()):
            raise bad(key, f"must map roles to column names, got {value!r}")
        value = dict(value)
    elif value is not None and key not in ("type",) and not isinstance(value, str):
        raise bad(key, f"must be a string, got {value!r}")
    return value


def _check_location(values: dict[str, Any], bad) -> None:
    local = [k for k in ("train_file", "validation_file", "file") if values.get(k)]
    if values.get("dataset"):
        if local:
            raise bad("dataset", f"and {local} are both given; a task reads a Hub dataset or local files")
        return
    if values.get("file"):
        if values.get("train_file") or values.get("validation_file"):
            raise bad("file", "is split into train and validation rows: give file + validation_rows, or "
                              "train_file + validation_file")
        if not values.get("validation_rows"):
            raise bad("validation_rows", "is missing: how many rows of `file` to hold out for validation")
        return
    if not values.get("train_file") or not values.get("validation_file"):
        raise bad("data", "is missing: give train_file + validation_file, file + validation_rows, or a Hub dataset "
                          "(dataset, config, train_split, validation_split)")


@functools.cache
def known_metrics(task_type: str) -> frozenset[str]:
    """The ``eval_*`` scores the recipe reports for ``task_type``: the keys its metric function returns on a tiny
    probe (so the list follows the metric functions), and the loss (:meth:`~hfbert.tasks.registry.TaskKind.scores`)."""
    return TASK_TYPES[task_type].scores()
