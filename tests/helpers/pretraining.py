"""What the pretraining tests start from: a tiny model, the head of the shipped Austen corpus prepared at a few
lengths, and one set of run settings (fp32, a checkpoint every two steps, JSON-lines logs) that each test changes
with keyword overrides; beside them the comparisons of two runs and the drivers of runs in other processes.

The fixtures built from these (``corpus``, ``prepared``, ``one_thread``) are in tests/conftest.py.
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from safetensors.torch import load_file

from hfbert.data import prepare_corpus
from hfbert.pretrain import PretrainCallback
from hfbert.pretrain.corpora import BUILTIN_CORPUS
from hfbert.pretrain.tracking import read_jsonl

TINY_MODEL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
STEPS = 8  # the default run's steps
GOOGLE = Path(__file__).resolve().parents[1] / "fixtures" / "google_bert_tiny"  # a Google BERT checkpoint folder


def write_corpus_head(path: Path, lines: int = 400) -> Path:
    """The first ``lines`` lines of the shipped corpus (400: nine chapters, about 390 sentences)."""
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as handle:
        head = [next(handle) for _ in range(lines)]
    path.write_text("".join(head), encoding="utf-8")
    return path


def prepare_folders(corpus: Path, root: Path, lengths=(64, 96), **settings) -> dict[int, Path]:
    """The corpus prepared at each length, the tokenizer trained once (at the first length) and reused."""
    folders, tokenizer = {}, None
    for length in lengths:
        folders[length] = prepare_corpus(
            [str(corpus)], root / f"length-{length}", tokenizer=tokenizer, vocab_size=400, max_seq_length=length,
            input_layout="paragraphs", document_boundary="chapter", eval_fraction=0.2, seed=42,
            **{"masking": "dynamic", **settings})
        tokenizer = tokenizer or folders[length]
    return folders


def settings(folders, output_dir, **overrides) -> dict:
    """The settings of a tiny run on prepared ``folders``: 8 steps of 8 rows, fp32 (the bitwise and the 1e-4
    comparisons), a checkpoint every 2 steps (the last 3 kept), an evaluation every 4, every step logged."""
    values = {
        "prepared": [str(folder) for folder in folders], "preset": "tiny", "model": dict(TINY_MODEL),
        "batch_size": 8, "max_seq_length": 64, "max_steps": STEPS, "logging_steps": 1, "eval_steps": 4,
        "save_steps": 2, "keep_last": 3, "max_time_minutes": None, "max_eval_examples": 24, "progress_bar": False,
        "report_to": ["jsonl"], "output_dir": str(output_dir), "fill_mask_text": "She was [MASK] happy.",
        "mixed_precision": "no",
    }
    values.update(overrides)
    return values


def init_from_settings(corpus: Path, output_dir: Path, **overrides) -> dict:
    """A run that continues the Google checkpoint on raw text: 6 steps at length 32 (its size is the checkpoint's)."""
    values = {"init_from": str(GOOGLE), "input": [str(corpus)], "input_layout": "paragraphs",
              "document_boundary": "chapter", "eval_fraction": 0.2, "batch_size": 8, "max_seq_length": 32,
              "max_steps": 6, "logging_steps": 1, "eval_steps": 3, "save_steps": 2, "keep_last": 3,
              "max_time_minutes": None, "max_eval_examples": 16, "progress_bar": False, "report_to": ["jsonl"],
              "output_dir": str(output_dir), "fill_mask_text": "she was [MASK] happy .", "mixed_precision": "no"}
    values.update(overrides)
    return values


def write_config(path: Path, values: dict) -> Path:
    path.write_text(json.dumps(values), encoding="utf-8")
    return path


def argv(values: dict) -> list[str]:
    """``values`` as command-line options of hfbert pretrain."""
    args = []
    for key, value in values.items():
        if isinstance(value, bool):
            args += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            args += [f"--{key}", *map(str, value)]
        elif isinstance(value, dict):
            args += [f"--{key}", json.dumps(value)]
        else:
            args += [f"--{key}", "null" if value is None else str(value)]
    return args


def logged_steps(output_dir: Path) -> list[dict]:
    """Every logged line except the wall-clock figures and what the reader holds, which no two runs share."""
    records = read_jsonl(output_dir / "runs" / "metrics.jsonl")
    clock = ("tokens_per_second", "train_seconds", "step_seconds", "data_seconds", "reader_mib", "open_files")
    return [{k: v for k, v in r.items() if k not in clock} for r in records if "step" in r]


def assert_same_weights(a: Path, b: Path) -> None:
    left, right = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert left.keys() == right.keys()
    different = [name for name in left if not torch.equal(left[name], right[name])]
    assert not different, f"parameters differ bitwise: {different[:5]}"


class FirstWeights(PretrainCallback):
    """Keeps the weights the run starts from."""

    def on_train_begin(self, step, model, **kwargs):
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}


def run_script(script: str, *args, timeout: int = 240) -> subprocess.CompletedProcess:
    """``script`` (dedented) in a fresh single-threaded, offline interpreter, ``args`` in its sys.argv[1:]."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env)


def launch(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``accelerate launch ARGS`` on CPU processes (--multi_gpu is what makes accelerate start one per rank)."""
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([launcher, "launch", "--mixed_precision", "no", "--dynamo_backend", "no", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


# A run (run_script with a config file and a checkpoint name) that dies by SIGKILL once that checkpoint is published.
KILL_AFTER_CHECKPOINT = """
    import os, signal, sys, torch
    torch.set_num_threads(1)
    import hfbert.pretrain.checkpointing as checkpointing
    from hfbert.pretrain import main

    publish = checkpointing.publish

    def publish_then_die(scratch, final):
        publish(scratch, final)
        if final.name == sys.argv[2]:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpointing.publish = publish_then_die
    sys.exit(main(["--config", sys.argv[1]]))
"""
