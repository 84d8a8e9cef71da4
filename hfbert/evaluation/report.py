"""What an evaluation reports: per task the mean and spread of its scores over the seeds, one average over the
tasks, as a Markdown table, a figure, and the Hub's ``model-index`` in a model card."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from .suites import Suite

__all__ = ["METRIC_TYPES", "eval_results", "plot_budgets", "plot_results", "protocol_table", "results_table",
           "summarize", "write_results_card"]

# Recipe score -> the metric id the Hub's model-index uses (the `evaluate` metric names).
METRIC_TYPES = {"eval_accuracy": "accuracy", "eval_f1": "f1", "eval_mcc": "matthews_correlation",
                "eval_pearson": "pearsonr", "eval_spearman": "spearmanr", "eval_mse": "mse", "eval_precision":
                "precision", "eval_recall": "recall", "eval_loss": "loss"}


def _spread(values: Mapping[int, float]) -> dict[str, Any]:
    """Mean, sample standard deviation (n - 1; 0 for one seed) and the values by seed."""
    numbers = list(values.values())
    finite = all(math.isfinite(v) for v in numbers)
    return {"mean": statistics.fmean(numbers) if finite else math.nan,
            "std": (statistics.stdev(numbers) if len(numbers) > 1 else 0.0) if finite else math.nan,
            "values": {str(seed): value for seed, value in values.items()}}


def summarize(suite: Suite, model: str, seeds: Sequence[int], runs: Mapping[tuple[str, int], dict],
              files: Mapping[str, Any]) -> dict[str, Any]:
    """``results.json``: ``runs`` maps (task, seed) to a run's result (its ``scores``, ``seconds``)."""
    tasks = {}
    for task in suite.tasks:
        data = files[task.name]
        tasks[task.name] = {
            "type": task.type, "metric": task.metric, "data": data.source, "train_rows": data.train_rows,
            "validation_rows": data.validation_rows, "learning_rate": task.learning_rate, "epochs": task.epochs,
            "scores": {metric: _spread({s: runs[task.name, s]["scores"][metric] for s in seeds})
                       for metric in task.metrics},
            "reference": task.reference, "seconds": round(sum(runs[task.name, s]["seconds"] for s in seeds), 1),
        }
    by_seed = {s: statistics.fmean(runs[t.name, s]["scores"][t.metric] for t in suite.tasks) for s in seeds}
    references = [t.reference for t in suite.tasks]
    return {
        "model": model, "suite": suite.name, "suite_file": str(suite.path), "seeds": list(seeds), "tasks": tasks,
        "average": {"of": "each task's first metric", **_spread(by_seed)},
        "reference": suite.reference,
        "reference_average": statistics.fmean(references) if all(r is not None for r in references) else None,
        "train_seconds": round(sum(r["seconds"] for r in runs.values()), 1),
    }


def _number(value: float | None) -> str:
    return "-" if value is None else ("nan" if not math.isfinite(value) else f"{value:.4f}")


def results_table(summary: Mapping[str, Any]) -> str:
    """The summary as a Markdown table: a row per task and metric, then the average."""
    seeds = ", ".join(map(str, summary["seeds"]))
    rows = [f"| task | metric | mean | std | seeds {seeds} | reference |", "|---|---|---|---|---|---|"]
    for name, task in summary["tasks"].items():
        for number, (metric, score) in enumerate(task["scores"].items()):
            values = ", ".join(_number(v) for v in score["values"].values())
            reference = _number(task["reference"]) if number == 0 else ""
            rows.append(f"| {name if number == 0 else ''} | {metric} | {_number(score['mean'])} | "
                        f"{_number(score['std'])} | {values} | {reference} |")
    average = summary["average"]
    rows.append(f"| **average** | first metric of each task | {_number(average['mean'])} | {_number(average['std'])} "
                f"| {', '.join(_number(v) for v in average['values'].values())} | "
                f"{_number(summary.get('reference_average'))} |")
    return "\n".join(rows)


def _held_out_cell(arm: Mapping[str, Any]) -> str:
    score = arm["held_out"]
    failed = "" if score["failed"] is None else f", {score['failed']}/{len(score['values'])} failed"
    return (f"{_number(score['mean'])} ± {_number(score['std'])} (median {_number(score['median'])}{failed}; "
            f"lr {arm['learning_rate']:g})")


def protocol_table(summary: Mapping[str, Any]) -> str:
    """The protocol's results as a Markdown table: a row per task and label budget, the model's held-out score
    (mean ± sd over the seeds, median, failed runs, chosen rate), the baseline's, and the difference with its
    interval."""
    protocol = summary["protocol"]
    baseline = protocol["settings"]["baseline"]
    head = "| task | metric | labelled rows | model | " + ("random weights | difference (95% CI) |" if baseline else "")
    rows = [head, "|---|---|---|---|" + ("---|---|" if baseline else "")]
    for name, task in protocol["tasks"].items():
        for size, entry in task["sizes"].items():
            cells = [name, task["metric"].removeprefix("eval_"), f"{entry['rows']:,}", _held_out_cell(entry["model"])]
            if baseline:
                d = entry["difference"]
                cells += [_held_out_cell(entry["baseline"]),
                          f"{d['difference']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]"]
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot_budgets(summary: Mapping[str, Any], path: Path) -> Path | None:
    """The protocol's held-out score against the labelled rows, one panel per task: the model and, beside it, the
    random-weights baseline (mean over the seeds, the spread as error bars, each seed as a dot)."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    tasks = summary["protocol"]["tasks"]
    figure = Figure(figsize=(4.2 * len(tasks), 3.6), layout="constrained")
    panels = figure.subplots(1, len(tasks), squeeze=False)[0]
    for axes, (name, task) in zip(panels, tasks.items()):
        entries = list(task["sizes"].values())
        xs = [e["rows"] for e in entries]
        for arm, colour, label in (("model", "tab:blue", Path(summary["model"]).name),
                                   ("baseline", "tab:grey", "random weights")):
            if arm not in entries[0]:
                continue
            means = [e[arm]["held_out"]["mean"] for e in entries]
            stds = [e[arm]["held_out"]["std"] for e in entries]
            axes.errorbar(xs, means, yerr=stds, marker="o", capsize=3, color=colour, label=label)
            for x, e in zip(xs, entries):
                values = list(e[arm]["held_out"]["values"].values())
                axes.scatter([x] * len(values), values, s=8, color=colour, alpha=0.5)
        if task["floor"] is not None:
            axes.axhline(task["floor"], linestyle=":", color="tab:red", label="constant predictor")
        if len(set(xs)) > 1:
            axes.set_xscale("log")
        axes.set(xlabel="labelled training rows", ylabel=task["metric"].removeprefix("eval_") + " (held out)",
                 title=f"{name} ({task['max_steps']} steps per run)")
        axes.legend(fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def plot_results(summary: Mapping[str, Any], path: Path) -> Path | None:
    """Each task's first metric: the mean over seeds (bar), its spread (error bar), each seed (dots), the
    reference (cross); the average as a line. None when matplotlib is not installed."""
    try:
        from matplotlib.figure import Figure  # the object API needs no global backend
    except ImportError:
        return None
    names = list(summary["tasks"])
    figure = Figure(figsize=(max(5.0, 1.1 * len(names) + 2), 4), layout="constrained")
    axes = figure.subplots()
    for x, name in enumerate(names):
        task = summary["tasks"][name]
        score = task["scores"][task["metric"]]
        axes.bar(x, score["mean"], yerr=score["std"], capsize=4, color="tab:blue", alpha=0.6,
                 label="mean over seeds (std)" if x == 0 else None)
        values = list(score["values"].values())
        axes.scatter([x] * len(values), values, color="black", s=12, zorder=3, label="one seed" if x == 0 else None)
        if task["reference"] is not None:
            axes.scatter([x], [task["reference"]], marker="x", color="tab:red", s=40, zorder=3,
                         label="reference" if not any(summary["tasks"][n]["reference"] is not None
                                                      for n in names[:x]) else None)
    axes.axhline(summary["average"]["mean"], linestyle="--", color="grey", label="average")
    axes.set_xticks(range(len(names)), [f"{n}\n{summary['tasks'][n]['metric'].removeprefix('eval_')}"
                                        for n in names])
    axes.set(ylabel="score", title=f"{Path(summary['model']).name} on the {summary['suite']} suite "
                                   f"({len(summary['seeds'])} seeds)")
    axes.legend(fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def eval_results(summary: Mapping[str, Any], suite: Suite) -> list[EvalResult]:
    """The summary as the Hub's ``EvalResult``s: one per task and metric, the mean over the seeds."""
    results = []
    n = len(summary["seeds"])
    for task in suite.tasks:
        scores = summary["tasks"][task.name]["scores"]
        dataset = task.dataset or Path(task.file or task.train_file).stem  # an id: the Hub's, or the file's name
        for metric in task.metrics:
            score = scores[metric]
            results.append(EvalResult(
                task_type=task.kind.hub_task, task_name=task.name, dataset_type=dataset,
                dataset_name=task.dataset_name or dataset, dataset_config=task.config,
                dataset_split=task.validation_split if task.dataset else "validation",
                metric_type=METRIC_TYPES.get(metric, metric.removeprefix("eval_")),
                metric_value=round(score["mean"], 4),
                metric_name=f"{metric.removeprefix('eval_')} (mean of {n} seeds, std {score['std']:.4f})",
            ))
    return results


def _block(suite_name: str) -> tuple[str, str]:
    return f"<!-- hfbert evaluate: {suite_name} -->", f"<!-- end of hfbert evaluate: {suite_name} -->"


def write_results_card(model_dir: str | Path, summary: Mapping[str, Any], suite: Suite) -> Path:
    """Add the scores to ``model_dir/README.md``: the header's ``model-index`` (earlier results of these tasks
    replaced, others kept) and a results section in the text (replaced when the suite ran before). The rest of
    the card is kept; a folder without a card gets a short one."""
    path = Path(model_dir) / "README.md"
    card = ModelCard.load(path) if path.is_file() else ModelCard(f"---\n---\n\n# {Path(model_dir).resolve().name}\n")
    data = card.data.to_dict()
    data.pop("model-index", None)
    mine = eval_results(summary, suite)
    ours = {(r.task_name, r.dataset_type, r.dataset_config) for r in mine}
    kept = [r for r in (card.data.eval_results or []) if (r.task_name, r.dataset_type, r.dataset_config) not in ours]
    model_name = card.data.model_name or Path(model_dir).resolve().name
    new_data = ModelCardData(**{**data, "model_name": model_name, "eval_results": kept + mine})
    begin, end = _block(suite.name)
    if "protocol" in summary:
        section = (f"{begin}\n## Downstream evaluation: the `{suite.name}` suite\n\n"
                   f"Fine-tuned with `hfbert evaluate` on each task with {len(summary['seeds'])} seeds, the learning "
                   f"rate chosen on a selection split carved from the training rows; scores on the held-out rows "
                   f"(mean ± standard deviation over the seeds, median, runs at or below a constant predictor)."
                   f"\n\n{protocol_table(summary)}\n\n![score against labelled rows](label_budgets.png)\n")
    else:
        section = (f"{begin}\n## Downstream evaluation: the `{suite.name}` suite\n\n"
                   f"Fine-tuned with `hfbert evaluate` on each task with {len(summary['seeds'])} seeds; scores on "
                   f"the validation rows, mean and standard deviation over the seeds.\n\n{results_table(summary)}\n")
    if summary.get("reference"):
        section += f"\nReference: {summary['reference']}\n"
    section += f"{end}"
    text = card.text
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), flags=re.DOTALL)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section + "\n"
    ModelCard(f"---\n{new_data.to_yaml()}\n---\n{text}").save(path)
    return path
