"""Fine-tune BERT for extractive question answering (SQuAD v1.1 / v2.0 JSON, or flat JSON/JSONL rows).

    python -m hfbert.recipes.finetune_qa --model_name_or_path DIR --train_file train-v1.1.json \
        --validation_file dev-v1.1.json --output_dir out [--version_2_with_negative]

Contexts are split into windows of ``--max_seq_length`` tokens sharing ``--doc_stride`` tokens; answers
are decoded over context tokens only (end >= start, ``--max_answer_length``) and merged across windows by
maximum context. With ``--version_2_with_negative`` the null threshold is searched on the validation set
and reported next to the threshold-0 scores. Answers whose text is not at their ``answer_start`` are
moved to the nearest occurrence or dropped from training, and counted in the results and the card.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from datasets import Dataset
from transformers import TrainingArguments, default_data_collator, set_seed

from ..tasks import (
    CardKeepingTrainer,
    best_null_threshold,
    check_answer_offsets,
    count_windows,
    load_qa_file,
    postprocess_qa_predictions,
    prepare_qa_features,
    squad_evaluate,
)
from ..settings import setting
from ..tasks.recipe import ModelArguments, finish_run, note, parse_args


@dataclass
class DataArguments:
    train_file: str | None = setting(None, "SQuAD JSON, or JSON/JSONL rows (id, question, context, answers)")
    validation_file: str | None = setting(None, "evaluation data, in the format of --train_file")
    version_2_with_negative: bool = setting(False, "SQuAD 2.0: questions may have no answer")
    max_seq_length: int = setting(384, "tokens per window (question + context)")
    doc_stride: int = setting(128, "context tokens shared by consecutive windows")
    max_query_length: int = setting(64, "question tokens kept")
    max_answer_length: int = setting(30, "longest answer span decoded, in tokens")
    n_best_size: int = setting(20, "start and end candidates per window")
    max_train_samples: int | None = setting(None, "use only the first N training questions")
    max_eval_samples: int | None = setting(None, "use only the first N evaluation questions")
    language: str | None = setting(None, "language code for the model card (e.g. zh)")


def main(argv=None) -> dict:
    """The recipe from the command line (or ``argv``): its options parsed into the arguments of :func:`run`."""
    return run(*parse_args((ModelArguments, DataArguments, TrainingArguments), argv))


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune for extractive question answering, then evaluate and save the run's folder
    (``training_args.output_dir``).

    Args:
        model_args: the model to fine-tune.
        data_args: the data and how it is read.
        training_args: transformers' ``Trainer`` settings.

    Returns:
        The run's metrics (``train_*``, ``eval_*``, ``test_*``), as written to ``all_results.json``.
    """
    set_seed(training_args.seed)
    if data_args.train_file is None and data_args.validation_file is None:
        raise ValueError("give --train_file and/or --validation_file")
    tokenizer, model = model_args.load("question-answering")
    window = {"tokenizer": tokenizer, "max_length": data_args.max_seq_length, "doc_stride": data_args.doc_stride,
              "max_query_length": data_args.max_query_length}
    notes: list[str] = []
    train_features = None
    if data_args.train_file:
        train = load_qa_file(data_args.train_file)[: data_args.max_train_samples]
        train, check = check_answer_offsets(train)
        if check.relocated or check.unfound:
            note(notes, "train: " + check.summary())
        train_ds = Dataset.from_list(train)
        train_features = train_ds.map(prepare_qa_features, batched=True, remove_columns=train_ds.column_names,
                                      fn_kwargs={**window, "training": True}, desc="train windows")
        _note_windows(notes, "train", train_features["example_id"], data_args.max_seq_length)
        train_features = train_features.remove_columns(["example_id", "offset_mapping", "max_context"])

    trainer = CardKeepingTrainer(model=model, args=training_args, train_dataset=train_features,
                                 processing_class=tokenizer, data_collator=default_data_collator)
    metrics: dict = {}
    if train_features is not None:
        metrics.update(trainer.train().metrics)
    if data_args.validation_file:
        metrics.update(_evaluate(trainer, data_args, window, notes))
    finish_run(
        trainer, tokenizer, metrics, task="question-answering", recipe="finetune_qa",
        pipeline_task="question-answering", model_args=model_args, notes=notes,
        max_length=data_args.max_seq_length, language=data_args.language,
        data_description={"train": str(data_args.train_file), "eval": str(data_args.validation_file)},
    )
    return metrics


def _note_windows(notes, split, example_ids, max_length):
    counts = count_windows(example_ids)
    if counts["windowed_examples"]:
        note(notes, f"{split}: {counts['windowed_examples']} of {counts['examples']} questions have contexts longer "
                    f"than one {max_length}-token window; {counts['windows']} windows in all (windowed, not cut)")


def _evaluate(trainer, data_args, window, notes) -> dict:
    records = load_qa_file(data_args.validation_file)[: data_args.max_eval_samples]
    _, check = check_answer_offsets(records)  # scoring uses the texts; offsets only matter for training
    if check.relocated or check.unfound:
        note(notes, "validation: " + check.summary())
    eval_ds = Dataset.from_list(records)
    features = eval_ds.map(prepare_qa_features, batched=True, remove_columns=eval_ds.column_names,
                           fn_kwargs=window, desc="validation windows")
    _note_windows(notes, "validation", features["example_id"], data_args.max_seq_length)
    inputs = features.remove_columns(["example_id", "offset_mapping", "max_context"])
    output = trainer.predict(inputs, metric_key_prefix="eval")
    start_logits, end_logits = output.predictions[:2]
    windows = features.select_columns(["example_id", "offset_mapping", "max_context"]).to_list()
    decoded = postprocess_qa_predictions(
        records, windows, start_logits, end_logits, n_best_size=data_args.n_best_size,
        max_answer_length=data_args.max_answer_length, version_2_with_negative=data_args.version_2_with_negative,
    )
    references = {r["id"]: r["answers"]["text"] for r in records}
    metrics = {**output.metrics, **{f"eval_{k}": v for k, v in squad_evaluate(decoded.predictions, references).items()}}
    predictions = decoded.predictions
    if data_args.version_2_with_negative:
        threshold, _ = best_null_threshold(decoded.null_score_diffs, decoded.best_answers, references)
        predictions = decoded.with_threshold(threshold)
        best = squad_evaluate(predictions, references)
        metrics.update({"eval_best_threshold": threshold, "eval_best_exact_match": best["exact_match"],
                        "eval_best_f1": best["f1"]})
    out = Path(trainer.args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval_predictions.json").write_text(json.dumps(predictions, ensure_ascii=False, indent=1))
    (out / "eval_nbest_predictions.json").write_text(
        json.dumps({q: c[:5] for q, c in decoded.nbest.items()}, ensure_ascii=False))
    return metrics


if __name__ == "__main__":
    main()
