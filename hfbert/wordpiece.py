"""The BERT text pipeline in `tokenizers` terms, and a cached WordPiece encoder for building data in bulk.

:func:`build_normalizer` and :func:`build_pre_tokenizer` are Google's BasicTokenizer as `tokenizers` components;
:func:`wordpiece_split` is its WordPiece step for one word; :class:`WordCacheEncoder` gives the ids of that pipeline
for many texts at once.  This module needs only `tokenizers`
and numpy: the processes that build a prepared corpus import it without transformers.

Where the stock `tokenizers` BERT pipeline differs from Google's published algorithm, the pipeline built
here follows Google:

* ``max_input_chars_per_word`` defaults to 200 (Google) instead of 100 (`tokenizers`).
* Text cleaning drops only NUL, U+FFFD and Unicode Cc/Cf characters (Google); `tokenizers`' BertNormalizer
  also drops private-use (Co) and unassigned (Cn) code points, which Google keeps (and maps to [UNK]).
* Lower-casing applies the Greek final-sigma rule as Python's ``str.lower`` does (ΟΔΟΣ -> οδος);
  `tokenizers` lower-cases character by character (-> οδοσ).
* CJK Extension E (U+2B820..U+2B91F) is split character by character as in Google's ranges; `tokenizers`
  starts that range at U+2B920.
* Punctuation splitting and accent stripping use current Unicode classes (P*, Mn) through Oniguruma
  regexes; `tokenizers`' own tables are several Unicode versions old (e.g. U+2E52 is not split there).

Remaining, deliberate differences: special tokens written in the raw text ("[MASK]") are kept whole, as
everywhere in transformers (Google splits them into "[", "mask", "]"); the final-sigma rule does not look
back across case-ignorable characters (Python turns "Α'Σ" into "α'ς", this pipeline into "α'σ"); and
characters assigned or re-classified after the Unicode version of the running Python can be classed
differently (Oniguruma's and Rust's tables are newer than Python 3.11's Unicode 14).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Container, Sequence
from itertools import chain
from typing import Any

import numpy as np
from tokenizers import Regex, Tokenizer, normalizers, pre_tokenizers

__all__ = [
    "GOOGLE_MAX_INPUT_CHARS_PER_WORD", "WordCacheEncoder", "build_normalizer", "build_pre_tokenizer", "concat_ranges",
    "wordpiece_split",
]

GOOGLE_MAX_INPUT_CHARS_PER_WORD = 200

# Google's CJK ranges include Extension E from U+2B820; the `tokenizers` table starts it at U+2B920.
_CJK_EXTENSION_E_GAP = "[\U0002b820-\U0002b91f]"
# Python's str.lower() turns a capital sigma that ends a word into the final form.
_FINAL_SIGMA = r"(?<=\p{Cased})Σ(?!\p{Case_Ignorable}*\p{Cased})"


# --------------------------------------------------------------------------------------------------------------
# The BERT pipeline


def build_normalizer(
    *, lowercase: bool, strip_accents: bool | None, handle_chinese_chars: bool
) -> normalizers.Normalizer:
    """Google's BasicTokenizer text normalisation, expressed with `tokenizers` normalizers.

    Cleaning and accent stripping use regex classes (Oniguruma's Unicode tables) instead of BertNormalizer's
    built-in ones: those also delete private-use and unassigned characters, which Google keeps, and their
    mark table is several Unicode versions old.  Order as in Google: clean, space CJK, lower-case, strip.
    """
    do_strip = lowercase if strip_accents is None else strip_accents
    steps: list[normalizers.Normalizer] = [
        # \t \n \r are Cc but count as whitespace; every Zs (NBSP, U+3000, ...) becomes a plain space.
        normalizers.Replace(Regex(r"[\t\n\r\p{Zs}]"), " "),
        normalizers.Replace(Regex(r"[\p{Cc}\p{Cf}\x{FFFD}]"), ""),
    ]
    if lowercase:
        steps.append(normalizers.Replace(Regex(_FINAL_SIGMA), "ς"))
    steps.append(
        normalizers.BertNormalizer(
            clean_text=False, handle_chinese_chars=handle_chinese_chars, strip_accents=False, lowercase=lowercase
        )
    )
    if do_strip:
        steps += [normalizers.NFD(), normalizers.Replace(Regex(r"\p{Mn}"), "")]
    return normalizers.Sequence(steps)


def build_pre_tokenizer(*, handle_chinese_chars: bool) -> pre_tokenizers.PreTokenizer:
    """Whitespace + punctuation split (BertPreTokenizer), completed with what its old Unicode tables miss.

    The extra split isolates every Unicode P* character (BertPreTokenizer's table predates e.g. U+2E52) and,
    with CJK handling on, the CJK Extension E ideographs `tokenizers` does not space out.
    """
    extra = r"\p{P}" + (_CJK_EXTENSION_E_GAP[1:-1] if handle_chinese_chars else "")
    # Split first: one regex scan over the whole text is cheaper than one per (single-character CJK) word.
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(f"[{extra}]"), behavior="isolated"), pre_tokenizers.BertPreTokenizer()]
    )


# --------------------------------------------------------------------------------------------------------------
# Fast batch encoding (ids only)

# Printable ASCII is where every BERT configuration agrees: nothing to clean, no CJK, no accents, the only
# whitespace is " ", and every non-alphanumeric character is a punctuation split of its own.
_ASCII_WORD = re.compile(r"[A-Za-z0-9]+|[^A-Za-z0-9 ]")


class WordCacheEncoder:
    """Token ids of many texts at once, identical to ``encode_batch(texts, add_special_tokens=False)`` of the
    `tokenizers` pipeline serialised in ``tokenizer_json`` (with truncation and padding off).

    Why: that pipeline spends most of its time in normalisation and pre-tokenisation, which track character
    alignments the ids do not need.  For a text of printable
    ASCII (the bulk of English corpora) every BERT normalizer/pre-tokenizer configuration this module builds,
    and `tokenizers`' stock ``BertNormalizer``/``BertPreTokenizer``, reduce to "lower-case if uncased, split on
    spaces, isolate every other non-alphanumeric character": one regex.  A word's WordPiece pieces do not
    depend on its context, so each distinct word is segmented once (greedy longest-match-first, as
    `tokenizers`' ``WordPiece`` model does it) and cached; the rest is a table look-up
    (``benchmarks/bench_tokenization.py`` measures both paths).
    Anything else -- a non-ASCII or control character, an added token such as ``[MASK]`` written in the text,
    a pipeline of another shape -- goes through `tokenizers` itself, so the ids are always the pipeline's
    (``tests/test_tokenization.py`` checks this on real text and on random ASCII).

    The cache holds at most ``max_cached_words`` words (then starts afresh), so memory stays bounded on a
    corpus of any size.  Pickles without its cache and its `tokenizers` object (both are rebuilt on use).
    """

    def __init__(self, tokenizer_json: str, max_cached_words: int = 1 << 18, config: dict | None = None) -> None:
        config = json.loads(tokenizer_json) if config is None else config  # ``config``: the JSON already parsed
        self.tokenizer_json = tokenizer_json
        self.max_cached_words = max_cached_words
        model = config.get("model") or {}
        self.lowercase = _ascii_lowercase(config)
        self.vocab: dict[str, int] = model.get("vocab") or {}
        self.fast = self.lowercase is not None and model.get("unk_token") in self.vocab
        if self.fast:
            self.unk_id = self.vocab[model["unk_token"]]
            self.prefix = model["continuing_subword_prefix"]
            self.max_chars = model["max_input_chars_per_word"]
        added = [token["content"].lower() for token in config.get("added_tokens", []) if token["content"]]
        # Checked on the lower-cased text: a superset of what the pipeline matches, which is safe (it only
        # sends more texts down the exact, slow path).
        self._added = re.compile("|".join(map(re.escape, sorted(added, key=len, reverse=True)))) if added else None
        self._backend: Tokenizer | None = None
        self._clear()

    def _clear(self) -> None:
        self._index: dict[str, int] = {}
        self._lengths: list[int] = []
        self._pieces: list[int] = []
        self._table: tuple[Any, Any, Any] | None = None

    def __getstate__(self) -> dict:
        # Workers start with an empty cache; shipping a large one to every process costs more than refilling it.
        return dict(self.__dict__, _backend=None, _index={}, _lengths=[], _pieces=[], _table=None)

    @property
    def backend(self) -> Tokenizer:
        """The `tokenizers` pipeline, for the texts the fast path does not take (made on first use)."""
        if self._backend is None:
            self._backend = Tokenizer.from_str(self.tokenizer_json)
            self._backend.no_truncation()
            self._backend.no_padding()
        return self._backend

    def encode(self, texts: Sequence[str]) -> tuple[Any, Any]:
        """``(ids, lengths)``: the ids of all texts back to back (int32) and the count per text (int64)."""
        words_of: list[list[str]] = []
        slow: list[int] = []
        for i, text in enumerate(texts):
            if self.fast and text.isascii() and text.isprintable():
                lowered = text.lower()
                if self._added is None or self._added.search(lowered) is None:
                    words_of.append(_ASCII_WORD.findall(lowered if self.lowercase else text))
                    continue
            words_of.append([])
            slow.append(i)
        n_words = np.fromiter(map(len, words_of), dtype=np.int64, count=len(words_of))
        word_rows = self._rows(words_of, int(n_words.sum()))
        starts, lengths_table, pieces = self._arrays()
        word_lengths = lengths_table[word_rows]
        fast_ids = pieces[concat_ranges(starts[word_rows], word_lengths)]
        word_ends = np.concatenate(([0], np.cumsum(word_lengths)))
        text_ends = np.cumsum(n_words)
        lengths = word_ends[text_ends] - word_ends[text_ends - n_words]
        if not slow:
            return fast_ids, lengths
        encodings = self.backend.encode_batch_fast([texts[i] for i in slow], add_special_tokens=False)
        slow_lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(slow))
        slow_ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int32,
                               count=int(slow_lengths.sum()))
        lengths[slow] = slow_lengths
        is_slow = np.zeros(len(words_of), dtype=bool)
        is_slow[slow] = True
        token_is_slow = np.repeat(is_slow, lengths)
        ids = np.empty(len(token_is_slow), dtype=np.int32)
        ids[token_is_slow] = slow_ids
        ids[~token_is_slow] = fast_ids
        return ids, lengths

    def _rows(self, words_of: list[list[str]], total: int) -> Any:
        """Row of every word in the cache table, segmenting the words seen for the first time."""
        new = set(chain.from_iterable(words_of)).difference(self._index)
        if len(self._index) + len(new) > self.max_cached_words:
            self._clear()
            new = set(chain.from_iterable(words_of))
        for word in sorted(new):
            pieces = self._wordpiece(word)
            self._index[word] = len(self._lengths)
            self._lengths.append(len(pieces))
            self._pieces.extend(pieces)
        if new:
            self._table = None
        return np.fromiter(map(self._index.__getitem__, chain.from_iterable(words_of)), dtype=np.int64, count=total)

    def _wordpiece(self, word: str) -> list[int]:
        """`tokenizers`' ``WordPiece.tokenize``: greedy longest-match-first, [UNK] for a long or unsplittable word."""
        pieces = wordpiece_split(word, self.vocab, prefix=self.prefix, max_chars=self.max_chars)
        return [self.unk_id] if pieces is None else [self.vocab[piece] for piece in pieces]

    def _arrays(self) -> tuple[Any, Any, Any]:
        if self._table is None:
            lengths = np.asarray(self._lengths, dtype=np.int64)
            self._table = (np.cumsum(lengths) - lengths, lengths, np.asarray(self._pieces, dtype=np.int32))
        return self._table


def wordpiece_split(word: str, vocab: Container[str], *, prefix: str = "##",
                    max_chars: int = GOOGLE_MAX_INPUT_CHARS_PER_WORD, inside: bool = False) -> list[str] | None:
    """The pieces of one (normalized, pre-tokenized) word: WordPiece's greedy longest-match-first, as Google's
    ``WordpieceTokenizer`` and `tokenizers`' ``WordPiece`` model segment it; None where they give one [UNK] (a word
    longer than ``max_chars``, or one ``vocab`` cannot spell). ``inside``: the word continues another, so its
    first piece is a ``prefix`` piece too."""
    if len(word) > max_chars:
        return None
    pieces, start, n = [], 0, len(word)
    while start < n:
        end = n
        while start < end:
            piece = word[start:end] if start == 0 and not inside else prefix + word[start:end]
            if piece in vocab:
                break
            end -= 1
        else:
            return None
        pieces.append(piece)
        start = end
    return pieces


def concat_ranges(starts: Any, lengths: Any) -> Any:
    """Concatenation of ``arange(s, s + l)`` for every (s, l), without a Python loop."""
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(starts - (ends - lengths), lengths)


def _ascii_lowercase(config: dict) -> bool | None:
    """For a pipeline the ASCII fast path reproduces: whether it lower-cases; for any other, None."""
    model, normalizer, pre_tokenizer = config.get("model") or {}, config.get("normalizer"), config.get("pre_tokenizer")
    if model.get("type") != "WordPiece" or not normalizer or not pre_tokenizer:
        return None
    if pre_tokenizer != {"type": "BertPreTokenizer"} and pre_tokenizer not in _known_pre_tokenizers():
        return None
    if normalizer.get("type") == "BertNormalizer":
        return bool(normalizer.get("lowercase"))
    return _known_normalizers().get(json.dumps(normalizer, sort_keys=True))


@functools.cache
def _known_pre_tokenizers() -> list[dict]:
    return [json.loads(build_pre_tokenizer(handle_chinese_chars=chinese).__getstate__()) for chinese in (True, False)]


@functools.cache
def _known_normalizers() -> dict[str, bool]:
    """The JSON of every normalizer :func:`build_normalizer` makes -> whether it lower-cases."""
    known = {}
    for lowercase in (True, False):
        for strip in (None, True, False):
            for chinese in (True, False):
                normalizer = build_normalizer(lowercase=lowercase, strip_accents=strip, handle_chinese_chars=chinese)
                known[json.dumps(json.loads(normalizer.__getstate__()), sort_keys=True)] = lowercase
    return known
