"""``hfbert pretrain``: the pretraining job and its parts.

* :mod:`~hfbert.pretrain.config` -- the settings (:class:`PretrainConfig`) and the sequence-length schedule.
* :mod:`~hfbert.pretrain.plan` -- :func:`plan_run`: the settings turned into a :class:`RunPlan` (the corpora, each
  opened once, the phases, the model, optimizer and schedule), every check done before the first step.
* :mod:`~hfbert.pretrain.corpora` -- the run's prepared corpora (built first without ``--prepared``), each phase's
  collator and held-out batches.
* :mod:`~hfbert.pretrain.batches` -- the batch machinery: rows by index (:class:`BatchPlan`), the host's layout of a
  batch, reading ahead.
* :mod:`~hfbert.pretrain.loop` -- the Accelerate training loop and evaluation.
* :mod:`~hfbert.pretrain.schedule` -- the run's schedule: the phase of each step and when the run ends, counted in
  steps or by a time budget (``--budget_minutes``).
* :mod:`~hfbert.pretrain.clock` -- the run's training clock.
* :mod:`~hfbert.pretrain.command` -- ``hfbert pretrain``: the settings, the job, each failure in one line.
* :mod:`~hfbert.pretrain.export` -- the exported Hub-format folder (weights, card, curve, fill-mask) and the push.
* :mod:`~hfbert.pretrain.callbacks` -- :class:`PretrainCallback`, the hooks a caller watches and steers the run
  through (:class:`TrainingControl`, :class:`DefaultSchedule`).
* :mod:`~hfbert.pretrain.checkpointing` -- atomic, resumable checkpoints.
* :mod:`~hfbert.pretrain.recovery` -- how a run starts or resumes, divergence and the last good checkpoint.
* :mod:`~hfbert.pretrain.tracking` -- the JSONL log that the curve, the model card and resumption read.

``python -m hfbert.pretrain`` and ``hfbert pretrain`` run :func:`main`; ``pretrain(config)`` is the same job as a
function, and ``pretrain(config, callbacks=[...], model_init=...)`` lets a caller watch and steer it or supply
the model.

The names below are imported on first use (PEP 562): reading the settings (:mod:`~hfbert.pretrain.config`, what
``hfbert pretrain --help`` shows) loads neither torch nor the training loop.
"""

import importlib

_EXPORTS = {
    "callbacks": ["DefaultSchedule", "PretrainCallback", "TrainingControl"],
    "config": ["ConfigError", "Phase", "PretrainConfig", "load_config", "parse_args", "resolve_phases"],
    "export": ["CURVE_FILE", "LOG_FILE", "METRICS_FILE", "fill_mask_example", "plot_curve"],
    "command": ["main"],
    "loop": ["PretrainResult", "TrainingDivergedError", "pretrain"],
    "plan": ["CONFIG_FILE", "RunPlan", "plan_run", "preflight"],
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
