"""hfbert pretrain --gradient_checkpointing: every encoder layer of the training model is recomputed in the backward
pass, the run logs the losses and ends with the weights of the same run without it (dropout on: the recomputation
replays each layer's dropout), and the card records the setting.

A tiny model (hidden 32, 2 layers) on the nine-chapter corpus (tests/helpers/pretraining.py).
"""

import re

import pytest
import torch
from safetensors.torch import load_file

from hfbert.pretrain import PretrainCallback, pretrain
from hfbert.pretrain.config import ConfigError, PretrainConfig
from hfbert.pretrain.tracking import read_jsonl

from helpers.pretraining import settings

DROPOUT = {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
STEPS = 4


class LayerCalls(PretrainCallback):
    """Counts the passes through the encoder layers' feed-forward blocks in training, step by step (a checkpointed
    layer's inside runs twice: in the forward and again in the backward pass), and what the model says of itself."""

    def __init__(self):
        self.calls, self.per_step, self.enabled = 0, [], None

    def count(self, module, args):
        self.calls += module.training

    def on_train_begin(self, step, model, **kwargs):
        self.enabled = model.is_activation_checkpointing
        for layer in model.bert.encoder.layer:
            layer.intermediate.register_forward_pre_hook(self.count)

    def on_step_end(self, step, model, control, **kwargs):
        self.per_step.append(self.calls)
        self.calls = 0


def run(prepared, output_dir, **overrides):
    calls = LayerCalls()
    values = settings([prepared[64]], output_dir, max_steps=STEPS, eval_steps=2, save_steps=100,
                      model={"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                             "intermediate_size": 37, **DROPOUT}, **overrides)
    result = pretrain(PretrainConfig.from_dict(values), callbacks=[calls])
    lines = [{k: v for k, v in line.items() if k in ("step", "loss", "mlm_loss", "nsp_loss", "eval_loss")}
             for line in read_jsonl(output_dir / "runs" / "metrics.jsonl") if "step" in line]
    return calls, lines, load_file(output_dir / "model.safetensors"), result


@pytest.mark.slow
def test_checkpointed_layers_train_as_the_plain_ones(prepared, tmp_path):
    plain, plain_lines, plain_weights, _ = run(prepared, tmp_path / "plain")
    checked, lines, weights, _ = run(prepared, tmp_path / "checkpointed", gradient_checkpointing=True)
    assert plain.enabled is False and plain.per_step == [2] * STEPS  # each of the 2 layers, once
    assert checked.enabled is True and checked.per_step == [4] * STEPS  # and again in the backward pass
    assert len(lines) == len(plain_lines) > STEPS
    for mine, theirs in zip(lines, plain_lines):
        assert mine.keys() == theirs.keys() and mine["step"] == theirs["step"]
        for key in mine.keys() - {"step"}:
            assert mine[key] == pytest.approx(theirs[key], rel=1e-5, abs=1e-6), (mine["step"], key)
    assert weights.keys() == plain_weights.keys()
    for name, tensor in weights.items():
        torch.testing.assert_close(tensor, plain_weights[name], rtol=1e-5, atol=1e-6, msg=name)
    card = (tmp_path / "checkpointed" / "README.md").read_text()
    assert re.search(r"gradient_checkpointing\W+True", card), card


def test_a_model_that_cannot_checkpoint_is_refused_before_training(prepared, tmp_path):
    values = settings([prepared[64]], tmp_path / "out", max_steps=STEPS, gradient_checkpointing=True)

    def model_init(model_config):
        from hfbert import HfBertForPreTraining

        model = HfBertForPreTraining(model_config)
        model.supports_gradient_checkpointing = False
        return model

    with pytest.raises(ConfigError, match="gradient_checkpointing: the model .* does not support it"):
        pretrain(PretrainConfig.from_dict(values), model_init=model_init)
