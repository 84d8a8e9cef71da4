"""Evaluation suites: a small YAML/JSON file of downstream tasks, read, checked and turned into recipe inputs.

A suite names its tasks and, for each, where the data is, which columns hold what, which recipe score to report
and the fine-tuning settings::

    name: local
    defaults: {epochs: 3, learning_rate: 5.0e-5, batch_size: 32, max_length: 128}
    tasks:
      - name: sentiment
        type: classification                 # classification, regression or ner
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

:func:`check_suite` finds every problem before any training (a setting, a file, a split, a column, a metric) and
raises :class:`~hfbert.usage.UsageError` naming the task and the setting. :func:`prepare_task` writes a task's rows
(the named columns, capped) as JSONL files that the recipes read.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..usage import UsageError

__all__ = ["SUITE_DIR", "TASK_TYPES", "PreparedTask", "Suite", "SuiteTask", "TaskType", "check_suite", "find_suite",
           "known_metrics", "load_suite", "packaged_suites", "prepare_task"]

#: The suites that ship in the package (``glue``, ``local``).
SUITE_DIR = Path(__file__).resolve().parent / "suites"


@dataclass(frozen=True)
class TaskType:
    """What a suite task type runs: the recipe (a module of :mod:`hfbert.recipes`), its column options (role ->
    (recipe option, required)), the recipe's ``--task_type`` if any, and the Hub's task name for model-index."""

    recipe: str
    columns: dict[str, tuple[str, bool]]
    hub_task: str
    recipe_task_type: str | None = None


_SENTENCES = {"text": ("--text_column", True), "text_pair": ("--text_pair_column", False),
              "label": ("--label_column", True)}
TASK_TYPES: dict[str, TaskType] = {
    "classification": TaskType("finetune_classification", _SENTENCES, "text-classification",
                               "single_label_classification"),
    "regression": TaskType("finetune_classification", _SENTENCES, "text-classification", "regression"),
    "ner": TaskType("finetune_ner", {"tokens": ("--tokens_column", True), "tags": ("--tags_column", True)},
                    "token-classification"),
}


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
    training: dict[str, Any] = field(default_factory=dict)  # more recipe/TrainingArguments options, as --key value
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
    def kind(self) -> TaskType:
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
    is not read (that is :func:`check_suite`)."""
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
        if metric not in known and not (values["type"] == "ner" and metric.startswith("eval_")
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
    probe (so the list follows the metric functions), and the loss."""
    import numpy as np

    from ..tasks import classification_metrics, entity_scores

    if task_type == "ner":
        scores = entity_scores([["B-X", "O"]], [["B-X", "O"]])
    elif task_type == "regression":
        scores = classification_metrics(np.array([0.1, 0.5, 0.9]), np.array([0.0, 0.6, 1.0]), "regression")
    else:
        scores = classification_metrics(np.array([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), np.array([0, 1, 1]),
                                        "single_label_classification")
    return frozenset({"eval_loss"} | {f"eval_{key}" for key in scores})


# ----------------------------------------------------------------------------------------------------------------
# Checking the data, before any training


def check_suite(suite: str | Path | Suite, data_dir: str | Path | None = None,
                tasks: list[str] | None = None) -> Suite:
    """Load ``suite`` (a packaged name, a path or a :class:`Suite`) and check every task's data: files exist, splits
    exist, the columns named exist. Returns the suite, cut to ``tasks`` when given. Raises UsageError naming the
    task and the setting."""
    suite = suite if isinstance(suite, Suite) else load_suite(suite)
    if data_dir is not None and not Path(data_dir).is_dir():
        raise UsageError(f"--data_dir {data_dir} is not a folder")
    if tasks:
        unknown = sorted(set(tasks) - {t.name for t in suite.tasks})
        if unknown:
            raise UsageError(f"--tasks {unknown} not in suite {suite.name!r} (tasks: "
                             f"{', '.join(t.name for t in suite.tasks)})")
        suite = dataclasses.replace(suite, tasks=[t for t in suite.tasks if t.name in tasks])
    for task in suite.tasks:
        if task.dataset:
            _check_hub_task(task, data_dir)
        else:
            for setting, path in _local_files(task, suite, data_dir).items():
                _check_file_columns(task, setting, path)
    return suite


def _local_files(task: SuiteTask, suite: Suite, data_dir) -> dict[str, Path]:
    base = Path(data_dir) if data_dir is not None else suite.path.parent
    found = {}
    for setting in ("train_file", "validation_file", "file"):
        name = getattr(task, setting)
        if not name:
            continue
        path = Path(name).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            if data_dir is not None:
                hint = "relative paths are read from --data_dir"
            elif suite.path.parent == SUITE_DIR:
                hint = (f"the packaged suite {suite.name!r} reads its files from --data_dir: give the folder that "
                        "holds them")
            else:
                hint = "relative paths are read from the suite file's folder, or from --data_dir when given"
            raise UsageError(f"task {task.name!r}: {setting} {path} not found ({hint})")
        found[setting] = path
    return found


def _check_file_columns(task: SuiteTask, setting: str, path: Path) -> None:
    columns, first = _file_columns(task, setting, path)
    for role, column in task.columns.items():
        if column not in columns:
            raise UsageError(f"task {task.name!r}: column {column!r} ({role}) not in {path} (columns: "
                             f"{', '.join(map(str, columns))})")
    if first is not None:
        _check_values(task, f"{path}, first row", first)


def _check_values(task: SuiteTask, where: str, row: dict) -> None:
    """The first row's values have the kinds the task type needs (text, a number, lists of words and tags)."""
    for role, column in task.columns.items():
        value = row.get(column)
        if role in ("tokens", "tags"):
            ok, need = isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of strings"
        elif role == "label" and task.type == "regression":
            ok, need = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
        elif role == "label":
            ok, need = isinstance(value, (str, int)) and not isinstance(value, bool), "a label (a string or an int)"
        else:
            ok, need = isinstance(value, str), "text"
        if not ok:
            raise UsageError(f"task {task.name!r}: column {column!r} ({role}) must hold {need}; {where} has "
                             f"{value!r:.80}")


def _file_columns(task: SuiteTask, setting: str, path: Path) -> tuple[list[str], dict | None]:
    """The column names of a data file and its first row (None for CSV/TSV, whose values are all text)."""
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".tsv"):
            with path.open(encoding="utf-8", newline="") as f:
                return next(csv.reader(f, delimiter="\t" if suffix == ".tsv" else ","), []), None
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                line = next((line for line in f if line.strip()), "{}")
            first = json.loads(line)
        elif suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            rows = data.get("data", data) if isinstance(data, dict) else data
            first = rows[0] if isinstance(rows, list) and rows else {}
        else:
            raise UsageError(f"task {task.name!r}: {setting} {path}: unsupported file type {suffix!r} "
                             "(use .csv, .tsv, .json or .jsonl)")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(f"task {task.name!r}: cannot read {setting} {path}: {err}") from None
    if not isinstance(first, dict):
        raise UsageError(f"task {task.name!r}: {setting} {path} must hold one object per row, got {first!r:.80}")
    return list(first), first


def local_copy(task: SuiteTask, data_dir) -> Path | None:
    """``<data_dir>/<dataset>/<config>``, where a Hub task reads its dataset when that folder exists."""
    if data_dir is None:
        return None
    folder = Path(data_dir) / task.dataset / (task.config or "default")
    return folder if folder.is_dir() else None


def _check_hub_task(task: SuiteTask, data_dir) -> None:
    splits = {"train_split": task.train_split, "validation_split": task.validation_split}
    where = f"dataset {task.dataset}" + (f" (config {task.config})" if task.config else "")
    copy = local_copy(task, data_dir)
    if copy is not None:
        import datasets

        try:
            loaded = datasets.load_from_disk(str(copy))
        except (OSError, ValueError) as err:  # ValueError: datasets' "not a dataset folder" family
            raise UsageError(f"task {task.name!r}: cannot read the local copy {copy} of {where}: {err}") from None
        if not isinstance(loaded, datasets.DatasetDict):
            raise UsageError(f"task {task.name!r}: the local copy {copy} holds one split; save the whole "
                             "DatasetDict (load_dataset(...).save_to_disk(...))")
        columns = {name: loaded[name].column_names for name in loaded}
        where = f"{where}, local copy {copy}"
    else:
        columns = _hub_columns(task, where)
    for setting, split in splits.items():
        if columns is not None and split not in columns:
            raise UsageError(f"task {task.name!r}: {setting} {split!r} not in {where} (splits: "
                             f"{', '.join(columns)})")
        available = columns[split] if columns is not None else None
        for role, column in task.columns.items():
            if available is not None and column not in available:
                raise UsageError(f"task {task.name!r}: column {column!r} ({role}) not in the {split} split of "
                                 f"{where} (columns: {', '.join(available)})")


def _hub_columns(task: SuiteTask, where: str) -> dict[str, list[str]] | None:
    """Split -> columns of a Hub dataset, from its metadata (the rows are not downloaded); None when the
    metadata does not list its splits."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(task.dataset, task.config)
    except Exception as err:  # offline, unknown repository, unknown config: the Hub's errors are many
        message = " ".join(str(err).split())[:300]
        raise UsageError(f"task {task.name!r}: cannot read {where} from the Hub ({type(err).__name__}: {message}); "
                         f"offline, put a copy under --data_dir as <data_dir>/{task.dataset}/"
                         f"{task.config or 'default'} (load_dataset(...).save_to_disk(...))") from None
    info = builder.info
    if info.splits is None or info.features is None:
        return None
    return {name: list(info.features) for name in info.splits}


# ----------------------------------------------------------------------------------------------------------------
# The rows a recipe reads


@dataclass(frozen=True)
class PreparedTask:
    """A task's rows as the recipe reads them: ``train.jsonl``, ``validation.jsonl`` (the named columns only)."""

    train_file: Path
    validation_file: Path
    train_rows: int
    validation_rows: int
    source: str  # where the rows came from, in words
    labels: list[str] | None = None  # NER: every tag of both splits, "O" first


def prepare_task(task: SuiteTask, suite: Suite, data_dir, folder: Path) -> PreparedTask:
    """Write the task's train/validation rows into ``folder`` (once: a folder prepared with the same settings is
    reused) and return where they are."""
    key = _data_key(task, suite, data_dir)
    record = folder / "prepared.json"
    if record.is_file():
        done = json.loads(record.read_text(encoding="utf-8"))
        if done.get("key") == key:
            return _prepared(folder, done)
    with _quiet_datasets():
        splits, source = _load_splits(task, suite, data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(task.columns.values()))
    rows = {}
    for split, limit in (("train", task.max_train_samples), ("validation", task.max_eval_samples)):
        ds = splits[split].select_columns(columns)
        if limit is not None:
            ds = ds.select(range(min(limit, len(ds))))
        if task.type == "ner":
            ds = _tag_names(ds, task.columns["tags"])
        _write_jsonl(ds, folder / f"{split}.jsonl")
        rows[split] = ds
    labels = None
    if task.type == "ner":  # from both splits: a tag seen only in the validation rows is still a label
        from ..tasks import build_label_list

        labels = build_label_list([*rows["train"][task.columns["tags"]], *rows["validation"][task.columns["tags"]]])
    done = {"key": key, "train_rows": len(rows["train"]), "validation_rows": len(rows["validation"]),
            "source": source, "labels": labels}
    from ..data.shards import write_atomically  # with the data builder (datasets): not for reading a suite

    write_atomically(str(folder), record.name, json.dumps(done, indent=1, ensure_ascii=False).encode("utf-8"))
    return _prepared(folder, done)


@contextlib.contextmanager
def _quiet_datasets():
    """datasets' own progress bars off while a task's rows are read: the evaluation's bar is the one to watch."""
    import datasets

    shown = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if shown:
            datasets.enable_progress_bars()


def _prepared(folder: Path, done: dict) -> PreparedTask:
    return PreparedTask(folder / "train.jsonl", folder / "validation.jsonl", done["train_rows"],
                        done["validation_rows"], done["source"], done.get("labels"))


def data_fingerprint(task: SuiteTask, suite: Suite, data_dir) -> dict[str, Any]:
    """What decides a task's rows: its data settings and the size and time of the files read."""
    settings = {k: v for k, v in task.settings().items()
                if k in ("columns", "max_train_samples", "max_eval_samples", "train_file", "validation_file", "file",
                         "validation_rows", "split_seed", "dataset", "config", "train_split", "validation_split")}
    if task.dataset:
        copy = local_copy(task, data_dir)
        settings["source"] = str(copy) if copy else "hub"
    else:
        settings["files"] = {k: [str(p), p.stat().st_size, p.stat().st_mtime_ns]
                             for k, p in _local_files(task, suite, data_dir).items()}
    return settings


def _data_key(task: SuiteTask, suite: Suite, data_dir) -> str:
    text = json.dumps(data_fingerprint(task, suite, data_dir), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _load_splits(task: SuiteTask, suite: Suite, data_dir) -> tuple[dict, str]:
    import datasets

    from ..tasks import load_data

    if task.dataset:
        copy = local_copy(task, data_dir)
        loaded = (datasets.load_from_disk(str(copy)) if copy is not None
                  else datasets.load_dataset(task.dataset, task.config))
        where = f"{task.dataset}" + (f" ({task.config})" if task.config else "")
        source = f"{where}, {'local copy' if copy else 'the Hub'}: {task.train_split} / {task.validation_split}"
        return {"train": loaded[task.train_split], "validation": loaded[task.validation_split]}, source
    files = _local_files(task, suite, data_dir)
    if "file" in files:
        whole = load_data(str(files["file"]))["train"]
        order = list(range(len(whole)))
        random.Random(task.split_seed).shuffle(order)
        if task.validation_rows >= len(order):
            raise UsageError(f"task {task.name!r}: validation_rows {task.validation_rows} leaves no training rows "
                             f"in {files['file']} ({len(order)} rows)")
        splits = {"validation": whole.select(order[:task.validation_rows]),
                  "train": whole.select(order[task.validation_rows:])}
        return splits, (f"{files['file'].name}: {task.validation_rows} rows held out for validation (split seed "
                        f"{task.split_seed}), the rest for training")
    loaded = load_data(str(files["train_file"]), str(files["validation_file"]))
    return dict(loaded), f"{files['train_file'].name} / {files['validation_file'].name}"


def _tag_names(ds, column: str):
    """NER tags stored as class ids (a Hub dataset's ``Sequence(ClassLabel)``) become their names."""
    import datasets

    feature = getattr(ds.features[column], "feature", None)
    if not isinstance(feature, datasets.ClassLabel):
        return ds
    names = feature.names
    return ds.map(lambda batch: {column: [[names[i] for i in row] for row in batch[column]]}, batched=True,
                  features=datasets.Features({**ds.features, column: datasets.Sequence(datasets.Value("string"))}),
                  desc="tag names")


def _write_jsonl(ds, path: Path) -> None:
    from ..data.shards import write_atomically

    write_atomically(str(path.parent), path.name, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in ds)
                     .encode("utf-8"))
