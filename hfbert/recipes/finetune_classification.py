"""Fine-tune BERT for sentence or sentence-pair classification, regression or multi-label classification.

    python -m hfbert.recipes.finetune_classification --model_name_or_path DIR --train_file train.jsonl \
        --validation_file dev.jsonl --text_column sentence --label_column label --output_dir out
    python -m hfbert.recipes.finetune_classification args.yaml        # the same arguments from a JSON/YAML file

``--task_type auto`` picks regression for float targets (``num_labels == 1``, MSE), multi-label for list
targets (BCE) and single-label classification otherwise. ``--model_family transformers`` trains
transformers' own ``BertForSequenceClassification`` with the same recipe and seed, for comparison.

Texts longer than ``--max_seq_length`` are truncated, or with ``--doc_stride N`` split into windows sharing N
tokens (``hfbert.tasks.windows``): every window trains with its text's label, and a text's prediction and scores
(during training too) come from the mean of its windows' logits, one row per input row.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import DataCollatorWithPadding, TrainingArguments, set_seed

from ..tasks import (
    CardKeepingTrainer,
    build_label_maps,
    check_columns,
    count_windows,
    encode_labels,
    metrics_for_trainer,
)
from ..settings import setting
from ..tasks.recipe import DataFiles, ModelArguments, finish_run, note, parse_args, wants_training, write_jsonl
from ..tasks.windows import check_stride, combine_windows, window_texts


@dataclass
class DataArguments(DataFiles):
    text_column: str = setting("sentence", "column with the text")
    text_pair_column: str | None = setting(None, "column with the second sentence, for pair tasks")
    label_column: str = setting("label", "column with the label (a string, a number or a list)")
    task_type: str = setting("auto", "auto, single_label_classification, regression or multi_label_classification")
    max_seq_length: int = setting(128, "tokens per example, [CLS] and [SEP] included; longer texts are truncated")
    doc_stride: int | None = setting(None, "read longer texts as windows sharing this many tokens, each text predicted "
                                           "by the mean of its windows' logits, instead of truncating them")

    def __post_init__(self):
        if self.doc_stride is not None:
            check_stride(self.doc_stride, self.max_seq_length, name="--doc_stride")


def infer_task_type(values) -> str:
    if all(isinstance(v, (list, tuple)) for v in values):
        return "multi_label_classification"
    if any(isinstance(v, float) and not v.is_integer() for v in values):
        return "regression"
    return "single_label_classification"


def main(argv=None) -> dict:
    """The recipe from the command line (or ``argv``): its options parsed into the arguments of :func:`run`."""
    return run(*parse_args((ModelArguments, DataArguments, TrainingArguments), argv))


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune for sentence (pair) classification, regression or multi-label classification, then evaluate and
    save the run's folder (``training_args.output_dir``).

    Args:
        model_args: the model to fine-tune.
        data_args: the data and how it is read.
        training_args: transformers' ``Trainer`` settings.

    Returns:
        The run's metrics (``train_*``, ``eval_*``, ``test_*``), as written to ``all_results.json``.
    """
    set_seed(training_args.seed)
    raw = data_args.load()
    columns = [data_args.text_column, data_args.text_pair_column, data_args.label_column]
    for split, ds in raw.items():
        check_columns(ds.column_names, columns, split=f"{split} split")

    # Labels: the map comes from the training split; anything else must use the same labels.
    train_labels = raw["train"][data_args.label_column]
    task_type = infer_task_type(train_labels) if data_args.task_type == "auto" else data_args.task_type
    label2id = id2label = None
    if task_type != "regression":
        label2id, id2label = build_label_maps(train_labels, multi_label=task_type.startswith("multi"))
    head = {"num_labels": 1 if label2id is None else len(label2id), "problem_type": task_type}
    if label2id is not None:
        head.update(id2label=id2label, label2id=label2id)
    tokenizer, model = model_args.load("sequence-classification", **head)

    notes: list[str] = []
    windowed = data_args.doc_stride is not None

    def preprocess(batch, indices):
        labels = encode_labels(batch[data_args.label_column], label2id, task_type)
        if windowed:
            return window_texts(batch, indices, tokenizer, data_args.max_seq_length, data_args.doc_stride,
                                data_args.text_column, data_args.text_pair_column, labels=labels)
        pair = [batch[data_args.text_pair_column]] if data_args.text_pair_column else []
        enc = tokenizer(batch[data_args.text_column], *pair, truncation=True, max_length=data_args.max_seq_length)
        enc["num_tokens"] = [len(x) for x in tokenizer(batch[data_args.text_column], *pair)["input_ids"]]
        return {**enc, "labels": labels}

    data = raw.map(preprocess, batched=True, with_indices=True, remove_columns=raw["train"].column_names,
                   desc="windows" if windowed else "tokenising")
    # Each window's row: scores and predictions are per input row, a row's windows combined first.
    documents = {split: ds["document"] for split, ds in data.items()} if windowed else {}
    for split, ds in data.items():
        _note_length(notes, split, ds, data_args)
    data = data.remove_columns("document" if windowed else "num_tokens")

    trainer = CardKeepingTrainer(
        model=model, args=training_args, train_dataset=data["train"], eval_dataset=data.get("validation"),
        processing_class=tokenizer, data_collator=DataCollatorWithPadding(tokenizer),
        compute_metrics=metrics_for_trainer(task_type, documents=documents.get("validation")),
    )
    metrics: dict = {}
    if wants_training(training_args):
        metrics.update(trainer.train().metrics)
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split not in data:
            continue
        trainer.compute_metrics = metrics_for_trainer(task_type, documents=documents.get(split))
        output = trainer.predict(data[split], metric_key_prefix=prefix)
        metrics.update(output.metrics)
        logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
        if windowed:
            logits = combine_windows(logits, documents[split])
        write_jsonl(f"{training_args.output_dir}/{prefix}_predictions.jsonl",
                    _prediction_rows(logits, id2label, task_type))
    finish_run(
        trainer, tokenizer, metrics, task="text-classification", recipe="finetune_classification",
        pipeline_task="text-classification", model_args=model_args, notes=notes, labels=id2label,
        max_length=data_args.max_seq_length,
        data_description={"train": f"{data_args.train_file or data_args.dataset_dir} ({len(raw['train'])} rows)",
                          "eval": f"{data_args.validation_file} ({len(raw.get('validation', []))} rows)"},
    )
    return metrics


def _note_length(notes, split, ds, data_args):
    """Say how many texts were longer than one window, and what became of their tail."""
    if data_args.doc_stride is None:
        cut = sum(n > data_args.max_seq_length for n in ds["num_tokens"])
        if cut:  # sequence classification reads [CLS] of one window; say how many texts lost their tail
            note(notes, f"{cut} of {len(ds)} {split} texts are longer than {data_args.max_seq_length} tokens "
                        f"and were truncated (their tail is not seen)")
        return
    counts = count_windows(ds["document"])
    if counts["windowed_examples"]:
        note(notes, f"{counts['windowed_examples']} of {counts['examples']} {split} texts are longer than "
                    f"{data_args.max_seq_length} tokens: {counts['windows']} windows sharing {data_args.doc_stride} "
                    f"tokens, one prediction per text from the mean of its windows' logits (windowed, not cut)")


def _prediction_rows(logits, id2label, task_type):
    if task_type == "regression":
        return [{"prediction": float(x)} for x in logits.reshape(-1)]
    if task_type == "multi_label_classification":
        return [{"prediction": [id2label[i] for i, v in enumerate(row) if v > 0]} for row in logits]
    return [{"prediction": id2label[int(i)]} for i in logits.argmax(-1)]


if __name__ == "__main__":
    main()
