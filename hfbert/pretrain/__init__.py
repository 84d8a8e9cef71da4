"""``hfbert pretrain``: the pretraining job and its parts.

* :mod:`~hfbert.pretrain.config` -- the settings (:class:`PretrainConfig`) and the sequence-length schedule.
* :mod:`~hfbert.pretrain.data` -- the prepared corpora (built first without ``--prepared``) and the batches.
* :mod:`~hfbert.pretrain.loop` -- the Accelerate training loop and evaluation.
* :mod:`~hfbert.pretrain.export` -- the exported Hub-format folder (weights, card, curve, fill-mask) and the push.
* :mod:`~hfbert.pretrain.callbacks` -- :class:`PretrainCallback`, the hooks a caller watches and steers the run
  through (:class:`TrainingControl`, :class:`DefaultSchedule`).
* :mod:`~hfbert.pretrain.checkpointing` -- atomic, resumable checkpoints.
* :mod:`~hfbert.pretrain.recovery` -- how a run starts or resumes, divergence and the last good checkpoint.
* :mod:`~hfbert.pretrain.tracking` -- the JSONL log that the curve, the model card and resumption read.

``python -m hfbert.pretrain`` and ``hfbert pretrain`` run :func:`main`; ``pretrain(config)`` is the same job as a
function, and ``pretrain(config, callbacks=[...], model_init=...)`` lets a caller watch and steer it or supply
the model.
"""

from .callbacks import DefaultSchedule, PretrainCallback, TrainingControl
from .config import ConfigError, Phase, PretrainConfig, load_config, parse_args, resolve_phases
from .export import CURVE_FILE, LOG_FILE, METRICS_FILE, fill_mask_example, plot_curve
from .loop import CONFIG_FILE, PretrainResult, TrainingDivergedError, main, preflight, pretrain

__all__ = [
    "CONFIG_FILE", "CURVE_FILE", "ConfigError", "DefaultSchedule", "LOG_FILE", "METRICS_FILE", "Phase",
    "PretrainCallback", "PretrainConfig", "PretrainResult", "TrainingControl", "TrainingDivergedError",
    "fill_mask_example", "load_config", "main", "parse_args", "plot_curve", "preflight", "pretrain", "resolve_phases",
]
