"""Deadlines for Hub operations: one limit for a whole push, download or config read, retries included.

huggingface_hub's shared HTTP client waits forever by default (and some of its calls ask for no limit),
it retries a request that timed out or got an HTTP 5xx answer, up to five times with pauses between tries, and a
limit on each wait does not stop a Hub that answers a byte at a time: a limit on each wait is not a limit on the
operation. Every Hub call hfbert makes runs inside :func:`hub_timeout`, whose limit (the ``timeout`` argument, else
the ``HFBERT_HUB_TIMEOUT`` environment variable, else :data:`DEFAULT_TIMEOUT`; raise it for slow links) bounds the
whole operation -- a push, a snapshot download, a config read -- from its start to its end, retries, answers and
transfers included: a deadline fixed when it starts, at the limit plus one second per megabyte it moves
(:data:`MIN_TRANSFER_RATE`: a push counts its folder's bytes from the start, a download each byte as it arrives), so
a large transfer at a steady 1 MB/s or more is never cut. No single wait lasts longer than the limit. At the
deadline the connections still open are shut down (a thread reading or writing one wakes at once), no new request
starts, and an error answer is not retried when huggingface_hub's pause before the retry would end past it. Xet
(``hf_xet``, huggingface_hub's transfer of large files) moves bytes through its own client, which no hook reaches: the
limit bounds huggingface_hub's requests around a Xet transfer (the Xet token, the commit), not the transfer itself,
which ends by hf_xet's own retries and timeouts. For a hard limit on every byte, set ``HF_HUB_DISABLE_XET=1``
(huggingface_hub then moves files over plain HTTP, under the limit).

The limit is a request hook (with httpcore's ``trace`` extension) and a response hook on huggingface_hub's HTTP
clients. huggingface_hub replaces its shared client after a refused connection, from its client factory; the first
block installs (with the public ``huggingface_hub.set_client_factory``) a factory that makes clients like the shared
client it found -- the same hooks, headers, redirects and timeout -- with the limit's hooks added, so that every
replacement carries them too. A program that set its own factory earlier keeps those settings, not its transport
(proxy and certificates then come from the environment, as for huggingface_hub's default client). Outside the blocks
the hooks do nothing: requests made there are exactly huggingface_hub's.

:mod:`hfbert.hub` runs every Hub call inside :func:`hub_timeout`; :func:`timed_out` and :func:`timeout_sentence`
turn what a passed deadline raised into the one sentence a user reads.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import weakref
from collections.abc import Iterator

from huggingface_hub import get_session, set_client_factory

try:  # the HTTP library of huggingface_hub's clients: httpx2 from huggingface_hub 2, httpx before
    import httpx2 as _httpx
except ImportError:
    import httpx as _httpx

__all__ = ["DEFAULT_TIMEOUT", "MIN_TRANSFER_RATE", "TIMEOUT_ENV", "HubWaitExceeded", "hub_timeout", "resolve_timeout",
           "timed_out", "timeout_sentence"]

# Seconds one Hub operation may take (plus a second per megabyte it moves). The Hub answers a healthy request in well
# under a second; a minute leaves room for a slow link and for the Hub's own work on a large commit.
DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "HFBERT_HUB_TIMEOUT"


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


def _limited_factory(template):
    """A client factory for huggingface_hub: clients made like ``template`` (its hooks, headers, redirects, timeout
    and use of the environment), with the limit's hooks added."""
    hooks = {kind: [hook for hook in template.event_hooks.get(kind, []) if hook not in (_apply_limit, _on_answer)]
             for kind in ("request", "response")}
    settings = dict(headers=template.headers, follow_redirects=template.follow_redirects,
                    max_redirects=template.max_redirects, timeout=template.timeout, trust_env=template.trust_env)

    def make():
        return _httpx.Client(**settings, event_hooks={"request": [*hooks["request"], _apply_limit],
                                                      "response": [*hooks["response"], _on_answer]})

    return make


def _install_limit() -> None:
    """Make huggingface_hub's clients carry the limit's hooks (once; again after someone else set a factory)."""
    shared = get_session()
    if _apply_limit not in shared.event_hooks.get("request", []):
        set_client_factory(_limited_factory(shared))  # closes the shared client; the next one has the hooks


@contextlib.contextmanager
def hub_timeout(timeout: float | None = None, *, transfer_bytes: int = 0) -> Iterator[float]:
    """Within the block, huggingface_hub's requests stop at a deadline fixed when the block opens: ``timeout``
    seconds (see :func:`resolve_timeout`) plus one second per :data:`MIN_TRANSFER_RATE` bytes of ``transfer_bytes``
    (what the block is known to send, e.g. a folder to push) and of every response body received. Retries,
    answers and transfers in progress count; no single wait (to connect, for each read or write) lasts longer than
    ``timeout``. The bytes of a Xet transfer are not limited (see the module docstring). Yields the seconds.
    Requests made by other threads while a block is open obey it too; outside the blocks, nothing changes."""
    seconds = resolve_timeout(timeout)
    limit = _Limit(seconds, transfer_bytes)
    with _TIMEOUT_LOCK:
        _install_limit()
        _active_limits.append(limit)
    threading.Thread(target=limit.watch, name="hfbert-hub-deadline", daemon=True).start()
    try:
        yield seconds
    finally:
        limit.closed.set()
        with _TIMEOUT_LOCK:
            _active_limits.remove(limit)


def timed_out(err: BaseException) -> BaseException | None:
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


def timeout_sentence(err: BaseException, *, endpoint: str, seconds: float, doing: str) -> str:
    request = _request_of(err)
    answer = getattr(err, "answer", None)
    where = f" on {request}{f', answered {answer}' if answer else ''}" if request else ""
    return (f"the Hub at {endpoint} did not answer within {seconds:g} s while {doing} ({type(err).__name__}{where}). "
            f"Check the network or HF_ENDPOINT; on a slow link raise the limit with --hub_timeout SECONDS (or "
            f"{TIMEOUT_ENV}).")
