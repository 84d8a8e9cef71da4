"""An independent, pure-Python BERT tokenizer used only as the tests' oracle.

Written from the published description of Google's ``tokenization.py``:
BasicTokenizer (clean text, space around CJK ideographs, lowercase + strip accents when uncased, split on
punctuation) followed by greedy longest-match-first WordPiece.  It deliberately shares no code with
``tokenizers`` or ``hfbert`` so that agreement between the two is evidence, not a tautology.

Character classes follow Python's ``unicodedata`` (the Unicode version of the running interpreter), as
Google's code does.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

# The eight CJK Unified Ideograph blocks Google treats as "Chinese characters".  Hangul, kana and CJK
# punctuation are not in them, so they are not split character by character.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_whitespace(ch: str) -> bool:
    # \t \n \r are control characters in Unicode but BERT treats them as whitespace.
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch: str) -> bool:
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    # Every non-alphanumeric printable ASCII character counts, e.g. "^", "$", "`" which are not P* in Unicode.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def clean_text(text: str) -> str:
    out = []
    for ch in text:
        if ch in ("\x00", "\ufffd") or is_control(ch):
            continue
        out.append(" " if is_whitespace(ch) else ch)
    return "".join(out)


def space_cjk(text: str) -> str:
    return "".join(f" {ch} " if is_cjk(ch) else ch for ch in text)


def strip_accents(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")


def split_on_punctuation(word: str) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    for ch in word:
        if is_punctuation(ch):
            if current:
                pieces.append("".join(current))
                current = []
            pieces.append(ch)
        else:
            current.append(ch)
    if current:
        pieces.append("".join(current))
    return pieces


def basic_tokenize(
    text: str, *, lowercase: bool = True, strip_accents_: bool | None = None, handle_cjk: bool = True
) -> list[str]:
    """Google's BasicTokenizer; ``strip_accents_=None`` means "strip when lowercasing" as in the original."""
    do_strip = lowercase if strip_accents_ is None else strip_accents_
    text = clean_text(text)
    if handle_cjk:
        text = space_cjk(text)
    words: list[str] = []
    for word in text.split():
        if lowercase:
            word = word.lower()
        if do_strip:
            word = strip_accents(word)
        words.extend(split_on_punctuation(word))
    # A word can become empty after accent stripping (e.g. a lone combining mark): re-split drops it.
    return " ".join(words).split()


def wordpiece(word: str, vocab: set[str], *, unk: str = "[UNK]", max_chars: int = 200) -> list[str]:
    """Greedy longest-match-first; an over-long or unsegmentable word is one [UNK]."""
    if len(word) > max_chars:
        return [unk]
    pieces = []
    start = 0
    while start < len(word):
        end = len(word)
        match = None
        while start < end:
            candidate = word[start:end] if start == 0 else "##" + word[start:end]
            if candidate in vocab:
                match = candidate
                break
            end -= 1
        if match is None:
            return [unk]
        pieces.append(match)
        start = end
    return pieces


class ReferenceBertTokenizer:
    def __init__(
        self,
        vocab_file: str | Path,
        *,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        handle_cjk: bool = True,
        max_chars: int = 200,
    ) -> None:
        lines = Path(vocab_file).read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self.vocab = {line.strip() for line in lines}
        self.lowercase = lowercase
        self.strip_accents = strip_accents
        self.handle_cjk = handle_cjk
        self.max_chars = max_chars
        # WordPiece is a pure function of the word: caching it only saves time.
        self._cache: dict[str, list[str]] = {}

    def tokenize(self, text: str) -> list[str]:
        out: list[str] = []
        for word in basic_tokenize(
            text, lowercase=self.lowercase, strip_accents_=self.strip_accents, handle_cjk=self.handle_cjk
        ):
            pieces = self._cache.get(word)
            if pieces is None:
                pieces = self._cache[word] = wordpiece(word, self.vocab, max_chars=self.max_chars)
            out.extend(pieces)
        return out
