"""How `hfbert pretrain --prepared` behaves as the corpus grows: start-up time, step time, the wait for data, and a
training process's memory.

Answered in docs/pretraining.md and docs/data.md.

    python benchmarks/bench_pretrain_scale.py --work /tmp/bench-pretrain [--megabytes builtin 250 1000] [--steps 500]
                                           [--preset mini] [--batch_size 32] [--output figures.json]

For each size it makes a corpus with benchmarks/make_corpus.py (the shipped Austen chapters, shuffled and cut into
new documents; ``builtin`` is the shipped 4 MB corpus itself), prepares it once with `hfbert prepare` (dynamic
masking, length 128, a WordPiece vocabulary of 8,000 trained once on the shipped corpus and reused, so every size
has the same model), then runs `python -m hfbert.pretrain --prepared DIR` for --steps optimizer steps (--preset,
--batch_size, one process) and samples the process every 0.2 s: its resident memory (VmRSS, and VmHWM for the
peak) and the last step it logged.

It reports, per size: the seconds from starting the training command to its first optimizer step (the first
line of runs/metrics.jsonl), the mean step time and the mean wait for data in it (``data_seconds``, and its share
of the step) from step 10 on, what the reader held at the end (decoded row groups in MiB, open shard files), the
peak resident memory, the resident memory (all of it, and without file pages) every 25 steps, and the ratio of
the last step's to step 50's (--minutes stops a run early on a slow machine); with ``builtin`` among the sizes,
each size's step time against builtin's. Corpora and prepared folders are kept in --work and reused by the next
run. Figures from a shared machine move with its load: run the sizes back to back and compare them with each
other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hfbert.data.manifest import MANIFEST, Manifest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_SECONDS = 0.2


def _run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def _memory_kib(pid: int) -> tuple[int, int, int]:
    """(VmRSS, VmHWM, RssAnon) of a live process, in KiB (zeros once it is gone). RssAnon leaves out the pages of
    memory-mapped files (the prepared shards), which the kernel can drop at any time."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    except (FileNotFoundError, ProcessLookupError):
        return 0, 0, 0
    if "VmRSS" not in fields:  # exited, not yet reaped
        return 0, 0, 0
    return tuple(int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM", "RssAnon"))


def _last_step(log: Path) -> int:
    if not log.is_file():
        return 0
    lines = log.read_text(encoding="utf-8").splitlines()
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record.get("step"), int):
            return record["step"]
    return 0


def prepare(work: Path, size: str, tokenizer: Path) -> Path:
    """The prepared folder of a size: megabytes of generated corpus, or ``builtin`` (the shipped 4 MB corpus)."""
    if size == "builtin":
        corpus, layout = None, []  # no --input: the shipped corpus, read as the main job reads it
    else:
        corpus, layout = work / f"corpus-{float(size):g}mb.txt", ["--input_layout", "paragraphs"]
        if not corpus.is_file():
            _run([sys.executable, str(REPO / "benchmarks" / "make_corpus.py"), str(corpus), "--megabytes", size])
    folder = work / (f"prepared-{float(size):g}mb" if size != "builtin" else "prepared-builtin")
    if not (folder / MANIFEST).is_file():
        started = time.monotonic()
        source = ["--input", str(corpus)] if corpus else []
        _run([sys.executable, "-m", "hfbert.cli", "prepare", *source, "--output_dir", str(folder),
              "--overwrite_output_dir", *layout, "--masking", "dynamic",
              "--max_seq_length", "128", "--tokenizer", str(tokenizer), "--seed", "42"])
        print(f"prepared {folder.name} in {time.monotonic() - started:.0f} s", flush=True)
    return folder


def train(work: Path, folder: Path, steps: int, preset: str, batch_size: int, minutes: float | None = None) -> dict:
    """One `hfbert pretrain --prepared` run, sampled; returns its figures. ``minutes`` stops the training loop
    early (its --max_time_minutes): the figures are then those of the steps it reached."""
    output_dir = work / f"run-{folder.name}-{preset}-b{batch_size}"
    command = [sys.executable, "-m", "hfbert.pretrain", "--prepared", str(folder), "--output_dir", str(output_dir),
               "--overwrite_output_dir", "true", "--preset", preset, "--batch_size", str(batch_size),
               "--max_steps", str(steps), "--max_time_minutes", "null" if minutes is None else str(minutes),
               "--logging_steps", "1",
               "--eval_steps", str(steps), "--save_steps", str(steps), "--progress_bar", "false",
               "--report_to", "jsonl"]
    log = output_dir / "runs" / "metrics.jsonl"
    log.unlink(missing_ok=True)
    print("+", " ".join(command), flush=True)
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples, first_step_seconds, peak = [], None, 0
    while process.poll() is None:
        rss, hwm, anonymous = _memory_kib(process.pid)
        step = _last_step(log)
        if step >= 1 and first_step_seconds is None:
            first_step_seconds = time.monotonic() - started
        if rss:
            samples.append((step, rss, anonymous))
            peak = max(peak, hwm)
        time.sleep(SAMPLE_SECONDS)
    _, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"training failed ({process.returncode}):\n{err[-3000:]}")

    def at(step: int, column: int = 1) -> float:
        """Resident MiB while the loop was at ``step`` (the median of the samples taken there)."""
        near = sorted(sample[column] for sample in samples if sample[0] == step) or sorted(
            sample[column] for sample in samples if abs(sample[0] - step) <= 5)
        return round(near[len(near) // 2] / 1024, 1) if near else float("nan")

    training = [rss for s, rss, _ in samples if s >= 1]
    reached = _last_step(log)
    # The loop's own timing, from step 10 on (the first steps include warm-up): the mean step, the mean wait for
    # its data, and what the reader held at the last log line.
    logged = [r for r in map(json.loads, log.read_text(encoding="utf-8").splitlines())
              if isinstance(r.get("step"), int) and "step_seconds" in r]
    steady = [r for r in logged if r["step"] > 10] or logged
    step_seconds = sum(r["step_seconds"] for r in steady) / max(len(steady), 1)
    data_seconds = sum(r["data_seconds"] for r in steady) / max(len(steady), 1)
    figures = {
        "prepared": str(folder),
        "train_rows": Manifest.read(folder).splits["train"].rows,
        "prepared_megabytes": round(sum(p.stat().st_size for p in (folder / "data").iterdir()) / 1e6, 1),
        "seconds_to_first_step": round(first_step_seconds, 1) if first_step_seconds else None,
        "peak_rss_mib": round(peak / 1024, 1),
        "training_peak_rss_mib": round(max(training) / 1024, 1) if training else None,
        "rss_mib_at_step_50": at(50),
        "steps_done": reached,
        "rss_mib_at_last_step": at(reached),
        "rss_mib_by_step": {step: at(step) for step in range(0, reached + 1, 25) if step},
        "anonymous_rss_mib_by_step": {step: at(step, 2) for step in range(0, reached + 1, 25) if step},
        "total_seconds": round(time.monotonic() - started, 1),
        "step_seconds": round(step_seconds, 4),
        "data_seconds": round(data_seconds, 5),
        "data_share": round(data_seconds / step_seconds, 4) if step_seconds else None,
        "reader_mib": round(logged[-1].get("reader_mib", float("nan")), 1) if logged else None,
        "open_files": logged[-1].get("open_files") if logged else None,
    }
    figures["rss_ratio_last_to_step_50"] = round(figures["rss_mib_at_last_step"] / figures["rss_mib_at_step_50"], 3)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True, help="folder for corpora, prepared folders and runs")
    parser.add_argument("--megabytes", nargs="+", default=["250", "1000"],
                        help="corpus sizes in MB of generated text; 'builtin' is the shipped 4 MB corpus")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=None, help="stop each training run after this long")
    parser.add_argument("--output", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    tokenizer = args.work / "tokenizer"
    if not (tokenizer / "tokenizer.json").is_file():
        shipped = args.work / "austen.txt"
        _run([sys.executable, "-c", "import gzip, shutil, sys; from hfbert.data.sources import BUILTIN_CORPUS; "
              "shutil.copyfileobj(gzip.open(BUILTIN_CORPUS, 'rb'), open(sys.argv[1], 'wb'))", str(shipped)])
        _run([sys.executable, "-m", "hfbert.cli", "train-tokenizer", "--input", str(shipped), "--vocab_size", "8000",
              "--output_dir", str(tokenizer), "--progress_bar", "false"])
    folders = [prepare(args.work, size, tokenizer) for size in args.megabytes]
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average_before": os.getloadavg()[0], "sizes": {}}
    for size, folder in zip(args.megabytes, folders):
        name = size if size == "builtin" else f"{float(size):g}MB"
        report["sizes"][name] = train(args.work, folder, args.steps, args.preset, args.batch_size, args.minutes)
        print(json.dumps(report["sizes"][name]), flush=True)
    speeds = {name: figures["step_seconds"] for name, figures in report["sizes"].items()}
    if "builtin" in speeds:  # a large corpus should train as fast as the small one: its step against builtin's
        report["step_time_vs_builtin"] = {name: round(v / speeds["builtin"], 3) for name, v in speeds.items()}
    report.update(preset=args.preset, batch_size=args.batch_size, steps=args.steps)
    report["load_average_after"] = os.getloadavg()[0]
    text = json.dumps(report, indent=1)
    print(text)
    if args.output:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
