"""One settings object for building examples (hfbert.data.ExampleSettings) and one reading of a text source
(hfbert.inputs.text_source), used by prepare, the in-memory builder, tokenizer training and pretrain."""

from __future__ import annotations

import dataclasses
import gzip
import uuid

import fsspec
import pytest
from datasets import Dataset, IterableDataset

from hfbert import train_wordpiece
from hfbert.arguments import CommandParser, UsageError
from hfbert.data import ExampleSettings, PreparedCorpus, build_pretraining_dataset, prepare_corpus
from hfbert.data.cli import PrepareArguments, command_parser as prepare_parser, main as prepare_main
from hfbert.data.sources import DocumentRows, DocumentStream, TextFiles, resolve_input
from hfbert.inputs import Files, Rows, Stream, names_files, text_source
from hfbert.pretrain.config import PretrainConfig, command_parser

SENTENCES = [f"Sentence number {i} of document {d} says something." for d in range(12) for i in range(6)]


@pytest.fixture
def corpus_dir(tmp_path):
    for part in range(3):
        lines = SENTENCES[part * 24:(part + 1) * 24]
        text = "".join(line + ("\n\n" if (i + 1) % 6 == 0 else "\n") for i, line in enumerate(lines))
        (tmp_path / f"part-{part}.txt").write_text(text, encoding="utf-8")
    return tmp_path


# -- the settings object


def test_every_example_setting_is_an_option_of_both_commands_with_one_help_text(tmp_path):
    # The commands' settings extend ExampleSettings: each field is theirs, with its help text and default.
    prepare = {f.name: f for f in dataclasses.fields(PrepareArguments)}
    pretrain = {f.name: f for f in dataclasses.fields(PretrainConfig)}
    overridden = {"masking", "max_seq_length", "seed"}  # pretrain: dynamic masks, the schedule, the job's seed
    for f in dataclasses.fields(ExampleSettings):
        assert prepare[f.name] is f or (prepare[f.name].metadata == f.metadata and prepare[f.name].default == f.default)
        if f.name not in overridden:
            assert pretrain[f.name].metadata == f.metadata and pretrain[f.name].default == f.default, f.name
    assert PretrainConfig().masking == "dynamic" and ExampleSettings().masking == "static"
    # ... and both command lines parse it, with the same spelling.
    argv = ["--max-seq-length", "64", "--selection", "bernoulli", "--no_wwm_per_word_decision", "--pool_size", "9"]
    prepared = CommandParser("hfbert prepare", PrepareArguments).parse_values([*argv, "--output_dir", str(tmp_path)])
    trained = command_parser().parse_values(argv)
    assert prepared.example_settings() == trained.example_settings(masking="static", seed=12345)
    assert prepared.example_settings() == ExampleSettings(max_seq_length=64, selection="bernoulli",
                                                          wwm_per_word_decision=False, pool_size=9)
    # Building the parsers leaves the fields' own marks alone: the manifest still leaves out the vocabulary.
    assert "vocab_size" not in ExampleSettings().recorded() and "max_seq_length" in ExampleSettings().recorded()


def test_keywords_and_the_settings_object_are_the_same_build(en_tok, corpus_dir, tmp_path):
    settings = ExampleSettings(max_seq_length=48, dupe_factor=2, pool_size=4, seed=3, num_shards=2, eval_fraction=0.3)
    by_object = prepare_corpus(str(corpus_dir / "*.txt"), tmp_path / "a", settings, tokenizer=en_tok)
    by_keywords = prepare_corpus(str(corpus_dir / "*.txt"), tmp_path / "b", tokenizer=en_tok, max_seq_length=48,
                                 dupe_factor=2, pool_size=4, seed=3, num_shards=2, eval_fraction=0.3)
    a, b = PreparedCorpus.open(by_object), PreparedCorpus.open(by_keywords)
    assert a.manifest.splits == b.manifest.splits and a.settings == b.settings
    # The manifest records every example setting (defaults resolved) and reads back as the same object.
    assert ExampleSettings.from_recorded(a.settings) == settings.example_settings(input_layout=None)
    assert a.settings["dupe_factor"] == 2 and a.settings["num_shards"] == 2
    # A keyword replaces the object's value; the in-memory build takes the same object.
    rows = build_pretraining_dataset(str(corpus_dir / "*.txt"), en_tok, settings, max_seq_length=32)
    assert max(len(ids) for ids in rows["input_ids"]) <= 32


def test_bad_or_unknown_settings_are_named(en_tok, corpus_dir, tmp_path):
    with pytest.raises(TypeError, match=r"unknown example setting\(s\) \['max_seq_lenght'\]"):
        prepare_corpus(str(corpus_dir / "*.txt"), tmp_path / "x", tokenizer=en_tok, max_seq_lenght=64)
    with pytest.raises(UsageError, match="pool_size must be >= 2"):
        ExampleSettings(pool_size=1)
    with pytest.raises(UsageError, match="masking must be one of 'static', 'dynamic', got 'often'"):
        ExampleSettings(masking="often")
    with pytest.raises(UsageError, match="max_predictions_per_seq must be an int, got '20'"):
        ExampleSettings(max_predictions_per_seq="20")
    assert not (tmp_path / "x").exists()


def test_the_prepare_command_names_the_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        prepare_main(["--output_dir", str(tmp_path / "o"), "--pool_size", "1"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip() == "hfbert prepare: error: --pool_size must be >= 2 (random-next needs " \
                                              "another document), got 1"


# -- the text source


def test_one_reading_of_paths_globs_urls_and_texts(corpus_dir):
    files = sorted(str(p) for p in corpus_dir.glob("*.txt"))
    assert text_source(str(corpus_dir / "*.txt")) == Files(tuple(files))
    assert text_source([corpus_dir / "part-1.txt"]) == Files((files[1],))
    assert text_source(files[::-1]) == Files(tuple(files[::-1]))  # a list keeps its order
    with pytest.raises(FileNotFoundError, match="no file matches .*missing-\\*.txt"):
        text_source(str(corpus_dir / "missing-*.txt"))
    with pytest.raises(FileNotFoundError, match="input file not found: typo.txt"):
        text_source(["typo.txt"])  # looks like a file name: a typo, not a text
    texts = ["One text here.", "Another one."]
    assert text_source(texts) == Rows(texts, None, "documents") and not names_files(texts)
    dataset = Dataset.from_dict({"text": texts})
    assert text_source(dataset).column == "text"
    assert isinstance(text_source(dataset.to_iterable_dataset()), Stream)
    assert isinstance(text_source(iter(texts)), Stream)
    with pytest.raises(ValueError, match="'sentences' or 'text' column"):
        text_source(Dataset.from_dict({"body": texts}))


def test_prepare_builder_and_tokenizer_read_a_source_alike(corpus_dir):
    glob = str(corpus_dir / "*.txt")
    resolved = resolve_input(glob)
    assert isinstance(resolved, TextFiles) and resolved.paths == text_source(glob).paths
    assert isinstance(resolve_input([["a b", "c d"], ["e f"]]), DocumentRows)
    assert isinstance(resolve_input(Dataset.from_dict({"text": ["x"]}), streaming=True), DocumentStream)
    # An fsspec URL with a glob, gzip-compressed, reads in tokenizer training as in preparation.
    root = f"memory://source-{uuid.uuid4().hex}"  # the memory filesystem is one per process, shared by every test
    with fsspec.open(f"{root}/a.txt.gz", "wb") as handle:
        handle.write(gzip.compress("\n".join(SENTENCES).encode()))
    url = f"{root}/*.txt.gz"
    (path,) = resolve_input(url).paths
    assert path.startswith("memory://") and path.endswith("/a.txt.gz")
    from_url = train_wordpiece([url], 70, min_frequency=1)
    assert len(from_url) == 70 and "[UNK]" not in from_url.tokenize(SENTENCES[0])
    with pytest.raises(FileNotFoundError, match=f"no file matches {root}/\\*.txt"):
        train_wordpiece([f"{root}/*.txt"], 70)


def test_the_in_memory_builder_streams_any_source(en_tok, corpus_dir):
    glob = str(corpus_dir / "*.txt")
    settings = ExampleSettings(max_seq_length=32, dupe_factor=1, pool_size=4, seed=1)
    mapped = build_pretraining_dataset(glob, en_tok, settings, shuffle=False)
    streamed = build_pretraining_dataset(glob, en_tok, settings, streaming=True)
    assert isinstance(streamed, IterableDataset)
    assert [row["input_ids"] for row in streamed] == mapped["input_ids"]


def test_the_input_layouts_are_one_list(tmp_path):
    """The layouts the settings accept, the command offers and the reader resolves are the one ``LAYOUTS``: a layout
    added there is a choice everywhere, and an unknown one is refused by name before any file is read."""
    from hfbert.data.sources import LAYOUTS

    for layout in LAYOUTS:
        assert ExampleSettings(input_layout=layout).input_layout == layout
    choices = next(action.choices for action in prepare_parser()._actions if "--input_layout" in action.option_strings)
    assert tuple(choices) == LAYOUTS
    with pytest.raises(UsageError, match="input_layout must be one of 'sentences', 'paragraphs', 'people-daily'"):
        ExampleSettings(input_layout="sentence")
    with pytest.raises(ValueError, match="input_layout must be one of"):
        resolve_input(str(tmp_path / "missing.txt"), input_layout="sentence")
