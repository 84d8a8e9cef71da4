"""WordPiece vocabulary training and the original BERT tokenizer, as a Hugging Face pipeline.

Google published the BERT tokenizer (BasicTokenizer + greedy longest-match-first WordPiece) but no code to
learn a vocabulary.  This module learns one with the `tokenizers` library and wraps it in a transformers fast
tokenizer (:class:`HfBertTokenizer`, a :class:`transformers.BertTokenizer`) that ``save_pretrained`` writes in
Hub format and ``AutoTokenizer.from_pretrained`` reloads offline.

Vocabulary layout (fixed, whatever ``num_unused`` is)::

    0 [PAD]   1 [UNK]   2 [CLS]   3 [SEP]   4 [MASK]   5.. [unused0] .. [unused{num_unused-1}]
    then the alphabet: the characters, then the "##" form of each character seen inside a word, both in code
    point order; then the learned sub-words in the order they were learned.

This is transformers' own ``BertTokenizer()`` default layout; it differs from Google's released vocabularies
([PAD], [unused0..98], [UNK]=100, [CLS]=101, ...), which :func:`bert_tokenizer_from_vocab` loads unchanged.

The text pipeline follows Google's BasicTokenizer where the stock `tokenizers` BERT pipeline does not
(:mod:`hfbert.wordpiece` lists the differences).

Reproducibility: training is deterministic.  The same corpus (its texts in any order) and settings give the same
vocabulary, entry for entry, in every process, with any number of `tokenizers` threads.  Sub-words are learned as
the `tokenizers` WordPiece trainer learns them (BPE merges, the most frequent adjacent pair first), with this
tie-break: of equally frequent pairs, the one whose left piece comes first in the vocabulary layout above wins,
then the one whose right piece does (a character before any "##" form, code point order within each, learned
sub-words last, in the order learned).  The trainer breaks ties by its token ids, but numbers the "##" forms in
hash-map order, which changes from process to process; :func:`train_wordpiece` therefore counts the words first
(with the same `tokenizers` normalizer and pre-tokenizer, :func:`_word_counts`) and hands the trainer the whole
alphabet, ordered, as its first tokens.  With ``limit_alphabet``, of equally frequent characters the lower code
points are kept.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from tokenizers import Tokenizer, pre_tokenizers, trainers
from tokenizers.models import WordPiece
from tqdm.auto import tqdm
from transformers import BertTokenizer

from .inputs import Files, Rows, Stream, open_binary, text_source
from .tokenizer_settings import SPECIAL_TOKENS, TrainTokenizerArguments, check_train_args
from .wordpiece import (  # noqa: F401 -- WordCacheEncoder: also importable from here
    GOOGLE_MAX_INPUT_CHARS_PER_WORD,
    WordCacheEncoder,
    build_normalizer,
    build_pre_tokenizer,
)

__all__ = [
    "SPECIAL_TOKENS",
    "HfBertTokenizer",
    "TrainTokenizerArguments",
    "bert_tokenizer_from_vocab",
    "count_words",
    "learn_wordpiece",
    "load_vocab",
    "tokenize_dataset",
    "train_wordpiece",
]

class HfBertTokenizer(BertTokenizer):
    """A :class:`transformers.BertTokenizer` whose backend follows Google's published algorithm.

    It adds ``max_input_chars_per_word`` (saved in ``tokenizer_config.json``) and replaces the backend's
    normalizer and pre-tokenizer with :func:`build_normalizer` / :func:`build_pre_tokenizer`.  A directory it
    saves reloads as this class when ``hfbert`` is imported, and as transformers' generic
    ``TokenizersBackend`` (which reads ``tokenizer.json`` verbatim, so the encodings are the same) when not.

    Args:
        vocab (`dict[str, int]`, *optional*):
            The token -> id mapping; passed on to :class:`transformers.BertTokenizer`.
        do_lower_case (`bool`, *optional*, defaults to `True`):
            Lower-case the text (BasicTokenizer's option).
        tokenize_chinese_chars (`bool`, *optional*, defaults to `True`):
            Put spaces around every CJK character, so that each is a word of its own.
        strip_accents (`bool`, *optional*):
            Strip accents; `None` strips them exactly when lower-casing, as the original BERT does.
        max_input_chars_per_word (`int`, *optional*, defaults to 200):
            A longer word becomes one `[UNK]` (200 as in Google's code).
        **kwargs:
            Passed on to :class:`transformers.BertTokenizer` (special tokens, ``model_max_length``, ...).

    Raises:
        `TypeError`: ``max_input_chars_per_word`` is not an `int`.
        `ValueError`: ``max_input_chars_per_word`` is below 1.
    """

    def __init__(
        self,
        vocab: dict[str, int] | None = None,
        do_lower_case: bool = True,
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        max_input_chars_per_word: int = GOOGLE_MAX_INPUT_CHARS_PER_WORD,
        **kwargs: Any,
    ) -> None:
        if isinstance(max_input_chars_per_word, bool) or not isinstance(max_input_chars_per_word, int):
            raise TypeError(f"max_input_chars_per_word must be an int, got {max_input_chars_per_word!r}")
        if max_input_chars_per_word < 1:
            raise ValueError(f"max_input_chars_per_word must be >= 1, got {max_input_chars_per_word}")
        self.max_input_chars_per_word = max_input_chars_per_word
        # Saved in tokenizer_config.json so that the generic TokenizersBackend fallback also returns segment ids.
        kwargs.setdefault("model_input_names", list(self.model_input_names))
        super().__init__(
            vocab=vocab,
            do_lower_case=do_lower_case,
            tokenize_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents,
            max_input_chars_per_word=max_input_chars_per_word,
            **kwargs,
        )
        backend = self._tokenizer
        backend.normalizer = build_normalizer(
            lowercase=do_lower_case, strip_accents=strip_accents, handle_chinese_chars=tokenize_chinese_chars
        )
        backend.pre_tokenizer = build_pre_tokenizer(handle_chinese_chars=tokenize_chinese_chars)
        backend.model.max_input_chars_per_word = max_input_chars_per_word

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str]:
        """Write ``vocab.txt`` (one token per line, line number = id), Google's and transformers 4's format."""
        vocab = self.get_vocab()
        tokens = sorted(vocab, key=vocab.__getitem__)
        if [vocab[t] for t in tokens] != list(range(len(tokens))):
            raise ValueError("the vocabulary ids are not contiguous from 0; vocab.txt cannot represent them")
        name = (filename_prefix + "-" if filename_prefix else "") + "vocab.txt"
        path = os.path.join(save_directory, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(token + "\n" for token in tokens)
        return (path,)

    def _save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        file_names: tuple[str, ...],
        legacy_format: bool | None = None,
        filename_prefix: str | None = None,
    ) -> tuple[str, ...]:
        """tokenizer.json (the exact pipeline) plus vocab.txt and special_tokens_map.json for older readers."""
        saved = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        vocab_file = self.save_vocabulary(str(save_directory), filename_prefix)
        specials = {name: str(value) for name, value in self.special_tokens_map.items() if value is not None}
        specials_file = os.path.join(
            str(save_directory), (filename_prefix + "-" if filename_prefix else "") + "special_tokens_map.json"
        )
        with open(specials_file, "w", encoding="utf-8") as handle:
            json.dump(specials, handle, indent=2, sort_keys=True)
        return (*saved, *vocab_file, specials_file)


# --------------------------------------------------------------------------------------------------------------
# Loading an existing vocab.txt


def load_vocab(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read a BERT ``vocab.txt`` (one token per line, id = line number) into a dict.

    Lines are stripped as in Google's loader; a duplicated token is an error because it would silently shift
    every later id.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary file not found: {path}")
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not valid UTF-8 (byte {err.start}): {err.reason}") from err
    if lines and lines[-1] == "":
        lines.pop()
    vocab: dict[str, int] = {}
    for index, line in enumerate(lines):
        token = line.strip()
        if token in vocab:
            raise ValueError(f"{path}: token {token!r} on line {index + 1} already on line {vocab[token] + 1}")
        vocab[token] = index
    if not vocab:
        raise ValueError(f"vocabulary file is empty: {path}")
    return vocab


def bert_tokenizer_from_vocab(
    path: str | os.PathLike[str] | dict[str, int],
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    handle_chinese_chars: bool = True,
    max_input_chars_per_word: int = GOOGLE_MAX_INPUT_CHARS_PER_WORD,
    model_max_length: int = 512,
) -> HfBertTokenizer:
    """An :class:`HfBertTokenizer` over an existing ``vocab.txt`` (e.g. Google's) or a token -> id mapping, ids
    unchanged.

    Args:
        path (`str`, `os.PathLike` or `dict[str, int]`):
            A ``vocab.txt`` (one token per line, id = line number) or a token -> id mapping.
        lowercase (`bool`, *optional*, defaults to `True`):
            Lower-case the text.
        strip_accents (`bool`, *optional*):
            `None` strips accents exactly when lower-casing, as the original BERT does.
        handle_chinese_chars (`bool`, *optional*, defaults to `True`):
            Make every CJK character a word of its own.
        max_input_chars_per_word (`int`, *optional*, defaults to 200):
            A longer word becomes one `[UNK]` (200 as in Google's code).
        model_max_length (`int`, *optional*, defaults to 512):
            What ``truncation=True`` cuts to.

    Returns:
        [`HfBertTokenizer`]: the tokenizer over that vocabulary.

    Raises:
        `FileNotFoundError`: ``path`` is not a file.
        `ValueError`: the file is not UTF-8, repeats a token or is empty, or the vocabulary lacks one of the special
            tokens ([PAD], [UNK], [CLS], [SEP], [MASK]).
    """
    vocab = dict(path) if isinstance(path, dict) else load_vocab(path)
    missing = [tok for tok in SPECIAL_TOKENS if tok not in vocab]
    if missing:
        raise ValueError(f"{'the vocabulary' if isinstance(path, dict) else path} lacks the special tokens {missing}")
    return HfBertTokenizer(
        vocab=vocab,
        do_lower_case=lowercase,
        strip_accents=strip_accents,
        tokenize_chinese_chars=handle_chinese_chars,
        max_input_chars_per_word=max_input_chars_per_word,
        model_max_length=model_max_length,
    )


# --------------------------------------------------------------------------------------------------------------
# Corpus reading


@dataclass
class _CorpusStats:
    """What the training iterator saw: used to refuse an empty corpus and to report decode replacements."""

    sources: tuple[str, ...] = ()  # the files read, to name them when the corpus turns out empty
    texts: int = 0
    non_blank: int = 0
    chars: int = 0
    replaced_bytes: int = 0


def _iter_files(files: Sequence[str], on_decode_error: str, stats: _CorpusStats, batch: int) -> Iterator[list[str]]:
    for f in files:
        with open_binary(f) as handle:
            raw = handle.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            if on_decode_error == "raise":
                line = raw.count(b"\n", 0, err.start) + 1
                raise ValueError(
                    f"{f}:{line}: not valid UTF-8 (byte {err.start}: {err.reason}); fix the file or pass "
                    "on_decode_error='replace' to replace undecodable bytes with U+FFFD, which BERT then drops"
                ) from err
            text = raw.decode("utf-8", errors="replace")
            stats.replaced_bytes += text.count("\ufffd") - raw.count("\ufffd".encode())
        lines = text.splitlines()
        for start in range(0, len(lines), batch):
            yield lines[start : start + batch]


def _iter_rows(source: Rows | Stream, batch: int) -> Iterator[list[str]]:
    """A dataset column (map-style or streamed) in batches."""
    if isinstance(source, Rows):
        for start in range(0, len(source.rows), batch):
            yield source.rows[start : start + batch][source.column]
    else:
        for rows in source.items.iter(batch_size=batch):
            yield rows[source.column]


def _iter_strings(corpus: Iterable[Any], batch: int) -> Iterator[list[str]]:
    buffer: list[str] = []
    for item in corpus:
        buffer.append(item)
        if len(buffer) == batch:
            yield buffer
            buffer = []
    if buffer:
        yield buffer


def _corpus_batches(
    corpus: Any, text_column: str, on_decode_error: str, stats: _CorpusStats, batch: int = 1000
) -> Iterator[list[str]]:
    """Turn any supported corpus into batches of strings, validating and counting on the way; what the corpus is
    (files, a dataset, texts) is :func:`hfbert.inputs.text_source`'s reading."""
    if isinstance(corpus, (str, bytes, os.PathLike)):
        raise TypeError(
            "corpus must be a datasets.Dataset/IterableDataset, a list of file paths or an iterable of strings; "
            f"got a single {type(corpus).__name__} (wrap one file path in a list)"
        )
    meant = text_source(corpus, text_column=text_column, columns=(text_column,))
    if isinstance(meant, Files):
        stats.sources = meant.paths
        source = _iter_files(meant.paths, on_decode_error, stats, batch)
    elif meant.column is not None:  # a dataset's column
        source = _iter_rows(meant, batch)
    else:
        source = _iter_strings(meant.rows if isinstance(meant, Rows) else meant.items, batch)
    for texts in source:
        for text in texts:
            if not isinstance(text, str):
                raise TypeError(f"corpus items must be str, got {type(text).__name__}: {text!r:.60}")
            stats.texts += 1
            stats.chars += len(text)
            stats.non_blank += bool(text.strip())
        yield texts


# --------------------------------------------------------------------------------------------------------------
# Training


def _special_tokens(num_unused: int) -> list[str]:
    return [*SPECIAL_TOKENS, *(f"[unused{i}]" for i in range(num_unused))]


def _is_alphabet(token: str, prefix: str = "##") -> bool:
    return len(token) == 1 or (token.startswith(prefix) and len(token) == len(prefix) + 1)


def _fit_vocab_size(vocab: dict[str, int], vocab_size: int, num_specials: int, min_frequency: int) -> dict[str, int]:
    """Return exactly ``vocab_size`` entries, or explain why the corpus cannot give that many.

    The BPE-style trainer stops early when no pair reaches ``min_frequency`` and always keeps the whole
    alphabet, so it can return fewer or more entries than asked.  Extra entries are the latest merges, the
    rarest sub-words, and are dropped: WordPiece needs no merge closure, only the alphabet, to segment.
    """
    ordered = sorted(vocab, key=vocab.__getitem__)
    alphabet = sum(_is_alphabet(tok) for tok in ordered[num_specials:])
    floor = num_specials + alphabet
    if vocab_size < floor:
        raise ValueError(
            f"vocab_size ({vocab_size}) is smaller than the special tokens ({num_specials}) + the corpus "
            f"alphabet ({alphabet} characters and ## forms) = {floor}; raise vocab_size or set limit_alphabet"
        )
    if len(ordered) < vocab_size:
        raise ValueError(
            f"the corpus fills only {len(ordered)} of the {vocab_size} requested vocabulary entries "
            f"({num_specials} special, {alphabet} alphabet, {len(ordered) - floor} learned at min_frequency="
            f"{min_frequency}); use a larger corpus, a smaller vocab_size or a lower min_frequency"
        )
    # Keep the original order (specials, alphabet, merges); merges are kept until the budget is spent.
    budget = vocab_size - floor
    result: list[str] = []
    for index, tok in enumerate(ordered):
        if index < num_specials or _is_alphabet(tok):
            result.append(tok)
        elif budget > 0:
            result.append(tok)
            budget -= 1
    assert len(result) == vocab_size
    return {tok: i for i, tok in enumerate(result)}


def _training_backend(
    lowercase: bool, strip_accents: bool | None, handle_chinese_chars: bool, max_input_chars_per_word: int
) -> Tokenizer:
    backend = Tokenizer(WordPiece(unk_token="[UNK]", max_input_chars_per_word=max_input_chars_per_word))
    backend.normalizer = build_normalizer(
        lowercase=lowercase, strip_accents=strip_accents, handle_chinese_chars=handle_chinese_chars
    )
    backend.pre_tokenizer = build_pre_tokenizer(handle_chinese_chars=handle_chinese_chars)
    return backend


# The characters the BERT normalizer turns into a plain space before any other step.
_TO_SPACE = str.maketrans("\t\n\r", "   ")


def _chunk_counts(batches: Iterable[list[str]]) -> Counter[str]:
    """How often each space-delimited chunk of text occurs in the corpus (tabs and line breaks are spaces too).

    A chunk is the unit :func:`_word_counts` sends through the BERT pipeline once, however often it occurs.
    """
    counts: Counter[str] = Counter()
    for texts in batches:
        joined = " ".join(texts)  # the end of a text ends its last word, as a space does
        if "\t" in joined or "\n" in joined or "\r" in joined:
            joined = joined.translate(_TO_SPACE)
        counts.update(joined.split(" "))
    counts.pop("", None)
    return counts


def _word_counts(chunks: Counter[str], backend: Tokenizer) -> dict[str, int]:
    """The words BERT's pipeline makes of the corpus (normalized, pre-tokenized) and how often each occurs.

    These are exactly the counts the `tokenizers` trainer takes from the texts themselves, for less work: each
    distinct chunk is normalized once, and each distinct space-delimited piece of the result is pre-tokenized
    once, its words counting as often as the piece occurs.  Cutting at those spaces changes no word: the
    normalizer turns spaces, tabs and line breaks into spaces first and otherwise works character by character
    (the final-sigma rule looks at neighbours, but never across a space), and the pre-tokenizer ends a word at
    every space and drops it.  ``tests/test_vocab_determinism.py`` checks the equality on text made to break it.
    """
    normalize, pre_tokenize = backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str
    # Chunks that occur equally often are normalized, then cut, together: one C-level split and count per group.
    by_count: dict[int, list[str]] = {}
    for chunk, count in chunks.items():
        by_count.setdefault(count, []).append(normalize(chunk))
    pieces: Counter[str] = Counter()
    for count, normalized in by_count.items():
        for piece, times in Counter(" ".join(normalized).split(" ")).items():
            pieces[piece] += times * count
    pieces.pop("", None)
    words: dict[str, int] = {}
    for piece, count in pieces.items():
        for word, _ in pre_tokenize(piece):
            words[word] = words.get(word, 0) + count
    return words


def _initial_alphabet(
    words: dict[str, int], limit_alphabet: int | None, prefix: str = "##"
) -> tuple[list[str], list[str]]:
    """The alphabet training starts from, in its vocabulary order: the characters the words contain, and the
    ``##`` form of each character that occurs inside a word (not first), both in code point order.

    ``limit_alphabet`` keeps that many characters, the most frequent (counted over every word occurrence); among
    equally frequent ones, the lower code point.  This is the `tokenizers` trainer's alphabet, ordered: it sorts
    the characters itself but numbers the ``##`` forms in hash-map order and breaks count ties at the limit in
    hash-map order too.
    """
    frequency: Counter[str] = Counter()
    inner: set[str] = set()
    for word, count in words.items():
        for char in word:
            frequency[char] += count
        inner.update(word[1:])
    characters = sorted(frequency)
    if limit_alphabet is not None and len(characters) > limit_alphabet:
        # A stable sort: equally frequent characters stay in code point order.
        characters = sorted(sorted(characters, key=lambda char: -frequency[char])[:limit_alphabet])
    continuations = [prefix + char for char in characters if char in inner]
    return characters, continuations


def _as_texts(words: dict[str, int], size: int = 1 << 16) -> Iterator[str]:
    """The words as texts again, each word as often as it occurs, separated by spaces, in texts of about ``size``
    characters: what the trainer counts with a whitespace split, so that nothing is normalized twice."""
    texts: list[str] = []
    length = 0
    for word in sorted(words):
        left, per_text = words[word], max(1, size // (len(word) + 1))
        while left:
            times = min(left, per_text)
            texts.append((word + " ") * times)
            left -= times
            length += times * (len(word) + 1)
            if length >= size:
                yield "".join(texts)
                texts, length = [], 0
    if texts:
        yield "".join(texts)


def train_wordpiece(
    corpus: Any,
    vocab_size: int = 30522,
    *,
    lowercase: bool = True,
    strip_accents: bool | None = None,
    handle_chinese_chars: bool = True,
    min_frequency: int = 2,
    num_unused: int = 0,
    limit_alphabet: int | None = None,
    max_input_chars_per_word: int = GOOGLE_MAX_INPUT_CHARS_PER_WORD,
    text_column: str = "text",
    on_decode_error: str = "raise",
    show_progress: bool = False,
    model_max_length: int = 512,
) -> HfBertTokenizer:
    """Learn a WordPiece vocabulary of exactly ``vocab_size`` entries and return the BERT tokenizer over it.

    The same corpus and settings give the same vocabulary, entry for entry, in every process (see the module
    docstring: how ties are broken); the order of the texts in the corpus does not matter.

    Args:
        corpus (`datasets.Dataset`, `datasets.IterableDataset`, `list` of files or iterable of `str`):
            A ``datasets.Dataset`` / ``IterableDataset`` (column ``text_column``), a list of UTF-8 text
            files, globs or fsspec URLs (``.gz`` too; ``Path`` objects, or strings that name files or look like
            paths: :func:`hfbert.inputs.names_files`), or any iterable of strings (one text per item; a generator
            is always read as texts).  It is read once; memory grows with its number of distinct
            space-separated chunks, not with its size.
        vocab_size (`int`, *optional*, defaults to 30522):
            Total size, specials and ``[unused*]`` included.  The corpus must be able to fill it:
            otherwise a ``ValueError`` says how many entries it could give.
        lowercase (`bool`, *optional*, defaults to `True`):
            Lower-case the text (a BasicTokenizer option).
        strip_accents (`bool`, *optional*):
            Strip accents; `None` strips exactly when lower-casing, as the original BERT does.
        handle_chinese_chars (`bool`, *optional*, defaults to `True`):
            Make every CJK character a word of its own (a BasicTokenizer option).
        min_frequency (`int`, *optional*, defaults to 2):
            A pair must occur this often to be merged into a new sub-word.
        num_unused (`int`, *optional*, defaults to 0):
            ``[unused0..]`` slots reserved after the specials (ids 5..), for tokens added later
            without resizing the embeddings.
        limit_alphabet (`int`, *optional*):
            Keep only this many most frequent characters (``None``: keep all, so Chinese and
            Japanese text is not turned into [UNK]); of equally frequent ones, the lower code points.
        max_input_chars_per_word (`int`, *optional*, defaults to 200):
            Longer words become one [UNK] (200 as in Google's code).
        text_column (`str`, *optional*, defaults to `"text"`):
            The column read from a ``datasets`` corpus.
        on_decode_error (`str`, *optional*, defaults to `"raise"`):
            ``"raise"`` rejects a file that is not UTF-8, naming it; ``"replace"`` turns
            undecodable bytes into U+FFFD (dropped by BERT's text cleaning) and warns with their count.
        show_progress (`bool`, *optional*, defaults to `False`):
            Draw the `tokenizers` progress bar (the CLI turns it on).
        model_max_length (`int`, *optional*, defaults to 512):
            What ``truncation=True`` cuts to; 512 is BERT's number of learned positions.

    Returns:
        [`HfBertTokenizer`]: the tokenizer over the learned vocabulary.

    Raises:
        `ValueError`: a setting is out of range, the corpus is empty (or nothing in it survives BERT's text
            cleaning), a file is not UTF-8 (with ``on_decode_error="raise"``), or the corpus cannot fill
            ``vocab_size``.
        `TypeError`: an integer setting is not an `int`.
    """
    check_train_args(vocab_size, min_frequency, num_unused, limit_alphabet, max_input_chars_per_word)
    backend = _training_backend(lowercase, strip_accents, handle_chinese_chars, max_input_chars_per_word)
    words = count_words(corpus, backend, text_column=text_column, on_decode_error=on_decode_error,
                        show_progress=show_progress)
    vocab = learn_wordpiece(words, vocab_size, min_frequency=min_frequency, num_unused=num_unused,
                            limit_alphabet=limit_alphabet, show_progress=show_progress)
    return bert_tokenizer_from_vocab(vocab, lowercase=lowercase, strip_accents=strip_accents,
                                     handle_chinese_chars=handle_chinese_chars, model_max_length=model_max_length,
                                     max_input_chars_per_word=max_input_chars_per_word)


def count_words(corpus: Any, backend: Tokenizer, *, text_column: str = "text", on_decode_error: str = "raise",
                show_progress: bool = False) -> dict[str, int]:
    """The words ``backend``'s normalizer and pre-tokenizer make of ``corpus`` (any corpus :func:`train_wordpiece`
    takes, read once), and how often each occurs. Raises ``ValueError`` for an empty corpus and, with
    ``on_decode_error="raise"``, for a file that is not UTF-8."""
    if on_decode_error not in ("raise", "replace"):
        raise ValueError(f"on_decode_error must be 'raise' or 'replace', got {on_decode_error!r}")
    stats = _CorpusStats()
    batches = _corpus_batches(corpus, text_column, on_decode_error, stats)
    if show_progress:
        batches = tqdm(batches, desc="Reading the corpus", unit=" batches")
    chunks = _chunk_counts(batches)
    if stats.non_blank == 0:
        where = f" ({', '.join(stats.sources)})" if stats.sources else ""
        raise ValueError(f"the corpus{where} is empty: {stats.texts} texts, none with non-whitespace characters")
    if stats.replaced_bytes:
        warnings.warn(
            f"replaced {stats.replaced_bytes} undecodable byte sequence(s) with U+FFFD while reading the corpus",
            stacklevel=3,
        )
    words = _word_counts(chunks, backend)
    if not words:
        raise ValueError("the corpus contains no characters that survive BERT's text cleaning")
    return words


def learn_wordpiece(words: dict[str, int], vocab_size: int, *, min_frequency: int = 2, num_unused: int = 0,
                    limit_alphabet: int | None = None, show_progress: bool = False, fill: bool = True
                    ) -> dict[str, int]:
    """The WordPiece vocabulary (token -> id, laid out as the module docstring says) learned from word counts
    (:func:`count_words`): exactly ``vocab_size`` entries; with ``fill=False``, whatever the trainer learns when
    asked for that many (fewer when the words cannot give them, more when the alphabet alone exceeds them)."""
    specials = _special_tokens(num_unused)
    # The trainer numbers its special tokens first, in the order given: naming the whole alphabet as special
    # tokens fixes every id it starts from, hence its tie-breaks.  Its merge loop is otherwise a function of the
    # counts and those ids; the one exception, two queue entries for one pair with equal counts, needs a sub-word
    # that two different merges make, which merging left to right all but rules out (none on the shipped corpus,
    # People's Daily or thousands of random two-letter corpora, checked with a Python copy of the loop).
    characters, continuations = _initial_alphabet(words, limit_alphabet)
    # The trainer's own default is "no limit" (it rejects an explicit None); it keeps the initial alphabet first.
    alphabet_limit = {} if limit_alphabet is None else {"limit_alphabet": limit_alphabet,
                                                         "initial_alphabet": characters}
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[*specials, *characters, *continuations],
        continuing_subword_prefix="##",
        show_progress=show_progress,
        **alphabet_limit,
    )
    counter = Tokenizer(WordPiece(unk_token="[UNK]"))
    counter.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # the words are BERT's already; spaces part them
    counter.train_from_iterator(_as_texts(words), trainer=trainer)
    learned = counter.get_vocab(with_added_tokens=False)
    if not fill:
        return {token: i for i, token in enumerate(sorted(learned, key=learned.__getitem__))}
    return _fit_vocab_size(learned, vocab_size, len(specials), min_frequency)


# --------------------------------------------------------------------------------------------------------------
# Tokenizing a dataset


def _tokenize_batch(
    batch: dict[str, list],
    tokenizer: Any,
    text_column: str,
    add_special_tokens: bool,
    encoder: WordCacheEncoder | None = None,
    as_arrays: bool = False,
) -> dict:
    texts = batch[text_column]
    if encoder is not None and all(isinstance(text, str) for text in texts):
        ids, lengths = encoder.encode(texts)
        rows = np.split(ids, np.cumsum(lengths)[:-1])
        # A map-style dataset turns a list of arrays into its list<int32> column in one concatenation; a
        # streamed one hands the rows to the user as they are, so they stay lists as on the slow path.
        return {"input_ids": rows if as_arrays else [row.tolist() for row in rows]}
    encoded = tokenizer(
        texts,
        add_special_tokens=add_special_tokens,
        return_attention_mask=False,
        return_token_type_ids=False,
    )
    return {"input_ids": encoded["input_ids"]}


def tokenize_dataset(
    dataset: Any,
    tokenizer: Any,
    text_column: str = "text",
    *,
    num_proc: int | None = None,
    batch_size: int = 1000,
    add_special_tokens: bool = False,
    keep_columns: bool = False,
) -> Any:
    """Add ``input_ids`` to every row with one batched ``Dataset.map`` (``num_proc`` worker processes).

    Special tokens are off by default: pretraining builds [CLS] A [SEP] B [SEP] itself from per-line ids.
    The text column (and every other column unless ``keep_columns``) is removed to keep the cache small.

    Args:
        dataset (`datasets.Dataset` or `datasets.IterableDataset`):
            The texts; an ``IterableDataset`` is tokenized lazily.
        tokenizer (`PreTrainedTokenizerBase`):
            The tokenizer to encode with.
        text_column (`str`, *optional*, defaults to `"text"`):
            The column holding the texts.
        num_proc (`int`, *optional*):
            Worker processes for ``Dataset.map``; not supported (other than 1) for an ``IterableDataset``.
        batch_size (`int`, *optional*, defaults to 1000):
            Rows per batch of the map.
        add_special_tokens (`bool`, *optional*, defaults to `False`):
            Add [CLS] / [SEP] to every row.
        keep_columns (`bool`, *optional*, defaults to `False`):
            Keep the columns other than the text column.

    Returns:
        `datasets.Dataset` or `datasets.IterableDataset` (as given): the rows with an ``input_ids`` column.

    Raises:
        `TypeError`: ``dataset`` is neither a ``Dataset`` nor an ``IterableDataset``.
        `ValueError`: the text column is missing, ``batch_size`` or ``num_proc`` is below 1, or ``num_proc`` is
            given for an ``IterableDataset``.
    """
    if not isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        raise TypeError(f"dataset must be a datasets.Dataset or IterableDataset, got {type(dataset).__name__}")
    if dataset.column_names is not None and text_column not in dataset.column_names:
        raise ValueError(f"text column {text_column!r} not in the dataset's columns {dataset.column_names}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    # Without special tokens the ids are plain encodings: the exact, faster WordCacheEncoder computes them.
    encoder = None
    if not add_special_tokens and hasattr(tokenizer, "backend_tokenizer"):
        encoder = WordCacheEncoder(tokenizer.backend_tokenizer.to_str())
        encoder = encoder if encoder.fast else None
    fn_kwargs = {"tokenizer": tokenizer, "text_column": text_column, "add_special_tokens": add_special_tokens,
                 "encoder": encoder, "as_arrays": isinstance(dataset, datasets.Dataset)}
    kwargs: dict[str, Any] = {
        "batched": True,
        "batch_size": batch_size,
        "fn_kwargs": fn_kwargs,
        "remove_columns": [text_column] if keep_columns else dataset.column_names,
    }
    if isinstance(dataset, datasets.Dataset):
        if num_proc is not None and num_proc < 1:
            raise ValueError(f"num_proc must be >= 1 or None, got {num_proc}")
        kwargs.update(num_proc=num_proc, desc="Tokenizing")
    elif num_proc not in (None, 1):
        raise ValueError("num_proc is not supported for an IterableDataset (it is tokenized lazily)")
    return dataset.map(_tokenize_batch, **kwargs)
