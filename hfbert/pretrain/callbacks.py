"""Hooks into :func:`~hfbert.pretrain.pretrain` for a caller that watches or steers the run (in the style of
transformers' ``TrainerCallback`` and ``TrainerControl``).

Subclass :class:`PretrainCallback`, override the events you need and pass instances as
``pretrain(config, callbacks=[...])``. Every event is called with keyword arguments -- ``step`` (optimizer steps
done) and what the event is about -- on every process, in the order the callbacks were given; a hook takes
``**kwargs`` so that arguments added later do not break it. An exception raised in a hook ends the run as any
error does (the trackers are closed; the last checkpoint stays). To supply the model instead of
:class:`~hfbert.HfBertForPreTraining`, pass ``model_init`` to ``pretrain``.

Steering: ``on_step_end``, ``on_log`` and ``on_evaluate`` also get ``control``, the step's
:class:`TrainingControl`. After each optimizer step the loop makes a fresh one, lets :class:`DefaultSchedule` (always
the first callback: ``logging_steps``, ``eval_steps``, ``evaluate_suite_steps``, ``save_steps``, the time limit and
the budget) and then the caller's callbacks set or clear its flags, and does what they ask, in this order: log,
evaluate, evaluate downstream, save, stop. Every process runs the callbacks and every one must decide the same (an evaluation and a checkpoint are collective): decide from
``step``, ``logs``, ``metrics`` and ``time_up``, which are the same on every process, not from a process's own clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["DefaultSchedule", "PretrainCallback", "TrainingControl"]


@dataclass
class TrainingControl:
    """What the loop does after the current optimizer step; callbacks set the flags, the loop reads them."""

    should_log: bool = False  # a training log line now (the averages since the previous one)
    should_evaluate: bool = False  # a held-out evaluation now
    should_save: bool = False  # a checkpoint now
    should_evaluate_downstream: bool = False  # fine-tune the evaluate_suite on the model now
    should_stop: bool = False  # end training after this step (then the final evaluation and the export)


class PretrainCallback:
    """A no-op for every event; override what you need."""

    def on_train_begin(self, step: int, model, **kwargs) -> None:
        """Before the first optimizer step of this invocation (``step`` > 0 when resuming)."""

    def on_step_end(self, step: int, model, control: TrainingControl, **kwargs) -> None:
        """After an optimizer step, before that step's log line, evaluation and checkpoint. ``time_up``: whether the
        run's time limit has passed (agreed by every process)."""

    def on_log(self, step: int, logs: dict, control: TrainingControl, **kwargs) -> None:
        """A training log line: the averages since the previous one (``loss``, ``learning_rate``, ...)."""

    def on_evaluate(self, step: int, metrics: dict, model, control: TrainingControl, **kwargs) -> None:
        """A held-out evaluation (``eval_loss``, ``eval_mlm_accuracy``, ...): when a callback asks for one (by
        default every ``eval_steps``), and at the end; or a downstream one (``downstream_average``,
        ``downstream_<task>``, ``downstream_minutes``): every ``evaluate_suite_steps``, and at the end."""

    def on_train_end(self, step: int, metrics: dict, model, **kwargs) -> None:
        """After the final evaluation, before the export."""


class DefaultSchedule(PretrainCallback):
    """The job's own schedule: a log line every ``logging_steps``, an evaluation every ``eval_steps``, a downstream
    evaluation every ``downstream_steps`` (None: never), a checkpoint every ``save_steps`` optimizer steps, and a
    stop once the time limit or the budget has passed (``time_up``)."""

    def __init__(self, logging_steps: int, eval_steps: int, save_steps: int, downstream_steps: int | None = None):
        self.logging_steps, self.eval_steps, self.save_steps = logging_steps, eval_steps, save_steps
        self.downstream_steps = downstream_steps

    def on_step_end(self, step: int, model, control: TrainingControl, time_up: bool = False, **kwargs) -> None:
        control.should_log = step % self.logging_steps == 0
        control.should_evaluate = step % self.eval_steps == 0
        control.should_evaluate_downstream = bool(self.downstream_steps) and step % self.downstream_steps == 0
        control.should_save = step % self.save_steps == 0
        control.should_stop = time_up


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
