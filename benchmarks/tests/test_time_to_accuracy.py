"""benchmarks/time_to_accuracy.py for a few steps on a tiny corpus and model: the files it writes hold what they claim."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from hfbert.pretrain.corpora import BUILTIN_CORPUS

pytest.importorskip("matplotlib")

SCRIPT = Path(__file__).resolve().parents[1] / "time_to_accuracy.py"


def _script(*args: str) -> subprocess.CompletedProcess:
    # A subprocess, as users run it: the runs are spawned processes that re-import the script as __main__.
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("time-to-accuracy")
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as source:
        lines = [line.strip() for _, line in zip(range(1200), source) if len(line.split()) > 3][:360]
    # One sentence-ish line each, a blank line between documents of 30 lines: 12 documents.
    corpus = tmp / "corpus.txt"
    corpus.write_text("\n".join(line + ("\n" if (i + 1) % 30 == 0 else "") for i, line in enumerate(lines)) + "\n",
                      encoding="utf-8")
    recipe = {
        "input": [str(corpus)], "vocab_size": 300, "preset": "tiny", "eval_fraction": 0.2,
        "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 37},
        "learning_rate": 1e-3, "warmup_steps": 2, "max_steps": 9, "eval_steps": 3, "max_eval_examples": 24,
        "mixed_precision": "no",  # the same arithmetic on every CPU, bf16-capable or not
        "phases": [{"max_seq_length": 32, "batch_size": 8, "steps": 6}, {"max_seq_length": 128, "batch_size": 2,
                                                                         "steps": 3}],
    }
    config = tmp / "recipe.json"
    config.write_text(json.dumps(recipe), encoding="utf-8")
    docs = tmp / "docs"
    done = _script("--config", str(config), "--docs", str(docs), "--work", str(tmp / "work"))
    assert done.returncode == 0, done.stderr[-3000:]
    return done.returncode, json.loads((docs / "time_to_accuracy.json").read_text(encoding="utf-8")), docs


def test_every_run_reports_its_curve(finished):
    code, summary, _ = finished
    assert code == 0 and summary["finished"] is True
    assert sorted(summary["curves"]) == ["a", "b", "c"]
    for run, result in summary["curves"].items():
        points = result["points"]
        steps = [p["step"] for p in points]
        # A run stops at a target, at its last step, or out of patience; here nothing reaches 0.20 by step 9.
        assert result["stopped_by"] in ("max_steps", "patience"), run
        if result["stopped_by"] == "max_steps":
            assert steps == [3, 6, 9], run
        assert steps == sorted(set(steps)) and steps[0] == 3, run
        seconds = [p["seconds"] for p in points]
        assert all(b > a for a, b in zip(seconds, seconds[1:])), (run, seconds)  # own time only moves forward
        assert all(0.0 <= p["eval_mlm_accuracy"] <= 1.0 and 0.0 <= p["eval_nsp_accuracy"] <= 1.0 for p in points)
    assert summary["curves"]["a"]["stopped_by"] == "max_steps"  # a is the reference; it is never cut short


def test_table_and_ratios_say_what_was_not_reached(finished):
    _, summary, _ = finished
    table = summary["time_to_accuracy"]
    for run in ("a", "b", "c"):
        for target in ("0.20", "0.30"):
            row = table[run][target]
            reached = [p for p in summary["curves"][run]["points"] if p["eval_mlm_accuracy"] >= float(target)]
            if reached:
                assert row["seconds"] == reached[0]["seconds"]
            else:
                assert row["seconds"] is None
                assert row["not_reached_within_seconds"] == summary["curves"][run]["points"][-1]["seconds"]
    assert set(summary["ratios"]) == {f"a_over_{r}_at_{t}" for r in "bc" for t in ("0.20", "0.30")}
    assert summary["eval_max_seq_length"] == 128 and summary["phases"][-1]["max_seq_length"] == 128


def test_plot_is_a_png(finished):
    _, _, docs = finished
    assert (docs / "time_to_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

