"""The pretraining job's precision: bf16 autocast where the hardware computes it natively, fp32 elsewhere, decided
once when the settings are read; an explicit --mixed_precision wins."""

import pytest
import torch

from hfbert.pretrain.config import ConfigError, PretrainConfig, native_mixed_precision


@pytest.fixture
def machine(monkeypatch):
    """Pretend to be a machine: (gpu: None | "bf16" | "fp32", cpu flags)."""
    def become(gpu=None, amx=False, avx512_bf16=False):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu is not None)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a test GPU")
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: gpu == "bf16")
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
        native_mixed_precision.cache_clear()
    yield become
    native_mixed_precision.cache_clear()


@pytest.mark.parametrize("hardware, expected", [
    (dict(), "no"),
    (dict(avx512_bf16=True), "bf16"),
    (dict(amx=True), "bf16"),
    (dict(gpu="bf16"), "bf16"),
    (dict(gpu="fp32", amx=True), "no"),  # the GPU does the work; its lack of bf16 decides
])
def test_auto_is_bf16_only_where_native(machine, hardware, expected):
    machine(**hardware)
    value, why = native_mixed_precision()
    assert value == expected and why
    assert PretrainConfig().mixed_precision == expected  # the default is auto, resolved when the settings are read


def test_an_explicit_choice_wins_and_a_bad_one_is_named(machine):
    machine(amx=True)
    assert PretrainConfig(mixed_precision="no").mixed_precision == "no"
    machine()
    assert PretrainConfig(mixed_precision="bf16").mixed_precision == "bf16"
    with pytest.raises(ConfigError, match="mixed_precision must be 'auto', 'no', 'bf16' or 'fp16', got 'fp8'"):
        PretrainConfig(mixed_precision="fp8")
