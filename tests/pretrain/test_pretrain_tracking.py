"""hfbert pretrain --report_to: the trackers of Accelerate beside the JSON lines, each with the same scalars and the
run's settings as its config; a tracker whose package is missing, or that does not start, is one line.

MLflow runs for real, offline: its local file store, read back with its own client.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from hfbert.pretrain import PretrainConfig, main, pretrain
from hfbert.pretrain.config import TRACKERS, ConfigError
from hfbert.pretrain.tracking import PROJECT, read_jsonl

from helpers.pretraining import settings, write_config


def missing(*modules: str):
    """``importlib.util.find_spec`` that finds none of ``modules`` (as on a machine without their packages)."""
    find_spec = importlib.util.find_spec
    return lambda name, *args: None if name in modules else find_spec(name, *args)


def test_every_tracker_of_accelerate_is_a_setting_and_a_missing_package_is_named(tmp_path, monkeypatch):
    from accelerate.utils import LoggerType

    assert set(TRACKERS) == {"jsonl"} | {str(t) for t in LoggerType} - {"all"}
    with pytest.raises(ConfigError, match=r"report_to accepts jsonl, tensorboard, wandb, .*; got \['neptune'\]"):
        PretrainConfig(output_dir=str(tmp_path), report_to=["jsonl", "neptune"])
    monkeypatch.setattr(importlib.util, "find_spec", missing("comet_ml", "tensorboard"))
    with pytest.raises(ConfigError, match="report_to comet_ml needs the comet-ml package, which is not installed: "
                                          "pip install comet-ml"):
        PretrainConfig(output_dir=str(tmp_path), report_to=["comet_ml"])
    PretrainConfig(output_dir=str(tmp_path), report_to=["jsonl", "tensorboard"])  # the default: used where installed


def test_the_command_says_a_missing_tracker_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(importlib.util, "find_spec", missing("wandb"))
    assert main(["--output_dir", str(tmp_path / "run"), "--report_to", "jsonl", "wandb"]) == 2
    assert capsys.readouterr().err == ("hfbert pretrain: error: report_to wandb needs the wandb package, which is not "
                                       "installed: pip install wandb\n")
    assert not (tmp_path / "run").exists()


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """MLflow's local file store under ``tmp_path`` (its maintenance-mode backend, allowed explicitly)."""
    mlflow = pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow.set_tracking_uri(store.as_uri())
    yield mlflow.MlflowClient(store.as_uri())
    mlflow.set_tracking_uri(None)


@pytest.mark.slow
def test_mlflow_gets_the_scalars_and_the_settings_of_the_json_lines(prepared, mlflow_store, tmp_path):
    output_dir, report_to = tmp_path / "run", ["jsonl", "tensorboard", "mlflow"]
    pretrain(PretrainConfig.from_dict(settings([prepared[64]], output_dir, max_steps=4, eval_steps=2, save_steps=4,
                                               logging_steps=1, report_to=report_to)))
    tensorboard = importlib.util.find_spec("tensorboard") is not None  # the default tracker, where installed
    assert bool(list((output_dir / "runs" / PROJECT).glob("events.out.tfevents.*"))) == tensorboard
    (experiment,) = [e for e in mlflow_store.search_experiments() if e.name == PROJECT]
    (run,) = mlflow_store.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    records = read_jsonl(output_dir / "runs" / "metrics.jsonl")
    # The settings: MLflow keeps every parameter as text.
    assert run.data.params == {key: str(value) for key, value in records[0]["config"].items()}
    assert json.loads(run.data.params["report_to"]) == report_to
    # The scalars: every number of every logged line, at its step.
    logged = {}
    for record in records[1:]:
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)):
                logged.setdefault(key, []).append((record["step"], float(value)))
    assert {"loss", "mlm_loss", "nsp_loss", "learning_rate", "eval_mlm_accuracy"} <= set(logged)
    for key, points in logged.items():
        history = [(m.step, m.value) for m in mlflow_store.get_metric_history(run.info.run_id, key)]
        assert sorted(history) == sorted(points), key
    assert sorted(run.data.metrics) == sorted(logged)


def test_a_tracker_that_does_not_start_stops_the_run_in_one_line(prepared, mlflow_store, tmp_path, monkeypatch,
                                                                 capsys):
    from accelerate.tracking import MLflowTracker

    def refuse(self):
        raise RuntimeError("API request to endpoint /api/2.0/mlflow/experiments/search failed\n(more detail)")

    monkeypatch.setattr(MLflowTracker, "start", refuse)
    values = settings([prepared[64]], tmp_path / "run", max_steps=2, report_to=["jsonl", "mlflow"])
    assert main(["--config", str(write_config(tmp_path / "run.json", values))]) == 2
    assert capsys.readouterr().err == (
        "hfbert pretrain: error: report_to: a tracker (mlflow) did not start: RuntimeError: API request to endpoint "
        "/api/2.0/mlflow/experiments/search failed\n")
    assert not list(Path(tmp_path / "run").glob("checkpoint-*"))
