"""Resumable training state on disk: atomic checkpoints, keep-last-K, find the latest.

A checkpoint is a folder ``checkpoint-00000100`` holding ``accelerator.save_state`` output (model, optimizer,
registered objects such as the LR scheduler, and every process's RNG states) plus ``hfbert_state.json`` (the step,
the logging window, counters). It is written into ``checkpoint-00000100.tmp`` and renamed into place only once
complete and flushed to disk: a run killed mid-write leaves a ``.tmp`` folder that is never mistaken for a
checkpoint (and is removed by the next start), and the previous checkpoint is untouched.

These folders are resumable state, not the Hub-format export (``save_pretrained``), which lives beside them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "STATE_FILE",
    "checkpoint_dir",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "remove_incomplete",
    "save_checkpoint",
]

STATE_FILE = "hfbert_state.json"
_NAME = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / f"checkpoint-{step:08d}"


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints in ``output_dir`` as ``(step, path)``, oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = []
    for path in output_dir.iterdir():
        match = _NAME.match(path.name)
        if match and path.is_dir() and (path / STATE_FILE).is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1][1] if checkpoints else None


def remove_incomplete(output_dir: str | Path) -> list[Path]:
    """Delete ``checkpoint-*.tmp`` folders left by a run killed while writing; returns what was removed."""
    output_dir = Path(output_dir)
    stale = [p for p in output_dir.glob("checkpoint-*.tmp") if p.is_dir()] if output_dir.is_dir() else []
    for path in stale:
        shutil.rmtree(path)
    return stale


def _fsync_tree(folder: Path) -> None:
    """Flush every file of ``folder`` and the folder itself, so the rename publishes data that is on disk."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is still atomic
        return
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _publish(scratch: Path, final: Path) -> None:
    """Rename the finished ``scratch`` folder to ``final`` (replacing an older copy of the same step)."""
    if final.exists():
        retired = final.with_name(final.name + ".old")
        shutil.rmtree(retired, ignore_errors=True)
        final.rename(retired)
        scratch.rename(final)
        shutil.rmtree(retired)
    else:
        scratch.rename(final)
    _fsync_dir(final.parent)


def _prune(output_dir: Path, keep_last: int) -> None:
    for _, path in list_checkpoints(output_dir)[:-keep_last]:
        shutil.rmtree(path)


def save_checkpoint(accelerator, output_dir: str | Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Write a checkpoint of ``step`` atomically and keep only the ``keep_last`` newest. Call on every process.

    ``state`` is the JSON-serialisable loop state (written by the main process). Raises ``OSError`` with the
    folder named when the write fails; earlier checkpoints are left as they were.
    """
    output_dir = Path(output_dir)
    final = checkpoint_dir(output_dir, step)
    scratch = final.with_name(final.name + ".tmp")
    if accelerator.is_main_process and scratch.exists():
        shutil.rmtree(scratch)
    accelerator.wait_for_everyone()
    try:
        # Pickled tensors: safetensors cannot hold the tied decoder/embedding pair without dropping one of them.
        accelerator.save_state(str(scratch), safe_serialization=False)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            (scratch / STATE_FILE).write_text(json.dumps({**state, "step": step}, indent=1), encoding="utf-8")
            _fsync_tree(scratch)
            _publish(scratch, final)
            _prune(output_dir, keep_last)
    except OSError as err:
        previous = latest_checkpoint(output_dir)
        raise OSError(
            f"could not write the checkpoint of step {step} to {scratch}: {err}. "
            f"The latest complete checkpoint is {previous or 'none'} and was not modified."
        ) from err
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator, path: str | Path) -> dict[str, Any]:
    """Restore model, optimizer, registered objects and RNG states from ``path``; returns the loop state."""
    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise FileNotFoundError(f"{path} is not a complete hfbert checkpoint (no {STATE_FILE})")
    accelerator.load_state(str(path))
    return json.loads(state_file.read_text(encoding="utf-8"))
