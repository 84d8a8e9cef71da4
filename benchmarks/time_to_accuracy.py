"""Wall time to held-out MLM accuracy: ``hfbert pretrain`` against transformers' ``Trainer``.

Answered in benchmarks/results/time_to_accuracy.md.

Three runs train a model of the same size and vocabulary on the same examples and are scored on the same held-out
set (length 128, masks fixed once) every ``--eval_steps`` optimizer steps:

* ``a``: ``hfbert pretrain`` with the recipe of ``--config`` (``benchmarks/configs/time_to_accuracy.json``):
  HfBertForPreTraining in hfbert's loop, its length schedule, optimizer and precision;
* ``b``: transformers' ``BertForPreTraining`` trained by ``Trainer`` the way a transformers user sets it up: the
  length-128 examples with their ``next_sentence_label``, ``DataCollatorForLanguageModeling`` drawing the masks,
  AdamW with a linear schedule, the learning rate, warmup and steps of ``a`` and the batch of its length-128 phase,
  the model's default dropout;
* ``c``: transformers' ``BertForPreTraining`` inside hfbert's loop with ``a``'s recipe (the model's speed apart from
  the recipe's).

The runs are separate processes that take turns, ``--eval_steps`` steps each, so a noisy spell of the machine hits
all of them; each run's clock counts only its own training (data building, evaluation and waiting for its turn are
left out). A run stops when it reaches the top target, at its last step, or, for ``b`` and ``c``, once its clock
passes ``--patience`` times the time ``a`` needed for the top target (reported as "not reached within X s": it is
already slower than ``a`` by at least that factor). Writes ``time_to_accuracy.json`` (every point, the times to each
target and their ratios) and ``time_to_accuracy.png`` (the three curves against wall time) into ``--docs``.

    python benchmarks/time_to_accuracy.py [--config FILE.json] [--docs FOLDER] [--runs a,b,c]

Extra ``--key value`` pairs override the recipe (``hfbert pretrain`` settings, e.g. ``--max_steps 2000``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import datasets
import torch

from hfbert import HfBertConfig
from hfbert.arguments import UsageError
from hfbert.data import PreparedCorpus
from hfbert.pretrain import PretrainCallback, PretrainConfig, parse_args, pretrain, resolve_phases
from hfbert.pretrain.corpora import baselines as baselines_of
from hfbert.pretrain.corpora import corpus_collator, held_out_batches, prepare_in_output_dir

REPO = Path(__file__).resolve().parents[1]
EVAL_LENGTH = 128
TARGETS = (0.20, 0.30)
RUNS = {
    "a": "hfbert pretrain (HfBertForPreTraining, hfbert's loop and recipe)",
    "b": "transformers Trainer (BertForPreTraining, DataCollatorForLanguageModeling, length 128)",
    "c": "transformers BertForPreTraining in hfbert's loop and recipe",
}


# ----------------------------------------------------------------------------------------------------------------
# The shared examples


def prepare_examples(config, work: Path) -> dict[int, Path]:
    """One prepared folder per length of the schedule and for 128 (the held-out length), built once by the same
    code as ``hfbert pretrain`` (one tokenizer for all) and read by all three runs."""
    from accelerate import Accelerator

    lengths = [p.max_seq_length for p in resolve_phases(config)]
    lengths = list(dict.fromkeys([*lengths, EVAL_LENGTH]))
    return prepare_in_output_dir(replace(config, output_dir=str(work)), Accelerator(cpu=True), lengths)


def held_out_set(config, folder: Path) -> list[dict]:
    """The held-out set at 128 as the loop builds it: the validation rows with masks fixed once, so every run
    and every evaluation scores the same positions."""
    corpus = PreparedCorpus.open(folder)
    collator = corpus_collator(corpus, corpus.load_tokenizer())
    return held_out_batches(corpus, collator, config.max_eval_examples, config.eval_batch_size, config.seed)


@torch.no_grad()
def held_out_accuracy(model, batches: list[dict]) -> dict[str, float]:
    """MLM and NSP accuracy of any BERT pretraining model (full (B, T, V) logits), in fp32 and eval mode."""
    was_training = model.training
    model.eval()
    mlm_correct = mlm_total = nsp_correct = nsp_total = 0
    for batch in batches:
        out = model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                    attention_mask=batch["attention_mask"])
        supervised = batch["labels"] != -100
        mlm_correct += int((out.prediction_logits.argmax(-1)[supervised] == batch["labels"][supervised]).sum())
        mlm_total += int(supervised.sum())
        nsp_correct += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
        nsp_total += len(batch["next_sentence_label"])
    model.train(was_training)
    return {"eval_mlm_accuracy": mlm_correct / max(mlm_total, 1), "eval_nsp_accuracy": nsp_correct / max(nsp_total, 1)}


# ----------------------------------------------------------------------------------------------------------------
# One run (a worker process): trains, and at every evaluation reports a point and waits for its next turn


class _Pacer:
    """The run's clock (its own training only) and its turns: ``checkpoint`` stops the clock, evaluates, reports
    and waits for the coordinator's next "go"; ``stopped`` once the coordinator ended the run (target reached, last
    step, or out of time)."""

    def __init__(self, connection, batches: list[dict]):
        self.connection, self.batches = connection, batches
        self.seconds, self.resumed, self.stopped = 0.0, None, False

    def _wait(self) -> None:
        self.stopped = self.connection.recv() == "stop"
        self.resumed = time.monotonic()

    def start(self) -> None:
        self.connection.send({"ready": True})
        self._wait()

    def checkpoint(self, model, step: int) -> None:
        self.seconds += time.monotonic() - self.resumed
        metrics = held_out_accuracy(model, self.batches)
        self.connection.send({"step": step, "seconds": round(self.seconds, 2), **metrics})
        self._wait()

    def turn_ends(self, model, step: int, every: int) -> bool:
        """At the end of optimizer step ``step``: whether the run stops here (a turn ends every ``every`` steps)."""
        if not self.stopped and step % every == 0:
            self.checkpoint(model, step)
        return self.stopped


def _transformers_config(hf: HfBertConfig, *, recipe_dropout: bool):
    """transformers' BertConfig of the size of ``hf`` (the recipe's preset and overrides, as hfbert builds it)."""
    from transformers import BertConfig

    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "pad_token_id", "initializer_range")
    values = {k: getattr(hf, k) for k in keys}
    if recipe_dropout:
        values.update(hidden_dropout_prob=hf.hidden_dropout_prob,
                      attention_probs_dropout_prob=hf.attention_probs_dropout_prob)
    return BertConfig(hidden_act="gelu", **values)


def _bert_in_hfbert_loop(model_config: HfBertConfig):
    """transformers' BertForPreTraining, with outputs in the shape hfbert's loop reads (logits and MLM loss at the
    supervised positions, the MLM and NSP losses apart)."""
    import torch.nn.functional as F
    from transformers import BertForPreTraining

    class BertInHfbertLoop(BertForPreTraining):
        def forward(self, labels=None, next_sentence_label=None, num_items_in_batch=None, **batch):
            out = super().forward(labels=labels, next_sentence_label=next_sentence_label, **batch)
            if labels is not None:
                supervised = labels != -100
                logits = out.prediction_logits[supervised]  # (M, V), row-major as hfbert's
                # The losses the loop backpropagates, normalised as hfbert's are: the MLM token sum over
                # num_items_in_batch (the step's supervised count) when given, NSP the mean over pairs.
                total = F.cross_entropy(logits.float(), labels[supervised], reduction="sum")
                out.mlm_loss = total / (num_items_in_batch if num_items_in_batch is not None
                                        else max(int(supervised.sum()), 1))
                out.nsp_loss = F.cross_entropy(out.seq_relationship_logits.float(), next_sentence_label)
                out.prediction_logits = logits
            return out

    return BertInHfbertLoop(_transformers_config(model_config, recipe_dropout=True))  # seeded by the job


class _Paced(PretrainCallback):
    """The turns of ``a`` and ``c``, through ``pretrain``'s callbacks: the clock starts with the first step, every
    ``every`` steps the common held-out score is taken and the turn passes, and the run stops when the coordinator
    says so (as run ``b``'s TrainerCallback does). The job's own evaluations are left to the end: its clock would
    count them, and the pacer's held-out score, off the clock, is the one compared."""

    def __init__(self, pacer: _Pacer, every: int):
        self.pacer, self.every = pacer, every

    def on_train_begin(self, step, model, **kwargs):
        self.pacer.start()

    def on_step_end(self, step, model, control, **kwargs):
        control.should_evaluate = False
        control.should_stop = self.pacer.turn_ends(model, step, self.every)


def _run_hfbert_loop(run: str, config, folders: dict[int, Path], pacer: _Pacer) -> None:
    """``a`` and ``c``: ``pretrain(config)`` on the prepared folders, paced at every ``eval_steps`` steps; for ``c``,
    transformers' model through ``model_init``."""
    lengths = [p.max_seq_length for p in resolve_phases(config)]
    job = replace(config, prepared=[str(folders[length]) for length in dict.fromkeys(lengths)],
                  input=None, dataset=None, tokenizer=None)
    pretrain(job, callbacks=[_Paced(pacer, config.eval_steps)],
             model_init=_bert_in_hfbert_loop if run == "c" else None)


def _run_trainer(config, folders: dict[int, Path], work: Path, pacer: _Pacer) -> None:
    """``b``: BertForPreTraining + Trainer + DataCollatorForLanguageModeling on the length-128 Parquet shards."""
    from transformers import (BertForPreTraining, DataCollatorForLanguageModeling, Trainer, TrainerCallback,
                              TrainingArguments)

    corpus = PreparedCorpus.open(folders[EVAL_LENGTH])
    tokenizer = corpus.load_tokenizer()
    shards = sorted(str(path) for path in (corpus.path / "data").glob("train-*.parquet"))
    # As a transformers user reads Parquet: datasets (memory-mapped Arrow), the columns the model takes.
    train = datasets.Dataset.from_parquet(shards, cache_dir=str(work / "cache"))
    train = train.select_columns(["input_ids", "token_type_ids", "next_sentence_label"])
    phases = resolve_phases(config)
    batch_size = next((p.batch_size for p in phases if p.max_seq_length == EVAL_LENGTH), phases[-1].batch_size)
    torch.manual_seed(config.seed)
    recipe = HfBertConfig.from_preset(config.preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                      **config.model)
    model = BertForPreTraining(_transformers_config(recipe, recipe_dropout=False))

    class Pace(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            pacer.start()

        def on_step_end(self, args, state, control, **kwargs):
            control.should_training_stop = pacer.turn_ends(kwargs["model"], state.global_step, config.eval_steps)

    args = TrainingArguments(
        output_dir=str(work / "trainer"), per_device_train_batch_size=batch_size, learning_rate=config.learning_rate,
        weight_decay=config.weight_decay, warmup_steps=config.warmup_steps or 0, max_steps=config.max_steps,
        lr_scheduler_type="linear", optim="adamw_torch", bf16=config.mixed_precision == "bf16", use_cpu=True,
        seed=config.seed, logging_steps=config.eval_steps, save_strategy="no", report_to=[], disable_tqdm=True,
        dataloader_num_workers=0)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=config.masked_lm_prob)
    Trainer(model=model, args=args, train_dataset=train, data_collator=collator,
            callbacks=[Pace()]).train()


def _worker(run: str, config_values: dict, folders: dict[int, str], work: str, connection) -> None:
    config = PretrainConfig.from_dict(config_values)
    folders = {int(length): Path(folder) for length, folder in folders.items()}
    pacer = _Pacer(connection, held_out_set(config, folders[EVAL_LENGTH]))
    if run == "b":
        _run_trainer(config, folders, Path(work) / run, pacer)
    else:
        _run_hfbert_loop(run, replace(config, output_dir=str(Path(work) / run)), folders, pacer)
    connection.send({"finished": True})


# ----------------------------------------------------------------------------------------------------------------
# The coordinator: turns, stopping rules, results


def _first_reaching(points: list[dict], target: float) -> dict | None:
    return next((p for p in points if p["eval_mlm_accuracy"] >= target), None)


def race(config, folders: dict[int, Path], work: Path, runs: list[str], patience: float,
         report=lambda results: None) -> dict[str, dict]:
    """Start one process per run, then give them turns of ``eval_steps`` steps until every run has stopped;
    ``report(results)`` after every point (the files are written as the runs go, so a stopped race leaves its
    curves)."""
    context = multiprocessing.get_context("spawn")  # fresh interpreters: no state shared with the coordinator
    connections, processes = {}, {}
    for run in runs:
        ours, theirs = context.Pipe()
        processes[run] = context.Process(target=_worker, args=(run, config.to_dict(), {k: str(v) for k, v in folders.items()}, str(work), theirs),
                                         name=f"time-to-accuracy-{run}")
        processes[run].start()
        theirs.close()  # the child holds its end now: a run that dies makes recv() raise instead of waiting forever
        connections[run] = ours

    def receive(run: str):
        try:
            return connections[run].recv()
        except EOFError:
            processes[run].join()
            raise RuntimeError(f"run {run} died (exit code {processes[run].exitcode}); its traceback is above") from None

    for run in runs:
        if not receive(run).get("ready"):
            raise RuntimeError(f"run {run} did not start")
    results = {run: {"points": [], "stopped_by": None} for run in runs}
    try:
        _take_turns(config, runs, connections, processes, receive, results, patience, report)
    finally:  # a run that failed must not leave the others waiting for their next turn
        for process in processes.values():
            if process.is_alive():
                process.terminate()
                process.join()
    return results


def _take_turns(config, runs, connections, processes, receive, results, patience, report) -> None:
    top = max(TARGETS)
    active = list(runs)
    while active:
        for run in list(active):
            connections[run].send("go")
            point = receive(run)
            if "step" not in point:
                raise RuntimeError(f"run {run} ended before its last step")
            point["load_average"] = round(os.getloadavg()[0], 2)
            results[run]["points"].append(point)
            print(f"{run} step {point['step']:>6}  {point['seconds']:8.1f} s  held-out MLM accuracy "
                  f"{point['eval_mlm_accuracy']:.4f}", flush=True)
            reference = _reference_seconds(results.get("a"), top)
            if point["eval_mlm_accuracy"] >= top:
                results[run]["stopped_by"] = "target"
            elif point["step"] >= config.max_steps:
                results[run]["stopped_by"] = "max_steps"
            elif run != "a" and reference is not None and point["seconds"] > patience * reference:
                results[run]["stopped_by"] = "patience"
            if results[run]["stopped_by"]:
                connections[run].send("stop")
                receive(run)  # "finished"
                processes[run].join()
                active.remove(run)
            report(results)


def _reference_seconds(a: dict | None, top: float) -> float | None:
    """``a``'s time to the top target, or its whole time when it stopped without reaching it; None while running."""
    if a is None:
        return None
    reached = _first_reaching(a["points"], top)
    if reached:
        return reached["seconds"]
    return a["points"][-1]["seconds"] if a["stopped_by"] else None


def summarize(results: dict[str, dict], patience: float) -> dict:
    table = {}
    for run, result in results.items():
        row = {}
        for target in TARGETS:
            reached = _first_reaching(result["points"], target)
            row[f"{target:.2f}"] = ({"seconds": reached["seconds"], "step": reached["step"]} if reached else
                                    {"seconds": None, "not_reached_within_seconds":
                                     result["points"][-1]["seconds"] if result["points"] else 0.0})
        table[run] = row
    ratios = {}
    for run in results:
        if run == "a" or "a" not in results:
            continue
        for target in TARGETS:
            mine, theirs = table["a"][f"{target:.2f}"], table[run][f"{target:.2f}"]
            key = f"a_over_{run}_at_{target:.2f}"
            if mine["seconds"] is not None and theirs["seconds"] is not None:
                ratios[key] = round(mine["seconds"] / theirs["seconds"], 3)
            elif mine["seconds"] is not None and theirs["not_reached_within_seconds"] > 0:
                # An upper bound: the other run had not got there when it stopped (or so far).
                ratios[key] = f"< {mine['seconds'] / theirs['not_reached_within_seconds']:.3f}"
            else:
                ratios[key] = None
    return {"time_to_accuracy": table, "ratios": ratios, "patience": patience}


def plot(results: dict[str, dict], baseline: float, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.5, 4.5), layout="constrained")
    axes = figure.subplots()
    for run, result in results.items():
        seconds = [0.0] + [p["seconds"] for p in result["points"]]
        accuracy = [0.0] + [p["eval_mlm_accuracy"] for p in result["points"]]
        axes.plot([s / 60 for s in seconds], accuracy, marker=".", label=f"({run}) {RUNS[run]}")
    for target in TARGETS:
        axes.axhline(target, color="grey", linestyle="--", linewidth=0.8)
    axes.axhline(baseline, color="grey", linestyle=":", label=f"most-frequent-token baseline {baseline:.3f}")
    axes.set(xlabel="training minutes (own compute only)", ylabel=f"held-out MLM accuracy (length {EVAL_LENGTH})",
             ylim=(0, max(0.45, max(max(p["eval_mlm_accuracy"] for p in r["points"]) for r in results.values())
                                 + 0.05)),
             title="Time to accuracy: the same model size, vocabulary and examples")
    axes.legend(loc="upper left", fontsize=7)
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "benchmarks" / "configs" / "time_to_accuracy.json"))
    parser.add_argument("--docs", default=str(REPO / "benchmarks" / "results"))
    parser.add_argument("--work", default="out/time-to-accuracy", help="folder for the shared examples and runs")
    parser.add_argument("--runs", default="a,b,c", help="which runs, comma-separated (a first when given)")
    parser.add_argument("--patience", type=float, default=2.5,
                        help="stop b and c once their clock passes this many times a's time to the top target")
    args, rest = parser.parse_known_args(argv)
    runs = [r for r in args.runs.split(",") if r]
    if not runs or set(runs) - set(RUNS) or len(set(runs)) != len(runs):
        parser.error(f"--runs takes distinct names from {sorted(RUNS)}, got {args.runs!r}")
    runs.sort()
    try:
        recipe = parse_args(["--config", args.config, *rest])
    except UsageError as err:
        parser.error(str(err))
    config = replace(recipe, max_time_minutes=None, progress_bar=False, report_to=["jsonl"],
                     overwrite_output_dir=True, output_dir=str(Path(args.work) / "run"))
    if config.max_steps % config.eval_steps:
        parser.error(f"max_steps ({config.max_steps}) must be a multiple of eval_steps ({config.eval_steps})")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    folders = prepare_examples(config, work)
    held_out = held_out_set(config, folders[EVAL_LENGTH])
    docs = Path(args.docs)
    docs.mkdir(parents=True, exist_ok=True)
    baselines = baselines_of(held_out)
    command = " ".join(["python", "benchmarks/time_to_accuracy.py", *(sys.argv[1:] if argv is None else argv)])

    def write(results: dict[str, dict]) -> dict:
        summary = {
            "command": command,
            "finished": all(r["stopped_by"] for r in results.values()),
            "recipe": config.to_dict(),
            "phases": [vars(p) for p in resolve_phases(config)],
            "runs": {run: RUNS[run] for run in runs},
            "eval_max_seq_length": EVAL_LENGTH,
            "targets": list(TARGETS),
            "prepared": {str(length): str(folder) for length, folder in folders.items()},
            "held_out": {"examples": sum(len(b["input_ids"]) for b in held_out), **baselines},
            **summarize(results, args.patience),
            "curves": results,
            "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                        "platform": platform.platform(), "load_average_before": [round(x, 2) for x in load_before],
                        "load_average_now": [round(x, 2) for x in os.getloadavg()]},
        }
        (docs / "time_to_accuracy.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        if any(r["points"] for r in results.values()):
            plot({k: r for k, r in results.items() if r["points"]}, baselines["eval_mlm_baseline_most_frequent_token"],
                 docs / "time_to_accuracy.png")
        return summary

    summary = write(race(config, folders, work, runs, args.patience, report=write))
    print(json.dumps({k: summary[k] for k in ("time_to_accuracy", "ratios")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
