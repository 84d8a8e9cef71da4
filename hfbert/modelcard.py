"""The model card of a pretrained hfbert folder, rendered from ``model_cards/pretrained.md`` with huggingface_hub.

The YAML header is a ``ModelCardData`` (library_name, tags, language, license, datasets, metrics, pipeline_tag), so
the Hub indexes it; the body is the Jinja template filled with the run's facts: architecture, data statistics,
hyper-parameters, held-out results next to their trivial baselines, the loss curve and a fill-mask example.
Cards are generated, never hand-edited.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["template_path", "render_pretrained_card", "write_pretrained_card"]

# Hyper-parameters shown in the card, in this order.
_CARD_SETTINGS = (
    "optimizer", "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm",
    "warmup_ratio", "warmup_steps", "batch_size", "gradient_accumulation_steps", "max_steps", "max_time_minutes",
    "masking", "masked_lm_prob", "max_predictions_per_seq", "short_seq_prob", "whole_word_mask", "mixed_precision",
    "seed",
)


def template_path(name: str) -> Path:
    """A card template: packaged as ``hfbert/model_cards/<name>`` or, in a source checkout, ``model_cards/<name>``."""
    package = Path(__file__).resolve().parent
    for folder in (package / "model_cards", package.parent / "model_cards"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"model card template {name!r} not found in {package / 'model_cards'} or "
                            f"{package.parent / 'model_cards'}")


def render_pretrained_card(*, config, model_config, stats: dict, metrics: dict, phases, curve: Path | None,
                           fill_mask: list[dict], fill_mask_text: str, model_name: str | None = None):
    """A ``huggingface_hub.ModelCard`` for a finished ``hfbert pretrain`` run."""
    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(
        library_name="transformers",
        license="apache-2.0",
        language=["en"],
        tags=["hfbert", "bert", "fill-mask", "pretraining", "masked-lm", "next-sentence-prediction"],
        datasets=None if config.dataset is None else [config.dataset],
        metrics=["accuracy"],
        pipeline_tag="fill-mask",
    )
    arch = {key: getattr(model_config, key) for key in (
        "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "hidden_act", "vocab_size",
        "max_position_embeddings")}
    settings = config.to_dict()
    return ModelCard.from_template(
        data,
        template_path=str(template_path("pretrained.md")),
        model_name=model_name or config.push_to_hub or Path(config.output_dir).name,
        preset=config.preset,
        corpus=stats["corpus"],
        lowercase=config.lowercase,
        arch=arch,
        num_parameters=_count_parameters(model_config),
        stats=stats,
        max_predictions_per_seq=config.max_predictions_per_seq,
        hyperparameters={key: settings[key] for key in _CARD_SETTINGS if settings[key] is not None},
        phases=phases,
        metrics=metrics,
        curve=curve.name if curve else None,
        fill_mask=fill_mask,
        fill_mask_text=fill_mask_text,
    )


def _count_parameters(model_config) -> int:
    """Parameters of ``HfBertForPreTraining`` with this config (tied decoder counted once), without building it."""
    v, d, f = model_config.vocab_size, model_config.hidden_size, model_config.intermediate_size
    embeddings = (v + model_config.max_position_embeddings + model_config.type_vocab_size) * d + 2 * d
    layer = 4 * (d * d + d) + 2 * d + (d * f + f) + (f * d + d) + 2 * d
    heads = (d * d + d) + 2 * d + v + (d * d + d) + (2 * d + 2)  # MLM transform + LN + bias, pooler, NSP
    return embeddings + model_config.num_hidden_layers * layer + heads


def write_pretrained_card(output_dir: str | Path, **kwargs: Any) -> Path:
    """Render the card and save it as ``output_dir/README.md``."""
    path = Path(output_dir) / "README.md"
    render_pretrained_card(**kwargs).save(path)
    return path
