"""The contenders of the bench: what each one is (:class:`ContenderSpec`: library, compiled or not, attention
backend, padding-free), which the code that runs, counts and reports a contender reads instead of its name, and the
models it runs (the same weights on both sides)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hfbert import HfBertConfig

# The attention backend transformers runs with; hfbert's row with it is plain "hfbert", and the compiled rows use it.
BASELINE_ATTENTION = "sdpa"
# The model shape of every preset under --quick.
QUICK_CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
                "max_position_embeddings": 512}


@dataclass(frozen=True)
class ContenderSpec:
    """One contender: ``library`` "hfbert" or "transformers", under ``torch.compile`` or not, its attention backend,
    and (inference) whether hfbert runs with ``config.padding_free``."""

    library: str
    compiled: bool = False
    backend: str = BASELINE_ATTENTION
    padding_free: bool = False

    @property
    def name(self) -> str:
        """The row's name: "hfbert", "transformers", "hfbert+compile", "hfbert eager", "hfbert eager padding_free"
        (the plain name for the baseline backend, so that it keeps the name it has without --attn_implementations)."""
        if self.compiled:
            return f"{self.library}+compile"
        name = self.library if self.backend == BASELINE_ATTENTION else f"{self.library} {self.backend}"
        return f"{name} padding_free" if self.padding_free else name

    @property
    def baseline(self) -> bool:
        """The row every speed-up is against: transformers without compilation."""
        return self.library == "transformers" and not self.compiled

    @property
    def padded_encoder(self) -> bool:
        """Whether the encoder runs on every padded position: transformers always, hfbert when compiled (its packing
        of the real tokens does not compile; see ``hfbert.modeling_hfbert``)."""
        return self.library == "transformers" or self.compiled

    @property
    def logits_everywhere(self) -> bool:
        """Whether the vocabulary logits are computed at every position (transformers) rather than at the supervised
        ones only (hfbert)."""
        return self.library == "transformers"

    @property
    def compiles_first(self) -> bool:
        """Whether the contender compiles kernels on its first steps (torch.compile; FlexAttention per shape)."""
        from hfbert.unpadding_hfbert import ATTENTION_BACKENDS

        return self.compiled or ATTENTION_BACKENDS[self.backend].compiles_per_shape

    @property
    def attention_dropout(self) -> bool:
        """Whether it trains with attention-probability dropout (not with a backend that takes none)."""
        from hfbert.unpadding_hfbert import ATTENTION_BACKENDS

        return ATTENTION_BACKENDS[self.backend].dropout_in_training

    def row(self) -> dict:
        """What the report's row says of the contender."""
        return {"library": self.library, "compiled": self.compiled, "attn_implementation": self.backend,
                "padding_free": self.padding_free}

    @classmethod
    def of_row(cls, row: dict) -> ContenderSpec:
        """The contender a report row describes (see :meth:`row`)."""
        return cls(row["library"], row["compiled"], row["attn_implementation"], row["padding_free"])


# The contenders --contenders chooses from, by name (section a; hfbert also runs once per --attn_implementations).
PEERS = {spec.name: spec for spec in (ContenderSpec("hfbert"), ContenderSpec("transformers"),
                                      ContenderSpec("hfbert", compiled=True),
                                      ContenderSpec("transformers", compiled=True))}
BASELINE = ContenderSpec("transformers").name


def model_config(preset: str, vocab_size: int, quick: bool) -> HfBertConfig:
    from hfbert import HfBertConfig

    if quick:
        return HfBertConfig(vocab_size=vocab_size, **QUICK_CONFIG)
    return HfBertConfig.from_preset(preset, vocab_size=vocab_size)


def twins(hfbert_class, transformers_class, config, device, seed: int = 0):
    """The hfbert model and the transformers model of the same head, holding the same weights (SDPA both)."""
    import torch

    torch.manual_seed(seed)
    ours = hfbert_class(config)
    bert_config = config.to_bert_config()
    bert_config._attn_implementation = BASELINE_ATTENTION
    theirs = transformers_class(bert_config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    if unexpected or any("decoder" not in key for key in missing):
        raise RuntimeError(f"weights do not line up: missing {missing}, unexpected {unexpected}")
    return ours.to(device), theirs.to(device)


def with_attention(model, backend: str):
    """``model`` itself for sdpa, else a copy of it (the same weights) running attention with ``backend``."""
    if backend == BASELINE_ATTENTION:
        return model
    model = copy.deepcopy(model)
    model.set_attn_implementation(backend)
    return model


def without_attention_dropout(model) -> None:
    """Attention-probability dropout off, for a backend that takes none when training (transformers'
    flex_attention)."""
    from hfbert.modeling_hfbert import HfBertSelfAttention

    for module in model.modules():
        if isinstance(module, HfBertSelfAttention):
            module.dropout.p = 0.0
