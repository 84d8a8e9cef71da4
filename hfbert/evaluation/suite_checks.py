"""A suite's data checked before any training: every file, split and column a task names, with one
:class:`~hfbert.settings.UsageError` naming the task and the setting (:func:`check_suite`); where a task's data is
(:func:`local_files`, :func:`local_copy`)."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

from ..settings import UsageError
from .suites import SUITE_DIR, Suite, SuiteTask, load_suite

__all__ = ["check_suite", "local_copy", "local_files"]


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
            for setting, path in local_files(task, suite, data_dir).items():
                _check_file_columns(task, setting, path)
    return suite


def local_files(task: SuiteTask, suite: Suite, data_dir) -> dict[str, Path]:
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
        elif role == "label" and task.kind.problem_type == "regression":
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
