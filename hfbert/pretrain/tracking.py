"""The trackers of ``hfbert pretrain``: a JSON-lines tracker of its own, and the ones of Accelerate.

Accelerate ships trackers for hosted services and TensorBoard, none that writes a plain local file. The JSON-lines
one is always on in ``hfbert pretrain``: the loss curve, the model card and the resume tests all read it. Each line
is ``{"step": int, ...values}``; the run's configuration is the first line, ``{"config": {...}}``.

``--report_to`` adds Accelerate's trackers (:data:`~hfbert.pretrain.config.TRACKERS`: TensorBoard, Weights &
Biases, MLflow, Trackio, Comet, Aim, ClearML, DVCLive, SwanLab), as a ``Trainer`` reports to them: each gets the same
scalars at the same steps, and the run's settings as its config, under the project name ``hfbert-pretrain``. Each is
configured the way its library is (``WANDB_MODE=offline``, ``MLFLOW_TRACKING_URI``, ...). A resumed run is a new
run in them.

Resuming rewrites the file up to the checkpoint's step (:meth:`JsonlTracker.truncate_after`), so a run that was
interrupted and resumed logs exactly the lines of an uninterrupted one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from accelerate.tracking import GeneralTracker

from .checkpointing import from_main
from .config import TRACKERS, ConfigError

__all__ = ["PROJECT", "JsonlTracker", "accelerate_trackers", "read_jsonl", "start_trackers"]

PROJECT = "hfbert-pretrain"  # the project (experiment) name every tracker files the run under


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


def accelerate_trackers(report_to: list[str]) -> list[str]:
    """The trackers of ``report_to`` that Accelerate runs: TensorBoard where installed (it is on by default), every
    other one as asked (the settings checked that its package is installed). Raises :class:`ConfigError` for an
    installed package that this Accelerate cannot use."""
    import accelerate
    from accelerate.tracking import get_available_trackers

    usable = {str(tracker) for tracker in get_available_trackers()}
    names = [name for name in report_to if name != "jsonl" and (name != "tensorboard" or name in usable)]
    for name in names:
        if name not in usable:
            raise ConfigError(f"report_to {name}: accelerate {accelerate.__version__} cannot use the installed "
                              f"{TRACKERS[name][1]} package (see accelerate.utils.is_{name}_available)")
    return names


def start_trackers(accelerator, values: dict[str, Any]) -> None:
    """``accelerator.init_trackers`` with ``values`` (the run's settings) as every tracker's config. A tracker that
    does not start (a service not configured or not reachable) stops every process before training, with one
    line that names the trackers: the trackers start on the main process, which tells the others."""
    failed = None
    try:
        accelerator.init_trackers(PROJECT, config=values)
    except Exception as err:  # whatever the tracker's library raises
        names = [t.name if isinstance(t, GeneralTracker) else str(t) for t in accelerator.log_with]
        names = ", ".join(name for name in names if name != "jsonl")
        failed = ConfigError(f"report_to: a tracker ({names}) did not start: {type(err).__name__}: "
                             f"{(str(err).strip().splitlines() or [''])[0]}")

    def check() -> None:
        if failed is not None:
            raise failed

    from_main(accelerator, check)
