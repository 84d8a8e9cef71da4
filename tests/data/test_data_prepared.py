"""Prepared corpora (hfbert.data.writer, hfbert.data.reader): byte ranges of whole documents, byte-identical shards
for any num_proc, the manifest, random access by row index against load_dataset and streaming, corrupt and missing
shards, static and dynamic masking, the `hfbert prepare` command and its one-line errors, and the Hub round trip."""

import errno
import gzip
import hashlib
import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from datasets import load_dataset
from datasets.utils.logging import disable_progress_bar

from hfbert.data import CHAPTER_HEADING, PreparedCorpus, PreparedDataError, prepare_corpus, push_prepared
from hfbert.data.cli import main as prepare_main
from hfbert.data.documents import ReadStats, read_document_range, read_documents
from hfbert.data.shards import held_out

from helpers.hub_server import HubServer, allow_hub_calls

disable_progress_bar()
AUSTEN_LINES = 1500


@pytest.fixture(scope="module")
def austen(shared_data, tmp_path_factory):
    lines = (shared_data / "en_austen_6novels.txt").read_text(encoding="utf-8").splitlines()[:AUSTEN_LINES]
    path = tmp_path_factory.mktemp("austen") / "austen.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _settings(**overrides):
    settings = dict(input_layout="paragraphs", document_boundary="chapter", num_shards=3, dupe_factor=2,
                    max_seq_length=64, eval_fraction=0.2, pool_size=4, seed=7)
    settings.update(overrides)
    return settings


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def static_folder(austen, en_tok, tmp_path_factory):
    return prepare_corpus(austen, tmp_path_factory.mktemp("static") / "out", tokenizer=en_tok, **_settings())


# ---------------------------------------------------------------------------------------------------------
# Byte ranges


def _messy_text(rng: random.Random) -> str:
    lines = []
    for _ in range(300):
        kind = rng.random()
        if kind < 0.15:
            lines.append("")
        elif kind < 0.2:
            lines.append(f"CHAPTER {rng.choice(['I', 'II', 'XIV'])}")
        else:
            lines.append(" ".join(rng.choice(["ab", "cde", "f", "ghij", "é", "ü"]) for _ in range(rng.randint(1, 40))))
    return "\n".join(lines) + rng.choice(["", "\n", "\n\n"])


@pytest.mark.parametrize("suffix", [".txt", ".gz"])
def test_any_byte_cuts_give_every_document_once(tmp_path, suffix):
    rng = random.Random(0)
    for trial in range(6):
        data = _messy_text(rng).encode("utf-8")
        path = tmp_path / f"c{trial}{suffix}"
        path.write_bytes(gzip.compress(data) if suffix == ".gz" else data)
        for layout, boundary in (("sentences", None), ("paragraphs", CHAPTER_HEADING)):
            whole_stats = ReadStats()
            whole = list(read_documents(path, layout=layout, boundary=boundary, stats=whole_stats))
            cuts = sorted({0, len(data), *(rng.randrange(len(data)) for _ in range(rng.randint(1, 12)))})
            pieces, stats = [], ReadStats()
            for lo, hi in zip(cuts[:-1], cuts[1:]):
                end = None if hi == len(data) else hi
                pieces += list(read_document_range(path, lo, end, layout=layout, boundary=boundary, stats=stats))
            assert pieces == whole
            assert {k: v for k, v in stats.as_dict().items() if k != "files"} == {
                k: v for k, v in whole_stats.as_dict().items() if k != "files"}


# ---------------------------------------------------------------------------------------------------------
# Building


@pytest.mark.slow
def test_num_proc_2_writes_the_same_bytes_and_the_manifest_describes_them(static_folder, austen, en_tok, tmp_path):
    two = prepare_corpus(austen, tmp_path / "two", tokenizer=en_tok, num_proc=2, **_settings())
    files = folder_bytes(static_folder)
    assert files == folder_bytes(two)
    assert sorted(name for name in files if name.startswith("data/")) == [
        f"data/{split}-{k:05d}-of-00003.parquet" for split in ("train", "validation") for k in range(3)]
    other_seed = prepare_corpus(austen, tmp_path / "seed8", tokenizer=en_tok, **_settings(seed=8))
    assert folder_bytes(other_seed)["data/train-00000-of-00003.parquet"] != files["data/train-00000-of-00003.parquet"]

    manifest = json.loads(files["hfbert_prepare.json"])
    assert manifest["format"] == "hfbert-prepared" and manifest["format_version"] == 1
    settings = manifest["settings"]
    for key, value in _settings().items():
        if key in settings:
            assert settings[key] == value, key
    assert {"masking", "masked_lm_prob", "max_predictions_per_seq", "short_seq_prob", "whole_word_mask"} <= set(
        settings)
    tokenizer = manifest["tokenizer"]
    assert tokenizer["sha256"] == hashlib.sha256(files["tokenizer.json"]).hexdigest()
    assert tokenizer["vocab_size"] == len(en_tok)
    assert tokenizer["special_token_ids"] == {"pad": en_tok.pad_token_id, "unk": en_tok.unk_token_id,
                                              "cls": en_tok.cls_token_id, "sep": en_tok.sep_token_id,
                                              "mask": en_tok.mask_token_id}
    for split, info in manifest["splits"].items():
        assert info["rows"] == sum(s["rows"] for s in info["shards"]) > 0
        for shard in info["shards"]:
            data = files[shard["file"]]
            assert shard["bytes"] == len(data) and shard["sha256"] == hashlib.sha256(data).hexdigest()
    report = manifest["report"]
    assert all(report["checks"].values()), report["checks"]
    assert report["instances"]["total"] == sum(info["rows"] for info in manifest["splits"].values())
    assert json.loads(files["report.json"]) == report and "checks: all counts add up" in files["report.txt"].decode()
    # Whole documents are held out: the two splits' documents add up to the corpus's.
    assert report["splits"]["train"]["documents"] + report["splits"]["validation"]["documents"] == report[
        "documents"]["used"]
    assert report["splits"]["validation"]["documents"] >= 2


def test_static_masks_come_in_dupe_passes_and_validation_once(static_folder, austen, en_tok, tmp_path):
    once = PreparedCorpus.open(prepare_corpus(austen, tmp_path / "once", tokenizer=en_tok,
                                              **_settings(dupe_factor=1)))
    twice = PreparedCorpus.open(static_folder)
    # Each pass draws its own targets, so the counts are close, not equal.
    assert 1.8 < twice.num_rows("train") / once.num_rows("train") < 2.2
    assert twice.num_rows("validation") == once.num_rows("validation")  # held-out documents are built once
    row = twice.rows("train", [0])[0]
    assert set(row) == {"input_ids", "token_type_ids", "next_sentence_label", "masked_lm_positions",
                        "masked_lm_ids"}
    assert row["input_ids"][0] == en_tok.cls_token_id and len(row["input_ids"]) <= 64


def test_dynamic_whole_word_masking_keeps_word_starts(austen, en_tok, tmp_path):
    corpus = PreparedCorpus.open(prepare_corpus(austen, tmp_path / "dyn", tokenizer=en_tok, **_settings(
        masking="dynamic", dupe_factor=None, whole_word_mask=True)))
    assert corpus.settings["dupe_factor"] == 1
    rows = corpus.rows("train", range(20))
    for row in rows:
        assert set(row) == {"input_ids", "token_type_ids", "next_sentence_label", "word_starts"}
        tokens = en_tok.convert_ids_to_tokens(row["input_ids"])
        segment_starts = {1, tokens.index("[SEP]") + 1}  # a truncated segment may begin inside a word
        expected = [int(i in segment_starts or not t.startswith("##")) for i, t in enumerate(tokens)]
        assert row["word_starts"] == expected
        assert en_tok.mask_token_id not in row["input_ids"]


def test_a_dataset_is_cut_by_rows_and_gives_the_same_rows_as_its_documents(en_tok, tmp_path):
    from datasets import Dataset

    documents = [[f"Sentence {s} of document {d} is here." for s in range(3 + d % 4)] for d in range(60)]
    settings = dict(num_shards=3, dupe_factor=1, eval_fraction=0.2, pool_size=4, seed=3, max_seq_length=32)
    from_list = prepare_corpus(documents, tmp_path / "list", tokenizer=en_tok, **settings)
    from_dataset = prepare_corpus(Dataset.from_dict({"sentences": documents}), tmp_path / "ds", tokenizer=en_tok,
                                  **settings)
    shards = lambda folder: {k: v for k, v in folder_bytes(folder).items() if k.startswith("data/")}  # noqa: E731
    assert shards(from_list) == shards(from_dataset)
    corpus = PreparedCorpus.open(from_dataset)
    assert corpus.manifest.input == {"dataset": "dataset", "rows": 60, "column": "sentences"}
    assert corpus.manifest.report["documents"]["used"] == 60


def test_held_out_rule_is_per_document():
    documents = [[f"sentence {i} of document {d}." for i in range(3)] for d in range(2000)]
    chosen = [held_out(d, 7, 0.1) for d in documents]
    assert 0.08 < np.mean(chosen) < 0.12  # 3 standard errors: 0.02
    assert chosen == [held_out(d, 7, 0.1) for d in documents]  # a function of the document and the seed
    assert chosen != [held_out(d, 8, 0.1) for d in documents]
    assert not any(held_out(d, 7, 0.0) for d in documents)


def test_an_output_dir_in_use_is_refused_unless_overwritten(static_folder, austen, en_tok):
    with pytest.raises(FileExistsError, match="not empty"):
        prepare_corpus(austen, static_folder, tokenizer=en_tok, **_settings())


def test_an_fsspec_url_output_gives_the_same_folder(static_folder, austen, en_tok, tmp_path):
    url = f"file://{tmp_path / 'url'}"
    assert prepare_corpus(austen, url, tokenizer=en_tok, **_settings()) == url
    assert folder_bytes(tmp_path / "url") == folder_bytes(static_folder)


# ---------------------------------------------------------------------------------------------------------
# Reading


def test_rows_agree_with_load_dataset_and_streaming(static_folder):
    corpus = PreparedCorpus.open(static_folder)
    loaded = load_dataset(str(static_folder))
    assert set(loaded) == {"train", "validation"}
    for split in ("train", "validation"):
        assert len(loaded[split]) == corpus.num_rows(split)
        picks = np.random.default_rng(0).choice(corpus.num_rows(split), size=40, replace=False)
        assert corpus.rows(split, picks) == [loaded[split][int(i)] for i in picks]
        assert corpus.rows(split, range(corpus.num_rows(split))) == loaded[split].to_list()
    streamed = load_dataset(str(static_folder), streaming=True)
    assert list(streamed["validation"]) == corpus.rows("validation", range(corpus.num_rows("validation")))
    with pytest.raises(IndexError, match="outside the train split"):
        corpus.rows("train", [corpus.num_rows("train")])
    with pytest.raises(KeyError, match="no 'test' split"):
        corpus.rows("test", [0])


def test_a_corrupt_or_missing_shard_is_named(static_folder, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(static_folder, broken)
    shard = broken / "data" / "train-00001-of-00003.parquet"
    data = bytearray(shard.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside a data page; same size, so only the page checksum can tell
    shard.write_bytes(bytes(data))
    corpus = PreparedCorpus.open(broken)
    with pytest.raises(PreparedDataError, match="train-00001-of-00003.parquet.*corrupt"):
        corpus.rows("train", range(corpus.num_rows("train")))
    with pytest.raises(PreparedDataError, match="train-00001-of-00003.parquet.*corrupt"):
        corpus.verify()
    shard.write_bytes(bytes(data[:-100]))
    with pytest.raises(PreparedDataError, match="train-00001-of-00003.parquet.*truncated"):
        PreparedCorpus.open(broken)
    shard.unlink()
    with pytest.raises(PreparedDataError, match="train-00001-of-00003.parquet.*missing"):
        PreparedCorpus.open(broken)
    with pytest.raises(PreparedDataError, match="no hfbert_prepare.json"):
        PreparedCorpus.open(broken / "data")


def test_running_out_of_file_descriptors_is_not_called_corruption(static_folder, monkeypatch):
    corpus = PreparedCorpus.open(static_folder)

    def exhausted(name):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(corpus, "_open_parquet", exhausted)
    with pytest.raises(OSError, match=r"train-00000-of-00003.parquet.*too many open files.*ulimit -n") as caught:
        corpus.rows("train", [0])
    assert not isinstance(caught.value, PreparedDataError) and caught.value.errno == errno.EMFILE


def test_tokenizer_and_model_config_checks(static_folder, en_tok):
    from hfbert import HfBertConfig

    corpus = PreparedCorpus.open(static_folder)
    assert corpus.load_tokenizer().get_vocab() == en_tok.get_vocab()
    corpus.check_model_config(HfBertConfig.from_preset("tiny", vocab_size=len(en_tok)))
    with pytest.raises(ValueError, match=rf"vocab_size \(1000\).*\({len(en_tok)}\)"):
        corpus.check_model_config(HfBertConfig.from_preset("tiny", vocab_size=1000))


# ---------------------------------------------------------------------------------------------------------
# The command


def test_prepare_command_trains_a_vocabulary_and_writes_the_folder(austen, tmp_path, capsys):
    out = tmp_path / "cli"
    code = prepare_main(["--input", str(austen), "--output", str(out), "--input_layout", "paragraphs",
                         "--document_boundary", "chapter", "--vocab_size", "1200", "--max_seq_length", "64",
                         "--dupe_factor", "1", "--num_shards", "2", "--seed", "5"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "checks: all counts add up" in printed and "shard(s) per split" in printed
    corpus = PreparedCorpus.open(out)
    assert corpus.manifest.tokenizer.vocab_size == 1200 and len(corpus.load_tokenizer()) == 1200
    assert corpus.settings["seed"] == 5 and corpus.num_rows("train") > 0


@pytest.mark.parametrize("content, message", [
    (b"Fine line.\nAnother.\n\nBroken \xff here.\n", "{path}:4: not valid UTF-8"),
    (b"", "{path}: the file is empty"),
    (b"\n\n\n", "{path}: the input has no documents"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, minilm_path, capsys, content, message):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    code = prepare_main(["--input", str(path), "--tokenizer", str(minilm_path), "--output_dir", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("hfbert prepare: error: " + message.format(path=path))


def test_bad_settings_stop_before_any_work(tmp_path, capsys):
    for argv, message in ((["--masked_lm_prob", "1.5"], "--masked_lm_prob must be in (0, 1)"),
                          (["--document_boundary", "("], "--document_boundary '(' is not a regular expression"),
                          (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler needs --engine dask")):
        with pytest.raises(SystemExit) as exit_:
            prepare_main(["--output_dir", str(tmp_path / "never"), *argv])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"hfbert prepare: error: {message}") and "\n" not in err
    assert not (tmp_path / "never").exists()


# ---------------------------------------------------------------------------------------------------------
# The Hub


def test_push_as_a_dataset_repo_and_open_by_repo_id(static_folder, hub_server, tmp_path, monkeypatch):
    allow_hub_calls(monkeypatch)
    commit = push_prepared(static_folder, "user/austen-prepared", token=HubServer.WRITE_TOKEN,
                           endpoint=hub_server.url)
    assert ("dataset", "user/austen-prepared") in hub_server.repos and len(commit.commit_oid) == 40
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    pulled = PreparedCorpus.open("user/austen-prepared", token=HubServer.WRITE_TOKEN, endpoint=hub_server.url)
    local = PreparedCorpus.open(static_folder)
    assert pulled.path != local.path and pulled.manifest == local.manifest
    picks = [0, 7, local.num_rows("train") - 1]
    assert pulled.rows("train", picks) == local.rows("train", picks)
    assert hub_server.unknown_routes == []
