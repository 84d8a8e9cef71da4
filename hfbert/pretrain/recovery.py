"""Recovering a pretraining run: divergence, the last good checkpoint, and resuming with changed settings.

Divergence. The loop stops, before the step updates any weight, when the step's training loss is not finite or
*spikes*: rises above ``loss_spike_factor`` times the median of the last ``loss_spike_window`` steps
(:class:`LossWatch`; the window is part of the checkpoint, so a resumed run watches exactly as an uninterrupted one).
A loss that ran away without spiking, and then a NaN, is what a learning rate too high for the model looks like;
a spike is caught first, while the checkpoints still hold good weights.

The last good checkpoint. When the loss of step ``s`` goes wrong, it was computed with the weights after step
``s - 1``, so a checkpoint of step ``s - 1`` holds the very weights that went wrong: the last good checkpoint is the
newest one of an earlier step whose own recorded losses were finite and had not spiked.

Resuming with changes. A plain ``--resume`` is exact: every setting that shapes training must equal the run's, and
resuming a diverged run unchanged diverges again at the same step. The recovery path is explicit:

    hfbert pretrain --config OUT/pretrain_config.json --resume_from checkpoint-00000400 \\
        --resume_with_changes learning_rate --learning_rate 1e-4

Where it is decided. :func:`plan_start` is the one place that decides how a run starts in its output folder: fresh
(refusing a folder that holds a run, unless overwriting), or from which checkpoint, with which settings allowed to
differ and which changes in force -- checked before any work, on the main process, whose verdict every process
gets. :func:`resume_run` then loads what the plan names and applies its changes.

``--resume_from`` picks the checkpoint (later ones belong to the abandoned trajectory and are deleted);
``--resume_with_changes`` names the settings allowed to differ (:data:`RECOVERY_CHANGES`: learning rate, warmup,
precision, clipping, weight decay, Adam's betas and epsilon). Every such resume is written into the run's history
-- the ``history`` list of every later checkpoint and a ``{"event": "resumed", ...}`` line of ``runs/metrics.jsonl``
-- with the step, the checkpoint, each setting's old and new value and the divergence that led to it, so the run
stays reproducible. ``pretrain_config.json`` keeps the settings the run started with.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checkpointing import (
    discard_after,
    is_complete,
    latest_checkpoint,
    list_checkpoints,
    from_main,
    load_checkpoint,
    missing_files,
    read_state,
    remove_incomplete,
)
from .config import (
    OPTIMIZER_GROUP_KEYS, RECOVERY_CHANGES, RESUMABLE_CHANGES, SCHEDULE_SETTINGS, ConfigError, PretrainConfig,
)
from .tracking import read_jsonl

__all__ = [
    "RECOVERY_CHANGES",
    "LossWatch",
    "RunStart",
    "clear_for_resume",
    "diverged_message",
    "effective_settings",
    "last_good_checkpoint",
    "plan_start",
    "resume_checkpoint",
    "resume_run",
]

RESUMED, DIVERGED = "resumed", "diverged"


# ----------------------------------------------------------------------------------------------------------------
# Watching the loss


class LossWatch:
    """Decides whether a step's loss is a divergence: not finite, or above ``factor`` times the median of the
    last ``window`` steps' losses. ``recent`` is that window, kept in the loop state (and so in checkpoints);
    ``factor=None`` watches for non-finite losses only."""

    def __init__(self, recent: list[float], factor: float | None, window: int):
        self.recent, self.factor, self.window = recent, factor, window

    def problem(self, loss: float) -> str | None:
        """Why ``loss`` is a divergence, or None."""
        if not math.isfinite(loss):
            return f"the training loss became {loss}"
        if self.factor is None or not self.recent:
            return None
        median = statistics.median(self.recent)
        if median > 0 and loss > self.factor * median:
            return (f"the training loss spiked to {loss:.4g}, {loss / median:.1f} times the median {median:.4g} of "
                    f"the last {len(self.recent)} steps (loss_spike_factor {self.factor:g})")
        return None

    def add(self, loss: float) -> None:
        """Record the loss of a step that updated the weights."""
        self.recent.append(loss)
        del self.recent[:-self.window]


def _healthy(losses: Any, factor: float | None) -> bool:
    """A checkpoint's recorded window: all finite, and its last loss not a spike over the ones before it."""
    if not isinstance(losses, list) or not losses:
        return True  # nothing recorded to judge by
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in losses):
        return False
    return LossWatch(losses[:-1], factor, len(losses)).problem(losses[-1]) is None


def last_good_checkpoint(output_dir: str | Path, diverged_step: int, factor: float | None) -> Path | None:
    """The newest complete checkpoint before step ``diverged_step - 1`` whose recorded losses were healthy."""
    for step, path in reversed(list_checkpoints(output_dir)):
        if step < diverged_step - 1 and _healthy((read_state(path) or {}).get("recent_losses"), factor):
            return path
    return None


def _command(config_path: Path, *options: str) -> str:
    return " ".join(["hfbert pretrain --config", shlex.quote(str(config_path)), *options])


def diverged_message(config: PretrainConfig, step: int, problem: str, config_path: Path) -> str:
    """What happened at ``step``, the last good checkpoint, and the exact command that recovers (or, with no good
    checkpoint, how to start over)."""
    output_dir = Path(config.output_dir)
    good = last_good_checkpoint(output_dir, step, config.loss_spike_factor)
    lower = f"{config.learning_rate / 4:.3g}"
    head = f"{problem} at step {step}; stopped before updating the weights."
    if good is None:
        written = list_checkpoints(output_dir)
        why = ("No checkpoint had been written yet" if not written else
               f"No checkpoint from before the loss went wrong is left ({', '.join(p.name for _, p in written)}: "
               f"the weights that produced it)")
        return (f"{head} {why}, so there is nothing good to resume from. Start over with a lower learning rate "
                f"(and a smaller save_steps than {config.save_steps}, so that a checkpoint is near if it happens "
                f"again), e.g.:\n  "
                + _command(config_path, "--overwrite_output_dir true", f"--learning_rate {lower}"))
    recover = _command(config_path, f"--resume_from {good.name}", "--resume_with_changes learning_rate",
                       f"--learning_rate {lower}")
    lines = [f"{head} The last good checkpoint is {good}. To continue from it with a lower learning rate, run:",
             f"  {recover}"]
    if config.mixed_precision != "no":
        lines.append("or, to continue in full precision: " + _command(
            config_path, f"--resume_from {good.name}", "--resume_with_changes mixed_precision", "--mixed_precision no"))
    lines.append(f"(--resume_with_changes may list any of {', '.join(sorted(RECOVERY_CHANGES))}; the change is "
                 "recorded in the run's history.)")
    return "\n".join(lines)


def record_divergence(log_path: Path, step: int, loss: float, problem: str) -> None:
    """A ``{"event": "diverged"}`` line in the JSON-lines log (main process), for the history of the resume
    that recovers."""
    record = {"step": step, "event": DIVERGED, "loss": loss if math.isfinite(loss) else str(loss), "reason": problem}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record) + "\n")


# ----------------------------------------------------------------------------------------------------------------
# Before any work: which checkpoint, which changes


def _listed_changes(config: PretrainConfig) -> set[str]:
    """``--resume_with_changes`` as a set (space- or comma-separated names)."""
    return {name.strip() for item in config.resume_with_changes or [] for name in item.split(",") if name.strip()}


def resume_checkpoint(config: PretrainConfig, output_dir: str | Path | None = None) -> Path:
    """The checkpoint a resume starts from: ``resume_from`` (a checkpoint folder of output_dir, by name or path),
    else the latest complete one. Raises :class:`ConfigError` naming what is wrong."""
    output_dir = Path(output_dir if output_dir is not None else config.output_dir)
    if config.resume_from is None:
        latest = latest_checkpoint(output_dir)
        if latest is None:
            raise ConfigError(f"resume: there is no complete checkpoint in {output_dir}")
        return latest
    chosen = Path(config.resume_from)
    if len(chosen.parts) == 1:
        chosen = output_dir / chosen
    available = ", ".join(p.name for _, p in list_checkpoints(output_dir)) or "none"
    if chosen.resolve().parent != output_dir.resolve():
        raise ConfigError(f"resume_from {config.resume_from} is not a checkpoint of output_dir {output_dir} "
                          f"(its complete checkpoints: {available})")
    if not chosen.is_dir():
        raise ConfigError(f"resume_from: there is no {chosen} (complete checkpoints: {available})")
    if not is_complete(chosen):
        raise ConfigError(f"resume_from: {chosen} is not a complete checkpoint (missing: "
                          f"{', '.join(missing_files(chosen)[:5])}); complete checkpoints: {available}")
    return chosen


def effective_settings(started: dict[str, Any], history: list[dict]) -> dict[str, Any]:
    """The settings in force at a checkpoint: those the run started with, with every recorded change applied."""
    settings = dict(started)
    for entry in history:
        for name, change in entry.get("changed", {}).items():
            settings[name] = change["to"]
    return settings


@dataclass(frozen=True)
class RunStart:
    """How a run starts in its output folder (:func:`plan_start`): fresh, or from ``checkpoint`` (of ``step``) with
    ``changes`` in force -- the recovery settings that differ from the run as of that checkpoint, as
    ``{name: {"from": old, "to": new}}``."""

    checkpoint: Path | None = None
    step: int = 0
    changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    chosen: bool = False  # resume_from: the checkpoints after ``step`` are an abandoned trajectory

    @property
    def resuming(self) -> bool:
        return self.checkpoint is not None


def _existing_run(output_dir: Path, config_path: Path) -> list[str]:
    markers = [p.name for _, p in list_checkpoints(output_dir)]
    return markers + [p.name for p in (config_path, output_dir / "config.json") if p.is_file()]


def plan_start(config: PretrainConfig, config_path: Path) -> RunStart:
    """Before any work: how the run starts. Fresh: the output folder holds no run, or ``overwrite_output_dir``.
    Resuming: the checkpoint exists and is complete, and every setting that differs from the run (as of that
    checkpoint) may differ -- freely (RESUMABLE_CHANGES) or because ``resume_with_changes`` lists it.
    ``config_path`` holds the settings the run started with. Raises :class:`ConfigError` naming what is wrong."""
    output_dir = Path(config.output_dir)
    if not config.resume:
        existing = _existing_run(output_dir, config_path)
        if existing and not config.overwrite_output_dir:
            raise ConfigError(
                f"output_dir {output_dir} already holds a run ({', '.join(existing[:4])}); pass --resume to continue "
                "it or --overwrite_output_dir true to start over")
        return RunStart()
    checkpoint = resume_checkpoint(config, output_dir)
    listed = _listed_changes(config)
    unknown = sorted(listed - RECOVERY_CHANGES)
    if unknown:
        raise ConfigError(f"resume_with_changes: {', '.join(unknown)} cannot change on resume; the settings that "
                          f"can are {', '.join(sorted(RECOVERY_CHANGES))}")
    try:
        started = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(f"resume: {config_path} is missing or unreadable, so the run's settings are unknown; start "
                          "over with --overwrite_output_dir true") from None
    state = read_state(checkpoint) or {}
    saved = effective_settings(started, state.get("history", []))
    current = config.to_dict()
    changed = sorted(k for k in current if k not in RESUMABLE_CHANGES and saved.get(k) != current[k])
    refused = [k for k in changed if k not in listed]
    if refused:
        if set(refused) <= RECOVERY_CHANGES:
            hint = f"; to resume with {'it' if len(refused) == 1 else 'them'} changed, add --resume_with_changes " \
                   f"{' '.join(sorted(listed | set(refused)))}"
        else:
            hint = (f"; of these, only {', '.join(sorted(set(refused) & RECOVERY_CHANGES)) or 'none'} may change "
                    "on resume (with --resume_with_changes)")
        raise ConfigError(
            f"resume: these settings differ from the run in {output_dir} as of {checkpoint.name}: "
            + ", ".join(f"{k} ({saved.get(k)!r} -> {current[k]!r})" for k in refused) + hint)
    if "mixed_precision" in changed and current["mixed_precision"] == "fp16":
        raise ConfigError("resume_with_changes: mixed_precision can change to no or bf16 on resume, not to fp16 "
                          "(the checkpoint holds no fp16 loss-scale state)")
    changes = {name: {"from": saved.get(name), "to": current[name]} for name in changed}
    return RunStart(checkpoint, int(state["step"]), changes, chosen=config.resume_from is not None)


# ----------------------------------------------------------------------------------------------------------------
# Starting: the output folder, loading, applying the changes, the history


def clear_for_resume(config: PretrainConfig, start: RunStart) -> None:
    """Main process, before a resumed run trains: clean up what a crash left; when resuming from a chosen
    checkpoint, delete the later ones (the trajectory it abandons); then keep ``keep_last`` checkpoints."""
    output_dir = Path(config.output_dir)
    remove_incomplete(output_dir)
    if start.chosen:
        discard_after(output_dir, start.step)
    remove_incomplete(output_dir, keep_last=config.keep_last)


def _fresh_hyperparameters(optimizer, scheduler) -> dict[str, Any]:
    """The optimizer's group settings and the schedule's state as built from the current settings."""
    return copy.deepcopy({"groups": [{k: v for k, v in group.items() if k != "params"}
                                     for group in optimizer.param_groups],
                          "schedule": scheduler.state_dict()})


def _apply_changes(changed: dict[str, Any], fresh: dict[str, Any], optimizer, scheduler) -> None:
    """Put the new settings into the optimizer and the schedule just loaded from a checkpoint (which hold the old
    ones), keeping the optimizer's moments and the step count."""
    for group, new in zip(optimizer.param_groups, fresh["groups"]):
        for setting, keys in OPTIMIZER_GROUP_KEYS.items():  # entries taken from the optimizer built anew
            if setting in changed:
                group.update({key: new[key] for key in keys if key in new})
    if not SCHEDULE_SETTINGS & changed.keys():
        return
    schedule = scheduler.state_dict()
    if "learning_rate" in changed:
        schedule["base_lrs"] = list(fresh["schedule"]["base_lrs"])
    if "lr_lambdas" in schedule:  # the warmup/decay multiplier object, rebuilt for the new warmup
        schedule["lr_lambdas"] = fresh["schedule"]["lr_lambdas"]
    scheduler.load_state_dict(schedule)
    # The learning rate in force from now on: the new peak times the new schedule at the step reached.
    rates = [base * fn(scheduler.last_epoch) for base, fn in zip(scheduler.base_lrs, scheduler.lr_lambdas)]
    for group, rate in zip(optimizer.param_groups, rates):
        group["lr"] = rate
    scheduler.load_state_dict({**scheduler.state_dict(), "_last_lr": rates})


def _rewrite_log(log_path: Path, step: int, record: dict | None) -> None:
    """Cut the log back to ``step`` (lines a run wrote after its checkpoint) and drop resume events from ``step``
    on (attempts that started from this checkpoint and are now abandoned); append ``record``. Atomic."""
    if not log_path.is_file() and record is None:
        return
    kept = [r for r in read_jsonl(log_path)
            if r.get("step") is None or (r["step"] <= step and not (r["step"] == step and r.get("event") == RESUMED))]
    if record is not None:
        kept.append(record)
    scratch = log_path.with_suffix(log_path.suffix + ".tmp")
    scratch.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    scratch.replace(log_path)


def resume_run(start: RunStart, accelerator, model, optimizer, scheduler, *, log_path: Path) -> dict[str, Any]:
    """Load the planned checkpoint (the main process reads it, every process gets it), apply the planned changes,
    record them in the history (the returned state's ``history`` and the log) and cut the log back to the
    checkpoint's step. Returns the loop state the checkpoint holds."""
    fresh = _fresh_hyperparameters(optimizer, scheduler)
    saved = load_checkpoint(accelerator, start.checkpoint, model=model, optimizer=optimizer, scheduler=scheduler)
    _apply_changes(start.changes, fresh, optimizer, scheduler)

    def record_history() -> list[dict]:  # the log lives on the main process's disk
        history, record = list(saved.get("history", [])), None
        if start.changes or start.chosen:
            entry = {"step": start.step, "checkpoint": start.checkpoint.name, "changed": start.changes}
            abandoned = [r for r in read_jsonl(log_path) if r.get("event") == DIVERGED and r.get("step", 0) > start.step]
            if abandoned:
                entry["diverged"] = {k: abandoned[-1][k] for k in ("step", "loss", "reason") if k in abandoned[-1]}
            history.append(entry)
            record = {"step": start.step, "event": RESUMED, **{k: v for k, v in entry.items() if k != "step"}}
        _rewrite_log(log_path, start.step, record)
        return history

    saved["history"] = from_main(accelerator, record_history)
    return saved
