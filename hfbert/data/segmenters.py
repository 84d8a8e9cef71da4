"""Word segmenters for whole-word masking, and the word boundaries they induce on WordPiece tokens.

Whole-word masking needs to know which tokens form one word.  For English the WordPiece ``##`` prefix says so.
Chinese BERT vocabularies split text into single characters with no ``##`` marks, so without a segmenter every
character is its own "word" (google-research/bert#780), and transformers 5 groups by character-offset gaps, which
makes a whole unspaced passage one word.  Here a *segmenter* is any callable ``text -> list of words`` whose words
appear in ``text`` in order (whitespace between them is ignored).  Two adapters ship:

* :class:`PreSegmented` for text that is already segmented with spaces (People's Daily via
  :func:`hfbert.data.documents.read_people_daily`);
* :class:`JiebaSegmenter` for raw Chinese when the optional ``jieba`` package is installed.

Boundaries are mapped onto tokens through the fast tokenizer's character offsets (:func:`word_starts_from_offsets`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["JiebaSegmenter", "PreSegmented", "Segmenter", "word_starts_from_offsets", "word_char_ids"]

Segmenter = Callable[[str], Sequence[str]]


class PreSegmented:
    """Segmenter for text whose words are already separated by whitespace (the segmentation is kept as given).

    Takes no arguments; call it on a text to get its words.
    """

    def __call__(self, text: str) -> list[str]:
        """The words of ``text``.

        Args:
            text (`str`):
                Words separated by whitespace.

        Returns:
            `list[str]`: ``text.split()``.
        """
        return text.split()

    def __repr__(self) -> str:
        return "PreSegmented()"


class JiebaSegmenter:
    """Adapter for the ``jieba`` Chinese segmenter (optional: ``pip install jieba``; not a dependency of hfbert).

    jieba is imported on first use so that building a segmenter object never fails on machines without it.

    Args:
        hmm (`bool`, *optional*, defaults to `True`):
            Toggles jieba's HMM-based discovery of unknown words.
    """

    def __init__(self, hmm: bool = True):
        self.hmm = hmm
        self._cut = None

    def __call__(self, text: str) -> list[str]:
        """The words jieba cuts ``text`` into.

        Args:
            text (`str`):
                The text.

        Returns:
            `list[str]`: the words, whitespace-only ones left out.

        Raises:
            `ImportError`: jieba is not installed.
        """
        if self._cut is None:
            try:
                import jieba
            except ImportError:
                raise ImportError(
                    "JiebaSegmenter needs the optional package jieba: `pip install jieba`, "
                    "or pass pre-segmented text with PreSegmented()"
                ) from None
            self._cut = jieba.lcut
        return [word for word in self._cut(text, HMM=self.hmm) if word.strip()]

    def __getstate__(self) -> dict:
        # The module function is re-imported in worker processes rather than pickled.
        return {"hmm": self.hmm, "_cut": None}

    def __repr__(self) -> str:
        return f"JiebaSegmenter(hmm={self.hmm})"


def word_char_ids(text: str, words: Sequence[str]) -> np.ndarray:
    """Word index of every character of ``text`` (-1 for whitespace between words).

    Words are located left to right with ``str.find``, so a segmenter may drop whitespace but must not rewrite
    the text; a word that cannot be found is a segmenter bug and raises ValueError naming it.
    """
    ids = np.full(len(text), -1, dtype=np.int32)
    position = 0
    for index, word in enumerate(words):
        if not word:
            continue
        found = text.find(word, position)
        if found < 0:
            raise ValueError(
                f"segmenter returned the word {word!r} which is not in the text after position {position}: "
                f"{text[:80]!r}"
            )
        ids[found : found + len(word)] = index
        position = found + len(word)
    return ids


def word_starts_from_offsets(char_word: np.ndarray, offsets: Sequence[tuple[int, int]]) -> np.ndarray:
    """1 where a token begins a new word, 0 where it continues the previous token's word.

    A token starts a new word when its first character belongs to a word after the last word touched by the
    previous token; a token that straddles a boundary therefore merges the two words rather than splitting one.
    Characters outside every word (-1) count as their own word.
    """
    if len(offsets) == 0:
        return np.zeros(0, dtype=np.int8)
    bounds = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    # Renumber characters so that every word, and every character outside a word, gets its own increasing key.
    change = np.ones(len(char_word), dtype=bool)
    change[1:] = (char_word[1:] != char_word[:-1]) | (char_word[1:] < 0)
    key = np.append(np.cumsum(change), len(char_word) + 1)
    first = key[np.minimum(bounds[:, 0], len(char_word))]
    last = key[np.clip(bounds[:, 1] - 1, bounds[:, 0], len(char_word))]
    starts = np.ones(len(bounds), dtype=np.int8)
    starts[1:] = first[1:] > last[:-1]
    return starts
