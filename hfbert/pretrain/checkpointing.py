"""Resumable training state on disk: atomic checkpoints, crash-safe keep-last-K, find the latest complete one.

A checkpoint is a folder ``checkpoint-00000100`` holding ``accelerator.save_state`` output (model, optimizer,
registered objects such as the LR scheduler) plus ``hfbert_state.json`` (the step, the logging window, counters, and
the list of the checkpoint's files with their sizes). These folders are resumable state, not the Hub-format export
(``save_pretrained``), which lives beside them.

Many machines, one disk that counts. Only the main process's output folder holds checkpoints; nothing a resume needs
lives on any other machine, so a run whose other machines lost their disks resumes exactly:

* Random state is not saved at all. Each optimizer step seeds torch's generators from ``(seed, step, rank)``
  (:func:`seed_step`), so dropout at step ``s`` on process ``r`` is the same whatever happened before: in an
  uninterrupted run, after a resume, with any number of machines. (accelerate still writes its ``random_states_*``
  files; a resume ignores them, and a machine without the main's disk removes its copy after each save.)
* Loading (:func:`load_checkpoint`): the main process reads the checkpoint and every other process receives the
  model's weights, the optimizer's state and the schedule from it over the process group.
* Decisions that read the output folder are taken on the main process and sent to the others, errors included
  (:func:`from_main`), so every process takes the same branch and none waits for good in a collective.

What makes it crash-safe, whenever the process dies:

* Writing: a checkpoint is written into ``checkpoint-00000100.tmp`` and renamed into place only once complete and
  flushed to disk. A killed write leaves a ``.tmp`` folder that never counts as a checkpoint.
* Completeness: a folder counts as a checkpoint only when ``hfbert_state.json`` parses and every file it lists is
  there at its recorded size, so a folder that lost files (by a crash, or by hand) is never resumed from.
* Pruning: an old checkpoint is first renamed to ``checkpoint-00000100.deleting`` (one atomic rename, after which it
  no longer counts) and only then are its files removed.
* Starting: :func:`remove_incomplete` deletes what a crash left (``.tmp``, ``.deleting``), puts back a checkpoint
  that was being replaced, and prunes to ``keep_last`` -- so ``keep_last`` holds after any crash, from the next start.

A full disk stops the run with :class:`DiskFullError`: one line naming the folder, the space the checkpoint needs and
the complete checkpoint that is left, on every process. Freeing space and ``--resume`` continues exactly.

Every step of save-and-prune calls :func:`crash_hook` with one of :data:`CRASH_POINTS`; it does nothing, and the
tests replace it to kill the process exactly there.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import re
import shutil
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "CRASH_POINTS",
    "STATE_FILE",
    "DiskFullError",
    "checkpoint_dir",
    "discard_after",
    "from_main",
    "is_complete",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "missing_files",
    "out_of_space",
    "read_state",
    "remove_incomplete",
    "save_checkpoint",
    "seed_step",
    "settle",
    "staged_folder",
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


_DROPOUT_STREAM = 0x64726F70  # separates the seeds of dropout from those of the masks and the held-out set
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def crash_hook(point: str) -> None:
    """Called at each of :data:`CRASH_POINTS`; does nothing (tests replace it to kill the process there)."""


class DiskFullError(OSError):
    """A write ran out of space. The message is one line: the folder, the space it needs, what is left intact."""

    def __init__(self, message: str):
        super().__init__(message)
        self.errno = errno.ENOSPC


# ----------------------------------------------------------------------------------------------------------------
# Processes


def _processes(accelerator) -> int:
    return getattr(accelerator, "num_processes", 1)


# Weak references to the tensors of the latest exchange. gloo's worker thread frees a finished collective's tensors
# after the caller has moved on, and freeing a tensor that Python made needs the GIL: if the process group is torn
# down at that moment (the run ends, or stops on an error), the teardown holds the GIL and waits for that thread,
# which waits for the GIL -- the exit hangs. :func:`settle` waits, without the GIL, until they are freed.
_in_flight: list[weakref.ref] = []


def settle(timeout: float = 10.0) -> None:
    """Wait until the process group's worker threads have freed the tensors of this module's last exchange (call
    before the process group is torn down)."""
    deadline = time.monotonic() + timeout
    while any(ref() is not None for ref in _in_flight) and time.monotonic() < deadline:
        time.sleep(0.001)


def _send(accelerator, obj: Any, source: int) -> Any:
    """``obj`` of process ``source`` on every process (pickled into two broadcasts)."""
    device = accelerator.device
    payload = pickle.dumps(obj) if accelerator.process_index == source else b""
    size = torch.tensor([len(payload)], dtype=torch.long, device=device)
    torch.distributed.broadcast(size, src=source)
    if accelerator.process_index == source:
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)
    else:
        data = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    torch.distributed.broadcast(data, src=source)
    _in_flight[:] = [weakref.ref(size), weakref.ref(data)]
    return obj if accelerator.process_index == source else pickle.loads(data.cpu().numpy().tobytes())


def from_main(accelerator, compute: Callable[[], Any]) -> Any:
    """``compute()`` on the main process, and its result on every process; when it raises, every process raises
    that error. For what only the main process can know (its output folder), so that all processes take the same
    branch: none goes on into a collective that another has left."""
    result = error = None
    if accelerator.is_main_process:
        try:
            result = compute()
        except Exception as err:  # sent to every process and raised there
            error = err
            try:
                pickle.loads(pickle.dumps(error))
            except Exception:  # an exception class that does not survive pickling: its type and message do
                error = RuntimeError(f"{type(err).__name__}: {err}")
    if _processes(accelerator) > 1:
        result, error = _send(accelerator, (result, error), source=0)
    if error is not None:
        settle()  # the run stops: the process group is torn down next
        raise error
    return result


def seed_step(seed: int, step: int, rank: int) -> None:
    """Seed torch's generators (CPU and every GPU) for optimizer step ``step`` on process ``rank``: the step's random
    numbers (dropout) follow from ``(seed, step, rank)`` alone, so no random state needs saving or sending."""
    torch.manual_seed(int(np.random.SeedSequence([seed, _DROPOUT_STREAM, step, rank]).generate_state(1)[0]))


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
            crash_hook("deleting")
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
    crash_hook("marked_for_deletion")
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


def fsync_tree(folder: Path) -> None:
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


def publish(scratch: Path, final: Path) -> None:
    """Rename the finished ``scratch`` folder to ``final`` (replacing an older copy of the same step)."""
    if final.exists():
        replaced = final.with_name(final.name + _REPLACED)
        if replaced.exists():
            _remove_tree(replaced)
        final.rename(replaced)
        crash_hook("moved_old_copy")
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

    ``state`` is the JSON-serialisable loop state (written by the main process). When a write fails anywhere, every
    process raises the same ``OSError`` naming the folder (:class:`DiskFullError` when the disk is full, with the
    space needed); earlier checkpoints are left as they were.
    """
    output_dir = Path(output_dir)
    final = checkpoint_dir(output_dir, step)
    scratch = final.with_name(final.name + _WRITING)
    from_main(accelerator, lambda: shutil.rmtree(scratch) if scratch.exists() else None)
    try:
        try:
            # Pickled tensors: safetensors cannot hold the tied decoder/embedding pair without dropping one of them.
            accelerator.save_state(str(scratch), safe_serialization=False)
            failed = None
        except Exception as err:  # a full disk is a RuntimeError of torch's writer, not always an OSError
            failed = err
        failed = _first_of_all(accelerator, failed)
        if failed is not None:
            raise failed

        def write_and_publish() -> None:
            crash_hook("saved_state")
            # Written last and listing every other file: a folder counts as a checkpoint only when all are there.
            record = {**state, "step": step, "files": _file_sizes(scratch)}
            (scratch / STATE_FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")
            crash_hook("wrote_state_file")
            fsync_tree(scratch)
            crash_hook("flushed")
            publish(scratch, final)
            crash_hook("published")
            _prune(output_dir, keep_last)
            crash_hook("pruned")

        from_main(accelerator, write_and_publish)
    except Exception as err:
        if not (isinstance(err, OSError) or out_of_space(err, scratch)):
            raise
        raise _write_error(err, output_dir, scratch, step) from err
    if not accelerator.is_main_process and accelerator.is_local_main_process and scratch.exists():
        shutil.rmtree(scratch, ignore_errors=True)  # this machine's copy of its random states; the main's disk counts
    return final


def _first_of_all(accelerator, error: BaseException | None) -> BaseException | None:
    """The first error (by process) of those the processes had, on every process."""
    if _processes(accelerator) == 1:
        return error
    world = accelerator.num_processes
    first = torch.tensor([accelerator.process_index if error is not None else world], device=accelerator.device)
    torch.distributed.all_reduce(first, op=torch.distributed.ReduceOp.MIN)
    _in_flight[:] = [weakref.ref(first)]
    source = int(first.item())
    return None if source == world else _send(accelerator, error, source)


def folder_size(folder: str | Path) -> int:
    """Bytes in the files under ``folder``."""
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def _megabytes(size: int) -> str:
    return f"{size / 2**20:,.1f} MB"


def out_of_space(err: BaseException, folder: Path) -> bool:
    """Whether ``err`` (or a cause) is a full disk. torch's and safetensors' writers do not raise OSError for it
    (torch: ``RuntimeError: ... unexpected pos``; safetensors: ``SafetensorError: ... os error 28``)."""
    seen = 0
    while err is not None and seen < 10:
        text = str(err)
        if getattr(err, "errno", None) in _NO_SPACE or "No space left" in text or "os error 28" in text:
            return True
        if "unexpected pos" in text or "file write failed" in text:  # torch's zip writer: check the disk itself
            with contextlib.suppress(OSError):
                return shutil.disk_usage(_existing(folder)).free < 2**20
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _write_error(err: BaseException, output_dir: Path, scratch: Path, step: int) -> OSError:
    """One line for a checkpoint that could not be written: the folder, what happened, what is intact."""
    previous = latest_checkpoint(output_dir)
    intact = f"The latest complete checkpoint is {previous or 'none'} and was not modified"
    if not out_of_space(err, scratch):
        return OSError(f"could not write the checkpoint of step {step} to {scratch}: {err}. {intact}.")
    written = folder_size(scratch) if scratch.is_dir() else 0
    shutil.rmtree(scratch, ignore_errors=True)  # what was written of it: the space is needed
    free = shutil.disk_usage(_existing(output_dir)).free
    needed = (f"a checkpoint of this run takes {_megabytes(folder_size(previous))}" if previous is not None else
              f"a checkpoint of this run takes more than {_megabytes(written)}")
    return DiskFullError(
        f"could not write the checkpoint of step {step} to {scratch}: No space left on device in {output_dir} "
        f"({needed}, {_megabytes(free)} are free). {intact}; free some space and run the same command with "
        "--resume to continue from it.")


def load_checkpoint(accelerator, path: str | Path, *, model=None, optimizer=None, scheduler=None) -> dict[str, Any]:
    """Restore a checkpoint on every process; returns the loop state (without the file list).

    The main process reads ``path`` (model, optimizer, registered objects); the others receive the model's weights,
    the optimizer's state and the schedule (``model``, ``optimizer``, ``scheduler``) from it, so they need no copy
    of the checkpoint. Random states are not restored: :func:`seed_step` makes them unnecessary.
    """
    path = Path(path)

    def load() -> dict[str, Any]:
        missing = missing_files(path) if path.is_dir() else [str(path)]
        if missing:
            raise FileNotFoundError(f"{path} is not a complete hfbert checkpoint (missing: {', '.join(missing[:5])})")
        accelerator.load_state(str(path))
        state = read_state(path)
        state.pop("files", None)
        return state

    state = from_main(accelerator, load)
    if _processes(accelerator) > 1:
        _send_from_main(accelerator, model, optimizer, scheduler)
    return state


def _send_from_main(accelerator, model, optimizer, scheduler) -> None:
    """Give every process the main process's weights (in place), optimizer state and schedule."""
    for tensor in accelerator.unwrap_model(model).state_dict().values():
        torch.distributed.broadcast(tensor, src=0)
    scaler = getattr(accelerator, "scaler", None)
    parts = [optimizer, scheduler, scaler]
    states = _send(accelerator, [part.state_dict() if part is not None and accelerator.is_main_process else None
                                 for part in parts], source=0)
    if not accelerator.is_main_process:
        for part, part_state in zip(parts, states):
            if part is not None:
                part.load_state_dict(part_state)


# ----------------------------------------------------------------------------------------------------------------
# The exported folder


@contextlib.contextmanager
def staged_folder(folder: str | Path, last: str = "config.json") -> Iterator[Path]:
    """Write files for ``folder`` into a scratch folder beside them, then move them in, ``last`` last.

    A failed write (a full disk) leaves ``folder`` as it was and removes the scratch folder. The moves are renames
    on the same filesystem (no space needed); ``folder/last`` is removed before them and put back after, so a reader
    that needs it (``from_pretrained`` needs config.json) never sees new files beside old ones.
    """
    folder = Path(folder)
    scratch = folder / f".{last}.staged{_WRITING}"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    try:
        yield scratch
        fsync_tree(scratch)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    (folder / last).unlink(missing_ok=True)
    _fsync_dir(folder)
    for path in sorted(scratch.iterdir(), key=lambda p: p.name == last):
        target = folder / path.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(path, target)
    _fsync_dir(folder)
    scratch.rmdir()
