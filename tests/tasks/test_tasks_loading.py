"""Recipe plumbing that needs no model: local data files, model cards, argument files."""

import json

import pytest

from hfbert.tasks import load_data, render_model_card, write_model_card
from hfbert.tasks.recipe import DEFAULT_CARD_TEMPLATE, ModelArguments, card_metrics, parse_args


def test_load_data_reads_tsv_jsonl_and_saved_datasets(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\na, b\tpos\nc\tneg\n")
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\nd\tpos\n")
    data = load_data(str(tmp_path / "train.tsv"), str(tmp_path / "dev.tsv"))
    assert data["train"]["sentence"] == ["a, b", "c"] and len(data["validation"]) == 1  # tab, not comma
    data.save_to_disk(str(tmp_path / "saved"))
    assert load_data(dataset_dir=str(tmp_path / "saved"))["train"]["label"] == ["pos", "neg"]
    (tmp_path / "dev.jsonl").write_text(json.dumps({"sentence": "x", "label": "pos"}) + "\n")
    with pytest.raises(ValueError, match="same format"):
        load_data(str(tmp_path / "train.tsv"), str(tmp_path / "dev.jsonl"))
    with pytest.raises(FileNotFoundError, match="validation file not found"):
        load_data(str(tmp_path / "train.tsv"), str(tmp_path / "missing.tsv"))
    (tmp_path / "train.parquet").write_text("")
    with pytest.raises(ValueError, match="unsupported extension '.parquet'"):
        load_data(str(tmp_path / "train.parquet"))
    with pytest.raises(ValueError, match="no data"):
        load_data()


def test_model_arguments_are_checked_up_front():
    with pytest.raises(ValueError, match="exactly one of --model_name_or_path or --preset"):
        ModelArguments()
    with pytest.raises(ValueError, match="needs --tokenizer "):
        ModelArguments(preset="tiny")
    with pytest.raises(ValueError, match="model_family"):
        ModelArguments(model_name_or_path="x", model_family="jax")
    assert ModelArguments(preset="tiny", tokenizer="v.txt", config_overrides='{"hidden_size": 32}').overrides == {
        "hidden_size": 32}


def test_json_argument_file(tmp_path, capsys):
    (tmp_path / "args.json").write_text(json.dumps({"model_name_or_path": "m", "model_family": "transformers"}))
    (model_args,) = parse_args((ModelArguments,), [str(tmp_path / "args.json")])
    assert model_args.model_family == "transformers"
    # --tokenizer as in hfbert pretrain/prepare; transformers' examples' --tokenizer_name still works
    (tmp_path / "args.yaml").write_text("preset: tiny\ntokenizer_name: v.txt\n")
    assert parse_args((ModelArguments,), [str(tmp_path / "args.yaml")])[0].tokenizer == "v.txt"
    assert parse_args((ModelArguments,), ["--preset", "tiny", "--tokenizer-name", "w.txt"])[0].tokenizer == "w.txt"
    with pytest.raises(SystemExit) as exc:
        parse_args((ModelArguments,), ["--model_name_or_path", "m", "--config_overrides", "{hidden: 3"], prog="recipe")
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("recipe: error: --config_overrides is not valid JSON")


def test_card_renders_metadata_and_keeps_local_paths_out_of_the_header(tmp_path):
    metrics = {"eval_accuracy": 0.8125, "eval_runtime": 3.2, "train_loss": 0.4}
    assert card_metrics(metrics) == {"eval_accuracy": 0.8125}
    path = write_model_card(
        tmp_path, DEFAULT_CARD_TEMPLATE, language="en", base_model=str(tmp_path), metrics=card_metrics(metrics),
        pipeline_tag="text-classification", model_name="m", task="text-classification", recipe="finetune_x",
        pipeline_task="text-classification", model_family="hfbert", preset=None, train_data="t", eval_data="e",
        seed=0, epochs=1, learning_rate=5e-5, batch_size=32, max_length=128, labels={0: "neg", 1: "pos"},
        notes=["3 texts truncated"],
    )
    text = path.read_text()
    header = text.split("---")[1]
    assert "pipeline_tag: text-classification" in header and "base_model" not in header  # a path is no Hub id
    assert "| eval_accuracy | 0.8125 |" in text and "eval_runtime" not in text
    assert "- 3 texts truncated" in text and "0: `neg`, 1: `pos`" in text
    hub = render_model_card(DEFAULT_CARD_TEMPLATE, base_model="sentence-transformers/all-MiniLM-L6-v2",
                            model_name="m", task="t", recipe="r", pipeline_task="p", model_family="transformers")
    assert hub.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    with pytest.raises(FileNotFoundError):
        render_model_card(tmp_path / "none.md")
