"""The peer a transformers user would reach for: run_mlm's recipe (``BertForMaskedLM``,
``DataCollatorForLanguageModeling``, ``Trainer``) on the same text, tokenizer, model size and wall-clock budget as an
``hfbert pretrain --budget_minutes`` run, for the downstream scoreboard in docs/downstream.md.

    python benchmarks/peer_mlm_trainer.py --input domain.txt --tokenizer TOKENIZER_DIR --budget_minutes 30 \\
        --output_dir out/peer-30

What it does, as run_mlm.py does by default: the lines are tokenized, concatenated and cut into blocks of
``--max_seq_length`` tokens (``group_texts``), 15% of the tokens are masked by the collator (80/10/10), and
``Trainer`` trains ``BertForMaskedLM`` with AdamW and a linear schedule with warmup. Two choices give the peer its
best chance at a fixed budget rather than run_mlm's defaults, which are for continued pretraining: the peak learning
rate, batch size and warmup are the hfbert run's (``--learning_rate``, ``--batch_size``), and ``max_steps`` is set
from the peer's own speed, measured over ``--calibration_steps`` first, so that its schedule ends when the budget
does (stock Trainer counts steps, not time); a callback stops it at the budget in any case. The model is saved as
a transformers BERT folder that ``hfbert evaluate`` takes as it is.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from datasets import load_dataset
from transformers import (AutoTokenizer, BertConfig, BertForMaskedLM, DataCollatorForLanguageModeling, Trainer,
                          TrainerCallback, TrainingArguments)


class StopAtBudget(TrainerCallback):
    """Ends training once ``seconds`` of training have passed."""

    def __init__(self, seconds: float):
        self.seconds, self.started = seconds, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        if time.monotonic() - self.started >= self.seconds:
            control.should_training_stop = True


def blocks(path: str, tokenizer, length: int):
    """run_mlm's preprocessing: tokenize every line, concatenate, cut into blocks of ``length`` tokens."""
    raw = load_dataset("text", data_files={"train": path})["train"].filter(lambda r: len(r["text"].strip()) > 0)
    tokenized = raw.map(lambda b: tokenizer(b["text"], return_special_tokens_mask=True), batched=True,
                        remove_columns=["text"])

    def group(batch):
        joined = {k: sum(batch[k], []) for k in batch}
        total = (len(joined["input_ids"]) // length) * length
        return {k: [v[i: i + length] for i in range(0, total, length)] for k, v in joined.items()}

    return tokenized.map(group, batched=True)


def train(args, max_steps: int, seconds: float, output_dir: Path, train_set, tokenizer) -> tuple[Trainer, float]:
    torch.manual_seed(args.seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=args.hidden_size, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.hidden_size,
                        max_position_embeddings=512, hidden_dropout_prob=args.dropout,
                        attention_probs_dropout_prob=args.dropout, pad_token_id=tokenizer.pad_token_id)
    model = BertForMaskedLM(config)
    training = TrainingArguments(
        output_dir=str(output_dir), max_steps=max_steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate, weight_decay=0.01, warmup_steps=args.warmup_ratio,
        adam_beta2=0.98, adam_epsilon=1e-6, max_grad_norm=1.0, lr_scheduler_type="linear", logging_steps=50,
        save_strategy="no", report_to=[], seed=args.seed, dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(), disable_tqdm=True)
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15)
    trainer = Trainer(model=model, args=training, train_dataset=train_set, data_collator=collator,
                      callbacks=[StopAtBudget(seconds)])
    started = time.monotonic()
    trainer.train()
    return trainer, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--budget_minutes", type=float, help="train for this long, the schedule sized to it")
    parser.add_argument("--max_steps", type=int, help="train this many steps instead of a budget")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--warmup_ratio", type=float, default=0.03)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--hidden_size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--calibration_steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    train_set = blocks(args.input, tokenizer, args.max_seq_length)
    out = Path(args.output_dir)
    if (args.budget_minutes is None) == (args.max_steps is None):
        parser.error("give one of --budget_minutes and --max_steps")
    calibration, seconds, max_steps = None, float("inf"), args.max_steps
    if args.budget_minutes is not None:
        _, calibration = train(args, args.calibration_steps, seconds, out / "calibration", train_set, tokenizer)
        seconds = args.budget_minutes * 60
        max_steps = max(1, int(args.calibration_steps * seconds / calibration))
    trainer, spent = train(args, max_steps, seconds, out / "trainer", train_set, tokenizer)
    trainer.model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    summary = {"max_steps_planned": max_steps, "steps_done": trainer.state.global_step, "train_seconds": spent,
               "blocks": len(train_set),
               "calibration_seconds_per_step": calibration and calibration / args.calibration_steps,
               "last_logs": trainer.state.log_history[-3:], "settings": vars(args)}
    (out / "peer_summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in summary.items() if k != "last_logs"}))


if __name__ == "__main__":
    main()
