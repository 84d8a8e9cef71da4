"""Push a trained folder to the Hugging Face Hub and fetch folders back, within a time limit.

``push_to_hub`` uploads a finished output folder -- a model (model, tokenizer, model card, metrics) or a dataset
(``repo_type="dataset"``, e.g. a prepared pretraining corpus) -- in one commit, on ``main`` or on a branch it
creates when missing, and can tag the commit. It only reads the folder: whatever goes wrong (endpoint unreachable
or silent, token refused, no write access) the local output is left exactly as it was, and the error says what
happened and what to do.

``download_snapshot`` fetches a whole repository (a model or a dataset) into the cache and ``read_config_any`` the
``config.json`` of a folder or a repository. Loading a model from either is :mod:`hfbert.model_source`'s
(``hfbert.load_any_bert``), which downloads through this module.

Every Hub call made here runs inside :func:`hfbert.hub_deadlines.hub_timeout`: one deadline for the whole operation,
retries, answers and transfers included (that module says how).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import (
    HfApi,
    constants,
    get_hf_file_metadata,
    hf_hub_download,
    hf_hub_url,
    snapshot_download,
)
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError
from huggingface_hub.utils import filter_repo_objects, validate_repo_id
from huggingface_hub.utils import logging as hf_logging

from .arguments import CommandParser, UsageError, run_command
from .hub_deadlines import (
    DEFAULT_TIMEOUT,
    MIN_TRANSFER_RATE,
    TIMEOUT_ENV,
    HubWaitExceeded,
    hub_timeout,
    resolve_timeout,
    timed_out,
    timeout_sentence,
)

__all__ = ["DEFAULT_IGNORE_PATTERNS", "DEFAULT_TIMEOUT", "MIN_TRANSFER_RATE", "TIMEOUT_ENV", "HubDownloadError",
           "HubPushError", "HubWaitExceeded", "PushArguments", "PushResult", "download_snapshot", "hub_timeout",
           "is_repo_id", "list_repo_files", "main", "push_to_hub", "read_config", "read_config_any",
           "resolve_timeout"]

logger = logging.getLogger(__name__)

# Never uploaded by default: resumable training state, caches and logs are not part of the Hub-format export.
DEFAULT_IGNORE_PATTERNS = (
    "checkpoint-*",
    "checkpoint-*/**",
    "last-checkpoint/**",
    "runs/**",
    ".cache/**",
    ".git/**",
    "__pycache__/**",
    "*.pyc",
)

REPO_TYPES = ("model", "dataset")


class HubPushError(RuntimeError):
    """A push that did not happen; the message says why. The local folder is untouched."""


class HubDownloadError(RuntimeError):
    """A download that did not happen (the Hub unreachable or silent); the message names the endpoint."""


@dataclass(frozen=True)
class PushResult:
    """The commit a :func:`push_to_hub` made.

    Args:
        repo_id (`str`):
            The repository pushed to.
        revision (`str`):
            The branch the commit is on (``main`` unless a ``revision`` was given).
        commit_oid (`str`):
            The commit's id.
        commit_url (`str`):
            The commit's address on the Hub.
        tag (`str`, *optional*):
            The tag given to the commit, if any.
    """

    repo_id: str
    revision: str
    commit_oid: str
    commit_url: str
    tag: str | None = None


# ----------------------------------------------------------------------------------------------------------------
# Push


def _is_network_error(err: BaseException) -> bool:
    """Connection refused, DNS failure, timeout: the HTTP client's transport errors, or an OSError.

    Checked after HTTP errors: huggingface_hub's HfHubHTTPError is itself an OSError."""
    names = {cls.__name__ for cls in type(err).__mro__}
    return isinstance(err, OSError) or bool(names & {"TransportError", "NetworkError", "ConnectError",
                                                      "TimeoutException", "ProxyError"})


def _explain(err: BaseException, *, endpoint: str, repo_id: str, folder: Path, seconds: float) -> str | None:
    """A user-facing sentence for a failed push, or None for errors that are not about the Hub."""
    intact = f"Nothing was changed in {folder}."
    if isinstance(err, OfflineModeIsEnabled):
        return f"cannot push {repo_id}: offline mode is enabled (HF_HUB_OFFLINE=1); unset it to push. {intact}"
    if isinstance(err, HfHubHTTPError) and err.response is not None:
        status = err.response.status_code
        server = err.server_message or err.response.headers.get("X-Error-Message") or str(err).splitlines()[0]
        if status == 401 and "Invalid credentials" in server:
            return (f"the Hub at {endpoint} refused the token (401: {server}). Log in with `hf auth login` or "
                    f"pass a valid write token (HF_TOKEN). {intact}")
        if status == 401:
            return (f"the Hub at {endpoint} needs a token to push {repo_id} (401: {server}). Log in with "
                    f"`hf auth login` or set HF_TOKEN. {intact}")
        if status in (403, 404) or isinstance(err, RepositoryNotFoundError):
            return (f"the Hub at {endpoint} denied writing to {repo_id} ({status}: {server}). Check that the "
                    f"token has write access to that namespace. {intact}")
        return f"the Hub at {endpoint} rejected the push of {repo_id} ({status}: {server}). {intact}"
    timeout = timed_out(err)
    if timeout is not None:
        return f"{timeout_sentence(timeout, endpoint=endpoint, seconds=seconds, doing=f'pushing {repo_id}')} {intact}"
    if _is_network_error(err):
        return (f"cannot reach the Hub at {endpoint} to push {repo_id} ({type(err).__name__}: {err}). "
                f"Check the network or HF_ENDPOINT and push again. {intact}")
    return None


def _check_folder(folder: Path, repo_type: str) -> list[Path]:
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot push {folder}: no such folder")
    files = [p for p in folder.rglob("*") if p.is_file()]
    if not files:
        raise ValueError(f"cannot push {folder}: the folder is empty")
    if repo_type == "model" and not (folder / "config.json").is_file():
        raise ValueError(f"cannot push {folder}: it has no config.json (save the model with save_pretrained first)")
    return files


def _upload_size(folder: Path, files: list[Path], ignore_patterns) -> int:
    """Bytes of the files a push of ``folder`` uploads (those ``ignore_patterns`` leave)."""
    names = {str(path.relative_to(folder).as_posix()): path for path in files}
    return sum(names[name].stat().st_size for name in filter_repo_objects(names, ignore_patterns=list(ignore_patterns)))


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    *,
    repo_type: str = "model",
    revision: str | None = None,
    tag: str | None = None,
    private: bool | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    commit_message: str | None = None,
    ignore_patterns: tuple[str, ...] | list[str] = DEFAULT_IGNORE_PATTERNS,
    timeout: float | None = None,
) -> PushResult:
    """Upload ``folder`` to ``repo_id`` in one commit; returns the commit. The folder is never modified.

    Args:
        folder (`str` or `Path`):
            The folder to upload; files matching ``ignore_patterns`` stay behind.
        repo_id (`str`):
            ``namespace/name`` on the Hub; the repository is created when missing.
        repo_type (`str`, *optional*, defaults to `"model"`):
            ``"model"`` (the folder must hold a ``config.json``) or ``"dataset"``.
        revision (`str`, *optional*):
            A branch; it is created from ``main`` when missing. By default ``main``.
        tag (`str`, *optional*):
            Tags the new commit; a tag that already exists is refused before anything is uploaded.
        private (`bool`, *optional*):
            Create the repository as private (when this push creates it).
        token (`str`, *optional*):
            Defaults to huggingface_hub's (``HF_TOKEN``, the stored login).
        endpoint (`str`, *optional*):
            Defaults to huggingface_hub's (``HF_ENDPOINT``).
        commit_message (`str`, *optional*):
            The commit's title; by default ``"Upload <folder name> with hfbert"``.
        ignore_patterns (`tuple[str, ...]` or `list[str]`, *optional*, defaults to `DEFAULT_IGNORE_PATTERNS`):
            Files never uploaded: resumable training state, caches and logs.
        timeout (`float`, *optional*):
            Seconds the whole operation may take under :func:`hub_timeout`; by default ``$HFBERT_HUB_TIMEOUT``, else
            60 (:func:`resolve_timeout`).
            One second per MB to upload is added.

    Returns:
        [`PushResult`]: the repository, branch, commit id and address, and the tag.

    Raises:
        [`HubPushError`]: with a clear message when the Hub cannot be reached, does not answer in time, refuses the
            token or the write, or the tag is taken.
        `FileNotFoundError`: ``folder`` is not a folder.
        `ValueError`: the folder is empty, a model folder has no ``config.json``, ``repo_type``, ``repo_id``,
            ``revision`` (a ``refs/`` name) or ``timeout`` is not valid.
    """
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
    folder = Path(folder)
    files = _check_folder(folder, repo_type)
    validate_repo_id(repo_id)  # HFValidationError (a ValueError) names the bad id
    if revision is not None and (not revision or revision.startswith("refs/")):
        raise ValueError(f"revision must be a branch name, got {revision!r}")
    seconds = resolve_timeout(timeout)
    api = HfApi(endpoint=endpoint, token=token)
    branch = revision or "main"
    try:
        with hub_timeout(seconds, transfer_bytes=_upload_size(folder, files, ignore_patterns)):
            commit = _push(api, folder, repo_id, repo_type, branch, tag, private, commit_message, ignore_patterns)
    except Exception as err:
        message = _explain(err, endpoint=api.endpoint, repo_id=repo_id, folder=folder, seconds=seconds)
        if message is None:
            raise
        raise HubPushError(message) from err
    return PushResult(repo_id, branch, commit.oid, str(commit.commit_url), tag)


def _push(api: HfApi, folder: Path, repo_id: str, repo_type: str, branch: str, tag: str | None,
          private: bool | None, commit_message: str | None, ignore_patterns):
    # Creating the repository first fails fast (no retries) when the endpoint is down or the token is refused.
    api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
    if branch != "main":
        api.create_branch(repo_id, repo_type=repo_type, branch=branch, exist_ok=True)
    if tag is not None:  # checked before uploading: a taken tag would otherwise fail after the commit landed
        taken = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo_id, repo_type=repo_type).tags}
        if tag in taken:
            raise HubPushError(
                f"tag {tag!r} already exists in {repo_id} (at commit {taken[tag][:12]}); nothing was uploaded. "
                f"Choose another tag, or delete that one first (HfApi().delete_tag). Nothing was changed in "
                f"{folder}.")
    commit = api.upload_folder(
        folder_path=folder,
        repo_id=repo_id,
        repo_type=repo_type,
        revision=branch,
        commit_message=commit_message or f"Upload {folder.name} with hfbert",
        ignore_patterns=list(ignore_patterns),
    )
    if tag is not None:
        api.create_tag(repo_id, repo_type=repo_type, tag=tag, revision=commit.oid)
    return commit


# ----------------------------------------------------------------------------------------------------------------
# Download and load


@contextlib.contextmanager
def _download_errors(what: str, endpoint: str | None, seconds: float) -> Iterator[None]:
    """Turn a timeout anywhere in a download into :class:`HubDownloadError` naming the endpoint."""
    try:
        yield
    except Exception as err:
        timeout = timed_out(err)
        if timeout is None:
            raise
        where = endpoint or constants.ENDPOINT
        raise HubDownloadError(timeout_sentence(timeout, endpoint=where, seconds=seconds, doing=what)) from err


def download_snapshot(
    repo_id: str,
    *,
    repo_type: str = "model",
    revision: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    timeout: float | None = None,
    **kwargs: Any,
) -> Path:
    """``huggingface_hub.snapshot_download`` of ``repo_id`` (a model or a dataset) under :func:`hub_timeout`.

    Args:
        repo_id (`str`):
            ``namespace/name`` on the Hub.
        repo_type (`str`, *optional*, defaults to `"model"`):
            ``"model"`` or ``"dataset"``.
        revision (`str`, *optional*):
            A branch, a tag or a commit.
        token (`str`, *optional*):
            Defaults to huggingface_hub's.
        endpoint (`str`, *optional*):
            Defaults to huggingface_hub's (``HF_ENDPOINT``).
        timeout (`float`, *optional*):
            Seconds the whole operation may take under :func:`hub_timeout`; by default ``$HFBERT_HUB_TIMEOUT``, else
            60 (:func:`resolve_timeout`).
        **kwargs:
            ``cache_dir``, ``local_dir``, ``allow_patterns``, ... pass through to ``snapshot_download``.

    Returns:
        `Path`: the local folder.

    Raises:
        [`HubDownloadError`]: naming the endpoint, when the Hub does not answer in time.
        `ValueError`: ``repo_type`` is neither ``"model"`` nor ``"dataset"``.
    """
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
    seconds = resolve_timeout(timeout)
    with _download_errors(f"downloading the {repo_type} {repo_id}", endpoint, seconds), hub_timeout(seconds):
        path = snapshot_download(repo_id, repo_type=repo_type, revision=revision, token=token, endpoint=endpoint,
                                 etag_timeout=seconds, **kwargs)
    return Path(path)


def list_repo_files(repo_id: str, *, revision: str | None = None, token: str | None = None,
                    endpoint: str | None = None, timeout: float | None = None) -> list[str]:
    """The files of the Hub model repository ``repo_id`` at ``revision``, listed under :func:`hub_timeout`.

    Args:
        repo_id (`str`):
            ``namespace/name`` of a model repository.
        revision (`str`, *optional*):
            A branch, a tag or a commit.
        token (`str`, *optional*):
            Defaults to huggingface_hub's.
        endpoint (`str`, *optional*):
            Defaults to huggingface_hub's (``HF_ENDPOINT``).
        timeout (`float`, *optional*):
            Seconds the whole operation may take under :func:`hub_timeout`; by default ``$HFBERT_HUB_TIMEOUT``, else
            60 (:func:`resolve_timeout`).

    Returns:
        `list[str]`: the paths of the repository's files.

    Raises:
        [`HubDownloadError`]: naming the endpoint, when the Hub does not answer in time; huggingface_hub's own errors
            (no such repository or revision, offline mode) pass through.
    """
    seconds = resolve_timeout(timeout)
    with _download_errors(f"listing the files of {repo_id}", endpoint, seconds), hub_timeout(seconds):
        return HfApi(endpoint=endpoint, token=token).list_repo_files(repo_id, revision=revision)


_REPO_ID = re.compile(r"[\w.-]+/[\w.-]+")


def is_repo_id(name: str) -> bool:
    """Whether ``name`` has the form of a Hub repository id (``user/name``).

    That is what a name that is not a local folder is taken to be. ``./x`` and ``../x`` are paths.

    Args:
        name (`str`):
            The name to check.

    Returns:
        `bool`: `True` for ``user/name`` (word characters, dots and hyphens) not starting with a dot.
    """
    return _REPO_ID.fullmatch(name) is not None and not name.startswith(".")


def read_config_any(repo_or_dir: str | Path, *, revision: str | None = None, token: str | None = None,
                    timeout: float | None = None, **hub_kwargs: Any) -> dict[str, Any]:
    """The ``config.json`` of a local folder or of a Hub repository at ``revision``.

    Args:
        repo_or_dir (`str` or `Path`):
            A local folder or a Hub repository id.
        revision (`str`, *optional*):
            The Hub revision (a branch, a tag or a commit).
        token (`str`, *optional*):
            Defaults to huggingface_hub's.
        timeout (`float`, *optional*):
            Seconds the whole operation may take under :func:`hub_timeout`; by default ``$HFBERT_HUB_TIMEOUT``, else
            60 (:func:`resolve_timeout`).
        **hub_kwargs:
            Passed on to ``hf_hub_download`` (``endpoint``, ``repo_type``, ``cache_dir``, ...).

    Returns:
        `dict[str, Any]`: the parsed config.

    Raises:
        [`HubDownloadError`]: naming the endpoint, when the Hub does not answer in time.
        `FileNotFoundError`: a local folder has no ``config.json``.
        `ValueError`: the ``config.json`` is not valid JSON.
    """
    if Path(repo_or_dir).is_dir():
        return read_config(repo_or_dir)
    seconds = resolve_timeout(timeout)
    endpoint = hub_kwargs.get("endpoint")
    with _download_errors(f"reading the config of {repo_or_dir}", endpoint, seconds), hub_timeout(seconds):
        # One request without retries first: when a file is not cached, hf_hub_download retries a failed
        # metadata request with its own, longer limit, which would turn a silent endpoint into minutes of waiting.
        get_hf_file_metadata(hf_hub_url(str(repo_or_dir), "config.json", revision=revision, endpoint=endpoint,
                                        repo_type=hub_kwargs.get("repo_type")),
                             token=token, timeout=seconds, endpoint=endpoint)
        config_path = Path(hf_hub_download(str(repo_or_dir), "config.json", revision=revision, token=token,
                                           etag_timeout=seconds, **hub_kwargs))
    return read_config(config_path.parent, source=repo_or_dir)


def read_config(folder: str | Path, *, source: str | Path | None = None) -> dict[str, Any]:
    """The ``config.json`` of a saved model folder.

    Args:
        folder (`str` or `Path`):
            The saved model folder.
        source (`str` or `Path`, *optional*):
            The name the folder was found under, for errors.

    Returns:
        `dict[str, Any]`: the parsed config.

    Raises:
        `FileNotFoundError`: the folder has no ``config.json``.
        `ValueError`: the ``config.json`` is not valid JSON.
    """
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json: it is not a saved model folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        where = path if source is None else f"the config.json of {source}"
        raise ValueError(f"{where} is not valid JSON: {err}") from err


# ----------------------------------------------------------------------------------------------------------------
# Command line


@dataclass
class PushArguments:
    """``hfbert push FOLDER REPO_ID [--revision BRANCH] [--tag TAG] ...``"""

    folder: str = field(metadata={"positional": True, "help": "the folder to push: a saved model (config.json, "
                                                              "weights, tokenizer, README.md) or a dataset"})
    repo_id: str = field(metadata={"positional": True, "help": "namespace/name on the Hub"})
    repo_type: str = field(default="model", metadata={"help": "model (needs a config.json) or dataset"})
    revision: str | None = field(default=None, metadata={"help": "branch to push to (created from main when missing)"})
    tag: str | None = field(default=None, metadata={"help": "tag the new commit"})
    private: bool = field(default=False, metadata={"help": "create the repository as private"})
    commit_message: str | None = field(default=None, metadata={"help": "the commit's title"})
    hub_timeout: float | None = field(default=None, metadata={
        "help": f"seconds the whole push may take, retries included, plus 1 s per MB to upload (a link slower than "
                f"1 MB/s needs more); a Xet transfer's own bytes are limited only with HF_HUB_DISABLE_XET=1 "
                f"(default ${TIMEOUT_ENV} or {DEFAULT_TIMEOUT:g})"})

    def __post_init__(self) -> None:
        if self.repo_type not in REPO_TYPES:
            raise UsageError(f"--repo_type must be one of {', '.join(REPO_TYPES)}, got {self.repo_type!r}")
        if self.hub_timeout is not None and not self.hub_timeout > 0:
            raise UsageError(f"--hub_timeout must be a positive number of seconds, got {self.hub_timeout}")


def main(argv: list[str] | None = None) -> int:
    """``hfbert push``: push a saved folder to the Hub and print the commit's address.

    Args:
        argv (`list[str]`, *optional*):
            The command's arguments (:class:`PushArguments`); by default ``sys.argv[1:]``.

    Returns:
        `int`: the exit status: 0 on success, 2 for bad input (one line), 1 when the Hub refuses or does not answer.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = CommandParser("hfbert push", PushArguments, description="Push a saved folder to the Hub.").parse(argv)

    def push() -> int:
        # The command's one line says what went wrong; huggingface_hub's warnings before each retry would bury it.
        hf_logging.set_verbosity_error()
        try:
            result = push_to_hub(args.folder, args.repo_id, repo_type=args.repo_type, revision=args.revision,
                                 tag=args.tag, private=args.private or None, commit_message=args.commit_message,
                                 timeout=args.hub_timeout)
        except HubPushError as err:
            print(f"hfbert push: error: {err}", file=sys.stderr)
            return 1
        print(result.commit_url)
        return 0

    return run_command("hfbert push", push, errors=(FileNotFoundError, ValueError))
