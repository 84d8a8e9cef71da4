"""pretrain()'s public hooks: callbacks told of the run's events, and model_init supplying the model."""

from __future__ import annotations

import json
import threading

import pytest
import torch

from hfbert import HfBertForPreTraining
from hfbert.pretrain import PretrainCallback, PretrainConfig, pretrain


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


@pytest.mark.slow
def test_callbacks_see_every_step_log_and_evaluation_in_order(prepared_32, tmp_path):
    recorder = Recorder()
    result = pretrain(job(prepared_32, tmp_path / "run"), callbacks=[recorder])
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


def test_model_init_supplies_the_model_and_a_callback_can_stop_the_run(prepared_32, tmp_path):
    class Stop(Exception):
        pass

    class StopAt(PretrainCallback):
        def on_step_end(self, step, model, **kwargs):
            self.model = model
            if step == 2:
                raise Stop

    stopper = StopAt()
    with pytest.raises(Stop):
        pretrain(job(prepared_32, tmp_path / "run"), callbacks=[stopper], model_init=Wider)
    assert Wider.built == 1 and isinstance(stopper.model, Wider)
    assert stopper.model.config.vocab_size == 300  # the corpus's vocabulary, given to model_init


def test_a_callback_that_is_not_one_fails_before_any_work(prepared_32, tmp_path):
    with pytest.raises(TypeError, match="callbacks must be PretrainCallback instances, got function"):
        pretrain(job(prepared_32, tmp_path / "never"), callbacks=[lambda **kwargs: None])
    assert not (tmp_path / "never").exists()


class Steer(PretrainCallback):
    """Evaluates at step 4 instead of the schedule's 3, checkpoints at step 2, stops after step 5; records what
    happened."""

    def __init__(self):
        self.events = []

    def on_step_end(self, step, model, control, **kwargs):
        if step == 3:
            assert control.should_evaluate  # the default schedule asked first; this callback says no
            control.should_evaluate = False
        control.should_evaluate |= step == 4
        control.should_save |= step == 2
        control.should_stop |= step == 5

    def on_log(self, step, logs, control, **kwargs):
        self.events.append(("log", step))

    def on_evaluate(self, step, metrics, model, control, **kwargs):
        self.events.append(("evaluate", step))
        if step == 4:
            control.should_save = True  # a checkpoint of the evaluated weights, asked for from the evaluation

    def on_train_end(self, step, metrics, model, **kwargs):
        self.events.append(("end", step, metrics["stopped_by"]))


@pytest.mark.slow
def test_callbacks_steer_evaluation_checkpoints_and_the_stop(prepared_32, tmp_path):
    steer = Steer()
    out = tmp_path / "run"
    result = pretrain(job(prepared_32, out, save_steps=100, keep_last=5), callbacks=[steer])
    assert steer.events == [("log", 2), ("log", 4), ("evaluate", 4), ("log", 5), ("evaluate", 5),
                            ("end", 5, "callback")]
    assert result.metrics["step"] == 5 and result.metrics["stopped_by"] == "callback"
    assert sorted(path.name for path in out.glob("checkpoint-*")) == [
        "checkpoint-00000002", "checkpoint-00000004", "checkpoint-00000005"]  # asked for, asked for, the last step
    logged = [json.loads(line) for line in (out / "runs" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "eval_mlm_accuracy" in r] == [4, 5]
    assert [r["step"] for r in logged if "loss" in r] == [2, 4, 5]
    assert (out / "model.safetensors").is_file()  # a stopped run is exported like a finished one


def test_a_checkpoint_written_before_the_log_sums_were_renamed_resumes_its_sums():
    from hfbert.pretrain.plan import LoopState

    sums = {"mlm_loss_sum": 3.0, "nsp_loss_sum": 1.0, "mlm_correct": 2.0, "mlm_total": 4.0, "nsp_correct": 1.0,
            "nsp_total": 2.0, "tokens": 50.0}
    state = LoopState.from_checkpoint({"step": 7, "window": {**sums, "time_up": 0.0}, "window_seconds": 1.5,
                                       "window_data_seconds": 0.5, "tokens_seen": 90}, logging_steps=5)
    assert state.since_log == sums and state.since_log_steps == 2
    assert (state.since_log_seconds, state.since_log_data_seconds, state.tokens_seen) == (1.5, 0.5, 90)


@pytest.mark.slow
def test_a_training_step_packs_its_rows_without_looking_at_the_mask_on_the_device(prepared_32, tmp_path, monkeypatch):
    """Where a micro-batch's real tokens and supervised labels sit is found on the host when the batch is read (in
    the read-ahead thread), from the rows' lengths and the labels; the training thread never searches the mask or
    the labels on the device for them (a host sync on a GPU)."""
    from hfbert import unpadding_hfbert

    rows, calls = unpadding_hfbert.PackedRows, []
    for name in ("from_mask", "from_lengths"):
        def recorded(cls, *args, _name=name, _original=getattr(rows, name).__func__):
            calls.append((_name, threading.current_thread().name))
            return _original(cls, *args)

        monkeypatch.setattr(rows, name, classmethod(recorded))

    class Watch(PretrainCallback):
        during = None

        def on_step_end(self, step, model, **kwargs):
            self.during = list(calls)  # the evaluations come after the last step's end

    class Told(HfBertForPreTraining):
        """Records what the loop tells the model of each training batch."""

        told = []

        def forward(self, *args, packed_rows=None, supervised_positions=None, **kwargs):
            if self.training:
                labels = kwargs["labels"]
                Told.told.append(packed_rows is not None and torch.equal(
                    supervised_positions, (labels.flatten() != -100).nonzero().squeeze(1)))
            return super().forward(*args, packed_rows=packed_rows, supervised_positions=supervised_positions,
                                   **kwargs)

    watch = Watch()
    pretrain(job(prepared_32, tmp_path / "run", eval_steps=100), callbacks=[watch], model_init=Told)
    assert sum(name == "from_lengths" for name, _ in watch.during) >= 6  # every micro-batch read so far
    assert {thread for _, thread in watch.during} == {"hfbert-read-ahead_0"}, watch.during
    assert len(Told.told) == 6 and all(Told.told)  # every step was told where its rows and labels are
