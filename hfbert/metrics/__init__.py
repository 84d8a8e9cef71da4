"""hfbert's fine-tuning metrics as ``evaluate`` modules that load offline.

Each metric is a local ``evaluate.Metric`` script shipped inside the package, so ``evaluate.load`` reads it from
disk and never asks the Hub::

    import evaluate
    import hfbert.metrics

    squad_v2 = evaluate.load(hfbert.metrics.path("squad_v2"))
    squad_v2 = hfbert.metrics.load("squad_v2")  # the same

The recipes score through these modules (:mod:`hfbert.tasks` calls them), and they can be passed as ``metric=``
to ``evaluate.evaluator``.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent
#: The metrics: every ``<name>/<name>.py`` script of this folder (the task kinds name theirs: hfbert.tasks.registry).
NAMES = tuple(sorted(p.name for p in _HERE.iterdir() if (p / f"{p.name}.py").is_file()))


def path(name: str) -> str:
    """The local module path of metric ``name`` (a ``<name>/<name>.py`` script), for ``evaluate.load``."""
    if name not in NAMES:
        raise ValueError(f"unknown hfbert metric {name!r}; the metrics are {list(NAMES)}")
    return str(_HERE / name / f"{name}.py")


def load(name: str, **kwargs):
    """``evaluate.load(path(name), **kwargs)``: the metric module, loaded from the package (no download)."""
    import evaluate

    return evaluate.load(path(name), **kwargs)


def shared(name: str, config_name: str | None = None):
    """Metric ``name`` loaded once per process and kept in memory (no cache files), for the library's scoring."""
    key = (name, config_name)
    if key not in _SHARED:
        _SHARED[key] = load(name, config_name=config_name, keep_in_memory=True)
    return _SHARED[key]


_SHARED: dict = {}

__all__ = ["NAMES", "load", "path", "shared"]
