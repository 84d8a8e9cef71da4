"""A JSON-lines experiment tracker for Accelerate (one JSON object per ``accelerator.log`` call).

Accelerate ships trackers for hosted services and TensorBoard, none that writes a plain local file. This one is
always on in ``hfbert pretrain``: the loss curve, the model card and the resume tests all read it. Each line is
``{"step": int, ...values}``; the run's configuration is the first line, ``{"config": {...}}``.

Resuming rewrites the file up to the checkpoint's step (:meth:`JsonlTracker.truncate_after`), so a run that was
interrupted and resumed logs exactly the lines of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from accelerate.tracking import GeneralTracker

__all__ = ["JsonlTracker", "read_jsonl"]


def _plain(value: Any) -> Any:
    """JSON-safe values: tensors and numpy scalars become Python numbers; NaN and inf become strings."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class JsonlTracker(GeneralTracker):
    """Append every logged dict to ``path`` as one JSON line, flushed at once (a killed run loses nothing)."""

    name = "jsonl"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, path: str | Path):
        super().__init__()
        self.path = Path(path)

    @property
    def tracker(self) -> Path:
        return self.path

    def store_init_configuration(self, values: dict) -> None:
        lines = read_jsonl(self.path)
        if lines and "config" in lines[0]:
            return  # a resumed run keeps the header of its first start
        self._append({"config": {key: _plain(value) for key, value in values.items()}})

    def log(self, values: dict, step: int | None = None, **kwargs) -> None:
        self._append({"step": step, **{key: _plain(value) for key, value in values.items()}})

    def _append(self, record: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()

    @staticmethod
    def truncate_after(path: str | Path, step: int) -> None:
        """Drop the lines logged after ``step`` (written by a run that was then interrupted), atomically."""
        path = Path(path)
        if not path.is_file():
            return
        kept = [record for record in read_jsonl(path) if record.get("step") is None or record["step"] <= step]
        scratch = path.with_suffix(path.suffix + ".tmp")
        scratch.write_text("".join(json.dumps(record) + "\n" for record in kept), encoding="utf-8")
        scratch.replace(path)


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of a JSON-lines file; a last line cut short by a crash is ignored."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
