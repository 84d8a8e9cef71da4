"""A domain vocabulary for a pretrained BERT: WordPiece entries learned from domain text, appended to the model's own
vocabulary, and the embedding rows they start from.

Extending a tokenizer (:func:`extend_wordpiece`; ``hfbert train-tokenizer --extend MODEL --add N``):

1. The domain text is cut into words by MODEL's own normalizer and pre-tokenizer (its casing, its accents), and a
   WordPiece vocabulary as large as the extended one (MODEL's size plus N) is learned from those words with
   hfbert's deterministic trainer (:func:`hfbert.tokenization.learn_wordpiece`; a small text gives fewer entries).
2. Its entries MODEL lacks are the candidates. One that MODEL's vocabulary cannot spell without [UNK] is left out:
   its embedding could only start as [UNK]'s.
3. The candidates are ranked by the tokens they save on the domain text. Every word is segmented with MODEL's
   vocabulary plus the candidates, greedy longest-match-first as the tokenizer will; a candidate's saving is how
   many more tokens its words would need without it, over every occurrence. Candidates that save nothing are
   dropped; while more than N remain, the half of the excess that saves least is dropped; and the savings are
   counted again after each drop, since removing an entry changes which others the words use.
4. The survivors, N at most, are appended after MODEL's last entry in the order of their savings (most first, ties
   in the order the trainer learned them). Ids 0..len(MODEL)-1 keep their tokens, and the new entries are WordPiece
   entries of ``vocab.txt`` (``##`` forms continue words), not added tokens, so domain words split into fewer pieces
   and the rest of the text exactly as before.

The extended tokenizer is an :class:`~hfbert.tokenization.HfBertTokenizer` (Google's text pipeline) with MODEL's
casing, accent and CJK settings and word-length limit. The same model, text and settings give the same entries in
the same order.

Growing a model (:func:`grow_embeddings`; ``hfbert pretrain --init_from MODEL --tokenizer DIR``, DIR's vocabulary an
extension of MODEL's: :func:`check_extension`): the word embeddings and the MLM output bias gain one row per new
entry, started by one of :data:`EMBEDDING_METHODS`:

- ``fvt``: Fast Vocabulary Transfer (Gee et al., 2022, "Fast Vocabulary Transfer for Language Model
  Compression"): the new row is the mean of the rows of the pieces MODEL's vocabulary splits the entry into, and its
  MLM bias the mean of those pieces' biases. A word-initial entry is split as a word; a ``##`` entry as the
  continuation of one (its text after ``##``, every piece a ``##`` piece: ``##hyped`` -> ``##hy``, ``##ped``), which
  is how the old tokenizer met that text inside words. An entry the old vocabulary cannot spell starts as [UNK]'s row.
- ``mean``: transformers' ``resize_token_embeddings(n, mean_resizing=True)``: every new row drawn around the mean of
  all old rows (a normal with their covariance scaled by 1e-9), and each new bias the mean of the old biases (what
  transformers gives an untied head; it leaves a tied one's at 0).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Container, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer
from transformers.utils import logging as transformers_logging

from .arguments import run_command
from .hub import HubDownloadError
from .model_source import check_special_ids, locate, source_tokenizer
from .tokenization import (SPECIAL_TOKENS, HfBertTokenizer, bert_tokenizer_from_vocab, count_words, learn_wordpiece,
                           train_wordpiece)
from .tokenizer_settings import command_parser
from .wordpiece import wordpiece_split

__all__ = ["EMBEDDING_METHODS", "EmbeddingGrowth", "VocabularyExtension", "check_extension", "extend_wordpiece",
           "grow_embeddings", "load_extension", "main", "old_pieces"]

#: How the rows of new entries start (``hfbert pretrain --new_embeddings``), as the card says it.
EMBEDDING_METHODS = {
    "fvt": "the mean of the embeddings (and MLM biases) of the pieces the original vocabulary splits each new entry "
           "into (FVT, Gee et al. 2022)",
    "mean": "transformers' mean resizing: the mean of all original embeddings (and MLM biases)",
}


@dataclass(frozen=True)
class _WordPiece:
    """A tokenizer's WordPiece model: its entries in id order, the continuation prefix, the word-length limit and
    the unknown token."""

    tokens: tuple[str, ...]
    prefix: str
    max_chars: int
    unk: str


def _wordpiece_of(tokenizer: Any, what: str) -> _WordPiece:
    config = json.loads(tokenizer.backend_tokenizer.to_str())
    model = config.get("model") or {}
    if model.get("type") != "WordPiece":
        raise ValueError(f"{what} is not a WordPiece tokenizer (its model is {model.get('type')})")
    vocab = model["vocab"]
    tokens = tuple(sorted(vocab, key=vocab.__getitem__))
    if [vocab[token] for token in tokens] != list(range(len(tokens))):
        raise ValueError(f"{what}: the WordPiece ids are not contiguous from 0")
    beyond = sorted(added["content"] for added in config.get("added_tokens", []) if added["id"] >= len(tokens))
    if beyond:
        raise ValueError(f"{what} has added tokens beyond its WordPiece vocabulary ({', '.join(beyond[:3])}); a "
                         "vocabulary can be extended, and checked as an extension, only in its vocab.txt")
    return _WordPiece(tokens, model["continuing_subword_prefix"], model["max_input_chars_per_word"], model["unk_token"])


def old_pieces(token: str, vocab: Container[str], *, prefix: str = "##", max_chars: int = 200) -> list[str] | None:
    """The pieces ``vocab`` splits a vocabulary entry into, None where it cannot spell it: a ``##`` entry is split
    as the continuation of a word (its text after the prefix, every piece a prefix piece), any other as a word."""
    inside = token.startswith(prefix) and len(token) > len(prefix)
    return wordpiece_split(token[len(prefix):] if inside else token, vocab, prefix=prefix, max_chars=max_chars,
                           inside=inside)


def _lowercases(tokenizer: Any) -> bool:
    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    return ids("Ab") == ids("ab")


# --------------------------------------------------------------------------------------------------------------
# Extending a tokenizer


@dataclass
class VocabularyExtension:
    """What :func:`extend_wordpiece` made: the extended ``tokenizer``, the ``added`` entries in id order with the
    tokens each ``saved`` on the domain text (as the ranking finally counted them), and the domain text's word
    occurrences (BERT's words: a punctuation mark is one) and their tokens with the old and the new vocabulary."""

    tokenizer: HfBertTokenizer
    added: list[str]
    saved: list[int]
    words: int
    tokens_before: int
    tokens_after: int

    @property
    def tokens_per_word(self) -> tuple[float, float]:
        """Tokens per word on the domain text, (before, after)."""
        return self.tokens_before / self.words, self.tokens_after / self.words


def extend_wordpiece(tokenizer: Any, corpus: Any, add: int, *, min_frequency: int = 2,
                     limit_alphabet: int | None = None, text_column: str = "text", on_decode_error: str = "raise",
                     show_progress: bool = False) -> VocabularyExtension:
    """``tokenizer``'s vocabulary with at most ``add`` WordPiece entries learned from ``corpus`` appended (see the
    module docstring: how they are learned and ranked).

    Args:
        tokenizer: a fast BERT (WordPiece) tokenizer, e.g. :func:`hfbert.model_source.source_tokenizer`'s.
        corpus: the domain text, any corpus :func:`hfbert.train_wordpiece` takes.
        add: the most entries to add; fewer when fewer save tokens.
        min_frequency / limit_alphabet: the domain vocabulary's training settings (:func:`hfbert.train_wordpiece`).
        text_column / on_decode_error / show_progress: how the corpus is read (:func:`hfbert.train_wordpiece`).
    """
    if isinstance(add, bool) or not isinstance(add, int) or add < 1:
        raise ValueError(f"add must be an int >= 1, got {add!r}")
    base = _wordpiece_of(tokenizer, "the tokenizer to extend")
    if base.prefix != "##":
        raise ValueError(f"the tokenizer to extend marks continuations with {base.prefix!r}, not '##'")
    known = frozenset(base.tokens)
    words = count_words(corpus, tokenizer.backend_tokenizer, text_column=text_column,
                        on_decode_error=on_decode_error, show_progress=show_progress)
    domain = learn_wordpiece(words, len(base.tokens) + add, min_frequency=min_frequency, limit_alphabet=limit_alphabet,
                             show_progress=show_progress, fill=False)
    spell = {"prefix": base.prefix, "max_chars": base.max_chars}
    candidates = [token for token in domain if token not in known and token not in SPECIAL_TOKENS
                  and old_pieces(token, known, **spell) is not None]
    added, saved = _rank(candidates, words, base, add)
    lowercase, strip_accents, chinese = _pipeline_settings(tokenizer)
    max_length = tokenizer.model_max_length if tokenizer.model_max_length <= 1_000_000 else 512
    extended = bert_tokenizer_from_vocab({token: i for i, token in enumerate([*base.tokens, *added])},
                                         lowercase=lowercase, strip_accents=strip_accents,
                                         handle_chinese_chars=chinese, max_input_chars_per_word=base.max_chars,
                                         model_max_length=max_length)
    return VocabularyExtension(extended, added, [saved[token] for token in added], sum(words.values()),
                               _tokens(words, known, base), _tokens(words, known | set(added), base))


def _pipeline_settings(tokenizer: Any) -> tuple[bool, bool | None, bool]:
    """(lowercase, strip_accents, handle_chinese_chars) of a BERT tokenizer, its casing probed when not recorded."""
    settings = tokenizer.init_kwargs
    lowercase = settings.get("do_lower_case")
    if not isinstance(lowercase, bool):
        lowercase = _lowercases(tokenizer)
    return lowercase, settings.get("strip_accents"), settings.get("tokenize_chinese_chars", True)


def _tokens(words: dict[str, int], vocab: Container[str], base: _WordPiece) -> int:
    """The tokens of every word occurrence with ``vocab`` (a word it cannot spell is one [UNK])."""
    total = 0
    for word, count in words.items():
        pieces = wordpiece_split(word, vocab, prefix=base.prefix, max_chars=base.max_chars)
        total += count * (1 if pieces is None else len(pieces))
    return total


def _rank(candidates: list[str], words: dict[str, int], base: _WordPiece, add: int) -> tuple[list[str], dict]:
    """At most ``add`` candidates, most tokens saved first, and what each saves (module docstring, step 3)."""
    order = {token: i for i, token in enumerate(candidates)}  # the trainer's order: the tie-break
    known = set(base.tokens)
    # A word that is an entry of its own is segmented as that entry whatever is added: it cannot use a candidate.
    words = {word: count for word, count in words.items() if word not in known}
    keep = candidates
    while True:
        saved = _savings(keep, words, base)
        useful = [token for token in keep if saved[token] > 0]
        if len(useful) == len(keep) and len(keep) <= add:
            return sorted(keep, key=lambda token: (-saved[token], order[token])), saved
        if len(useful) < len(keep):
            keep = useful
        else:
            ranked = sorted(keep, key=lambda token: (-saved[token], order[token]))
            keep = sorted(ranked[:len(keep) - math.ceil((len(keep) - add) / 2)], key=order.__getitem__)


def _savings(candidates: list[str], words: dict[str, int], base: _WordPiece) -> dict[str, int]:
    """How many tokens each candidate saves: for every word whose segmentation uses it, the tokens of the word
    without it minus the tokens with it, times the word's count (a word spelled only with it counts its letters)."""
    vocab = set(base.tokens).union(candidates)
    saved = dict.fromkeys(candidates, 0)
    for word, count in words.items():
        pieces = wordpiece_split(word, vocab, prefix=base.prefix, max_chars=base.max_chars)
        if pieces is None:
            continue
        for token in saved.keys() & pieces:
            vocab.remove(token)
            without = wordpiece_split(word, vocab, prefix=base.prefix, max_chars=base.max_chars)
            vocab.add(token)
            saved[token] += count * ((len(word) if without is None else len(without)) - len(pieces))
    return saved


# --------------------------------------------------------------------------------------------------------------
# Checking an extension and growing a model


def check_extension(tokenizer: Any, base: Any, *, what: str, base_what: str) -> int:
    """How many entries ``tokenizer``'s vocabulary adds to ``base``'s; ``ValueError`` of one line naming both when it
    is not an extension: fewer entries, another token at some id of ``base``, entries outside the WordPiece
    vocabulary, other special ids or other casing."""
    ours = _wordpiece_of(tokenizer, what).tokens
    theirs = _wordpiece_of(base, base_what).tokens
    if len(ours) < len(theirs):
        raise ValueError(f"{what} has {len(ours)} entries, fewer than the {len(theirs)} of {base_what}: it does not "
                         "extend that vocabulary")
    for i, token in enumerate(theirs):
        if ours[i] != token:
            raise ValueError(f"{what} does not extend the vocabulary of {base_what}: id {i} is {ours[i]!r} in it but "
                             f"{token!r} in {base_what}")
    check_special_ids(tokenizer, base, what, base_what)
    ours_lower, theirs_lower = _pipeline_settings(tokenizer)[0], _pipeline_settings(base)[0]
    if ours_lower != theirs_lower:
        cased = {True: "lower-cases", False: "keeps case"}
        raise ValueError(f"{what} {cased[ours_lower]} but {base_what} {cased[theirs_lower]}")
    return len(ours) - len(theirs)


def load_extension(path: str | Path, base: Any, *, base_what: str) -> Any:
    """The tokenizer saved in ``path``, checked to extend ``base`` (:func:`check_extension`); ``ValueError`` of one
    line otherwise."""
    if not Path(path).is_dir():
        raise ValueError(f"{path}: no such folder")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: the tokenizer does not load: {str(err).splitlines()[0]}") from None
    if not tokenizer.is_fast:
        raise ValueError(f"{path} has a slow tokenizer; hfbert needs a fast one (tokenizer.json)")
    check_extension(tokenizer, base, what=str(path), base_what=base_what)
    return tokenizer


@dataclass
class EmbeddingGrowth:
    """What :func:`grow_embeddings` did: the ``method``, the vocabulary's size before, the entries ``added``, and
    those the old vocabulary cannot spell (their FVT rows are [UNK]'s)."""

    method: str
    base_size: int
    added: int
    unspellable: list[str]

    def line(self) -> str:
        line = (f"the vocabulary grows from {self.base_size} to {self.base_size + self.added} entries; the new "
                f"embeddings start as {EMBEDDING_METHODS[self.method]}")
        if self.unspellable:
            line += (f"; {len(self.unspellable)} the original vocabulary cannot spell start as [UNK]'s: "
                     f"{', '.join(self.unspellable[:5])}")
        return line

    def record(self) -> dict:
        return {"base_size": self.base_size, "added": self.added, "new_embeddings": self.method,
                "how": EMBEDDING_METHODS[self.method], "unspellable": self.unspellable}


def grow_embeddings(model: Any, base: Any, tokenizer: Any, *, method: str = "fvt", seed: int = 0) -> EmbeddingGrowth:
    """Give ``model`` (a transformers model over ``base``'s vocabulary) a row for every entry ``tokenizer`` adds
    to it, in its word embeddings, its MLM decoder when untied and its MLM bias, started by ``method`` (a key of
    :data:`EMBEDDING_METHODS`); ``model.config.vocab_size`` follows. ``seed`` seeds mean resizing's draw."""
    if method not in EMBEDDING_METHODS:
        raise ValueError(f"new embeddings: {method!r} is not one of {', '.join(EMBEDDING_METHODS)}")
    old = _wordpiece_of(base, "the model's tokenizer")
    size = len(_wordpiece_of(tokenizer, "the extended tokenizer").tokens)
    rows = model.get_input_embeddings().num_embeddings
    if rows != len(old.tokens):
        raise ValueError(f"the model has {rows} word embeddings for the {len(old.tokens)} entries of its tokenizer; "
                         "only a model with one row per entry can be extended")
    added = [tokenizer.convert_ids_to_tokens(i) for i in range(len(old.tokens), size)]
    vocab = {token: i for i, token in enumerate(old.tokens)}
    pieces = [old_pieces(token, vocab, prefix=old.prefix, max_chars=old.max_chars) for token in added]
    ids = [[vocab[old.unk]] if split is None else [vocab[piece] for piece in split] for split in pieces]
    before = {name: tensor.detach().clone() for name, tensor in _rows(model).items()}
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # growth.line() says what happened instead
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model.resize_token_embeddings(size, mean_resizing=method == "mean")
    finally:
        transformers_logging.set_verbosity(verbosity)
    grown = _rows(model)
    with torch.no_grad():
        if method == "fvt":
            for name, tensor in grown.items():
                for row, index in enumerate(ids, start=len(old.tokens)):
                    tensor[row] = before[name][torch.tensor(index)].mean(0)
        elif "bias" in grown:
            grown["bias"][len(old.tokens):] = before["bias"].mean()
    unspellable = [token for token, split in zip(added, pieces) if split is None]
    return EmbeddingGrowth(method, len(old.tokens), len(added), unspellable)


def _rows(model: Any) -> dict[str, torch.Tensor]:
    """The tensors with a row per vocabulary entry: the word embeddings, the MLM decoder's weight when it is not
    tied to them, the MLM bias."""
    embeddings = model.get_input_embeddings().weight
    rows = {"embeddings": embeddings}
    output = model.get_output_embeddings()
    if output is not None:
        if output.weight.data_ptr() != embeddings.data_ptr():
            rows["decoder"] = output.weight
        if getattr(output, "bias", None) is not None:
            rows["bias"] = output.bias
    return rows


# --------------------------------------------------------------------------------------------------------------
# CLI: hfbert train-tokenizer


def main(argv: Sequence[str] | None = None) -> int:
    """``hfbert train-tokenizer``: train a vocabulary, or extend a pretrained BERT's (``--extend``); save it, and
    print where it went."""
    prog = "hfbert train-tokenizer"
    args = command_parser().parse(argv)
    corpus = [Path(p) for p in args.input]

    def train() -> int:
        tokenizer = train_wordpiece(
            corpus, vocab_size=args.vocab_size, lowercase=args.lowercase, strip_accents=args.strip_accents,
            handle_chinese_chars=args.handle_chinese_chars, min_frequency=args.min_frequency,
            num_unused=args.num_unused, limit_alphabet=args.limit_alphabet,
            max_input_chars_per_word=args.max_input_chars_per_word, on_decode_error=args.on_decode_error,
            show_progress=args.progress_bar)
        tokenizer.save_pretrained(args.output_dir)
        print(f"saved a {len(tokenizer)}-entry WordPiece tokenizer to {args.output_dir}")
        return 0

    def extend() -> int:
        base, warnings = source_tokenizer(locate(args.extend))
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        extension = extend_wordpiece(base, corpus, args.add, min_frequency=args.min_frequency,
                                     limit_alphabet=args.limit_alphabet, on_decode_error=args.on_decode_error,
                                     show_progress=args.progress_bar)
        extension.tokenizer.save_pretrained(args.output_dir)
        shown = ", ".join(extension.added[:8]) + (", ..." if len(extension.added) > 8 else "")
        before, after = extension.tokens_per_word
        print(f"saved a {len(extension.tokenizer)}-entry WordPiece tokenizer to {args.output_dir}: the {len(base)} "
              f"entries of {args.extend} and {len(extension.added)} learned from the input ({shown}); tokens per "
              f"word of the input {before:.3f} -> {after:.3f}")
        return 0

    # ValueError: what the corpus or the model cannot give (a non-UTF-8 line, too few entries, no BERT tokenizer),
    # each naming the file, the model or the setting.
    return run_command(prog, train if args.extend is None else extend, errors=(ValueError, OSError, HubDownloadError))


if __name__ == "__main__":
    sys.exit(main())
