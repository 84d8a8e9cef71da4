"""The rows a recipe reads: each task's train and validation rows written once as JSONL files
(:func:`write_task_files`), and the fingerprint of what decides them (:func:`data_fingerprint`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..settings import UsageError
from .suite_checks import local_copy, local_files
from .suites import Suite, SuiteTask

__all__ = ["TaskFiles", "data_fingerprint", "write_task_files"]


@dataclass(frozen=True)
class TaskFiles:
    """A task's rows as the recipe reads them: ``train.jsonl``, ``validation.jsonl`` (the named columns only)."""

    train_file: Path
    validation_file: Path
    train_rows: int
    validation_rows: int
    source: str  # where the rows came from, in words
    labels: list[str] | None = None  # a kind with tags (NER): every tag of both splits, "O" first


def write_task_files(task: SuiteTask, suite: Suite, data_dir, folder: Path) -> TaskFiles:
    """Write the task's train/validation rows into ``folder`` (once: a folder written with the same data settings
    is reused) and return where they are."""
    key = _data_key(task, suite, data_dir)
    record = folder / "rows.json"
    if record.is_file():
        done = json.loads(record.read_text(encoding="utf-8"))
        if done.get("key") == key:
            return _task_files(folder, done)
    with _quiet_datasets():
        splits, source = _load_splits(task, suite, data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(task.columns.values()))
    tags = task.columns[task.kind.tags] if task.kind.tags else None
    rows = {}
    for split, limit in (("train", task.max_train_samples), ("validation", task.max_eval_samples)):
        ds = splits[split].select_columns(columns)
        if limit is not None:
            ds = ds.select(range(min(limit, len(ds))))
        if tags:
            ds = _tag_names(ds, tags)
        _write_jsonl(ds, folder / f"{split}.jsonl")
        rows[split] = ds
    labels = None
    if tags:  # from both splits: a tag seen only in the validation rows is still a label
        from ..tasks import build_label_list

        labels = build_label_list([*rows["train"][tags], *rows["validation"][tags]])
    done = {"key": key, "train_rows": len(rows["train"]), "validation_rows": len(rows["validation"]),
            "source": source, "labels": labels}
    from ..data.shards import write_atomically  # with the data builder (datasets): not for reading a suite

    write_atomically(str(folder), record.name, json.dumps(done, indent=1, ensure_ascii=False).encode("utf-8"))
    return _task_files(folder, done)


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


def _task_files(folder: Path, done: dict) -> TaskFiles:
    return TaskFiles(folder / "train.jsonl", folder / "validation.jsonl", done["train_rows"],
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
                             for k, p in local_files(task, suite, data_dir).items()}
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
    files = local_files(task, suite, data_dir)
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
