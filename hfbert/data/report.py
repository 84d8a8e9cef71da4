"""The health report of a pretraining-data build: what came in, what was skipped, what came out.

Written next to the output as ``report.json`` (machine-readable) and ``report.txt`` (for people).  Every count
is paired with the counts it must add up to, and the ``checks`` section states those identities, so a reader can
see at a glance that nothing was dropped silently.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = [
    "assemble_report", "build_report", "content_digest", "line_sketch", "merge_line_sketches",
    "merge_pool_summaries", "merge_row_summaries", "render_report", "summarize_pools", "summarize_rows",
    "write_report",
]


def content_digest(dataset: Dataset) -> str:
    """SHA-256 of the dataset's schema and values: equal digests mean identical content, whatever the chunking,
    slicing or cache files behind the dataset (Arrow buffers themselves may carry unused bytes, so the values
    are hashed, not the buffers).

    Args:
        dataset (`datasets.Dataset`):
            The dataset to digest.

    Returns:
        `str`: the hex digest.
    """
    return table_digest(dataset.with_format("arrow")[:])


def table_digest(table: pa.Table) -> str:
    """:func:`content_digest` of an Arrow table."""
    digest = hashlib.sha256(str(table.schema.remove_metadata()).encode())
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        while pa.types.is_list(column.type):
            offsets = column.offsets.to_numpy().astype(np.int64)
            digest.update((offsets - offsets[0]).tobytes())
            column = column.flatten()
        digest.update(column.to_numpy(zero_copy_only=False).tobytes())
    return digest.hexdigest()


def _distribution(counts: np.ndarray) -> dict:
    """Summary and a coarse histogram (16 equal-width bins) of a non-negative integer distribution given as
    counts per value (``counts[v]`` = how often ``v`` occurs), so shards' distributions add up exactly."""
    counts = np.asarray(counts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return {"count": 0}
    present = np.flatnonzero(counts)
    low, high = int(present[0]), int(present[-1])
    values = np.arange(len(counts))
    cumulative = np.cumsum(counts)

    def percentile(q: float) -> float:  # numpy's default (linear) rule, on the sorted values the counts stand for
        position = q / 100 * (n - 1)
        below, above = (int(np.searchsorted(cumulative, k, side="right")) for k in (np.floor(position),
                                                                                     np.ceil(position)))
        return float(below + (above - below) * (position - np.floor(position)))

    histogram, edges = np.histogram(values[present], bins=min(16, high - low + 1), weights=counts[present])
    return {
        "count": n,
        "sum": int((values * counts).sum()),
        "min": low,
        "max": high,
        "mean": round(float((values * counts).sum() / n), 3),
        "p50": percentile(50),
        "p90": percentile(90),
        "p99": percentile(99),
        "histogram": {"edges": [round(float(e), 2) for e in edges], "counts": histogram.astype(np.int64).tolist()},
    }


def _list_lengths(table, column: str) -> np.ndarray:
    return pc.list_value_length(table.column(column)).to_numpy(zero_copy_only=False).astype(np.int64)


def _mask_actions(table, mask_token_id: int | None) -> dict | None:
    """Static masks: how many selected positions show [MASK], their original token, or something else."""
    if "masked_lm_positions" not in table.column_names or mask_token_id is None:
        return None
    ids = table.column("input_ids").combine_chunks()
    positions = table.column("masked_lm_positions").combine_chunks()
    labels = table.column("masked_lm_ids").combine_chunks().flatten().to_numpy()
    row_start = ids.offsets.to_numpy()[:-1]
    per_row = np.diff(positions.offsets.to_numpy())
    flat_positions = positions.flatten().to_numpy() + np.repeat(row_start, per_row)
    shown = ids.flatten().to_numpy()[flat_positions]
    masked = int(np.count_nonzero(shown == mask_token_id))
    unchanged = int(np.count_nonzero(shown == labels))
    return {"selected": int(len(shown)), "mask_token": masked, "unchanged": unchanged,
            "random_token": int(len(shown)) - masked - unchanged}


# ---------------------------------------------------------------------------------------------------------
# Mergeable pieces: each shard of a build summarises its own rows and lines; the summaries add up to the
# report of the whole corpus without the client ever holding its rows.

#: Distinct line hashes a sketch keeps: below this many distinct lines the duplicate count is exact.
SKETCH_SIZE = 1 << 16


def summarize_rows(table: pa.Table, mask_token_id: int | None = None) -> dict:
    """What the report needs from built rows: counts per sequence length and per masked count, NSP labels, the
    outcome of static masks.  Summaries of disjoint tables merge with :func:`merge_row_summaries`."""
    lengths = _list_lengths(table, "input_ids")
    labels = table.column("next_sentence_label").to_numpy(zero_copy_only=False)
    summary = {"rows": table.num_rows, "random_next": int(np.count_nonzero(labels == 1)),
               "tokens": int(lengths.sum()), "lengths": np.bincount(lengths).tolist()}
    if "masked_lm_positions" in table.column_names:
        summary["masked"] = np.bincount(_list_lengths(table, "masked_lm_positions")).tolist()
        summary["mask_actions"] = _mask_actions(table, mask_token_id)
    return summary


def _add_counts(a: list, b: list) -> list:
    longer, shorter = (a, b) if len(a) >= len(b) else (b, a)
    return [x + (shorter[i] if i < len(shorter) else 0) for i, x in enumerate(longer)]


def merge_row_summaries(summaries: list[dict]) -> dict:
    merged = {"rows": 0, "random_next": 0, "tokens": 0, "lengths": []}
    for summary in summaries:
        for key in ("rows", "random_next", "tokens"):
            merged[key] += summary[key]
        merged["lengths"] = _add_counts(merged["lengths"], summary["lengths"])
        if "masked" in summary:
            merged["masked"] = _add_counts(merged.get("masked", []), summary["masked"])
            actions = summary.get("mask_actions")
            if actions is not None:
                previous = merged.get("mask_actions") or dict.fromkeys(actions, 0)
                merged["mask_actions"] = {k: previous[k] + v for k, v in actions.items()}
    return merged


def line_sketch(hashes: np.ndarray) -> dict:
    """Line count and the ``SKETCH_SIZE`` smallest distinct 64-bit line hashes (a bottom-k sketch): merged
    sketches give the number of distinct lines exactly while it is below ``SKETCH_SIZE``, and an estimate
    with about 0.4% relative error above, in memory that does not grow with the corpus."""
    return {"lines": int(len(hashes)), "smallest": np.unique(np.asarray(hashes, dtype=np.uint64))[:SKETCH_SIZE]}


def merge_line_sketches(sketches: list[dict]) -> dict:
    smallest = np.unique(np.concatenate([np.asarray(s["smallest"], dtype=np.uint64) for s in sketches]
                                        or [np.zeros(0, np.uint64)]))[:SKETCH_SIZE]
    return {"lines": sum(s["lines"] for s in sketches), "smallest": smallest}


def _duplicate_lines(sketch: dict) -> dict:
    lines, smallest = sketch["lines"], sketch["smallest"]
    exact = len(smallest) < SKETCH_SIZE
    unique = len(smallest) if exact else int(round((SKETCH_SIZE - 1) / (float(smallest[-1]) / 2.0**64)))
    unique = min(unique, lines)
    return {"lines": lines, "unique": unique, "ratio": round(1 - unique / max(1, lines), 6),
            "unique_is_estimate": not exact}


def summarize_pools(pool_stats: list[dict]) -> dict:
    """The per-pool build stats added up, with the number of pools and of pools with a single document; the
    summaries of disjoint sets of pools add up key by key (:func:`merge_pool_summaries`)."""
    keys = ("documents", "empty_documents", "units", "sentences", "skipped_empty_lines", "tokens",
            "document_passes", "short_target_passes", "instances", "random_next", "truncated_instances",
            "truncated_tokens")
    summary = {key: sum(s[key] for s in pool_stats) for key in keys}
    summary["pools"] = len(pool_stats)
    summary["single_document_pools"] = sum(1 for s in pool_stats if s["pool_documents"] == 1)
    summary["single_document_pools_with_rows"] = sum(1 for s in pool_stats
                                                     if s["pool_documents"] == 1 and s["instances"] > 0)
    return summary


def merge_pool_summaries(summaries: list[dict]) -> dict:
    return {key: sum(s[key] for s in summaries) for key in summaries[0]} if summaries else summarize_pools([])


def assemble_report(pools: dict, rows: dict, lines: dict, read_stats: dict | None, settings: dict,
                    digest: str) -> dict:
    """The report (a JSON-serialisable dict) from a pool summary (:func:`summarize_pools`), a row summary
    (:func:`summarize_rows`) and a line sketch (:func:`line_sketch`), each merged over the shards."""
    total = pools
    count = rows["rows"]
    random_next = rows["random_next"]
    sentences_in = total["sentences"] + total["skipped_empty_lines"]
    report = {
        "digest": digest,
        "settings": settings,
        "input": read_stats,
        "documents": {"total": total["documents"], "empty_skipped": total["empty_documents"],
                      "used": total["documents"] - total["empty_documents"]},
        "sentences": {"total": sentences_in, "skipped_empty": total["skipped_empty_lines"],
                      "used": total["sentences"], "tokens": total["tokens"]},
        "duplicate_lines": _duplicate_lines(lines),
        "pools": {"count": pools["pools"], "single_document": pools["single_document_pools"]},
        "short_targets": {"document_passes": total["document_passes"], "short": total["short_target_passes"],
                          "fraction": round(total["short_target_passes"] / max(1, total["document_passes"]), 4)},
        "instances": {"total": count, "random_next": random_next, "actual_next": count - random_next,
                      "random_next_fraction": round(random_next / max(1, count), 4),
                      "truncated": total["truncated_instances"], "truncated_tokens": total["truncated_tokens"]},
        "lengths": _distribution(rows["lengths"]),
    }
    if "masked" in rows:
        report["masked_per_sequence"] = _distribution(rows["masked"])
        report["mask_actions"] = rows.get("mask_actions")
    report["checks"] = _checks(report, total, count)
    return report


def build_report(dataset: Dataset, pool_stats: list[dict], line_hashes: np.ndarray, read_stats: dict | None,
                 settings: dict, mask_token_id: int | None = None, digest: str | None = None) -> dict:
    """Aggregate per-pool stats and the built rows into one report (a JSON-serialisable dict).  ``digest``: the
    dataset's :func:`content_digest` when the caller has it already."""
    table = dataset.with_format("arrow")[:]
    return assemble_report(summarize_pools(pool_stats), summarize_rows(table, mask_token_id), line_sketch(line_hashes),
                           read_stats, settings, digest or content_digest(dataset))


def _checks(report: dict, total: dict, rows: int) -> dict:
    docs, sents = report["documents"], report["sentences"]
    checks = {
        "documents_add_up": docs["total"] == docs["used"] + docs["empty_skipped"],
        "sentences_add_up": sents["total"] == sents["used"] + sents["skipped_empty"],
        "hashed_every_used_line": report["duplicate_lines"]["lines"] == sents["used"],
        "instances_match_rows": total["instances"] == rows,
        "nsp_adds_up": report["instances"]["random_next"] + report["instances"]["actual_next"] == rows,
        "random_next_counted_twice_agree": total["random_next"] == report["instances"]["random_next"],
    }
    read = report["input"]
    if read:
        checks["lines_add_up"] = read["lines"] == read["text_lines"] + read["blank_lines"] + read["boundary_lines"]
        checks["read_documents_match"] = read["documents"] == docs["total"]
    actions = report.get("mask_actions")
    if actions:
        checks["mask_actions_add_up"] = actions["selected"] == report["masked_per_sequence"].get("sum", 0)
    return checks


def render_report(report: dict) -> str:
    """The report as readable text.

    Args:
        report (`dict`):
            A health report (``build_pretraining_dataset(..., return_report=True)``).

    Returns:
        `str`: one line per count (documents, sentences, duplicates, pools, short targets, instances, lengths,
        masks) and a last line saying whether every check adds up.
    """
    docs, sents, inst = report["documents"], report["sentences"], report["instances"]
    lines = [
        "hfbert pretraining data report",
        f"documents: {docs['total']} read, {docs['empty_skipped']} empty (skipped), {docs['used']} used",
        f"sentences: {sents['total']} read, {sents['skipped_empty']} empty (skipped), {sents['used']} used, "
        f"{sents['tokens']} tokens",
        f"duplicate lines: {report['duplicate_lines']['ratio']:.2%} of {report['duplicate_lines']['lines']}",
        f"pools: {report['pools']['count']} ({report['pools']['single_document']} with a single document)",
        f"short target lengths: {report['short_targets']['short']} of {report['short_targets']['document_passes']} "
        f"document passes ({report['short_targets']['fraction']:.2%})",
        f"instances: {inst['total']} = {inst['actual_next']} actual next + {inst['random_next']} random next "
        f"({inst['random_next_fraction']:.2%} random); {inst['truncated']} truncated "
        f"({inst['truncated_tokens']} tokens removed)",
        _render_distribution("sequence length", report["lengths"]),
    ]
    if report["input"]:
        read = report["input"]
        lines.insert(1, f"input: {read['lines']} lines = {read['text_lines']} text + {read['blank_lines']} "
                        f"blank + {read['boundary_lines']} boundary, from {len(read['files'])} file(s)")
    if "masked_per_sequence" in report:
        lines.append(_render_distribution("masked per sequence", report["masked_per_sequence"]))
        actions = report.get("mask_actions")
        if actions:
            lines.append(f"masked positions: {actions['selected']} = {actions['mask_token']} [MASK] + "
                         f"{actions['random_token']} random + {actions['unchanged']} unchanged")
    failed = [name for name, ok in report["checks"].items() if not ok]
    lines.append("checks: all counts add up" if not failed else f"checks FAILED: {', '.join(failed)}")
    return "\n".join(lines) + "\n"


def _render_distribution(name: str, dist: dict) -> str:
    if dist.get("count", 0) == 0:
        return f"{name}: (none)"
    return (f"{name}: min {dist['min']}, mean {dist['mean']}, p50 {dist['p50']:g}, p90 {dist['p90']:g}, "
            f"p99 {dist['p99']:g}, max {dist['max']}")


def write_report(report: dict, directory: str | Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.txt`` (:func:`render_report`) into ``directory``.

    Args:
        report (`dict`):
            A health report.
        directory (`str` or `Path`):
            The folder; created if needed.

    Returns:
        `tuple[Path, Path]`: the paths of ``report.json`` and ``report.txt``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    json_path, text_path = directory / "report.json", directory / "report.txt"
    json_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text_path.write_text(render_report(report), encoding="utf-8")
    return json_path, text_path
