"""Fine-tune BERT for multiple choice (SWAG-style): one [CLS] score per (context, choice) pair, softmax over choices.

    python -m hfbert.recipes.finetune_multiple_choice --model_name_or_path DIR --train_file train.jsonl \
        --validation_file dev.jsonl --context_column sent1 --question_column sent2 \
        --choice_columns ending0,ending1,ending2,ending3 --label_column label --output_dir out

Choices come from several columns (``--choice_columns``) or one list column (``--choices_column``); the
label is the index of the right choice. Each pair is ``[CLS] context [SEP] question + choice [SEP]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from transformers import DataCollatorForMultipleChoice, TrainingArguments, set_seed

from ..tasks import CardKeepingTrainer, check_columns, classification_metrics
from ..settings import setting
from ..tasks.recipe import DataFiles, ModelArguments, finish_run, note, parse_args, wants_training, write_jsonl


@dataclass
class DataArguments(DataFiles):
    context_column: str = setting("sent1", "column with the context")
    question_column: str | None = setting(None, "column with the text put before every choice")
    choice_columns: str | None = setting(None, "comma-separated, one column per choice")
    choices_column: str | None = setting(None, "one column holding the list of choices")
    label_column: str = setting("label", "column with the index of the right choice")
    max_seq_length: int = setting(128, "tokens per (context, choice) pair; longer pairs are truncated")

    def __post_init__(self):
        if (self.choice_columns is None) == (self.choices_column is None):
            raise ValueError("give exactly one of --choice_columns or --choices_column")


def main(argv=None) -> dict:
    """The recipe from the command line (or ``argv``): its options parsed into the arguments of :func:`run`."""
    return run(*parse_args((ModelArguments, DataArguments, TrainingArguments), argv))


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune for multiple choice, then evaluate and save the run's folder (``training_args.output_dir``).

    Args:
        model_args: the model to fine-tune.
        data_args: the data and how it is read.
        training_args: transformers' ``Trainer`` settings.

    Returns:
        The run's metrics (``train_*``, ``eval_*``, ``test_*``), as written to ``all_results.json``.
    """
    set_seed(training_args.seed)
    raw = data_args.load()
    choice_columns = data_args.choice_columns.split(",") if data_args.choice_columns else []
    required = [data_args.context_column, data_args.question_column, data_args.choices_column,
                data_args.label_column, *choice_columns]
    for split, ds in raw.items():
        check_columns(ds.column_names, required, split=f"{split} split")
    tokenizer, model = model_args.load("multiple-choice")
    notes: list[str] = []

    def preprocess(batch):
        choices = (batch[data_args.choices_column] if data_args.choices_column
                   else [list(row) for row in zip(*(batch[c] for c in choice_columns))])
        k = len(choices[0])
        if any(len(c) != k for c in choices):
            raise ValueError(f"every example needs the same number of choices ({k}); found {sorted({len(c) for c in choices})}")
        labels = batch[data_args.label_column]
        bad = [v for v in labels if not isinstance(v, int) or not 0 <= v < k]
        if bad:
            raise ValueError(f"label(s) {bad[:5]} are not choice indices; known labels: {list(range(k))}")
        prefix = batch[data_args.question_column] if data_args.question_column else [""] * len(choices)
        firsts = [ctx for ctx in batch[data_args.context_column] for _ in range(k)]
        seconds = [f"{p} {c}".strip() for p, row in zip(prefix, choices) for c in row]
        enc = tokenizer(firsts, seconds, truncation=True, max_length=data_args.max_seq_length)
        full = tokenizer(firsts, seconds)["input_ids"]
        out = {key: [v[i:i + k] for i in range(0, len(v), k)] for key, v in enc.items()}
        out["num_cut"] = [sum(len(full[i + j]) > data_args.max_seq_length for j in range(k))
                          for i in range(0, len(full), k)]
        out["labels"] = labels
        return out

    data = raw.map(preprocess, batched=True, remove_columns=raw["train"].column_names, desc="tokenising")
    for split, ds in data.items():
        cut = sum(ds["num_cut"])
        if cut:
            note(notes, f"{split}: {cut} (context, choice) pairs exceed {data_args.max_seq_length} tokens and were "
                        f"truncated")
    data = data.remove_columns("num_cut")

    trainer = CardKeepingTrainer(
        model=model, args=training_args, train_dataset=data["train"], eval_dataset=data.get("validation"),
        processing_class=tokenizer, data_collator=DataCollatorForMultipleChoice(tokenizer),
        compute_metrics=_accuracy,
    )
    metrics: dict = {}
    if wants_training(training_args):
        metrics.update(trainer.train().metrics)
    if "validation" in data:
        output = trainer.predict(data["validation"], metric_key_prefix="eval")
        metrics.update(output.metrics)
        write_jsonl(f"{training_args.output_dir}/eval_predictions.jsonl",
                    [{"prediction": int(i)} for i in np.argmax(output.predictions, -1)])
    finish_run(
        trainer, tokenizer, metrics, task="multiple-choice", recipe="finetune_multiple_choice",
        pipeline_task="multiple-choice", model_args=model_args, notes=notes, max_length=data_args.max_seq_length,
        data_description={"train": f"{data_args.train_file or data_args.dataset_dir} ({len(data['train'])} rows)",
                          "eval": f"{data_args.validation_file} ({len(data.get('validation', []))} rows)"},
    )
    return metrics


def _accuracy(prediction) -> dict[str, float]:
    """The right choice is one class of k: the classification metric's accuracy (SWAG's score)."""
    scores = classification_metrics(prediction.predictions, prediction.label_ids, "single_label_classification")
    return {"accuracy": scores["accuracy"]}


if __name__ == "__main__":
    main()
