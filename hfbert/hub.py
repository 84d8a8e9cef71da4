"""Push a trained folder to the Hugging Face Hub and fetch folders back, within a time limit.

``push_to_hub`` uploads a finished output folder -- a model (model, tokenizer, model card, metrics) or a dataset
(``repo_type="dataset"``, e.g. a prepared pretraining corpus) -- in one commit, on ``main`` or on a branch it
creates when missing, and can tag the commit. It only reads the folder: whatever goes wrong (endpoint unreachable
or silent, token refused, no write access) the local output is left exactly as it was, and the error says what
happened and what to do.

``download_snapshot`` fetches a whole repository (a model or a dataset) into the cache and ``read_config_any`` the
``config.json`` of a folder or a repository. Loading a model from either is :mod:`hfbert.model_source`'s
(``hfbert.load_any_bert``), which downloads through this module.

Timeouts. huggingface_hub's shared HTTP client waits forever by default (and some of its calls ask for no limit),
it retries a request that timed out or got an HTTP 5xx answer, up to five times with pauses between tries, and a
limit on each wait does not stop a Hub that answers a byte at a time: a limit on each wait is not a limit on the
operation. Every Hub call made here runs inside :func:`hub_timeout`, whose limit (the ``timeout`` argument, else
the ``HFBERT_HUB_TIMEOUT`` environment variable, else :data:`DEFAULT_TIMEOUT`; raise it for slow links) bounds the
whole operation -- a push, a snapshot download, a config read -- from its start to its end, retries, answers and
transfers included: a deadline fixed when it starts, at the limit plus one second per megabyte it moves
(:data:`MIN_TRANSFER_RATE`: a push counts its folder's bytes from the start, a download each byte as it arrives), so
a large transfer at a steady 1 MB/s or more is never cut. No single wait lasts longer than the limit. At the
deadline the connections still open are shut down (a thread reading or writing one wakes at once), no new request
starts, and an error answer is not retried when huggingface_hub's pause before the retry would end past it. Xet
(``hf_xet``) transfers through its own client, which no limit reaches: inside a block Xet is off and files move
over plain HTTP (LFS).

The limit is a request hook (with httpcore's ``trace`` extension) and a response hook on huggingface_hub's HTTP
clients. huggingface_hub replaces its shared client after a refused connection; the replacement comes from the
client factory, which :func:`hub_timeout` wraps (once, with ``huggingface_hub.set_client_factory``) so that every
client it makes carries the hooks too. Outside the blocks the hooks do nothing: requests made there are exactly
huggingface_hub's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import (
    HfApi,
    constants,
    get_hf_file_metadata,
    get_session,
    hf_hub_download,
    hf_hub_url,
    set_client_factory,
    snapshot_download,
)
from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError
from huggingface_hub.utils import filter_repo_objects, validate_repo_id
from huggingface_hub.utils import logging as hf_logging

try:  # the HTTP library of huggingface_hub's clients: httpx2 from huggingface_hub 2, httpx before
    import httpx2 as _httpx
except ImportError:
    import httpx as _httpx

from .arguments import CommandParser, UsageError, run_command

__all__ = ["DEFAULT_IGNORE_PATTERNS", "DEFAULT_TIMEOUT", "MIN_TRANSFER_RATE", "TIMEOUT_ENV", "HubDownloadError",
           "HubPushError", "HubWaitExceeded", "PushArguments", "PushResult", "download_snapshot", "hub_timeout",
           "list_repo_files", "main", "push_to_hub", "read_config_any", "resolve_timeout"]

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

# Seconds one Hub operation may take (plus a second per megabyte it moves). The Hub answers a healthy request in well
# under a second; a minute leaves room for a slow link and for the Hub's own work on a large commit.
DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "HFBERT_HUB_TIMEOUT"
REPO_TYPES = ("model", "dataset")


class HubPushError(RuntimeError):
    """A push that did not happen; the message says why. The local folder is untouched."""


class HubDownloadError(RuntimeError):
    """A download that did not happen (the Hub unreachable or silent); the message names the endpoint."""


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    revision: str
    commit_oid: str
    commit_url: str
    tag: str | None = None


# ----------------------------------------------------------------------------------------------------------------
# Timeouts


def resolve_timeout(timeout: float | None = None) -> float:
    """``timeout`` seconds, else ``$HFBERT_HUB_TIMEOUT``, else :data:`DEFAULT_TIMEOUT`; ``ValueError`` naming the
    source when it is not a positive number."""
    source, value = "timeout", timeout
    if value is None and os.environ.get(TIMEOUT_ENV):
        source, value = TIMEOUT_ENV, os.environ[TIMEOUT_ENV]
    if value is None:
        return DEFAULT_TIMEOUT
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a number of seconds, got {value!r}") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{source} must be a positive, finite number of seconds, got {value!r}")
    return seconds


class HubWaitExceeded(TimeoutError):
    """The deadline of a :func:`hub_timeout` block passed (retries included), or would pass before huggingface_hub's
    next try of a request the Hub answered with an error; raised instead of waiting on (huggingface_hub does not
    retry it)."""

    def __init__(self, request, seconds: float, answer: str | None = None):
        why = f"the Hub answered {answer} and the next try would end past the limit" if answer else \
            "the limit passed"
        super().__init__(f"{why} ({seconds:g} s for the whole operation, retries included); not trying "
                         f"{request.method} {request.url} again")
        self.request, self.answer = request, answer


# Bytes per second that any transfer is granted: each megabyte an operation moves adds one second to its deadline.
# A link slower than this needs a larger limit.
MIN_TRANSFER_RATE = 1_000_000
# huggingface_hub's pause before its n-th retry of a request (http_backoff's defaults: 1 s, doubling, at most 8 s).
_RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


def _pause_before_retry(tries: int) -> float:
    return min(8.0, 2.0 ** (tries - 1))


class _Limit:
    """One open :func:`hub_timeout` block: its deadline, and the sockets of its requests (to stop them there)."""

    def __init__(self, seconds: float, transfer_bytes: int = 0):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds + transfer_bytes / MIN_TRANSFER_RATE
        self.thread = threading.get_ident()  # requests of this thread obey this block (others: every open one)
        self.sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self.answers: dict[tuple[str, str], int] = {}  # (method, url) -> error answers that huggingface_hub retries
        self.lock = threading.Lock()
        self.closed = threading.Event()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def received(self, size: int) -> None:
        with self.lock:
            self.deadline += size / MIN_TRANSFER_RATE

    def retried_too_late(self, request, status: int) -> bool:
        """Whether huggingface_hub's pause before retrying this answer would end past the deadline."""
        with self.lock:
            key = (request.method, str(request.url))
            self.answers[key] = tries = self.answers.get(key, 0) + 1
        return _pause_before_retry(tries) >= self.left()

    def watch(self) -> None:
        """Until the block closes: once the deadline has passed, shut the block's sockets down. A thread blocked
        reading or writing one wakes with an error, which the trace hook turns into :class:`HubWaitExceeded`: the
        only way to stop a transfer that keeps trickling in (or out), where every single read makes progress."""
        while not self.closed.wait(max(self.left(), 0.0) + 0.01):
            if self.left() <= 0:
                for sock in list(self.sockets):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                self.sockets.clear()
                # Keep watching: a connection that was being opened at the deadline registers its socket late.
                self.closed.wait(0.25)


_TIMEOUT_LOCK = threading.Lock()
_active_limits: list[_Limit] = []  # the hub_timeout blocks now open, innermost last
_saved_xet: list[bool] = []  # huggingface_hub's Xet switch as it was before the first open block
_LIMITS = "hfbert_limits"  # the request extension that carries the limits a request obeys


def _limits_here() -> list[_Limit]:
    """The blocks a request made now obeys: those its thread opened, else (a worker thread of huggingface_hub,
    uploading or downloading for a block) every open block."""
    active = list(_active_limits)
    return [limit for limit in active if limit.thread == threading.get_ident()] or active


def _expired(limits: list[_Limit]) -> _Limit | None:
    return next((limit for limit in limits if limit.left() <= 0), None)


def _remember_socket(limits: list[_Limit], stream) -> None:
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None:
        for limit in limits:
            limit.sockets.add(sock)


# The httpcore steps of a request (trace events "<module>.<step>.<started|complete|failed>") that wait on the network
_WAITING_STEPS = frozenset({"connect_tcp", "connect_unix_socket", "start_tls", "send_request_headers",
                            "send_request_body", "receive_response_headers", "receive_response_body"})


def _tracer(request, limits: list[_Limit], previous):
    """The request's ``trace`` extension (httpcore calls it around every step): records each new connection's socket
    for the watchdog, and once the deadline has passed, stops the request at its next step -- or replaces the error
    of a step the watchdog cut -- with :class:`HubWaitExceeded`, which huggingface_hub does not retry."""
    def trace(event: str, info: dict) -> None:
        if previous is not None:
            previous(event, info)
        step, _, stage = event.rpartition(".")
        step = step.rpartition(".")[2]
        if step not in _WAITING_STEPS:
            return
        if stage == "complete" and step in ("connect_tcp", "connect_unix_socket", "start_tls"):
            _remember_socket(limits, info.get("return_value"))
        elif (limit := _expired(limits)) is not None:
            raise HubWaitExceeded(request, limit.seconds) from info.get("exception")

    return trace


class _CountedBody(_httpx.SyncByteStream):
    """A response body that grants its block :data:`MIN_TRANSFER_RATE` per byte received, and stops between reads
    once the deadline has passed."""

    def __init__(self, stream, request, limits: list[_Limit]):
        self.stream, self.request, self.limits = stream, request, limits

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.stream:
            if (limit := _expired(self.limits)) is not None:
                raise HubWaitExceeded(self.request, limit.seconds)
            for limit in self.limits:
                limit.received(len(chunk))
            yield chunk

    def close(self) -> None:
        self.stream.close()


def _apply_limit(request) -> None:
    """A request hook of huggingface_hub's clients: while a :func:`hub_timeout` block is open, the request waits at
    most the block's limit (and never past its deadline) to connect, for each read and each write -- whatever its
    caller passed, ``None`` (no limit) included -- and is traced (:func:`_tracer`); past the deadline it is not sent."""
    limits = _limits_here()
    if not limits:
        return
    if (limit := _expired(limits)) is not None:
        raise HubWaitExceeded(request, limit.seconds)
    wait = min(min(limit.left() for limit in limits), min(limit.seconds for limit in limits))
    request.extensions["timeout"] = {"connect": wait, "read": wait, "write": wait, "pool": wait}
    request.extensions["trace"] = _tracer(request, limits, request.extensions.get("trace"))
    request.extensions[_LIMITS] = limits


def _on_answer(response) -> None:
    """A response hook: watch the connection (a kept-alive one was opened before the request), count the body, and
    stop an error answer that huggingface_hub would retry after a pause that ends past the deadline."""
    limits = response.request.extensions.get(_LIMITS)
    if not limits:
        return
    _remember_socket(limits, response.extensions.get("network_stream"))
    response.stream = _CountedBody(response.stream, response.request, limits)
    if response.status_code in _RETRY_STATUSES:
        for limit in limits:
            if limit.retried_too_late(response.request, response.status_code):
                raise HubWaitExceeded(response.request, limit.seconds, answer=f"HTTP {response.status_code}")


def _with_limit(factory):
    """``factory`` (huggingface_hub's client factory), making clients that carry the limit's hooks."""
    def make():
        client = factory()
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "request": [*hooks.get("request", []), _apply_limit],
                              "response": [*hooks.get("response", []), _on_answer]}
        return client

    make.hfbert_limited = True
    return make


def _install_limit() -> None:
    """Make huggingface_hub's client factory the limited one (once; again after someone else replaced it)."""
    from huggingface_hub.utils import _http  # the factory in use has no public getter

    factory = getattr(_http, "_GLOBAL_CLIENT_FACTORY", _http.default_client_factory)
    if not getattr(factory, "hfbert_limited", False):
        set_client_factory(_with_limit(factory))  # closes the current client; the next one has the hooks


@contextlib.contextmanager
def hub_timeout(timeout: float | None = None, *, transfer_bytes: int = 0) -> Iterator[float]:
    """Within the block, huggingface_hub's requests stop at a deadline fixed when the block opens: ``timeout``
    seconds (see :func:`resolve_timeout`) plus one second per :data:`MIN_TRANSFER_RATE` bytes of ``transfer_bytes``
    (what the block is known to send, e.g. a folder to push) and of every response body received. Retries,
    answers and transfers in progress count; no single wait (to connect, for each read or write) lasts longer than
    ``timeout``. Xet transfers are off in the block (``hf_xet`` runs its own client, which no limit reaches), so
    files move over plain HTTP. Yields the seconds. Requests made by other threads while a block is open obey it
    too; outside the blocks, nothing changes (see the module docstring)."""
    seconds = resolve_timeout(timeout)
    limit = _Limit(seconds, transfer_bytes)
    with _TIMEOUT_LOCK:
        _install_limit()
        if not _active_limits:
            _saved_xet.append(constants.HF_HUB_DISABLE_XET)
            constants.HF_HUB_DISABLE_XET = True
        _active_limits.append(limit)
    threading.Thread(target=limit.watch, name="hfbert-hub-deadline", daemon=True).start()
    try:
        yield seconds
    finally:
        limit.closed.set()
        with _TIMEOUT_LOCK:
            _active_limits.remove(limit)
            if not _active_limits:
                constants.HF_HUB_DISABLE_XET = _saved_xet.pop()


def _timed_out(err: BaseException) -> BaseException | None:
    """The HTTP client's timeout error in ``err`` or its causes (huggingface_hub and transformers wrap it)."""
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, HubWaitExceeded) or "TimeoutException" in {cls.__name__ for cls in type(err).__mro__}:
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def _request_of(err: BaseException) -> str:
    """``METHOD url`` of the request that failed, when the HTTP error carries it."""
    try:
        request = err.request  # httpx-style errors raise RuntimeError when no request is attached
    except (AttributeError, RuntimeError):
        return ""
    return f"{request.method} {request.url}"


def _timeout_sentence(err: BaseException, *, endpoint: str, seconds: float, doing: str) -> str:
    request = _request_of(err)
    answer = getattr(err, "answer", None)
    where = f" on {request}{f', answered {answer}' if answer else ''}" if request else ""
    return (f"the Hub at {endpoint} did not answer within {seconds:g} s while {doing} ({type(err).__name__}{where}). "
            f"Check the network or HF_ENDPOINT; on a slow link raise the limit with --hub_timeout SECONDS (or "
            f"{TIMEOUT_ENV}).")


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
    timeout = _timed_out(err)
    if timeout is not None:
        return f"{_timeout_sentence(timeout, endpoint=endpoint, seconds=seconds, doing=f'pushing {repo_id}')} {intact}"
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
    """Upload ``folder`` to ``repo_id`` in one commit; returns the commit.

    ``repo_type`` is ``"model"`` (the folder must hold a ``config.json``) or ``"dataset"``. ``revision`` is a
    branch; it is created from ``main`` when missing. ``tag`` tags the new commit. ``token`` and ``endpoint``
    default to huggingface_hub's (``HF_TOKEN``, ``HF_ENDPOINT``); ``timeout`` is the limit of :func:`hub_timeout`.
    Raises ``HubPushError`` with a clear message when the Hub cannot be reached, does not answer in time or refuses
    the token; the folder is never modified.
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
        timeout = _timed_out(err)
        if timeout is None:
            raise
        where = endpoint or constants.ENDPOINT
        raise HubDownloadError(_timeout_sentence(timeout, endpoint=where, seconds=seconds, doing=what)) from err


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
    """``huggingface_hub.snapshot_download`` of ``repo_id`` (a model or a dataset) under :func:`hub_timeout`;
    returns the local folder. ``kwargs`` (``cache_dir``, ``local_dir``, ``allow_patterns``, ...) pass through.
    Raises :class:`HubDownloadError` naming the endpoint when the Hub does not answer in time."""
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, got {repo_type!r}")
    seconds = resolve_timeout(timeout)
    with _download_errors(f"downloading the {repo_type} {repo_id}", endpoint, seconds), hub_timeout(seconds):
        path = snapshot_download(repo_id, repo_type=repo_type, revision=revision, token=token, endpoint=endpoint,
                                 etag_timeout=seconds, **kwargs)
    return Path(path)


def list_repo_files(repo_id: str, *, revision: str | None = None, token: str | None = None,
                    endpoint: str | None = None, timeout: float | None = None) -> list[str]:
    """The files of the Hub model repository ``repo_id`` at ``revision``, listed under :func:`hub_timeout`. Raises
    :class:`HubDownloadError` naming the endpoint when the Hub does not answer in time; huggingface_hub's own errors
    (no such repository or revision, offline mode) pass through."""
    seconds = resolve_timeout(timeout)
    with _download_errors(f"listing the files of {repo_id}", endpoint, seconds), hub_timeout(seconds):
        return HfApi(endpoint=endpoint, token=token).list_repo_files(repo_id, revision=revision)


def read_config_any(repo_or_dir: str | Path, *, revision: str | None = None, token: str | None = None,
                    timeout: float | None = None, **hub_kwargs: Any) -> dict[str, Any]:
    """The ``config.json`` of a local folder or of a Hub repository at ``revision``."""
    path = Path(repo_or_dir)
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"{path} has no config.json: it is not a saved model folder")
    else:
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
    try:
        return json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"the config.json of {repo_or_dir} is not valid JSON: {err}") from err


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
                f"1 MB/s needs more); Xet is off, files go over HTTP (default ${TIMEOUT_ENV} or {DEFAULT_TIMEOUT:g})"})

    def __post_init__(self) -> None:
        if self.repo_type not in REPO_TYPES:
            raise UsageError(f"--repo_type must be one of {', '.join(REPO_TYPES)}, got {self.repo_type!r}")
        if self.hub_timeout is not None and not self.hub_timeout > 0:
            raise UsageError(f"--hub_timeout must be a positive number of seconds, got {self.hub_timeout}")


def main(argv: list[str] | None = None) -> int:
    """``hfbert push``: exit status 2 for bad input (one line), 1 when the Hub refuses or does not answer."""
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
