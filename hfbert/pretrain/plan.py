"""The plan of a ``hfbert pretrain`` run: everything between the settings and the loop, decided once.

:func:`plan_run` reads top-down, as the run starts:

    accelerator -> preflight (fresh, or the checkpoint to resume) -> the --prepared corpora, each opened once
    -> the phases (a one-folder run trains at its length) -> where the model comes from -> the data of each phase
    (prepared first without --prepared) -> the model -> NSP on or off -> optimizer and learning-rate schedule
    -> the state -> the run's schedule (counted in steps, or a time budget)

and returns a :class:`RunPlan`, which the loop (:mod:`~hfbert.pretrain.loop`) reads and never changes but for its
:class:`LoopState`. Every check that can fail does so here, before the first step, with a :class:`ConfigError`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs, TorchDynamoPlugin

from ..optim import create_optimizer, linear_warmup_decay, warmup_steps_for
from .checkpointing import from_main
from .config import ConfigError, Phase, PretrainConfig, native_mixed_precision, resolve_phases
from .corpora import PREPARED_DIR, TrainingData, check_sources, load_training_data, open_prepared
from .export import LOG_FILE
from .model import ORIGIN_FILE, Origin, build_model, find_origin, record_origin
from .nsp_choice import NspChoice, choose_nsp
from .recovery import RunStart, clear_for_resume, plan_start, resume_run
from .schedule import BudgetSchedule, Schedule, StepSchedule
from .tracking import JsonlTracker, accelerate_trackers

__all__ = ["CONFIG_FILE", "STATS", "SUITE_WAIT", "LoopState", "RunPlan", "make_accelerator", "plan_run", "preflight",
           "tracker_config"]

CONFIG_FILE = "pretrain_config.json"
# Statistics summed over processes each optimizer step (one all-reduce of this small vector). Losses are sums
# (over supervised tokens, over NSP pairs) so that any run of steps is normalised the way a step is.
STATS = ("mlm_loss_sum", "nsp_loss_sum", "mlm_correct", "mlm_total", "nsp_correct", "nsp_total", "tokens")


@dataclass
class LoopState:
    """Everything the loop carries between steps besides model/optimizer/schedule/RNG (saved in checkpoints)."""

    step: int = 0  # optimizer steps done
    since_log: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STATS, 0.0))  # sums since the last log
    since_log_steps: int = 0
    since_log_seconds: float = 0.0
    since_log_data_seconds: float = 0.0  # of since_log_seconds, the time this process's steps waited for their data
    tokens_seen: int = 0
    train_seconds: float = 0.0  # summed over every invocation of the run
    recent_losses: list[float] = field(default_factory=list)  # the losses the spike check compares with
    history: list[dict] = field(default_factory=list)  # resumes with changed settings (hfbert.pretrain.recovery)
    phase_starts: list[int] = field(default_factory=lambda: [0])  # a budget run's first step of each phase begun
    nsp_checks: list[dict] = field(default_factory=list)  # the held-out NSP checks made (hfbert.pretrain.loop)

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any], logging_steps: int) -> LoopState:
        """The state a checkpoint holds; one written before the log sums were named ``since_log`` is read too."""
        renamed = {"window": "since_log", "window_seconds": "since_log_seconds",
                   "window_data_seconds": "since_log_data_seconds"}
        values = {renamed.get(key, key): value for key, value in saved.items()}
        if "since_log_steps" not in values:  # then the log followed logging_steps alone
            values["since_log_steps"] = values.get("step", 0) % logging_steps
        values.get("since_log", {}).pop("time_up", None)
        return cls(**{key: value for key, value in values.items() if key in cls.__dataclass_fields__})


@dataclass
class RunPlan:
    """A run as planned: the loop reads it top-down and changes only ``state``."""

    accelerator: Accelerator
    start: RunStart  # fresh, or the checkpoint resumed and the changes in force
    origin: Origin  # where the model came from: fresh, pretrained (--init_from) or resumed
    phases: list[Phase]  # the length schedule (a budget run's as shares of its budget)
    data: TrainingData  # each phase's corpus, collator and held-out batches: data.of(phase)
    model: torch.nn.Module  # prepared by the accelerator (wrapped for several processes)
    optimizer: Any
    scheduler: Any  # the learning rate, stepped once per optimizer step by the loop (and set by a budget schedule)
    nsp: NspChoice  # which lengths train NSP, and why not
    schedule: Schedule  # the phase of each step and when the run ends, in steps or by a time budget
    state: LoopState = field(default_factory=LoopState)


def plan_run(config: PretrainConfig, model_init=None) -> RunPlan:
    """Plan the run of ``config`` (see the module docstring); ``model_init`` as :func:`~hfbert.pretrain.pretrain`
    takes it. Raises :class:`ConfigError` for settings, data or a model source that cannot be used."""
    accelerator = make_accelerator(config)
    start = preflight(config, accelerator)  # fresh, or the checkpoint to resume: the same on every process
    opened = open_prepared(config, accelerator)  # each --prepared folder once; None: prepared below
    kind = StepSchedule if config.budget_minutes is None else BudgetSchedule  # counted in steps or in time
    # One prepared folder trains at its own length; a budget run's phases are shares of its budget (in units).
    phases = resolve_phases(config, opened and [corpus.max_seq_length for corpus in opened], kind.units(config))
    _start_output_dir(config, accelerator, start)
    lengths = [phase.max_seq_length for phase in phases]
    origin = find_origin(config, accelerator, start.resuming, lengths)  # fresh, pretrained or resumed
    data = load_training_data(config, accelerator, lengths, opened=opened, tokenizer=origin.tokenizer)
    model = build_model(origin, config, data, model_init)
    if config.gradient_checkpointing:
        _checkpoint_activations(model)
    _record_settings(config, accelerator, start, origin)
    nsp = choose_nsp(config, data, lengths, say=accelerator.print, accelerator=accelerator)  # from training rows
    optimizer, scheduler = _build_optimizer(config, model, kind.units(config))
    model, optimizer = accelerator.prepare(model, optimizer)
    # The schedule is stepped by the loop once per optimizer step; accelerate's wrapper would step it per process.
    accelerator.register_for_checkpointing(scheduler)
    state = _resume(start, config, accelerator, model, optimizer, scheduler) if start.resuming else LoopState()
    schedule = kind.from_config(config, phases, scheduler, state)
    return RunPlan(accelerator, start, origin, phases, data, model, optimizer, scheduler, nsp, schedule, state)


# ----------------------------------------------------------------------------------------------------------------
# Before any work


def _check_writable(output_dir: Path) -> None:
    if output_dir.exists() and not output_dir.is_dir():
        raise ConfigError(f"output_dir {output_dir} exists and is not a folder")
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        descriptor, probe = tempfile.mkstemp(prefix=".hfbert-write-test-", dir=output_dir)
        os.close(descriptor)
        os.unlink(probe)
    except OSError as err:
        raise ConfigError(f"output_dir {output_dir} is not writable: {err.strerror or err}") from None


def preflight(config: PretrainConfig, accelerator=None) -> RunStart:
    """Every check that can fail without doing the work: inputs exist, hardware fits, the output folder is
    writable and consistent with resume/overwrite. Returns how the run starts (:func:`~hfbert.pretrain.recovery.
    plan_start`: fresh, or the checkpoint to resume and the changes in force). Raises :class:`ConfigError`.

    With an ``accelerator``, the output folder's verdict is the main process's (the other machines need not see
    its disk), and every process gets it -- or raises the same error."""
    check_sources(config)
    if config.mixed_precision == "fp16" and not torch.cuda.is_available():
        raise ConfigError("mixed_precision fp16 needs a GPU; use bf16 or no on a CPU")
    output_dir = Path(config.output_dir)
    _check_writable(output_dir)
    plan = lambda: plan_start(config, output_dir / CONFIG_FILE)  # noqa: E731
    return plan() if accelerator is None else from_main(accelerator, plan)


# ----------------------------------------------------------------------------------------------------------------
# Setup


#: How long the other processes of a run wait in a collective for the main process's downstream evaluation.
SUITE_WAIT = timedelta(hours=6)


def make_accelerator(config: PretrainConfig):
    output_dir = Path(config.output_dir)
    # JSON lines always (the curve, the card and a resume read them), then the --report_to trackers of Accelerate.
    trackers: list[Any] = [JsonlTracker(output_dir / LOG_FILE), *accelerate_trackers(config.report_to)]
    # Without a GPU, say so: accelerate only sets up multi-process CPU training (gloo) for cpu=True.
    on_cpu = not (torch.cuda.is_available() or torch.backends.mps.is_available())
    compiled = None
    if config.torch_compile:
        # The supervised rows (and the packed rows) are counted from the data: dynamo traces such counts as symbols
        # instead of breaking the graph there, and dynamic=True keeps one graph for every batch width.
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        torch._dynamo.config.capture_scalar_outputs = True
        compiled = TorchDynamoPlugin(backend="inductor", dynamic=True)
    # While the main process fine-tunes a suite, the others wait for it in a collective, which the process group's
    # timeout would end (NCCL's default: 10 minutes); a run that evaluates one waits as long as a suite may take.
    waits = [InitProcessGroupKwargs(timeout=SUITE_WAIT)] if config.evaluate_suite is not None else []
    accelerator = Accelerator(
        cpu=on_cpu, mixed_precision=config.mixed_precision, log_with=trackers,
        project_dir=str(output_dir / "runs"), dynamo_plugin=compiled, kwargs_handlers=waits,
    )
    native, why = native_mixed_precision()
    precision = {"no": "fp32", "bf16": "bf16 autocast", "fp16": "fp16 autocast"}[config.mixed_precision]
    accelerator.print(f"precision: {precision} ({why}; --mixed_precision {'no' if native == 'bf16' else 'bf16'} "
                      f"to choose otherwise)" if config.mixed_precision == native else f"precision: {precision}")
    return accelerator


def _start_output_dir(config: PretrainConfig, accelerator, start: RunStart) -> None:
    """Clear what a previous run left: for a resume, what a crash left and (resume_from) the abandoned checkpoints;
    for a fresh run, everything a previous run there wrote that this one replaces."""
    output_dir = Path(config.output_dir)
    if accelerator.is_main_process:
        if start.resuming:
            clear_for_resume(config, start)
        else:
            for path in output_dir.glob("checkpoint-*"):  # complete or not
                if path.is_dir():
                    shutil.rmtree(path)
            shutil.rmtree(output_dir / PREPARED_DIR, ignore_errors=True)  # prepared again for these settings
            (output_dir / LOG_FILE).unlink(missing_ok=True)
            (output_dir / CONFIG_FILE).unlink(missing_ok=True)
            (output_dir / ORIGIN_FILE).unlink(missing_ok=True)
    accelerator.wait_for_everyone()


def _record_settings(config: PretrainConfig, accelerator, start: RunStart, origin: Origin) -> None:
    """Mark the folder as holding this run, once the data and the model have passed their checks (a run that
    stopped at a check leaves nothing a retry must --overwrite)."""
    if accelerator.is_main_process and not start.resuming:
        record_origin(origin, config.output_dir)
        path = Path(config.output_dir) / CONFIG_FILE
        path.write_text(json.dumps(config.to_dict(), indent=1), encoding="utf-8")


def _checkpoint_activations(model) -> None:
    """--gradient_checkpointing: each encoder layer keeps only its input in training and runs again in the backward
    pass (torch's non-reentrant checkpoint, which also replays the layer's dropout)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ConfigError(f"gradient_checkpointing: the model ({type(model).__name__}, from model_init) does not "
                          "support it")
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})


def _build_optimizer(config: PretrainConfig, model, total: int):
    """The optimizer and its warm-up-then-decay schedule, ``total`` units long (steps, or a budget's units)."""
    optimizer = create_optimizer(
        model, config.optimizer, lr=config.learning_rate, weight_decay=config.weight_decay,
        betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_epsilon,
    )
    warmup = config.warmup_steps if config.warmup_steps is not None else warmup_steps_for(total, config.warmup_ratio)
    return optimizer, linear_warmup_decay(optimizer, warmup, total)


def _resume(start: RunStart, config: PretrainConfig, accelerator, model, optimizer, scheduler) -> LoopState:
    """Load the planned checkpoint on every process, apply the settings changed for recovery, and cut the log back
    to its step (lines a killed run wrote after it); see :mod:`~hfbert.pretrain.recovery`."""
    saved = resume_run(start, accelerator, model, optimizer, scheduler, log_path=Path(config.output_dir) / LOG_FILE)
    state = LoopState.from_checkpoint(saved, config.logging_steps)
    accelerator.print(f"resumed from {start.checkpoint} at step {state.step}")
    return state


def tracker_config(config: PretrainConfig, data: TrainingData) -> dict[str, Any]:
    """Settings and data statistics as flat scalars (TensorBoard's hparams accept nothing else)."""
    flat = {}
    for key, value in {**config.to_dict(), **{f"data_{k}": v for k, v in data.stats.items()}}.items():
        flat[key] = value if isinstance(value, (int, float, str, bool)) or value is None else json.dumps(value)
    return flat
