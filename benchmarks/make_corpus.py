"""Generate a large English pretraining corpus from the Austen novels hfbert ships, for benchmarks.

Answered in the corpora behind docs/data.md and docs/pretraining.md (generated, never committed).

    python benchmarks/make_corpus.py OUTPUT.txt --megabytes 1000 [--seed 0] [--extra MORE.txt ...]

How: the shipped corpus (hfbert/corpora/en_austen_6novels.txt.gz) is cut into its chapters (the documents of
`hfbert prepare --input_layout paragraphs --document_boundary chapter`), plus the chapters of any --extra file
in the same layout.  Each generated document is a run of consecutive paragraphs -- a random start and a random
length, from half to all of the chapter -- of a randomly drawn chapter, so paragraphs and their sentences stay
in their original order while no two documents are alike; documents are written one paragraph per line with a
blank line between documents (the `paragraphs` layout) until the file reaches --megabytes.  The text is real
English, but its sentences repeat: the duplicate-line figure of the build's health report says how much.
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
from pathlib import Path

from hfbert.data import CHAPTER_HEADING
from hfbert.data.sources import BUILTIN_CORPUS

__all__ = ["chapters", "write_corpus"]


def chapters(paths: list[Path]) -> list[list[str]]:
    """Chapters (lists of paragraphs) of one-paragraph-per-line files whose chapter headings start a chapter."""
    heading = re.compile(CHAPTER_HEADING)
    found: list[list[str]] = []
    for path in paths:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as handle:
            current: list[str] = []
            for line in handle:
                line = line.strip()
                if heading.match(line):
                    if len(current) >= 4:
                        found.append(current)
                    current = []
                elif line:
                    current.append(line)
            if len(current) >= 4:
                found.append(current)
    return found


def write_corpus(output: Path, megabytes: float, seed: int = 0, extra: list[Path] | None = None) -> dict:
    """Write the corpus (see the module docstring); return its size in bytes and documents."""
    pool = chapters([BUILTIN_CORPUS, *(extra or [])])
    rng = random.Random(seed)
    target = int(megabytes * 1e6)
    written = documents = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8") as sink:
        while written < target:
            chapter = rng.choice(pool)
            length = rng.randint(max(2, len(chapter) // 2), len(chapter))
            start = rng.randint(0, len(chapter) - length)
            text = "\n".join(chapter[start:start + length]) + "\n\n"
            sink.write(text)
            written += len(text.encode("utf-8"))
            documents += 1
    return {"path": str(output), "bytes": written, "documents": documents, "source_chapters": len(pool)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", type=Path)
    parser.add_argument("--megabytes", type=float, default=250.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extra", type=Path, nargs="*", default=[], help="more one-paragraph-per-line text files")
    args = parser.parse_args()
    print(write_corpus(args.output, args.megabytes, args.seed, args.extra))


if __name__ == "__main__":
    main()
