"""``hfbert pretrain``: prepared corpora -> Accelerate training -> Hub-format folder.

With no arguments this is the project's main job: the built-in public-domain Austen corpus prepared into
``output_dir/prepared`` (an 8,000-entry vocabulary, NSP/MLM examples in Parquet shards, as ``hfbert prepare``
writes them), the ``tiny`` preset with short sequences first, a few minutes on a CPU, then a fill-mask example.
``--prepared DIR_OR_REPO`` trains on folders ``hfbert prepare`` built. Every setting is in
:class:`~hfbert.pretrain.config.PretrainConfig`; ``pretrain(config)`` is the same job as a function.

The loop (after transformers' ``run_mlm_no_trainer.py`` and accelerate's ``nlp_example.py``) reads like the job:

    settings -> data (prepared corpora, tokenizer, held-out batches) -> model + optimizer + schedule
    -> [resume] -> train (log, evaluate, checkpoint) -> evaluate -> export (save_pretrained, card, curve)
    -> [downstream evaluation, --evaluate_suite] -> push

What makes it exactly resumable: batches come from :class:`~hfbert.pretrain.batches.BatchPlan` (rows by arithmetic on
the step), dynamic masks drawn row by row from (seed, phase, epoch, row), dropout from generators seeded by (seed,
step, process) at each step, and a checkpoint on the main process's disk holds model, optimizer, schedule and the
sums since the last log line (:mod:`~hfbert.pretrain.checkpointing`). A resumed run computes bit for bit what an
uninterrupted one does (fp32 on a CPU), on any number of machines, and logs the same lines.

Outputs in ``output_dir``: ``config.json`` (with ``auto_map``) and ``model.safetensors`` plus the modeling files,
the tokenizer files, ``README.md`` (model card), ``metrics.json``, ``loss_curve.png``, ``pretrain_config.json``;
resumable state in ``checkpoint-*`` folders and logs in ``runs/`` (neither is uploaded by ``push_to_hub``).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data.manifest import PreparedDataError
from ..data.progress import Progress
from ..data.remote import ShardReadError
from ..evaluation import evaluate_during_training, evaluate_exported
from ..modeling_hfbert import IGNORE_INDEX, HfBertForPreTraining
from .batches import BatchPlan, HostLayout, ReadAhead, stand_in_batch, training_batch
from .callbacks import CallbackHandler, DefaultSchedule, PretrainCallback, TrainingControl
from .checkpointing import from_main, save_checkpoint, seed_step, settle
from .clock import Clock
from .config import Phase, PretrainConfig
from .export import LOG_FILE, export, push
from .nsp_choice import CHECK_SHARE, check_held_out, check_note
from .plan import CONFIG_FILE, STATS, RunPlan, plan_run, preflight, tracker_config
from .recovery import LossWatch, diverged_message, record_divergence
from .tracking import start_trackers

__all__ = ["PretrainResult", "TrainingDivergedError", "pretrain", "preflight"]

#: Optimizer steps whose micro-batches are read and collated ahead, in a background thread.
READ_AHEAD_STEPS = 2


class StoppedByAnotherProcess(RuntimeError):
    """Raised on every process but the one that says why the run stops (it prints the one line)."""


class StepDataError(RuntimeError):
    """A process could not read its rows of a step (the message names the shard); raised on the first process that
    failed, the others stop with :class:`StoppedByAnotherProcess`."""


# A prepared corpus that cannot be read: damaged or missing shards, a remote read that failed for good. Said in one
# line by the command, whenever it happens.
CORPUS_ERRORS = (PreparedDataError, ShardReadError)
# What a process's reading of its rows during a step can fail with: those, or the process out of file descriptors.
# Every process learns of it at the step's first all-reduce, and the run stops with a StepDataError.
DATA_ERRORS = (*CORPUS_ERRORS, OSError)


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite, or spiked; the weights of that step were not updated. The message names
    the last good checkpoint and the command that resumes from it with a lower learning rate. Every process raises
    it at the same ``step`` with the same message."""

    def __init__(self, message: str, step: int | None = None):
        super().__init__(message)
        self.step = step


@dataclass
class PretrainResult:
    output_dir: Path
    metrics: dict[str, Any]
    fill_mask: list[dict] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------------------
# The job


def pretrain(config: PretrainConfig, *, callbacks: list[PretrainCallback] | None = None,
             model_init=None) -> PretrainResult:
    """The whole job; see the module docstring. ``callbacks``: :class:`~hfbert.pretrain.PretrainCallback` instances
    told of the run's events (:mod:`~hfbert.pretrain.callbacks`); ``model_init(model_config)``: the model to train
    instead of :class:`HfBertForPreTraining` (given the :class:`HfBertConfig` of the corpora's vocabulary, called
    after the seed is set; it must take the batches and return the outputs the loop reads, as that class does; a
subclass of it is also given the batch's ``packed_rows``, ``supervised_positions`` and ``inputs_checked``).
    Raises :class:`ConfigError` before any work for bad settings,
    :class:`TrainingDivergedError` when the loss stops being finite, :class:`~hfbert.pretrain.checkpointing.
    DiskFullError` when a checkpoint or the export does not fit on the disk; once the model is exported,
    :class:`~hfbert.evaluation.EvaluationError` when a run of ``evaluate_suite`` fails and
    :class:`~hfbert.hub.HubPushError` when the push does.

    It leaves the process's C allocator as it finds it. ``hfbert pretrain``, which owns its process, first fixes
    glibc's mmap threshold (:func:`~hfbert.pretrain.host_memory.return_large_blocks`), so that a CPU run's memory
    does not creep up at its evaluations; a caller who wants the same calls that function before this one, for the
    rest of its process: glibc cannot tell the previous setting, nor go back to its own."""
    # The job's own schedule first, then the caller's callbacks (a wrong one fails before any work).
    handler = CallbackHandler([DefaultSchedule(config.logging_steps, config.eval_steps, config.save_steps,
                                               config.evaluate_suite_steps), *(callbacks or ())])
    plan = plan_run(config, model_init)  # accelerator, corpora, phases, model, optimizer, schedule, state
    accelerator, data, state = plan.accelerator, plan.data, plan.state
    start_trackers(accelerator, tracker_config(config, data))
    loop = _Loop(config, plan, handler)
    try:
        stopped_by = loop.run()
        phases = plan.schedule.phases_run(state.step)  # a budget run's phases as the clock cut them
        logged = loop.evaluated_now()  # the loop has just logged this step's evaluation
        metrics = {**loop.evaluation(), "step": state.step, "stopped_by": stopped_by,
                   "train_seconds": round(state.train_seconds, 1), "tokens_seen": state.tokens_seen,
                   "num_processes": accelerator.num_processes,
                   "next_sentence_prediction": any(plan.nsp.by_length.values()), **loop.nsp_record()}
        metrics.update({k: v for k, v in data.stats.items() if k.startswith("eval_") and "baseline" in k})
        if "baselines_by_length" in data.stats:  # string keys, as metrics.json will hold them
            metrics["baselines_by_length"] = {str(k): v for k, v in data.stats["baselines_by_length"].items()}
        if not logged:
            accelerator.log({k: v for k, v in metrics.items() if k.startswith("eval_")}, step=state.step)
        handler("on_train_end", step=state.step, metrics=metrics, model=accelerator.unwrap_model(plan.model))
        result = PretrainResult(Path(config.output_dir), metrics)
        write = lambda: export(config, accelerator.unwrap_model(plan.model), data, metrics, phases,  # noqa: E731
                               plan.origin.record)
        fill_mask = from_main(accelerator, write)  # every process stops with it on a full disk
        if accelerator.is_main_process:
            result.fill_mask = fill_mask
    finally:
        settle()  # gloo lets go of the last exchange's tensors before its process group goes
        accelerator.end_training()
    if accelerator.is_main_process:
        evaluate_exported(config)  # --evaluate_suite: fine-tuned downstream, the scores into the card
    if config.push_to_hub and accelerator.is_main_process:
        push(config)
    return result


# ----------------------------------------------------------------------------------------------------------------
# The loop


class _Loop:
    """Train from ``state.step`` until the run's schedule is done (or a callback stops it): log, evaluate,
    checkpoint."""

    def __init__(self, config: PretrainConfig, plan: RunPlan, callbacks: CallbackHandler):
        self.config, self.accelerator, self.model = config, plan.accelerator, plan.model
        self.callbacks = callbacks  # DefaultSchedule first
        self.optimizer, self.scheduler, self.data = plan.optimizer, plan.scheduler, plan.data
        self.phases, self.schedule, self.state = plan.phases, plan.schedule, plan.state
        accelerator, model, state, phases = plan.accelerator, plan.model, plan.state, plan.phases
        world, seed = accelerator.num_processes, config.seed
        self.batch_plans = [BatchPlan(self.data.of(p).corpus.blocks("train"), p.batch_size, world, seed, p.index,
                                window=config.shuffle_window, accumulation=config.gradient_accumulation_steps)
                      for p in phases]
        for phase, batches in zip(phases, self.batch_plans):  # each decoded block serves its window, then is dropped
            corpus = self.data.of(phase).corpus
            corpus.set_cache(max(corpus.cached_blocks, batches.cache_blocks))
        self.pin_memory = accelerator.device.type == "cuda"
        # hfbert's own model takes where the real tokens and the supervised labels are, found on the host with the
        # batch (a compiled graph runs padded), and has the batch's ids checked there against its config; another
        # model from model_init does both itself.
        own = isinstance(accelerator.unwrap_model(model), HfBertForPreTraining)
        self.takes_layout = own and not config.torch_compile
        self.checked_against = accelerator.unwrap_model(model).config if own else None
        self.read_ahead = ReadAhead(lambda key: self.micro_batch(phases[key[0]], key[1]),
                                    depth=READ_AHEAD_STEPS * config.gradient_accumulation_steps)
        self.data_seconds = 0.0  # the mean wait for data per step over the last log line's steps
        self.output_dir = Path(config.output_dir)
        self.last_saved = state.step
        self.clock = Clock(state.train_seconds)
        self.last_evaluation: tuple[int, dict] = (-1, {})
        self.last_downstream = -1  # the step of the last downstream evaluation
        self.watch = LossWatch(state.recent_losses, config.loss_spike_factor, config.loss_spike_window)
        self.nsp = plan.nsp  # the lengths that train NSP; a held-out check may stop it in a phase (nsp_choice.py)

    def phase_at(self, step: int) -> Phase:
        return self.schedule.phase_at(step)

    def run(self) -> str:
        """Returns why training stopped: ``"max_steps"``, ``"budget"``, ``"max_time"`` or ``"callback"`` (a
        callback's ``should_stop``)."""
        config, state = self.config, self.state
        # A bar on a terminal; in a log file a plain line at each log line instead of a redraw per step.
        bar = Progress("pretraining", self.schedule.total_steps, initial=state.step, unit=" steps",
                       show=config.progress_bar if self.accelerator.is_local_main_process else False,
                       dynamic_ncols=True)
        self.model.train()
        self.callbacks("on_train_begin", step=state.step, model=self.accelerator.unwrap_model(self.model))
        try:
            stop = self._train(bar)
        finally:
            self.read_ahead.close()
        bar.close()
        if state.since_log_steps > 0:  # the steps since the last log line
            self.log()
        if config.evaluate_suite_steps is not None and self.last_downstream != state.step:  # the curve's last point
            self.accelerator.log(self.downstream(), step=state.step)
        if self.last_saved != state.step:
            self.checkpoint()
        return stop

    def _train(self, bar) -> str:
        state, schedule = self.state, self.schedule
        while not schedule.done(state.step):
            stats = self.train_step(clock=schedule.step_clock(self.clock))
            state.step += 1
            schedule.after_step(state.step, stats["clock"], stats["seconds"])  # a budget run's rate and phase
            time_up = schedule.time_up(stats["clock"])  # every process agrees: the clock is their mean
            state.tokens_seen += int(stats["tokens"])
            for key in STATS:
                state.since_log[key] += stats[key]
            state.since_log_steps += 1
            state.since_log_seconds += stats["seconds"]
            state.since_log_data_seconds += stats["data_seconds"]
            bar.update(1)
            control = TrainingControl()  # what this step's callbacks ask for (DefaultSchedule first)
            self.callbacks("on_step_end", step=state.step, model=self.accelerator.unwrap_model(self.model),
                           control=control, time_up=time_up)
            if control.should_log:
                bar.note(loss=f"{self.log(control):.3f}", data=f"{self.data_seconds:.3f}s")
            if control.should_evaluate:
                self.accelerator.log(self.evaluation(control), step=state.step)
            if control.should_evaluate_downstream:
                self.accelerator.log(self.downstream(control), step=state.step)
            if control.should_save:
                self.checkpoint()
            if schedule.done(state.step):  # the run's course ends it before a callback's stop
                break
            if control.should_stop:
                return "max_time" if time_up else "callback"
        return schedule.stopped_by

    def train_step(self, clock: float) -> dict[str, float]:
        """One optimizer step over ``gradient_accumulation_steps`` micro-batches on every process; ``clock``: the
        seconds this process offers for the step (:meth:`~hfbert.pretrain.schedule.Schedule.step_clock`), whose
        mean over the processes comes back as ``stats["clock"]``.

        The step's MLM loss is the mean over every supervised token of its global batch (all micro-batches on all
        processes), not a mean of per-micro-batch means, so a micro-batch with more masked tokens weighs more and
        the step does not depend on how its batch is split. The micro-batches are collated first (read ahead, see
        :class:`~hfbert.pretrain.batches.ReadAhead`), their supervised counts (counted on the host) are summed over
        processes in one all-reduce that stays on the device, and each forward divides its token sum by
        ``count / processes`` (DDP then averages the gradients over processes). NSP is the mean over all pairs:
        every micro-batch has the same number of pairs, so each one's mean weighs ``1 / accumulation``.

        The host reads the device once per step, after the backward passes: one small vector, all-reduced, holds
        what the loop must know before the update and what every process must agree on -- the step's loss (the
        divergence check keeps a diverged step out of the weights), the agreed clock (the schedule's) and which
        processes could not read their rows (a process that could not trains on a stand-in batch, so that its
        collectives meet the others', and every process stops at this read). The step's statistics for the log come
        in the same read. Nothing else waits for the device (on a GPU, a wait keeps the host from queueing the next
        kernels): where each micro-batch's real tokens and supervised labels sit is found on the host when it is read
        (``packed_rows``, ``supervised_positions``), and its ids are checked there too (``inputs_checked``).
        """
        accelerator, config, step = self.accelerator, self.config, self.state.step
        phase = self.phase_at(step)
        seed_step(config.seed, step, accelerator.process_index)  # this step's dropout: nothing to save or restore
        accumulation = config.gradient_accumulation_steps
        started = time.monotonic()
        first = (step - phase.first_step) * accumulation
        device = accelerator.device
        keys = [(phase.index, first + k) for k in range(accumulation)] + self._keys_from(step + 1)
        batches, layouts, data_seconds, failure = [], [], 0.0, None
        for k in range(accumulation):
            if failure is None:
                try:
                    (batch, layout), waited = self.read_ahead.get(keys[k], keys[k + 1 :])
                    data_seconds += waited
                except DATA_ERRORS as err:  # said after the backward passes, once every process knows
                    failure = err
            if failure is not None:  # the step runs on, to meet the other processes' collectives, and is dropped
                batch, layout = stand_in_batch()
            batches.append({name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()})
            layouts.append(layout.to(device, non_blocking=True))
        # The step's supervised count, summed over processes on the device. The host's numbers go into device tensors
        # as fill values: a copy from (unpinned) host memory would wait for the device.
        supervised = torch.full((), float(sum(layout.supervised for layout in layouts)), dtype=torch.float64,
                                device=device)
        num_items = accelerator.reduce(supervised, "sum").clamp(min=1.0) / accelerator.num_processes
        totals = torch.zeros(len(STATS), dtype=torch.float64, device=device)
        for k, batch in enumerate(batches):
            # Gradients are all-reduced only on the last micro-batch of the step.
            sync = contextlib.nullcontext() if k == accumulation - 1 else accelerator.no_sync(self.model)
            with sync:
                known = {**layouts[k].model_inputs(), "inputs_checked": True} if self.takes_layout else {}
                outputs = self.model(**batch, num_items_in_batch=num_items, **known)  # MLM: token sum / num_items
                nsp_loss = outputs.nsp_loss / accumulation if self.trains_nsp(phase) else 0.0
                accelerator.backward(outputs.mlm_loss + nsp_loss)
            totals += _batch_stats(outputs, batch, num_items, layouts[k])
        # With the statistics: the mean of the processes' clocks (the step's agreed clock) and which processes could
        # not read their rows. One all-reduce, and the step's one read of the device.
        agreed = torch.zeros(1 + accelerator.num_processes, dtype=torch.float64, device=device)
        agreed[0] = clock / accelerator.num_processes
        agreed[1 + accelerator.process_index] = float(failure is not None)
        shared = accelerator.reduce(torch.cat([totals, agreed]), reduction="sum").tolist()
        failed = [rank for rank, flag in enumerate(shared[len(STATS) + 1 :]) if flag]
        if failed:  # every process stops here, before the update; the first that failed says why
            self.optimizer.zero_grad(set_to_none=True)
            if failure is not None and accelerator.process_index == failed[0]:
                raise StepDataError(f"step {step + 1}: {failure}") from failure
            raise StoppedByAnotherProcess(f"process {failed[0]} could not read its rows at step {step + 1}")
        stats: dict[str, Any] = dict(zip(STATS, shared))
        stats["clock"] = shared[len(STATS)]
        loss = stats["mlm_loss_sum"] / max(stats["mlm_total"], 1.0)
        if self.trains_nsp(phase):
            loss += stats["nsp_loss_sum"] / stats["nsp_total"]
        problem = self.watch.problem(loss)
        if problem is not None:
            self.optimizer.zero_grad(set_to_none=True)
            raise self._diverged(problem, loss, step + 1)
        self.watch.add(loss)
        if config.max_grad_norm > 0:
            accelerator.clip_grad_norm_(self.model.parameters(), config.max_grad_norm)
        self.optimizer.step()
        if not accelerator.optimizer_step_was_skipped:  # fp16 overflow: the schedule waits too
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        stats["seconds"] = time.monotonic() - started
        stats["data_seconds"] = data_seconds
        return stats

    def _keys_from(self, step: int) -> list[tuple[int, int]]:
        """(phase, micro-batch) of the steps read ahead from ``step`` on."""
        keys, accumulation = [], self.config.gradient_accumulation_steps
        for later in self.schedule.read_ahead(step, READ_AHEAD_STEPS):
            phase = self.phase_at(later)
            first = (later - phase.first_step) * accumulation
            keys += [(phase.index, first + k) for k in range(accumulation)]
        return keys

    def micro_batch(self, phase: Phase, micro: int) -> tuple[dict[str, torch.Tensor], dict]:
        """This process's share of micro-batch ``micro`` of ``phase``, collated on the host (pinned for a GPU), and
        its layout (see :func:`~hfbert.pretrain.batches.training_batch`); only this process's rows are read."""
        rank, plan = self.accelerator.process_index, self.batch_plans[phase.index]
        return training_batch(self.data.of(phase).corpus, self.data.of(phase).collator, plan, micro, rank,
                              pin_memory=self.pin_memory, model_config=self.checked_against)

    def _diverged(self, problem: str, loss: float, step: int) -> TrainingDivergedError:
        """The error every process raises at the step whose (all-reduced) loss went wrong: recorded in the log and
        worded once, on the main process, which holds the checkpoints the message names."""
        def record() -> str:
            record_divergence(self.output_dir / LOG_FILE, step, loss, problem)
            return diverged_message(self.config, step, problem, self.output_dir / CONFIG_FILE)

        return TrainingDivergedError(from_main(self.accelerator, record), step=step)

    def log(self, control: TrainingControl | None = None) -> float:
        """Log the averages over the steps since the last log line (NSP's where the phase trains it); returns the
        mean loss."""
        state = self.state
        w, steps = state.since_log, state.since_log_steps
        trains_nsp = self.trains_nsp(self.phase_at(state.step - 1))
        mlm_loss, nsp_loss = w["mlm_loss_sum"] / max(w["mlm_total"], 1.0), w["nsp_loss_sum"] / max(w["nsp_total"], 1.0)
        values = {
            "loss": mlm_loss + (nsp_loss if trains_nsp else 0.0),
            "mlm_loss": mlm_loss,
            "nsp_loss": nsp_loss,
            "mlm_accuracy": w["mlm_correct"] / max(w["mlm_total"], 1.0),
            "nsp_accuracy": w["nsp_correct"] / max(w["nsp_total"], 1.0),
            "learning_rate": self.scheduler.get_last_lr()[0],
            "tokens_per_second": w["tokens"] / max(state.since_log_seconds, 1e-9),
            "step_seconds": state.since_log_seconds / steps,
            "data_seconds": state.since_log_data_seconds / steps,  # of step_seconds, the wait for the step's data
            "tokens_seen": state.tokens_seen,
            "max_seq_length": self.phase_at(state.step - 1).max_seq_length,
            "train_seconds": self.clock.total(),  # wall clock since the start, evaluations and checkpoints included
            # What the reader holds: decoded row groups (bounded by the shuffle window) and open shard files.
            "reader_mib": sum(c.held_bytes for c in self.data.corpora) / 2**20,
            "open_files": sum(c.open_files for c in self.data.corpora),
        }
        if not trains_nsp:  # no numbers of a task this phase does not train
            del values["nsp_loss"], values["nsp_accuracy"]
        self.accelerator.log(values, step=state.step)
        self.callbacks("on_log", step=state.step, logs=values, control=control or TrainingControl())
        self.data_seconds = values["data_seconds"]
        state.since_log, state.since_log_steps = dict.fromkeys(STATS, 0.0), 0
        state.since_log_seconds = state.since_log_data_seconds = 0.0
        return values["loss"]

    def evaluation(self, control: TrainingControl | None = None) -> dict[str, float]:
        """The held-out metrics at the current step (computed once per step)."""
        if not self.evaluated_now():
            self.last_evaluation = (self.state.step, self.evaluate())
            self._check_nsp(self.last_evaluation[1])
            self.callbacks("on_evaluate", step=self.state.step, metrics=self.last_evaluation[1],
                           model=self.accelerator.unwrap_model(self.model), control=control or TrainingControl())
        return self.last_evaluation[1]

    def downstream(self, control: TrainingControl | None = None) -> dict[str, float]:
        """The evaluate_suite fine-tuned on the model as it is now (on the main process, the others waiting); the
        clock stops meanwhile, so a budget run's schedule does not pay for it."""
        model, step = self.accelerator.unwrap_model(self.model), self.state.step
        with self.clock.paused():
            scores = from_main(self.accelerator,
                               lambda: evaluate_during_training(self.config, model, self.data.tokenizer, step))
        scores["downstream_minutes"] = self.clock.total() / 60  # training minutes so far
        self.last_downstream = step
        self.callbacks("on_evaluate", step=step, metrics=scores, model=model, control=control or TrainingControl())
        return scores

    def evaluated_now(self) -> bool:
        return self.last_evaluation[0] == self.state.step

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """Held-out MLM/NSP loss and accuracy at the current phase's length, with the fixed held-out masks."""
        accelerator = self.accelerator
        phase = self.phase_at(max(self.state.step - 1, 0))
        model = accelerator.unwrap_model(self.model)
        model.eval()
        totals = torch.zeros(len(STATS), dtype=torch.float64, device=accelerator.device)
        batches = self.data.of(phase).held_out
        for number in range(accelerator.process_index, len(batches), accelerator.num_processes):
            batch = {k: v.to(accelerator.device) for k, v in batches[number].items()}
            with accelerator.autocast():
                outputs = model(**batch)
            totals += _batch_stats(outputs, batch)
        model.train()
        totals = accelerator.reduce(totals.to(accelerator.device), reduction="sum").cpu()
        s = dict(zip(STATS, totals.tolist()))
        tokens, pairs = max(s["mlm_total"], 1.0), max(s["nsp_total"], 1.0)
        return {  # per supervised token and per pair over the whole held-out set, as in training (NSP where trained)
            "eval_loss": s["mlm_loss_sum"] / tokens + (s["nsp_loss_sum"] / pairs if self.trains_nsp(phase) else 0.0),
            "eval_mlm_loss": s["mlm_loss_sum"] / tokens,
            "eval_nsp_loss": s["nsp_loss_sum"] / pairs,
            "eval_mlm_accuracy": s["mlm_correct"] / tokens,
            "eval_nsp_accuracy": s["nsp_correct"] / pairs,
        }

    # -- next sentence prediction where it can be learned (nsp_choice.py)

    def trains_nsp(self, phase: Phase) -> bool:
        """Whether ``phase`` trains NSP: its length does (the settings or the data) and no held-out check stopped it."""
        return self.nsp.trains(phase.max_seq_length) and not any(
            check["phase"] == phase.index and check["stopped"] for check in self.state.nsp_checks)

    def _check_nsp(self, metrics: dict[str, float]) -> None:
        """The held-out check of a phase that trains NSP, at its first evaluation after CHECK_SHARE of it; one line
        when NSP is at the majority baseline. The evaluation's sums are every process's, so all decide alike."""
        phase = self.phase_at(max(self.state.step - 1, 0))
        if not self.trains_nsp(phase) or any(check["phase"] == phase.index for check in self.state.nsp_checks):
            return
        share = self.schedule.share_of_phase(phase, self.state.step)  # 1.0: no step of it remains
        if share < CHECK_SHARE:
            return
        labels = torch.cat([batch["next_sentence_label"] for batch in self.data.of(phase).held_out])
        pairs, random_next = labels.numel(), int(labels.sum())
        check = check_held_out(round(metrics["eval_nsp_accuracy"] * pairs), pairs,
                               max(random_next, pairs - random_next) / max(pairs, 1))
        if check is None:  # too few held-out pairs to tell
            return
        stopped = not (check["learned"] or self.nsp.given) and share < 1.0
        check.update(phase=phase.index, max_seq_length=phase.max_seq_length, step=self.state.step, stopped=stopped)
        self.state.nsp_checks.append(check)
        if not check["learned"]:
            self.accelerator.print(check_note(check, self.nsp.given))

    def nsp_record(self) -> dict:
        """What metrics.json and the card say of NSP beyond its scores: the held-out checks, and one line for each
        length that did not train it and each check that found it at the majority baseline."""
        notes = [*self.nsp.notes, *(check_note(check, self.nsp.given) for check in self.state.nsp_checks
                                    if not check["learned"])]
        return {"nsp_checks": self.state.nsp_checks, "nsp_notes": notes} if notes or self.state.nsp_checks else {}

    def checkpoint(self) -> None:
        self.state.train_seconds = self.clock.total()
        save_checkpoint(self.accelerator, self.output_dir, self.state.step, asdict(self.state), self.config.keep_last)
        self.last_saved = self.state.step


def _batch_stats(outputs, batch: dict[str, torch.Tensor], num_items=None,
                 layout: HostLayout | None = None) -> torch.Tensor:
    """Loss sums, MLM/NSP correct and total counts and real tokens of one micro-batch, as a STATS vector on the
    batch's device, built without waiting for it. ``num_items``: what the MLM loss was divided by (None: it is the
    mean over this batch's supervised tokens). ``layout``: the batch's :class:`~hfbert.pretrain.batches.HostLayout`
    (its supervised labels moved to the device, its numbers counted on the host at collation); without it they are
    found on the device (evaluation)."""
    labels = batch["labels"]
    if layout is None:
        targets = labels[labels != IGNORE_INDEX]  # the rows of prediction_logits, in the same row-major order
        tokens = batch["attention_mask"].sum()
    else:
        targets, tokens = layout.targets, layout.tokens
    pairs = batch["next_sentence_label"].numel()
    mlm_correct = (outputs.prediction_logits.argmax(-1) == targets).sum()
    nsp_correct = (outputs.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum()
    values = {
        "mlm_loss_sum": outputs.mlm_loss.detach().double() * (targets.numel() if num_items is None else num_items),
        "nsp_loss_sum": outputs.nsp_loss.detach().double() * pairs,
        "mlm_correct": mlm_correct, "mlm_total": targets.numel(),
        "nsp_correct": nsp_correct, "nsp_total": pairs,
        "tokens": tokens,
    }
    device = labels.device
    return torch.stack([value.to(torch.float64).reshape(()) if torch.is_tensor(value)
                        else torch.full((), float(value), dtype=torch.float64, device=device)
                        for value in (values[key] for key in STATS)])
