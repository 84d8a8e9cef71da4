"""Fine-tune BERT for token classification (NER) on pre-split words with BIO tags.

    python -m hfbert.recipes.finetune_ner --model_name_or_path DIR --train_file train.jsonl \
        --validation_file dev.jsonl --tokens_column tokens --tags_column ner_tags --output_dir out

Sentences longer than ``--max_seq_length`` sub-tokens are split into overlapping windows (``--doc_stride``
shared tokens) and merged back word by word from the window with the most context; nothing is cut.
Scores are entity-level precision/recall/F1 (seqeval). ``--label_all_subtokens`` supervises every piece of
a word (B- becomes I- on continuation pieces) instead of the first piece only.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import DataCollatorForTokenClassification, TrainingArguments, set_seed

from ..tasks import (
    CardKeepingTrainer,
    build_label_list,
    check_columns,
    entity_scores,
    merge_word_predictions,
    tokenize_and_align_labels,
)
from ..settings import setting
from ..tasks.recipe import DataFiles, ModelArguments, finish_run, note, parse_args, wants_training, write_jsonl


@dataclass
class DataArguments(DataFiles):
    train_file: str | None = setting(None, "JSON/JSONL rows with a list of words and a list of their tags")
    tokens_column: str = setting("tokens", "column with the words")
    tags_column: str = setting("ner_tags", "column with the BIO tags")
    label_list: str | None = setting(None, "comma-separated labels (default: those of the training data)")
    label_all_subtokens: bool = setting(False, "supervise every piece of a word (B- becomes I-), not the first")
    max_seq_length: int = setting(128, "tokens per window; longer sentences become several windows")
    doc_stride: int = setting(32, "tokens shared by consecutive windows")
    language: str | None = setting(None, "language code for the model card (e.g. zh)")


def main(argv=None) -> dict:
    """The recipe from the command line (or ``argv``): its options parsed into the arguments of :func:`run`."""
    return run(*parse_args((ModelArguments, DataArguments, TrainingArguments), argv))


def run(model_args: ModelArguments, data_args: DataArguments, training_args: TrainingArguments) -> dict:
    """Fine-tune for token classification (NER), then evaluate and save the run's folder (``training_args.output_dir``).

    Args:
        model_args: the model to fine-tune.
        data_args: the data and how it is read.
        training_args: transformers' ``Trainer`` settings.

    Returns:
        The run's metrics (``train_*``, ``eval_*``, ``test_*``), as written to ``all_results.json``.
    """
    set_seed(training_args.seed)
    raw = data_args.load()
    for split, ds in raw.items():
        check_columns(ds.column_names, [data_args.tokens_column, data_args.tags_column], split=f"{split} split")

    labels = (data_args.label_list.split(",") if data_args.label_list
              else build_label_list(raw["train"][data_args.tags_column]))
    label2id = {label: i for i, label in enumerate(labels)}
    tokenizer, model = model_args.load("token-classification", num_labels=len(labels),
                                       id2label=dict(enumerate(labels)), label2id=label2id)
    kwargs = {"tokenizer": tokenizer, "label2id": label2id, "max_length": data_args.max_seq_length,
              "stride": data_args.doc_stride, "label_all_subtokens": data_args.label_all_subtokens,
              "tokens_column": data_args.tokens_column, "tags_column": data_args.tags_column}
    # with_indices: example_index must point at the row in the whole split, not in the map batch.
    features = raw.map(
        lambda batch, idx: _windows(batch, idx, kwargs), batched=True, with_indices=True,
        remove_columns=raw["train"].column_names, desc="tokenising and aligning labels",
    )
    notes: list[str] = []
    for split, ds in features.items():
        windowed = len(ds) - len(set(ds["example_index"]))
        if windowed:
            note(notes, f"{split}: {len(raw[split])} sentences became {len(ds)} windows of <= "
                        f"{data_args.max_seq_length} tokens (long sentences are windowed, not cut)")

    trainer = CardKeepingTrainer(
        model=model, args=training_args, train_dataset=_model_inputs(features["train"]),
        eval_dataset=_model_inputs(features["validation"]) if "validation" in features else None,
        processing_class=tokenizer, data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    metrics: dict = {}
    if wants_training(training_args):
        metrics.update(trainer.train().metrics)
    for split, prefix in (("validation", "eval"), ("test", "test")):
        if split in features:
            metrics.update(_evaluate(trainer, raw[split], features[split], labels, data_args, notes, prefix))
    finish_run(
        trainer, tokenizer, metrics, task="token-classification", recipe="finetune_ner",
        pipeline_task="token-classification", model_args=model_args, notes=notes, labels=dict(enumerate(labels)),
        max_length=data_args.max_seq_length, language=data_args.language,
        data_description={"train": f"{data_args.train_file or data_args.dataset_dir} ({len(raw['train'])} sentences)",
                          "eval": f"{data_args.validation_file} ({len(raw.get('validation', []))} sentences)"},
    )
    return metrics


def _model_inputs(features):
    names = ("input_ids", "token_type_ids", "attention_mask", "labels")
    return features.select_columns([c for c in names if c in features.column_names])


def _windows(batch, indices, kwargs):
    enc = tokenize_and_align_labels(batch, **kwargs)
    enc["example_index"] = [indices[i] for i in enc["example_index"]]
    return enc


def _evaluate(trainer, raw_eval, eval_features, labels, data_args, notes, prefix="eval") -> dict:
    """Predict every window, merge words by max context, score entities, write the predictions."""
    output = trainer.predict(_model_inputs(eval_features), metric_key_prefix=prefix)
    words = raw_eval[data_args.tokens_column]
    pred_ids, missing = merge_word_predictions(
        eval_features["example_index"], eval_features["word_index"], output.predictions, [len(w) for w in words],
        default_label=labels.index("O") if "O" in labels else 0,
    )
    if missing:
        note(notes, f"{missing} evaluation words produced no sub-token (e.g. only control characters) "
                    f"and were predicted 'O'")
    predicted = [[labels[i] for i in row] for row in pred_ids]
    gold = raw_eval[data_args.tags_column]
    write_jsonl(f"{trainer.args.output_dir}/{prefix}_predictions.jsonl",
                [{"tokens": w, "gold": g, "predicted": p} for w, g, p in zip(words, gold, predicted)])
    scores = {f"{prefix}_{k}": v for k, v in entity_scores(gold, predicted).items()}
    return {**output.metrics, **scores}


if __name__ == "__main__":
    main()
