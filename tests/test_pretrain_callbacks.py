"""pretrain()'s public hooks: callbacks told of the run's events, and model_init supplying the model."""

from __future__ import annotations

import gzip
import json

import pytest

from hfbert import HfBertForPreTraining
from hfbert.data import prepare_corpus
from hfbert.pretrain import PretrainCallback, PretrainConfig, pretrain
from hfbert.pretrain.data import BUILTIN_CORPUS


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("callbacks")
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as handle:
        lines = [next(handle) for _ in range(300)]
    corpus = root / "austen_head.txt"
    corpus.write_text("".join(lines), encoding="utf-8")
    return prepare_corpus([str(corpus)], root / "length-32", vocab_size=300, max_seq_length=32, masking="dynamic",
                          input_layout="paragraphs", document_boundary="chapter", eval_fraction=0.2, seed=42)


def job(folder, output_dir, **overrides) -> PretrainConfig:
    values = {
        "prepared": [str(folder)], "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                             "intermediate_size": 37},
        "batch_size": 4, "max_seq_length": 32, "max_steps": 6, "logging_steps": 2, "eval_steps": 3, "save_steps": 6,
        "max_eval_examples": 8, "max_time_minutes": None, "progress_bar": False, "report_to": ["jsonl"],
        "output_dir": str(output_dir), "fill_mask_text": "She was [MASK] happy.", "mixed_precision": "no",
    }
    return PretrainConfig.from_dict({**values, **overrides})


class Recorder(PretrainCallback):
    def __init__(self):
        self.events = []

    def on_train_begin(self, step, model, **kwargs):
        self.events.append(("begin", step, type(model).__name__))

    def on_step_end(self, step, model, **kwargs):
        self.events.append(("step", step, model.training))

    def on_log(self, step, logs, **kwargs):
        self.events.append(("log", step, round(logs["loss"], 6)))

    def on_evaluate(self, step, metrics, model, **kwargs):
        self.events.append(("evaluate", step, round(metrics["eval_mlm_accuracy"], 6)))

    def on_train_end(self, step, metrics, model, **kwargs):
        self.events.append(("end", step, metrics["stopped_by"]))


class Wider(HfBertForPreTraining):
    """A model the job did not choose: counted, so the test sees it was the one trained."""

    built = 0

    def __init__(self, config):
        Wider.built += 1
        super().__init__(config)


def test_callbacks_see_every_step_log_and_evaluation_in_order(folder, tmp_path):
    recorder = Recorder()
    result = pretrain(job(folder, tmp_path / "run"), callbacks=[recorder])
    kinds = [event[:2] for event in recorder.events]
    assert kinds == [("begin", 0), ("step", 1), ("step", 2), ("log", 2), ("step", 3), ("evaluate", 3),
                     ("step", 4), ("log", 4), ("step", 5), ("step", 6), ("log", 6), ("evaluate", 6), ("end", 6)]
    assert recorder.events[0][2] == "HfBertForPreTraining" and all(e[2] for e in recorder.events if e[0] == "step")
    # What the callbacks were told is what the run logged.
    logged = [json.loads(line) for line in (tmp_path / "run" / "runs" / "metrics.jsonl").read_text().splitlines()]
    told = {(e[0], e[1]): e[2] for e in recorder.events}
    for record in logged:
        if "loss" in record:
            assert told[("log", record["step"])] == round(record["loss"], 6)
        if "eval_mlm_accuracy" in record:
            assert told[("evaluate", record["step"])] == round(record["eval_mlm_accuracy"], 6)
    assert result.metrics["eval_mlm_accuracy"] == pytest.approx(recorder.events[-2][2], abs=1e-6)


def test_model_init_supplies_the_model_and_a_callback_can_stop_the_run(folder, tmp_path):
    class Stop(Exception):
        pass

    class StopAt(PretrainCallback):
        def on_step_end(self, step, model, **kwargs):
            self.model = model
            if step == 2:
                raise Stop

    stopper = StopAt()
    with pytest.raises(Stop):
        pretrain(job(folder, tmp_path / "run"), callbacks=[stopper], model_init=Wider)
    assert Wider.built == 1 and isinstance(stopper.model, Wider)
    assert stopper.model.config.vocab_size == 300  # the corpus's vocabulary, given to model_init


def test_a_callback_that_is_not_one_fails_before_any_work(folder, tmp_path):
    with pytest.raises(TypeError, match="callbacks must be PretrainCallback instances, got function"):
        pretrain(job(folder, tmp_path / "never"), callbacks=[lambda **kwargs: None])
    assert not (tmp_path / "never").exists()
