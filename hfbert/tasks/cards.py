"""Model cards: render ``model_cards/*.md`` templates with huggingface_hub's ``ModelCard``.

Cards are generated, never hand-edited. The YAML header comes from ``ModelCardData`` (so the Hub indexes
license, tags, base model and metrics); the body is a Jinja template filled with the run's facts. Shared by
the fine-tuning recipes and pretraining.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import Trainer


def metrics_table(metrics: Mapping[str, Any], digits: int = 4) -> str:
    """A two-column Markdown table of the numeric metrics, in the order given."""
    rows = ["| metric | value |", "|---|---|"]
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        rows.append(f"| {name} | {value:.{digits}f} |" if isinstance(value, float) else f"| {name} | {value} |")
    return "\n".join(rows)


def render_model_card(
    template_path: str | Path,
    *,
    license: str = "apache-2.0",
    language: str | Sequence[str] | None = None,
    tags: Sequence[str] = ("hfbert", "bert"),
    base_model: str | None = None,
    datasets: Sequence[str] | None = None,
    metrics: Mapping[str, Any] | None = None,
    pipeline_tag: str | None = None,
    **template_vars: Any,
):
    """A ``huggingface_hub.ModelCard`` from a template; ``metrics`` fill both the header and ``metrics_table``.

    ``base_model`` is only put in the header when it is a Hub id (``owner/name``): a local path would make
    the Hub reject the card's metadata.
    """
    from huggingface_hub import ModelCard, ModelCardData

    template_path = Path(template_path)
    if not template_path.is_file():
        raise FileNotFoundError(f"model card template not found: {template_path}")
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
        data, template_path=str(template_path), base_model=base_model, metrics=metrics,
        metrics_table=metrics_table(metrics), **template_vars,
    )


def write_model_card(output_dir: str | Path, template_path: str | Path, **kwargs: Any) -> Path:
    """Render and save the card as ``output_dir/README.md``; returns its path."""
    card = render_model_card(template_path, **kwargs)
    path = Path(output_dir) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    card.save(path)
    return path


class CardKeepingTrainer(Trainer):
    """A ``Trainer`` whose ``push_to_hub`` uploads the hfbert card instead of overwriting it.

    ``Trainer.push_to_hub`` always calls ``create_model_card``, which replaces ``README.md`` with a generic
    card; when the recipe has already written its card, keep it.
    """

    def create_model_card(self, *args: Any, **kwargs: Any) -> None:
        if (Path(self.args.output_dir) / "README.md").is_file():
            return None
        return super().create_model_card(*args, **kwargs)
