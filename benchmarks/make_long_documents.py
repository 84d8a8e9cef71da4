"""A classification task whose documents run past the model's length, from real sentences: "reviews" of K movie-review
sentences of mixed sentiment, labelled by the sign of their mean valence, so the evidence is spread over the whole
document and a model that reads only its head misses part of it.

Answered in docs/fine_tuning.md (long documents): windows (``--doc_stride``) against truncation.

    python benchmarks/make_long_documents.py --sentences en_vader_movieReviewSnippets.jsonl --output_dir long
    python benchmarks/make_long_documents.py rules --run RUN --test_file long/test.jsonl --doc_stride 16

The sentences (JSONL rows with ``sentence`` and ``valence``, e.g. the VADER movie-review snippets) are shuffled once
with ``--seed`` and split before grouping, so no sentence of a validation or test review is in a training review.
Each review: ``text`` (its sentences in order), ``label`` (``pos`` when the mean valence is above 0, else ``neg``),
``valence`` (the mean, for regression) and ``sentences``. Reviews whose mean valence is within ``--margin`` of 0 are
left out: their label would be a coin toss.

``rules`` scores one finished ``--doc_stride`` run's combination of windows on ``--test_file`` by four rules from the
same window logits: the mean of the logits (the recipe's), the mean of the probabilities, the most confident window,
and a majority vote of the windows.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path


def read_jsonl(path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def read_sentences(path: str | Path) -> list[dict]:
    rows = read_jsonl(path)
    missing = [i for i, r in enumerate(rows) if not isinstance(r.get("sentence"), str) or "valence" not in r]
    if missing:
        raise SystemExit(f"{path}: row {missing[0]} has no 'sentence' text or no 'valence'")
    return rows


def make_reviews(sentences: list[dict], per_review: int, margin: float, rng: random.Random) -> list[dict]:
    """Consecutive groups of ``per_review`` (already shuffled) sentences -> reviews, the near-neutral ones left out."""
    reviews = []
    for start in range(0, len(sentences) - per_review + 1, per_review):
        group = sentences[start:start + per_review]
        valence = sum(float(s["valence"]) for s in group) / per_review
        if abs(valence) <= margin:
            continue
        text = " ".join(s["sentence"].strip() for s in group)
        reviews.append({"text": text, "label": "pos" if valence > 0 else "neg", "valence": round(valence, 4),
                        "sentences": per_review})
    rng.shuffle(reviews)
    return reviews


def build(args) -> dict[str, int]:
    sentences = read_sentences(args.sentences)
    rng = random.Random(args.seed)
    rng.shuffle(sentences)
    held = args.held_out_reviews * args.per_review * 2  # sentences enough for the validation and test reviews
    if held >= len(sentences):
        raise SystemExit(f"{len(sentences)} sentences cannot make {args.held_out_reviews} validation and test reviews "
                         f"of {args.per_review} sentences and leave any for training")
    splits = {"validation": sentences[:held // 2], "test": sentences[held // 2:held], "train": sentences[held:]}
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, rows in splits.items():
        reviews = make_reviews(rows, args.per_review, args.margin, rng)
        (out / f"{split}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in reviews),
                                            encoding="utf-8")
        counts[split] = len(reviews)
    return counts


def rules(args) -> dict[str, float]:
    """Test accuracy of one windowed run under four ways of combining a document's windows."""
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification

    from hfbert.tasks import load_tokenizer
    from hfbert.tasks.windows import combine_windows, window_texts

    tokenizer = load_tokenizer(args.run)
    model = AutoModelForSequenceClassification.from_pretrained(args.run, trust_remote_code=True).eval()
    rows = read_jsonl(args.test_file)
    window = {"tokenizer": tokenizer, "max_length": args.max_seq_length, "stride": args.doc_stride,
              "text_column": "text"}
    data = Dataset.from_list(rows).map(window_texts, batched=True, with_indices=True, remove_columns=list(rows[0]),
                                       fn_kwargs=window)
    logits = []
    with torch.inference_mode():
        for start in range(0, len(data), 64):
            batch = tokenizer.pad(data[start:start + 64], return_tensors="pt")
            batch.pop("document")
            logits.append(model(**batch).logits.float().numpy())
    logits, documents = np.concatenate(logits), np.asarray(data["document"])
    label2id = model.config.label2id
    gold = np.array([label2id[r["label"]] for r in rows])
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    confident = np.zeros(len(rows), dtype=int)
    best = np.full(len(rows), -1.0)
    for window, doc in enumerate(documents):
        if probabilities[window].max() > best[doc]:
            best[doc], confident[doc] = probabilities[window].max(), probabilities[window].argmax()
    votes = combine_windows(np.eye(logits.shape[1])[logits.argmax(-1)], documents)
    # A tied vote goes to the mean of the logits, so the vote is not decided by class order.
    mean_logits = combine_windows(logits, documents).argmax(-1)
    vote = np.where((votes == votes.max(-1, keepdims=True)).sum(-1) > 1, mean_logits, votes.argmax(-1))
    predictions = {"mean of logits": mean_logits, "mean of probabilities": combine_windows(probabilities, documents)
                   .argmax(-1), "most confident window": confident, "majority vote": vote,
                   "first window": logits[np.flatnonzero(np.r_[True, np.diff(documents) != 0])].argmax(-1)}
    return {rule: float((p == gold).mean()) for rule, p in predictions.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="?", default="build", choices=["build", "rules"])
    parser.add_argument("--sentences", help="JSONL rows with 'sentence' and 'valence' (build)")
    parser.add_argument("--output_dir", default="long_documents", help="where train/validation/test.jsonl go (build)")
    parser.add_argument("--per_review", type=int, default=8, help="sentences per review")
    parser.add_argument("--held_out_reviews", type=int, default=200, help="reviews' worth of sentences held out for "
                                                                           "each of validation and test")
    parser.add_argument("--margin", type=float, default=0.1,
                        help="leave out reviews whose mean valence is within this of 0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", help="a finished run of the classification recipe with --doc_stride (rules)")
    parser.add_argument("--test_file", help="the rows it is scored on (rules)")
    parser.add_argument("--max_seq_length", type=int, default=64)
    parser.add_argument("--doc_stride", type=int, default=16)
    args = parser.parse_args(argv)
    if args.command == "rules":
        if not args.run or not args.test_file:
            parser.error("rules needs --run and --test_file")
        print(json.dumps(rules(args)))
        return
    if not args.sentences:
        parser.error("build needs --sentences")
    if args.per_review < 1:
        parser.error(f"--per_review must be at least 1, got {args.per_review}")
    counts = build(args)
    print(json.dumps({"output_dir": args.output_dir, "reviews": counts}))


if __name__ == "__main__":
    main()
