"""Vocabulary training is deterministic: one corpus and one set of settings give one vocab.txt, byte for byte, in any
process (hash seeds differ per process), with any number of `tokenizers` threads, from the library or the CLI; and
ties between equally frequent pairs are broken by the documented rule (hfbert.tokenization's module docstring)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from hfbert.data.sources import BUILTIN_CORPUS
from hfbert.tokenization import (
    SPECIAL_TOKENS,
    _chunk_counts,
    _training_backend,
    _word_counts,
    train_wordpiece,
)
from hfbert.wordpiece import build_normalizer, build_pre_tokenizer

VOCAB_SIZE = 1000


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    """The first 2,000 lines of the shipped Austen corpus."""
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(2000)]
    path = tmp_path_factory.mktemp("determinism") / "austen_2000.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


SETTINGS = {
    "default": {"vocab_size": VOCAB_SIZE},
    "cased-limit_alphabet": {"vocab_size": 700, "lowercase": False, "limit_alphabet": 40, "num_unused": 3},
}

# Trains in a fresh interpreter and saves one tokenizer folder per settings: argv = corpus, folder, SETTINGS (JSON).
_TRAIN = """
import json, sys
from hfbert.tokenization import train_wordpiece
corpus, out, settings = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for name, kwargs in settings.items():
    train_wordpiece([corpus], **kwargs).save_pretrained(f"{out}/{name}")
"""


def _run(args: list[str], hash_seed: int, threads: int) -> None:
    env = dict(os.environ, PYTHONHASHSEED=str(hash_seed), RAYON_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="true" if threads > 1 else "false")
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
def test_one_vocab_txt_in_every_process_thread_count_and_entry_point(tmp_path, corpus_file):
    """Five processes with other hash seeds (and 1 or 2 `tokenizers` threads) and the ``hfbert train-tokenizer``
    command write the same vocab.txt, of exactly the size asked (hash order changed it on every run before)."""
    runs = []
    for seed in range(5):
        _run(["-c", _TRAIN, str(corpus_file), str(tmp_path / f"seed{seed}"), json.dumps(SETTINGS)], hash_seed=seed,
             threads=1 + seed % 2)
        runs.append(tmp_path / f"seed{seed}")
    _run(["-c", "import sys; from hfbert.cli import main; sys.exit(main())", "train-tokenizer", "--input",
          str(corpus_file), "--vocab_size", str(VOCAB_SIZE), "--output_dir", str(tmp_path / "cli" / "default"),
          "--no_progress_bar"], hash_seed=99, threads=2)
    runs.append(tmp_path / "cli")
    for name, settings in SETTINGS.items():
        folders = [run / name for run in runs if (run / name).is_dir()]
        assert len(folders) == (6 if name == "default" else 5)
        digests = {str(folder.relative_to(tmp_path)): _digest(folder / "vocab.txt") for folder in folders}
        assert len(set(digests.values())) == 1, digests
        lines = (folders[-1] / "vocab.txt").read_text(encoding="utf-8").split("\n")
        assert lines[-1] == "" and len(lines) - 1 == settings["vocab_size"] == len(set(lines[:-1]))
        assert lines[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)


@pytest.mark.slow
def test_text_order_and_batching_do_not_matter(corpus_file):
    lines = corpus_file.read_text(encoding="utf-8").splitlines()
    shuffled = lines[:]
    random.Random(0).shuffle(shuffled)
    reference = train_wordpiece([corpus_file], VOCAB_SIZE).get_vocab()
    assert train_wordpiece(iter(shuffled), VOCAB_SIZE).get_vocab() == reference
    # The same text cut into other units: every line in pieces at its spaces.
    pieces = [piece for line in lines for piece in line.split(" ")]
    assert train_wordpiece(iter(pieces), VOCAB_SIZE).get_vocab() == reference


# ------------------------------------------------------------------------------------------------------------
# The tie-break rule


def _learned(texts: list[str], merges: int, **settings) -> list[str]:
    """The sub-words learned, in order, when there is room for ``merges`` of them."""
    words = {word for text in texts for word in text.split()}
    alphabet = {c for w in words for c in w} | {"##" + c for w in words for c in w[1:]}
    size = len(SPECIAL_TOKENS) + len(alphabet) + merges
    vocab = train_wordpiece(iter(texts), size, min_frequency=1, **settings).get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert len(tokens) == size
    return tokens[len(SPECIAL_TOKENS) + len(alphabet):]


def test_layout_characters_then_continuations_each_in_code_point_order():
    vocab = train_wordpiece(iter(["zebra über yak", "zebra über yak"]), 20, min_frequency=1).get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    # "über" is "uber" once accents are stripped; ## forms only of the characters that occur inside a word.
    assert tokens[5:18] == ["a", "b", "e", "k", "r", "u", "y", "z", "##a", "##b", "##e", "##k", "##r"]


@pytest.mark.parametrize(("texts", "expected"), [
    # (a, ##b) and (c, ##d) both occur 3 times: "a" comes before "c".  Text order plays no part.
    (["cd cd cd", "ab ab ab"], ["ab", "cd"]),
    # Same left piece: the right piece decides, ##a before ##b.
    (["xb xb", "xa xa"], ["xa", "xb"]),
    # Characters come before ## forms, whatever their bytes: (z, ##y) before (##a, ##b), both 2 times.
    (["pab qab", "zy zy"], ["zy", "##ab"]),
    # Learned sub-words come after the whole alphabet: (d, ##e) before (ab, ##c), both 2 times, once ab exists.
    (["abc abc ab", "de de"], ["ab", "de", "abc"]),
], ids=["left-piece-first", "then-right-piece", "characters-before-continuations", "learned-pieces-last"])
def test_equal_counts_go_to_the_pair_whose_pieces_come_first_in_the_vocabulary(texts, expected):
    """The rule: the most frequent pair is merged first; of equally frequent pairs, the one whose left piece comes
    first in the vocabulary, then the one whose right piece does (characters by code point, then ## forms by
    code point, then learned sub-words in the order they were learned)."""
    assert _learned(texts, len(expected)) == expected


def test_limit_alphabet_ties_keep_the_lower_code_points():
    # Every character occurs 4 times: a limit of 3 keeps a, b and c (and the ## forms of those found inside a word).
    tokenizer = train_wordpiece(iter(["fe dc ba", "ba dc fe"] * 2), 11, min_frequency=1, limit_alphabet=3)
    vocab = tokenizer.get_vocab()
    assert sorted(vocab, key=vocab.__getitem__)[5:] == ["a", "b", "c", "##a", "##c", "ba"]


def _reference_wordpiece(lines: list[str], vocab_size: int, min_frequency: int = 2) -> list[str]:
    """The documented algorithm, plainly: count the pipeline's words, then repeatedly merge the most frequent
    adjacent pair (ties: the pair whose pieces come first in the vocabulary), recounting every pair each time."""
    normalize = build_normalizer(lowercase=True, strip_accents=None, handle_chinese_chars=True).normalize_str
    pre_tokenize = build_pre_tokenizer(handle_chinese_chars=True).pre_tokenize_str
    counts = Counter(word for line in lines for word, _ in pre_tokenize(normalize(line)))
    pieces = {word: [word[0], *("##" + c for c in word[1:])] for word in counts}
    characters = sorted({c for word in counts for c in word})
    vocab = [*SPECIAL_TOKENS, *characters, *sorted({"##" + c for word in counts for c in word[1:]})]
    rank = {token: i for i, token in enumerate(vocab)}
    while len(vocab) < vocab_size:
        pairs: Counter[tuple[str, str]] = Counter()
        for word, parts in pieces.items():
            for pair in zip(parts, parts[1:]):
                pairs[pair] += counts[word]
        if not pairs:
            break
        best = min(pairs, key=lambda pair: (-pairs[pair], rank[pair[0]], rank[pair[1]]))
        if pairs[best] < min_frequency:
            break
        new = best[0] + best[1].removeprefix("##")
        if new not in rank:
            rank[new] = len(vocab)
            vocab.append(new)
        for word, parts in pieces.items():
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == best:
                    merged.append(new)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            pieces[word] = merged
    return vocab


@pytest.mark.slow
def test_same_vocabulary_as_the_plain_reference_algorithm(corpus_file):
    lines = corpus_file.read_text(encoding="utf-8").splitlines()[:200]
    vocab = train_wordpiece(iter(lines), 300).get_vocab()
    assert sorted(vocab, key=vocab.__getitem__) == _reference_wordpiece(lines, 300)


# ------------------------------------------------------------------------------------------------------------
# Counting the distinct chunks once gives the pipeline's own word counts


_TRICKY = [
    "ΟΔΟΣ ΟΔΟΣ.\tΑΣ\nΣΑ 'ΑΣ' ΑΣ'Β ΑΣ\rΒ",  # final sigma next to spaces, tabs, line breaks, apostrophes
    "中文abc中 文字\t中",  # CJK split by the normalizer, next to Latin letters
    "a\u200bb c\u00a0d e\u2028f g\u3000h",  # zero-width (dropped), no-break and ideographic spaces, line separator
    "Café cafe\u0301 Ångström naïve ﬁne İstanbul",  # precomposed and combining accents, a ligature, dotted I
    "x\x0by z\x85w \ue000private\ufffd [MASK] don't e.g. 3.14 — ⸒ emoji🤗x",  # Cc, private use, punctuation
    "  leading  and  trailing  ",
    "",
]


@pytest.mark.parametrize("settings", [
    {"lowercase": True, "strip_accents": None, "handle_chinese_chars": True},
    {"lowercase": False, "strip_accents": None, "handle_chinese_chars": True},
    {"lowercase": False, "strip_accents": True, "handle_chinese_chars": False},
    {"lowercase": True, "strip_accents": False, "handle_chinese_chars": False},
], ids=["uncased", "cased", "cased-strip-no-cjk", "uncased-keep-accents-no-cjk"])
def test_word_counts_equal_the_pipeline_applied_to_each_text(settings):
    backend = _training_backend(max_input_chars_per_word=200, **settings)
    texts = _TRICKY * 3 + [text.upper() for text in _TRICKY]
    normalize, pre_tokenize = backend.normalizer.normalize_str, backend.pre_tokenizer.pre_tokenize_str
    expected = Counter(word for text in texts for word, _ in pre_tokenize(normalize(text)))
    assert _word_counts(_chunk_counts([texts[:5], texts[5:]]), backend) == dict(expected)
