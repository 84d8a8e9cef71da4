"""Model cards, rendered from the templates shipped in ``hfbert/model_cards/`` with huggingface_hub's ``ModelCard``.

Cards are generated, never hand-edited. The YAML header is a ``ModelCardData`` (library_name, license, tags,
language, base model, datasets, metrics, pipeline_tag), so the Hub indexes it; the body is a Jinja template filled
with the run's facts. Two templates:

* ``pretrained.md`` -- a finished ``hfbert pretrain`` run (:func:`write_pretrained_card`): architecture, data
  statistics, hyper-parameters, held-out results next to their trivial baselines, the loss curve, a fill-mask example;
* ``finetuned.md`` -- a fine-tuning recipe's output folder (:func:`write_model_card`): task, base model, data,
  metrics table, the notes on what the data preparation changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard, ModelCardData

from .settings import settings_marked

__all__ = [
    "TEMPLATE_DIR",
    "metrics_table",
    "render_model_card",
    "render_pretrained_card",
    "template_path",
    "write_model_card",
    "write_pretrained_card",
]

#: The card templates, package data (they travel in the wheel).
TEMPLATE_DIR = Path(__file__).resolve().parent / "model_cards"


def template_path(template: str | Path) -> Path:
    """A card template: the name of a packaged one (``"finetuned.md"``, ``"pretrained.md"``) or a path to your own."""
    if isinstance(template, str) and Path(template).name == template and (TEMPLATE_DIR / template).is_file():
        return TEMPLATE_DIR / template
    if Path(template).is_file():
        return Path(template)
    known = sorted(p.name for p in TEMPLATE_DIR.glob("*.md"))
    raise FileNotFoundError(f"model card template not found: {template} (packaged templates: {', '.join(known)})")


def metrics_table(metrics: Mapping[str, Any], digits: int = 4) -> str:
    """A two-column Markdown table of the numeric metrics, in the order given."""
    rows = ["| metric | value |", "|---|---|"]
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        rows.append(f"| {name} | {value:.{digits}f} |" if isinstance(value, float) else f"| {name} | {value} |")
    return "\n".join(rows)


def render_model_card(
    template: str | Path = "finetuned.md",
    *,
    license: str = "apache-2.0",
    language: str | Sequence[str] | None = None,
    tags: Sequence[str] = ("hfbert", "bert"),
    base_model: str | None = None,
    datasets: Sequence[str] | None = None,
    metrics: Mapping[str, Any] | None = None,
    pipeline_tag: str | None = None,
    **template_vars: Any,
) -> ModelCard:
    """A ``ModelCard`` from a template; ``metrics`` fill both the header and ``metrics_table``.

    ``base_model`` is only put in the header when it is a Hub id (``owner/name``): a local path would make
    the Hub reject the card's metadata.
    """
    path = template_path(template)
    metrics = dict(metrics or {})
    hub_base = base_model if base_model and not Path(base_model).exists() and base_model.count("/") == 1 else None
    data = ModelCardData(
        license=license,
        language=language,
        library_name="transformers",
        tags=list(tags),
        base_model=hub_base,
        datasets=list(datasets) if datasets else None,
        metrics=sorted(metrics) or None,
        pipeline_tag=pipeline_tag,
    )
    return ModelCard.from_template(
        data, template_path=str(path), base_model=base_model, metrics=metrics,
        metrics_table=metrics_table(metrics), **template_vars,
    )


def write_model_card(output_dir: str | Path, template: str | Path = "finetuned.md", **kwargs: Any) -> Path:
    """Render and save the card as ``output_dir/README.md``; returns its path."""
    card = render_model_card(template, **kwargs)
    path = Path(output_dir) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    card.save(path)
    return path


def render_pretrained_card(*, config, model_config, stats: dict, metrics: dict, phases, curve: Path | None,
                           fill_mask: list[dict], model_name: str | None = None,
                           origin: dict | None = None, downstream: list[dict] | None = None,
                           downstream_curve: Path | None = None) -> ModelCard:
    """The ``ModelCard`` of a finished ``hfbert pretrain`` run (``config``: its settings; ``origin``: for a run
    continued from a pretrained model, what :mod:`hfbert.pretrain.model` recorded of it)."""
    data = ModelCardData(
        library_name="transformers",
        license="apache-2.0",
        language=["en"],
        tags=["hfbert", "bert", "fill-mask", "pretraining", "masked-lm", "next-sentence-prediction"],
        datasets=None if config.dataset is None else [config.dataset],
        metrics=["accuracy"],
        pipeline_tag="fill-mask",
        base_model=(origin or {}).get("hub_id"),
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
        origin=origin,
        corpus=stats["corpus"],
        lowercase=config.lowercase,
        arch=arch,
        num_parameters=_count_parameters(model_config),
        stats=stats,
        max_predictions_per_seq=config.max_predictions_per_seq,
        hyperparameters={key: settings[key] for key in settings_marked(config, "card") if settings[key] is not None},
        phases=phases,
        metrics=metrics,
        curve=curve.name if curve else None,
        fill_mask=fill_mask,
        downstream=downstream or [],
        downstream_tasks=[k for k in (downstream or [{}])[0] if k not in ("step", "minutes", "average")],
        downstream_suite=config.evaluate_suite,
        downstream_seeds=", ".join(map(str, config.evaluate_seeds)),
        downstream_curve=downstream_curve.name if downstream_curve else None,
    )


def _count_parameters(model_config) -> int:
    """Parameters of ``HfBertForPreTraining`` with this config (tied decoder counted once), without building it."""
    v, d, f = model_config.vocab_size, model_config.hidden_size, model_config.intermediate_size
    embeddings = (v + model_config.max_position_embeddings + model_config.type_vocab_size) * d + 2 * d
    layer = 4 * (d * d + d) + 2 * d + (d * f + f) + (f * d + d) + 2 * d
    heads = (d * d + d) + 2 * d + v + (d * d + d) + (2 * d + 2)  # MLM transform + LN + bias, pooler, NSP
    return embeddings + model_config.num_hidden_layers * layer + heads


def write_pretrained_card(output_dir: str | Path, **kwargs: Any) -> Path:
    """Render the pretrained card and save it as ``output_dir/README.md``."""
    path = Path(output_dir) / "README.md"
    render_pretrained_card(**kwargs).save(path)
    return path
