"""Resumable training state on disk: atomic checkpoints, crash-safe keep-last-K, find the latest complete one.

A checkpoint is a folder ``checkpoint-00000100`` holding ``accelerator.save_state`` output (model, optimizer,
registered objects such as the LR scheduler, and every process's RNG states) plus ``hfbert_state.json`` (the step,
the logging window, counters, and the list of the checkpoint's files with their sizes). These folders are resumable
state, not the Hub-format export (``save_pretrained``), which lives beside them.

What makes it crash-safe, whenever the process dies:

* Writing: a checkpoint is written into ``checkpoint-00000100.tmp`` and renamed into place only once complete and
  flushed to disk. A killed write leaves a ``.tmp`` folder that never counts as a checkpoint.
* Completeness: a folder counts as a checkpoint only when ``hfbert_state.json`` parses and every file it lists is
  there at its recorded size, so a folder that lost files (by a crash, or by hand) is never resumed from.
* Pruning: an old checkpoint is first renamed to ``checkpoint-00000100.deleting`` (one atomic rename, after which it
  no longer counts) and only then are its files removed.
* Starting: :func:`remove_incomplete` deletes what a crash left (``.tmp``, ``.deleting``), puts back a checkpoint
  that was being replaced, and prunes to ``keep_last`` -- so ``keep_last`` holds after any crash, from the next start.

Every step of save-and-prune calls :func:`_crash_hook` with one of :data:`CRASH_POINTS`; it does nothing, and the
tests replace it to kill the process exactly there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

__all__ = [
    "CRASH_POINTS",
    "STATE_FILE",
    "checkpoint_dir",
    "discard_after",
    "is_complete",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "missing_files",
    "read_state",
    "remove_incomplete",
    "save_checkpoint",
]

STATE_FILE = "hfbert_state.json"
_NAME = re.compile(r"^checkpoint-(\d+)$")
# Folder suffixes of what is not, or no longer, a checkpoint: being written, being replaced, being deleted.
_WRITING, _REPLACED, _DELETING = ".tmp", ".old", ".deleting"
# What accelerate's save_state always writes for one model and one optimizer; only checked for a state file that
# does not list its files.
_REQUIRED = ("optimizer.bin", "random_states_0.pkl")
_WEIGHTS = ("pytorch_model.bin", "model.safetensors")

CRASH_POINTS = (
    "saved_state",  # accelerate's files are in the .tmp folder, no state file yet
    "wrote_state_file",  # the state file is written, nothing flushed yet
    "flushed",  # the .tmp folder is complete and on disk, not yet published
    "moved_old_copy",  # re-saving a step: its old copy renamed to .old, the new one not yet in place
    "published",  # the new checkpoint is in place, older ones not yet pruned
    "marked_for_deletion",  # an old checkpoint renamed to .deleting, its files all there
    "deleting",  # some of the files of a .deleting folder removed
    "pruned",  # save and prune done
)


def _crash_hook(point: str) -> None:
    """Called at each of :data:`CRASH_POINTS`; does nothing (tests replace it to kill the process there)."""


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / f"checkpoint-{step:08d}"


def read_state(path: str | Path) -> dict[str, Any] | None:
    """The parsed ``hfbert_state.json`` of a checkpoint folder, or None when it is missing or unreadable."""
    try:
        state = json.loads((Path(path) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def missing_files(path: str | Path) -> list[str]:
    """What keeps ``path`` from being a complete checkpoint: its state file, or files it lists (missing or of
    another size). Empty for a complete checkpoint."""
    path = Path(path)
    state = read_state(path)
    if state is None:
        return [STATE_FILE]
    listed = state.get("files")
    if not isinstance(listed, dict):  # a state file that does not list its files: check what is always written
        missing = [name for name in _REQUIRED if not (path / name).is_file()]
        return missing + ([] if any((path / name).is_file() for name in _WEIGHTS) else [_WEIGHTS[0]])
    problems = []
    for name, size in listed.items():
        file = path / name
        if not file.is_file():
            problems.append(name)
        elif file.stat().st_size != size:
            problems.append(f"{name} ({file.stat().st_size} bytes, not {size})")
    return problems


def is_complete(path: str | Path) -> bool:
    return Path(path).is_dir() and not missing_files(path)


def list_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints in ``output_dir`` as ``(step, path)``, oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = []
    for path in output_dir.iterdir():
        match = _NAME.match(path.name)
        if match and is_complete(path):
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1][1] if checkpoints else None


# ----------------------------------------------------------------------------------------------------------------
# Removing, crash-safely


def _remove_tree(path: Path) -> None:
    """Delete a folder that no longer counts as a checkpoint, file by file (a crash may stop it anywhere)."""
    files = sorted(p for p in path.rglob("*") if not p.is_dir())
    for index, file in enumerate(files):
        file.unlink()
        if index == 0:
            _crash_hook("deleting")
    shutil.rmtree(path, ignore_errors=True)  # the emptied folders
    if path.exists():
        shutil.rmtree(path)  # raise what stopped it


def _delete(path: Path) -> None:
    """Make ``path`` stop counting as a checkpoint (an atomic rename), then remove it."""
    doomed = path.with_name(path.name + _DELETING)
    if doomed.exists():
        _remove_tree(doomed)
    path.rename(doomed)
    _fsync_dir(path.parent)
    _crash_hook("marked_for_deletion")
    _remove_tree(doomed)


def _prune(output_dir: Path, keep_last: int) -> list[Path]:
    """Delete all but the ``keep_last`` newest complete checkpoints; returns the deleted ones."""
    doomed = [path for _, path in list_checkpoints(output_dir)[:-keep_last]]
    for path in doomed:
        _delete(path)
    return doomed


def discard_after(output_dir: str | Path, step: int) -> list[Path]:
    """Delete the complete checkpoints of steps after ``step`` (a run resumed from an earlier checkpoint abandons
    them); returns what was deleted."""
    doomed = [path for s, path in list_checkpoints(output_dir) if s > step]
    for path in doomed:
        _delete(path)
    return doomed


def remove_incomplete(output_dir: str | Path, keep_last: int | None = None) -> list[Path]:
    """Clean up after a crash: delete ``checkpoint-*.tmp`` and ``checkpoint-*.deleting`` folders, put back a
    checkpoint whose replacement was cut short (or drop its old copy), and with ``keep_last``, prune the complete
    checkpoints to that many. Returns the folders removed. Call on the main process, before training starts."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    removed = []
    for old in sorted(output_dir.glob(f"checkpoint-*{_REPLACED}")):
        final = old.with_name(old.name[: -len(_REPLACED)])
        if old.is_dir() and not is_complete(final) and is_complete(old):
            if final.exists():  # an incomplete folder in its place
                _delete(final)
            old.rename(final)
            _fsync_dir(output_dir)
        elif old.is_dir():
            _remove_tree(old)
            removed.append(old)
    for suffix in (_WRITING, _DELETING):
        for path in sorted(output_dir.glob(f"checkpoint-*{suffix}")):
            if path.is_dir():
                _remove_tree(path)
                removed.append(path)
    if keep_last is not None:
        removed += _prune(output_dir, keep_last)
    return removed


# ----------------------------------------------------------------------------------------------------------------
# Writing


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
        replaced = final.with_name(final.name + _REPLACED)
        if replaced.exists():
            _remove_tree(replaced)
        final.rename(replaced)
        _crash_hook("moved_old_copy")
        scratch.rename(final)
        _fsync_dir(final.parent)
        _remove_tree(replaced)
    else:
        scratch.rename(final)
    _fsync_dir(final.parent)


def _file_sizes(folder: Path) -> dict[str, int]:
    return {path.relative_to(folder).as_posix(): path.stat().st_size
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != STATE_FILE}


def save_checkpoint(accelerator, output_dir: str | Path, step: int, state: dict[str, Any], keep_last: int) -> Path:
    """Write a checkpoint of ``step`` atomically and keep only the ``keep_last`` newest. Call on every process.

    ``state`` is the JSON-serialisable loop state (written by the main process). Raises ``OSError`` with the
    folder named when the write fails; earlier checkpoints are left as they were.
    """
    output_dir = Path(output_dir)
    final = checkpoint_dir(output_dir, step)
    scratch = final.with_name(final.name + _WRITING)
    if accelerator.is_main_process and scratch.exists():
        shutil.rmtree(scratch)
    accelerator.wait_for_everyone()
    try:
        # Pickled tensors: safetensors cannot hold the tied decoder/embedding pair without dropping one of them.
        accelerator.save_state(str(scratch), safe_serialization=False)
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            _crash_hook("saved_state")
            # Written last and listing every other file: a folder counts as a checkpoint only when all are there.
            record = {**state, "step": step, "files": _file_sizes(scratch)}
            (scratch / STATE_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
            _crash_hook("wrote_state_file")
            _fsync_tree(scratch)
            _crash_hook("flushed")
            _publish(scratch, final)
            _crash_hook("published")
            _prune(output_dir, keep_last)
            _crash_hook("pruned")
    except OSError as err:
        previous = latest_checkpoint(output_dir)
        raise OSError(
            f"could not write the checkpoint of step {step} to {scratch}: {err}. "
            f"The latest complete checkpoint is {previous or 'none'} and was not modified."
        ) from err
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator, path: str | Path) -> dict[str, Any]:
    """Restore model, optimizer, registered objects and RNG states from ``path``; returns the loop state
    (without the file list)."""
    path = Path(path)
    missing = missing_files(path) if path.is_dir() else [str(path)]
    if missing:
        raise FileNotFoundError(f"{path} is not a complete hfbert checkpoint (missing: {', '.join(missing[:5])})")
    accelerator.load_state(str(path))
    state = read_state(path)
    state.pop("files", None)
    return state
