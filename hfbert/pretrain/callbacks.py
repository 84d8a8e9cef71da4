"""Hooks into :func:`~hfbert.pretrain.pretrain` for a caller that watches the run (in the style of transformers'
``TrainerCallback``).

Subclass :class:`PretrainCallback`, override the events you need and pass instances as
``pretrain(config, callbacks=[...])``. Every event is called with keyword arguments -- ``step`` (optimizer steps
done) and what the event is about -- on every process, in the order the callbacks were given; a hook takes
``**kwargs`` so that arguments added later do not break it. An exception raised in a hook ends the run as any
error does (the trackers are closed; the last checkpoint stays). To supply the model instead of
:class:`~hfbert.HfBertForPreTraining`, pass ``model_init`` to ``pretrain``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["PretrainCallback"]


class PretrainCallback:
    """A no-op for every event; override what you need."""

    def on_train_begin(self, step: int, model, **kwargs) -> None:
        """Before the first optimizer step of this invocation (``step`` > 0 when resuming)."""

    def on_step_end(self, step: int, model, **kwargs) -> None:
        """After an optimizer step, before that step's log line, evaluation and checkpoint."""

    def on_log(self, step: int, logs: dict, **kwargs) -> None:
        """A training log line: the averages since the previous one (``loss``, ``learning_rate``, ...)."""

    def on_evaluate(self, step: int, metrics: dict, model, **kwargs) -> None:
        """A held-out evaluation (``eval_loss``, ``eval_mlm_accuracy``, ...), every ``eval_steps`` and at the end."""

    def on_train_end(self, step: int, metrics: dict, model, **kwargs) -> None:
        """After the final evaluation, before the export."""


class CallbackHandler:
    """Calls one event on every callback, in order."""

    def __init__(self, callbacks: Sequence[PretrainCallback] = ()):
        for callback in callbacks:
            if not isinstance(callback, PretrainCallback):
                raise TypeError(f"callbacks must be PretrainCallback instances, got {type(callback).__name__}")
        self.callbacks = list(callbacks)

    def __call__(self, event: str, **kwargs) -> None:
        for callback in self.callbacks:
            getattr(callback, event)(**kwargs)
