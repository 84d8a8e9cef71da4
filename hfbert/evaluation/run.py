"""``hfbert evaluate MODEL --suite SUITE``: fine-tune MODEL on every task of a suite with several seeds, using the
package's recipes, and report what it is worth downstream.

Every (task, seed) run has its own folder, ``OUT/runs/<task>/seed-<seed>/``, whose ``result.json`` is written
last and whole (moved into place): ``--resume`` skips the runs whose result is there and was made with the same
settings, model and data. The fine-tuned weights are deleted after scoring unless ``--keep_models``. Everything
that can be checked is checked before the first training: the suite, every task's data, its columns and metric,
the recipe settings, the model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..arguments import CommandParser, run_command, settings_from
from ..settings import UsageError
from .protocol import (
    ARMS,
    FULL,
    PRESETS,
    Protocol,
    bootstrap_difference,
    budget_file,
    chosen_rate,
    constant_score,
    held_out_rows,
    lower_is_better,
    parse_sizes,
    spread,
    write_protocol_files,
)
from .report import plot_budgets, plot_results, protocol_table, results_table, summarize, write_results_card
from .suite_checks import check_suite
from .suites import Suite, SuiteTask, load_suite
from .task_files import TaskFiles, data_fingerprint, write_task_files

__all__ = ["PLOT_FILE", "RESULTS_FILE", "RESULT_FILE", "EvaluateArguments", "EvaluationError", "check_settings",
           "command_parser", "evaluate", "evaluate_during_training", "evaluate_exported", "evaluation_dir", "main",
           "recipe_arguments"]

RESULT_FILE = "result.json"  # one (task, seed) run
RESULTS_FILE = "results.json"  # the whole evaluation
PLOT_FILE = "results.png"
BUDGETS_PLOT_FILE = "label_budgets.png"  # score against labelled rows, the model beside its baseline
# The weights a recipe saves; deleted after scoring unless --keep_models.
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin")


class EvaluationError(RuntimeError):
    """A fine-tuning run failed; the message names the task, the seed and the run's log."""


@dataclass
class EvaluateArguments:
    model: str = field(metadata={"help": "the pretrained model: a folder (hfbert pretrain's output, an hfbert, "
                                         "transformers or Google BERT folder) or a Hub id", "positional": True})
    suite: str = field(metadata={"help": "a packaged suite (glue, local) or a suite file (YAML/JSON)"})
    data_dir: str | None = field(default=None, metadata={
        "help": "folder the suite's relative file paths are read from (default: the suite file's folder); a Hub "
                "dataset is read from <data_dir>/<dataset>/<config> when that save_to_disk copy exists"})
    seeds: list[int] = field(default_factory=lambda: [1, 2, 3],
                             metadata={"help": "fine-tuning seeds: every task runs once per seed"})
    output_dir: str | None = field(default=None, metadata={
        "help": "where the runs, results.json and results.png go (default: evaluation/<model name>-<suite>)"})
    resume: bool = field(default=False, metadata={
        "help": "skip the (task, seed) runs already finished in output_dir with the same settings"})
    write_card: bool = field(default=False, metadata={
        "help": "add the scores to MODEL's README.md (model-index metadata and a results table); MODEL must be a "
                "folder"})
    keep_models: bool = field(default=False, metadata={"help": "keep each run's fine-tuned weights"})
    tasks: list[str] | None = field(default=None, metadata={"help": "run only these tasks of the suite"})
    max_train_samples: int | None = field(default=None, metadata={
        "help": "at most this many training rows per task (on top of the suite's own limits), for a quick look"})
    max_eval_samples: int | None = field(default=None, metadata={
        "help": "at most this many validation rows per task (on top of the suite's own limits)"})
    learning_rate: float | None = field(default=None, metadata={
        "help": "fine-tune every task at this learning rate instead of the suite's (one setting for every model "
                "compared)"})
    learning_rates: list[float] | None = field(default=None, metadata={
        "help": "a grid of fine-tuning rates: each task keeps the one that scores best on the selection split "
                "(carved from its training rows) and reports the held-out rows at that rate"})
    train_sizes: list[str] | None = field(default=None, metadata={
        "help": "label budgets, e.g. 200 1000 full: each size draws its training rows afresh per seed and trains "
                "for the same --max_steps"})
    max_steps: int | None = field(default=None, metadata={
        "help": "optimizer steps of every run, whatever its size (default: the suite's epochs over all the "
                "training rows)"})
    selection_rows: int | None = field(default=None, metadata={
        "help": "training rows set aside to choose the rate and checkpoint (default: 10%%, at most 1,000)"})
    selection_seeds: int | None = field(default=None, metadata={
        "help": "choose the rate with the first N seeds (the others run at the chosen rate only; default: all)"})
    baseline: bool = field(default=False, metadata={
        "help": "also fine-tune MODEL's architecture and tokenizer from random weights under the same protocol, "
                "and report the difference with a 95%% paired bootstrap interval"})
    preset: str = field(default="suite", metadata={
        "help": "suite: the suite's own settings; stable: a step budget, warm-up over 10%%, a grid of rates "
                "(1e-4, 3e-4, 1e-3) and the checkpoint best on the selection split"})
    reinit_pooler: bool = field(default=False, metadata={"help": "draw the pooler afresh before fine-tuning"})
    reinit_layers: int = field(default=0, metadata={"help": "draw the top N layers afresh before fine-tuning"})
    progress_bar: bool = field(default=True, metadata={"help": "show a progress bar over the runs"})

    def __post_init__(self):
        _check_seeds(self.seeds)
        for name in ("max_train_samples", "max_eval_samples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UsageError(f"--{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise UsageError(f"--learning_rate must be > 0, got {self.learning_rate}")


def _check_seeds(seeds: Sequence[int]) -> None:
    if not seeds:
        raise UsageError("--seeds needs at least one seed")
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {list(seeds)} repeats a seed")


def command_parser() -> CommandParser:
    """The ``hfbert evaluate`` parser (this module loads neither torch nor datasets until a suite runs)."""
    return CommandParser("hfbert evaluate", EvaluateArguments, description=(
        "Fine-tune MODEL on every task of a suite, once per seed, and report each task's score (mean and spread "
        "over the seeds) and their average: a table, results.json and results.png."))


def main(argv: Sequence[str] | None = None) -> int:
    """``hfbert evaluate``; exit status 2 for a bad setting or suite (one line, before any training), 1 for a run
    that failed (one line naming its log)."""
    args = command_parser().parse(argv)
    settings = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.name != "model"}
    settings["progress"] = settings.pop("progress_bar")
    names = [f.name for f in dataclasses.fields(Protocol) if f.name != "bootstrap_samples"]
    protocol = {name: settings.pop(name) for name in names}
    protocol["train_sizes"] = parse_sizes(protocol["train_sizes"] or [FULL])
    protocol["learning_rates"] = tuple(protocol["learning_rates"]) if protocol["learning_rates"] else None
    settings["protocol"] = Protocol(**protocol)
    return run_command("hfbert evaluate", lambda: _print(evaluate(args.model, **settings)), errors=(EvaluationError,))


def _print(summary: dict) -> int:
    print(protocol_table(summary) if "protocol" in summary else results_table(summary))
    print(f"results in {summary['output_dir']}")
    return 0


def evaluate(model: str, suite: str | Path | Suite, *, data_dir: str | Path | None = None,
             seeds: Sequence[int] = (1, 2, 3), output_dir: str | Path | None = None, resume: bool = False,
             write_card: bool = False, keep_models: bool = False, tasks: Sequence[str] | None = None,
             max_train_samples: int | None = None, max_eval_samples: int | None = None,
             learning_rate: float | None = None, progress: bool = True,
             protocol: Protocol | None = None) -> dict[str, Any]:
    """Run ``suite`` on ``model`` (see the module docstring) and return the summary written to ``results.json``.
    With a ``protocol`` (:class:`~hfbert.evaluation.protocol.Protocol`: a rate grid chosen on a selection split,
    label budgets, a random-weights baseline), the summary also holds its ``protocol`` section. Raises UsageError
    before any training for a bad suite, data or model, EvaluationError when a run fails."""
    seeds = list(seeds)
    _check_seeds(seeds)
    protocol = protocol or Protocol()
    if protocol.selection_seeds is not None and protocol.selection_seeds > len(seeds):
        raise UsageError(f"--selection_seeds {protocol.selection_seeds} is more than the {len(seeds)} seeds given")
    suite = _capped(check_settings(suite, data_dir, tasks), max_train_samples, max_eval_samples)
    if learning_rate is not None:
        suite = dataclasses.replace(suite, tasks=[dataclasses.replace(t, learning_rate=learning_rate)
                                                  for t in suite.tasks])
    if write_card and not Path(model).is_dir():
        raise UsageError(f"--write_card writes MODEL's README.md; {model} is not a folder")
    model_key = _model_fingerprint(model)
    name = Path(model).resolve().name if Path(model).is_dir() else str(model).replace("/", "--")
    out = Path(output_dir) if output_dir is not None else Path("evaluation") / f"{name}-{suite.name}"
    out.mkdir(parents=True, exist_ok=True)

    from tqdm.auto import tqdm

    if protocol.active:
        return _finish(_evaluate_protocol(model, suite, seeds, protocol, out, model_key, data_dir, resume,
                                          keep_models, progress), out, model, suite, write_card)
    runs: dict[tuple[str, int], dict] = {}
    files: dict[str, TaskFiles] = {}
    bar = tqdm(total=len(suite.tasks) * len(seeds), unit="run", desc="evaluate", disable=not progress)
    for task in suite.tasks:
        files[task.name] = write_task_files(task, suite, data_dir, out / "data" / task.name)
        data_key = data_fingerprint(task, suite, data_dir)
        for seed in seeds:
            bar.set_description(f"{task.name} seed {seed}")
            run_dir = out / "runs" / task.name / f"seed-{seed}"
            key = _run_key(task, seed, model_key, data_key)
            done = _finished(run_dir / RESULT_FILE, key, task) if resume else None
            runs[task.name, seed] = done or _run(task, seed, model, files[task.name], run_dir, key, keep_models)
            bar.update()
    bar.close()
    return _finish(summarize(suite, model, seeds, runs, files), out, model, suite, write_card)


def _finish(summary: dict, out: Path, model: str, suite: Suite, write_card: bool) -> dict:
    """Write ``results.json`` and the figures, and the card when asked."""
    summary["output_dir"] = str(out)
    from ..data.shards import write_atomically  # with the data builder (datasets): not for reading the settings

    write_atomically(str(out), RESULTS_FILE, json.dumps(summary, indent=1, ensure_ascii=False).encode("utf-8"))
    plot_results(summary, out / PLOT_FILE)
    if "protocol" in summary:
        plot_budgets(summary, out / BUDGETS_PLOT_FILE)
    if write_card:
        if "protocol" in summary and (out / BUDGETS_PLOT_FILE).is_file():  # the card shows it
            shutil.copyfile(out / BUDGETS_PLOT_FILE, Path(model) / BUDGETS_PLOT_FILE)
        summary["card"] = str(write_results_card(model, summary, suite))
    return summary


def _evaluate_protocol(model: str, suite: Suite, seeds: list[int], protocol: Protocol, out: Path, model_key: dict,
                       data_dir, resume: bool, keep_models: bool, progress: bool) -> dict:
    """Every task under ``protocol`` (see :mod:`~hfbert.evaluation.protocol`): for each arm (the model, and its
    random-weights baseline) and label budget, the rate grid on the first seeds, the rate chosen on the selection
    split, the other seeds at that rate; the held-out scores, the failed runs, and the difference to the baseline."""
    from tqdm.auto import tqdm

    arms = ARMS if protocol.baseline else ARMS[:1]
    chooser = seeds[:protocol.selection_seeds or len(seeds)]
    others = seeds[len(chooser):]
    grid_of = {t.name: protocol.rates or (t.learning_rate,) for t in suite.tasks}
    total = sum(len(arms) * len(protocol.train_sizes) * (len(grid_of[t.name]) * len(chooser) + len(others))
                for t in suite.tasks)
    bar = tqdm(total=total, unit="run", desc="evaluate", disable=not progress)
    report: dict[str, Any] = {}
    files: dict[str, TaskFiles] = {}
    headline: dict[tuple[str, int], dict] = {}
    for task in suite.tasks:
        files[task.name] = write_task_files(task, suite, data_dir, out / "data" / task.name)
        rows = write_protocol_files(files[task.name], protocol.selection_rows, task.split_seed,
                                    out / "data" / task.name / "protocol")
        data_key = {**data_fingerprint(task, suite, data_dir), "selection_rows": rows.selection_rows}
        steps = protocol.max_steps or max(1, math.ceil(task.epochs * rows.pool_rows / task.batch_size))
        held_out = held_out_rows(rows.held_out_file)
        floor = constant_score(task, held_out_rows(rows.pool_file), held_out)
        grid = grid_of[task.name]
        sizes: dict[str, Any] = {}
        for size in protocol.train_sizes:
            entry: dict[str, Any] = {"rows": rows.size(size)}
            results: dict[str, dict[tuple[float, int], dict]] = {}
            for arm in arms:
                def one(rate: float, seed: int) -> dict:
                    bar.set_description(f"{task.name} {arm} {size} lr {rate:g} seed {seed}")
                    train = budget_file(rows, size, seed, out / "data" / task.name / "protocol")
                    data = TaskFiles(train, rows.selection_file, rows.size(size), rows.selection_rows,
                                     files[task.name].source, files[task.name].labels)
                    run_task = _protocol_task(task, protocol, arm, rate, steps, rows.held_out_file)
                    run_dir = out / "runs" / task.name / arm / f"size-{size}" / f"lr-{rate:g}" / f"seed-{seed}"
                    key = _run_key(run_task, seed, model_key, {**data_key, "size": size})
                    done = _finished(run_dir / RESULT_FILE, key, run_task) if resume else None
                    result = done or _run(run_task, seed, model, data, run_dir, key, keep_models)
                    bar.update()
                    return {**result, "run_dir": str(run_dir)}

                runs = {(rate, seed): one(rate, seed) for rate in grid for seed in chooser}
                selection = {rate: [runs[rate, s]["metrics"][task.metric] for s in chooser] for rate in grid}
                rate = chosen_rate(selection, task.metric)
                runs.update({(rate, seed): one(rate, seed) for seed in others})
                results[arm] = {seed: runs[rate, seed] for seed in seeds}
                entry[arm] = {
                    "learning_rate": rate,
                    "selection": {f"{r:g}": statistics.fmean(v) for r, v in selection.items()},
                    "held_out": spread({s: _held_out(results[arm][s], task.metric) for s in seeds}, floor),
                }
            if protocol.baseline:
                entry["difference"] = bootstrap_difference(
                    {s: _held_out(results["model"][s], task.metric) for s in seeds},
                    {s: _held_out(results["baseline"][s], task.metric) for s in seeds},
                    rows=_row_scores(task, results, seeds, held_out), samples=protocol.bootstrap_samples)
            sizes[str(size)] = entry
            for seed in seeds:  # the headline: the model at the last size asked for
                headline[task.name, seed] = {"scores": {m: _held_out(results["model"][seed], m) for m in task.metrics},
                                             "seconds": sum(r["seconds"] for arm in results.values()
                                                            for r in arm.values()) / len(seeds)}
        report[task.name] = {"metric": task.metric, "floor": floor, "max_steps": steps,
                             "selection_rows": rows.selection_rows, "pool_rows": rows.pool_rows,
                             "held_out_rows": rows.held_out_rows, "learning_rates": list(grid), "sizes": sizes}
    bar.close()
    summary = summarize(suite, model, seeds, headline, files)
    summary["protocol"] = {"settings": protocol.settings(), "selection_seeds": chooser, "tasks": report}
    return summary


def _protocol_task(task: SuiteTask, protocol: Protocol, arm: str, rate: float, steps: int, held_out: Path):
    """The task as one protocol run trains it: the rate, the step budget, the held-out rows as the recipe's test
    file, the baseline's fresh weights, the preset's warm-up and best checkpoint."""
    training = {**task.training, "max_steps": steps, "test_file": str(held_out)}
    if arm == "baseline":
        training["from_scratch"] = True
    if protocol.reinit_pooler:
        training["reinit_pooler"] = True
    if protocol.reinit_layers:
        training["reinit_layers"] = protocol.reinit_layers
    preset = PRESETS[protocol.preset]
    if "evaluations" in preset:
        every = max(1, steps // preset["evaluations"])
        chooses_by = task.metric if task.kind.trainer_scores else "eval_loss"
        training.update({"warmup_steps": preset["warmup_steps"], "eval_strategy": "steps", "eval_steps": every,
                         "save_strategy": "steps", "save_steps": every, "save_total_limit": 1,
                         "load_best_model_at_end": True, "greater_is_better": not lower_is_better(chooses_by),
                         "metric_for_best_model": chooses_by.removeprefix("eval_")})
    return dataclasses.replace(task, learning_rate=rate, training=training)


def _held_out(result: dict, metric: str) -> float:
    """A run's score on the held-out rows (the recipe's test split) for the suite's ``eval_`` metric name."""
    return float(result["metrics"].get("test_" + metric.removeprefix("eval_"), math.nan))


def _row_scores(task: SuiteTask, results: dict, seeds: list[int], held_out: list[dict]):
    """Per-row predictions of both arms on the held-out rows, for the row-level bootstrap: (kind, model, baseline,
    gold), or None where the task's score is not accuracy or Pearson correlation (the seeds alone are resampled)."""
    kind = task.metric.removeprefix("eval_")
    if kind not in task.kind.row_scores:
        return None
    column = task.columns["label"]
    gold = [str(row[column]) if kind == "accuracy" else float(row[column]) for row in held_out]
    arms = []
    for arm in ARMS:
        by_seed = {}
        for seed in seeds:
            path = Path(results[arm][seed]["run_dir"]) / "test_predictions.jsonl"
            if not path.is_file():
                return None
            values = [json.loads(line)["prediction"] for line in path.read_text(encoding="utf-8").splitlines()]
            by_seed[seed] = [str(v) if kind == "accuracy" else float(v) for v in values]
            if len(by_seed[seed]) != len(gold):
                return None
        arms.append(by_seed)
    return kind, arms[0], arms[1], gold


def check_settings(suite: str | Path | Suite, data_dir: str | Path | None = None,
                   tasks: Sequence[str] | None = None) -> Suite:
    """Every check of an evaluation that needs no model: the suite file, each task's data, columns and metric
    (:func:`~hfbert.evaluation.suite_checks.check_suite`) and its recipe settings. Returns the suite (cut to
    ``tasks``); raises UsageError naming the task and the setting."""
    suite = check_suite(suite, data_dir, list(tasks) if tasks else None)
    for task in suite.tasks:
        _check_recipe_settings(task)
    return suite


def _capped(suite: Suite, max_train: int | None, max_eval: int | None) -> Suite:
    def cap(limit, extra):
        return extra if limit is None else (limit if extra is None else min(limit, extra))

    return dataclasses.replace(suite, tasks=[
        dataclasses.replace(t, max_train_samples=cap(t.max_train_samples, max_train),
                            max_eval_samples=cap(t.max_eval_samples, max_eval)) for t in suite.tasks])


def recipe_arguments(task: SuiteTask, model: str, data: TaskFiles, run_dir: Path, seed: int) -> tuple:
    """The typed arguments of one run of the task's recipe.

    Args:
        task: the suite task (its kind names the recipe and its data settings; ``training`` adds to them).
        model: the model to fine-tune.
        data: the rows the run reads.
        run_dir: the run's folder.
        seed: the fine-tuning seed.

    Returns:
        ``(ModelArguments, DataArguments, TrainingArguments)`` for the recipe's ``run``.

    Raises:
        UsageError: naming the task, for a ``training`` option the recipe does not have or a bad value.
    """
    from transformers import TrainingArguments

    from ..tasks.recipe import ModelArguments

    kind = task.kind
    values = {"model_name_or_path": str(model), "train_file": str(data.train_file),
              "validation_file": str(data.validation_file), "max_seq_length": task.max_length,
              **kind.recipe_settings(task.columns, task.max_length, data.labels),
              "output_dir": str(run_dir), "seed": seed, "num_train_epochs": task.epochs,
              "learning_rate": task.learning_rate, "per_device_train_batch_size": task.batch_size,
              "per_device_eval_batch_size": max(task.batch_size, 64), "save_strategy": "no", "report_to": "none",
              "disable_tqdm": True, "logging_strategy": "no", **task.training}
    try:
        return settings_from((ModelArguments, kind.recipe_module().DataArguments, TrainingArguments), values,
                             source=f"the {kind.recipe} recipe")
    except UsageError as err:
        raise UsageError(f"task {task.name!r}: a recipe setting does not parse ({err}); training: "
                         f"{task.training}") from None


def _check_recipe_settings(task: SuiteTask) -> None:
    """The task's recipe arguments build: a bad ``training`` option fails now, not after other tasks trained."""
    placeholder = TaskFiles(Path("train.jsonl"), Path("validation.jsonl"), 0, 0, "", ["O"] if task.kind.tags
                            else None)
    recipe_arguments(task, "model", placeholder, Path("unused"), 0)


def _model_fingerprint(model: str) -> dict[str, Any]:
    """The model a run fine-tunes, as a resumed evaluation compares it: a folder's config and weight files by
    size and time (a model retrained in place is another model), a Hub id by name. The model is looked up now, so
    a wrong name fails before any training."""
    from ..hub import HubDownloadError
    from ..model_source import locate

    try:
        locate(model)
    except (ValueError, HubDownloadError) as err:  # ModelSourceError, a silent Hub: one sentence naming the source
        raise UsageError(f"MODEL {model}: {err}") from None
    folder = Path(model)
    if not folder.is_dir():
        return {"hub": model}
    files = sorted(p for p in folder.iterdir() if p.is_file() and (
        p.suffix in (".json", ".safetensors", ".bin", ".txt") or p.name.startswith("bert_model.ckpt")))
    return {"folder": str(folder.resolve()),
            "files": {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in files if p.name != "README.md"}}


def _run_key(task: SuiteTask, seed: int, model_key: dict, data_key: dict) -> str:
    settings = {k: v for k, v in task.settings().items() if k not in ("reference", "reference_note", "dataset_name")}
    text = json.dumps([settings, seed, model_key, data_key], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _finished(path: Path, key: str, task: SuiteTask) -> dict | None:
    """The result of a run finished with the same settings, or None."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if result.get("key") != key or not all(m in result.get("scores", {}) for m in task.metrics):
        return None
    return result


def _run(task: SuiteTask, seed: int, model: str, data: TaskFiles, run_dir: Path, key: str,
         keep_models: bool) -> dict:
    """One fine-tuning run; its result is written last and whole."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RESULT_FILE).unlink(missing_ok=True)
    log = run_dir / "recipe.log"
    arguments = recipe_arguments(task, model, data, run_dir, seed)
    start = time.perf_counter()
    with log.open("w", encoding="utf-8") as stream, redirect_stdout(stream), redirect_stderr(stream):
        print("recipe arguments:", *arguments, sep="\n")
        try:
            metrics = task.kind.recipe_module().run(*arguments)
        except (Exception, SystemExit) as err:
            traceback.print_exc(file=stream)
            failed = err
        else:
            failed = None
    if failed is not None:
        message = " ".join(str(failed).split()) or type(failed).__name__
        raise EvaluationError(f"task {task.name!r}, seed {seed}: the {task.kind.recipe} run failed: {message} "
                              f"(log: {log})") from failed
    seconds = time.perf_counter() - start
    missing = [m for m in task.metrics if m not in metrics]
    if missing:
        reported = sorted(k for k in metrics if k.startswith("eval_"))
        raise EvaluationError(f"task {task.name!r}, seed {seed}: the run reported no {missing} (it reported "
                              f"{reported}; log: {log})")
    if not keep_models:
        for pattern in WEIGHT_PATTERNS:
            for file in run_dir.glob(pattern):
                file.unlink()
        for checkpoint in run_dir.glob("checkpoint-*"):  # the best-checkpoint preset's saves
            shutil.rmtree(checkpoint, ignore_errors=True)
    result = {"task": task.name, "seed": seed, "key": key, "scores": {m: float(metrics[m]) for m in task.metrics},
              "metrics": {k: v for k, v in metrics.items() if isinstance(v, (int, float))},
              "seconds": round(seconds, 1)}
    from ..data.shards import write_atomically

    write_atomically(str(run_dir), RESULT_FILE, json.dumps(result, indent=1).encode("utf-8"))
    return result


# ----------------------------------------------------------------------------------------------------------------
# After pretraining


# Set by torchrun/accelerate for the processes of a distributed run: the evaluation runs alone, in a process of
# its own, and must not try to join that group.
_DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                    "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK")


def evaluation_dir(config) -> Path:
    """Where ``hfbert pretrain --evaluate_suite`` writes the evaluation: beside the run's logs (``runs/``, which a
    push leaves out); the scores go into the exported card."""
    return Path(config.output_dir) / "runs" / "evaluation" / load_suite(config.evaluate_suite).name


def evaluate_exported(config) -> dict | None:
    """Run ``config.evaluate_suite`` on the folder a finished ``hfbert pretrain`` exported (``config.output_dir``),
    with ``config.evaluate_data_dir`` and ``config.evaluate_seeds``, resuming runs already finished, and add the
    scores to its card. Returns the summary (``results.json``), or None without an ``evaluate_suite``. Call it on
    the main process only: it runs in a process of its own, outside the training's process group and
    accelerator. Raises EvaluationError when a run fails."""
    if config.evaluate_suite is None:
        return None
    out = evaluation_dir(config)
    done = _evaluate_apart(config, config.output_dir, out, "--resume", "--write_card")
    if done.returncode != 0:
        raise EvaluationError(f"the evaluation of {config.output_dir} on suite {config.evaluate_suite} failed "
                              f"(exit {done.returncode}; its error is above); the model is exported. Continue it "
                              f"with: hfbert evaluate {config.output_dir} --suite {config.evaluate_suite} "
                              f"--output_dir {out} --resume --write_card")
    return json.loads((out / RESULTS_FILE).read_text(encoding="utf-8"))


def evaluate_during_training(config, model, tokenizer, step: int) -> dict[str, float]:
    """``config.evaluate_suite`` on the model as it is at ``step`` of a pretraining run (``--evaluate_suite_steps``):
    the weights and tokenizer saved under ``runs/downstream/step-N/``, fine-tuned there once per seed, then deleted;
    the results stay. Returns ``downstream_average`` and ``downstream_<task>`` (each task's first metric, the mean
    over the seeds). Call it on the main process only. Raises EvaluationError when a run fails."""
    folder = Path(config.output_dir) / "runs" / "downstream" / f"step-{step:08d}"
    snapshot = folder / "model"
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    try:
        done = _evaluate_apart(config, snapshot, folder / "evaluation", capture=True)
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        raise EvaluationError(f"the evaluation at step {step} on suite {config.evaluate_suite} failed (exit "
                              f"{done.returncode}): {lines[-1] if lines else 'no message'}")
    summary = json.loads((folder / "evaluation" / RESULTS_FILE).read_text(encoding="utf-8"))
    scores = {"downstream_average": summary["average"]["mean"]}
    for name, task in summary["tasks"].items():
        scores[f"downstream_{name}"] = task["scores"][task["metric"]]["mean"]
    return scores


def _evaluate_apart(config, model_dir, out: Path, *options: str, capture: bool = False):
    """``hfbert evaluate`` of ``config``'s suite in a process of its own, outside the training's process group."""
    command = [sys.executable, "-m", "hfbert.cli", "evaluate", str(model_dir), "--suite", str(config.evaluate_suite),
               "--output_dir", str(out), *options, "--seeds", *map(str, config.evaluate_seeds), "--progress_bar",
               str(not capture and (sys.stderr.isatty() if config.progress_bar is None else config.progress_bar)).lower()]
    if config.evaluate_data_dir is not None:
        command += ["--data_dir", str(config.evaluate_data_dir)]
    env = {k: v for k, v in os.environ.items() if k not in _DISTRIBUTED_ENV and not k.startswith(
        ("ACCELERATE_", "TORCHELASTIC_"))}
    return subprocess.run(command, env=env, check=False, capture_output=capture, text=True)
