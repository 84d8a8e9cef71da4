"""Prepared corpora on remote storage, read on demand: the byte ranges of the row groups a process needs.

``--prepared`` names a local folder, a Hub dataset repo (``user/name``, ``hf://datasets/user/name[@revision]``) or
any fsspec URL (``s3://bucket/prepared-128``, ``gs://...``, ``memory://...``).  For a remote corpus a process
fetches, once per machine, the small files (the manifest, the tokenizer) and then only what its rows need: a
shard's footer the first time the shard is touched, and the bytes of each Parquet row group it decodes, one ranged
read per row group.  Nothing is copied whole unless asked (``download=True``, ``--prepared_download``).

The error model, read by read:

* A read is one ranged request, bounded in time: each attempt gets at most a third of ``timeout`` (and never more
  than is left of it), so a silent endpoint costs an attempt, not the run.  An attempt that raises, answers a 5xx
  or 429, or brings fewer (or more) bytes than asked is tried again after a short pause, until ``timeout`` seconds
  have passed since the read began; then :class:`ShardReadError` stops the job with one line naming the shard, the
  URL and the last failure.  Missing files (404) and refused credentials (401/403) are not retried.
* A shard whose size differs from the manifest's is refused when the corpus is opened (one listing of ``data/``).
  Bytes that arrive but are wrong are found by Parquet's page checksums (every page carries a CRC, checked on
  decode) and the footer's own structure; the manifest's sha256 of a shard is checked only where the whole shard
  is read anyway, after an explicit full download (hashing a shard would mean fetching all of it).
* A Hub repo is read at one commit: its revision is resolved once, when the corpus is opened, so a push during
  training cannot mix two versions of the data.

The cache (:class:`RangeCache`): fetched ranges are kept on local disk, in one folder per machine that all its
processes share (``$HFBERT_CACHE``, default ``$HF_HOME/hfbert/shards``), keyed by the shard's sha256 in the manifest and the byte
range, so an entry can only ever hold the bytes of that content.  An entry is written to a unique temporary name
and renamed into place (a reader sees a whole entry or none), carries a CRC32 of its bytes (a damaged entry is a
miss, fetched again), and is touched when read; when the folder grows past its limit the least recently used
entries are removed.  Each process rescans the folder after it has written 1/16 of the limit, so the folder
exceeds the limit by at most that much per process between scans.
"""

from __future__ import annotations

import hashlib
import io
import os
import queue
import re
import struct
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from ..hub import is_repo_id
from .manifest import Manifest, PreparedDataError, ShardRecord

__all__ = ["CACHE_ENV", "DEFAULT_CACHE_LIMIT", "RangeCache", "RemoteLocation", "ShardReadError", "default_cache_dir",
           "parse_size", "resolve_location"]

#: The default bound on the cache folder of one machine.
DEFAULT_CACHE_LIMIT = "20GB"
#: The environment variable that moves the cache folder.
CACHE_ENV = "HFBERT_CACHE"
_HF_URL = re.compile(r"^hf://datasets/(?P<repo>[\w.-]+/[\w.-]+?)(?:@(?P<rev>[^/]+))?/?$")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
# A Parquet footer is usually a few KB; one read of this many bytes from the end gets it whole almost always.
_TAIL_BYTES = 64 << 10
_FIRST_PAUSE, _LAST_PAUSE = 0.1, 2.0  # seconds between attempts, doubling


class ShardReadError(RuntimeError):
    """A read of a prepared corpus that failed for good; the message (one line) names the file and the URL."""


def parse_size(value: int | str) -> int:
    """Bytes from ``1000000``, ``"512MB"``, ``"20GB"`` or ``"1.5GiB"``; ``ValueError`` naming the value."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if match is None or match[2].upper() not in _UNITS:
        raise ValueError(f"cache_limit must be a size such as 20GB, 512MB or a number of bytes, got {value!r}")
    return int(float(match[1]) * _UNITS[match[2].upper()])


def default_cache_dir() -> Path:
    """``$HFBERT_CACHE``, else ``$HF_HOME/hfbert/shards`` (``~/.cache/huggingface/hfbert/shards`` without HF_HOME)."""
    from huggingface_hub import constants

    return Path(os.environ.get(CACHE_ENV) or Path(constants.HF_HOME) / "hfbert" / "shards")


# ---------------------------------------------------------------------------------------------------------
# Bounded, retried reads


class _Attempts:
    """Daemon threads that run bounded attempts, each reused for the next attempt once its call returns (a thread
    started per ranged read cost about a millisecond on a busy machine).  A thread whose call outlives its limit is
    left to end by itself (the HTTP client's own timeout ends it on the Hub) and rejoins the idle ones then; a new
    thread serves in the meantime.  As daemons they never hold the process at exit; a forked child starts with none."""

    def __init__(self) -> None:
        self._idle: queue.SimpleQueue = queue.SimpleQueue()  # the inboxes of idle threads
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._idle = queue.SimpleQueue()  # the parent's threads do not exist in the child

    def run(self, call: Callable[[], Any], seconds: float) -> Any:
        """``call()`` in one of the threads, given up after ``seconds`` (``TimeoutError``)."""
        try:
            inbox = self._idle.get_nowait()
        except queue.Empty:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox, self._idle), name="hfbert-shard-read",
                             daemon=True).start()
        box: dict[str, Any] = {}
        done = threading.Event()
        inbox.put((call, box, done))
        if not done.wait(seconds):
            raise TimeoutError(f"no answer within {seconds:.3g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    @staticmethod
    def _serve(inbox: queue.SimpleQueue, idle: queue.SimpleQueue) -> None:
        while True:
            call, box, done = inbox.get()
            try:
                box["value"] = call()
            except BaseException as err:  # handed to the caller
                box["error"] = err
            del call
            idle.put(inbox)  # idle again before the caller wakes: its next attempt finds this thread
            done.set()
            del box, done  # an idle thread holds nothing


_attempt = _Attempts().run


def _is_final(err: BaseException) -> bool:
    """Failures that another attempt cannot fix: the file is not there, or the credentials are refused."""
    status = getattr(getattr(err, "response", None), "status_code", None)
    return isinstance(err, (FileNotFoundError, PermissionError)) or status in (401, 403, 404)


def _describe(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def read_with_retries(fetch: Callable[[], Any], size: int | None, timeout: float, what: str,
                      passthrough: tuple[type[BaseException], ...] = ()) -> Any:
    """``fetch()`` until it brings ``size`` bytes (any result when None), within ``timeout`` seconds in all.
    Errors of the ``passthrough`` types are raised as they are, without another attempt."""
    deadline = time.monotonic() + timeout
    pause, attempts = _FIRST_PAUSE, 0
    while True:
        attempts += 1
        left = deadline - time.monotonic()
        try:
            data = _attempt(fetch, max(min(left, timeout / 3), 0.01))
            if size is None or len(data) == size:
                return data
            problem = f"{len(data)} bytes instead of {size}"
        except passthrough:
            raise
        except Exception as err:
            if _is_final(err):
                raise ShardReadError(f"cannot read {what}: {_describe(err)}") from None
            problem = _describe(err)
        left = deadline - time.monotonic()
        if left <= pause:
            raise ShardReadError(f"cannot read {what}: {problem} ({attempts} attempt(s) in {timeout:g} s; raise "
                                 "the time limit, --hub_timeout, for a slow link)")
        time.sleep(pause)
        pause = min(pause * 2, _LAST_PAUSE)


# ---------------------------------------------------------------------------------------------------------
# Where the corpus is


class RemoteLocation:
    """A prepared folder on an fsspec filesystem: ``fs`` and the folder's path ``root`` in it; ``url`` names it.

    :meth:`read` is one ranged read (one attempt; :func:`read_with_retries` repeats it)."""

    def __init__(self, fs: fsspec.AbstractFileSystem, root: str, url: str):
        self.fs, self.root, self.url = fs, root.rstrip("/"), url.rstrip("/")

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        return self.fs.cat_file(self.path(name), start=start, end=end)

    def sizes(self, folder: str) -> dict[str, int]:
        """``{name inside the corpus: bytes}`` of the files in ``folder`` (one listing)."""
        try:
            entries = self.fs.ls(self.path(folder), detail=True)
        except FileNotFoundError:
            return {}
        return {f"{folder}/{e['name'].rstrip('/').rsplit('/', 1)[-1]}": int(e["size"]) for e in entries
                if e.get("type") == "file"}

    def describe(self, name: str) -> str:
        return f"{name} of {self.url}"


class HubLocation(RemoteLocation):
    """A Hub dataset repo at one commit, through ``huggingface_hub.HfFileSystem`` (listing, small files); ranged
    reads are single GETs of the file's resolve URL, so that the time limit here is the only retry policy."""

    def __init__(self, repo_id: str, commit: str, *, endpoint: str | None, token: str | None, url: str):
        from huggingface_hub import HfFileSystem
        from huggingface_hub.utils import build_hf_headers

        fs = HfFileSystem(endpoint=endpoint, token=token)
        super().__init__(fs, f"datasets/{repo_id}@{commit}", url)
        self.repo_id, self.commit, self.token = repo_id, commit, token
        self.endpoint = fs.endpoint
        self._headers = build_hf_headers(token=token)  # once: it looks the token up on disk

    def read(self, name: str, start: int | None = None, end: int | None = None) -> bytes:
        from huggingface_hub import get_session, hf_hub_url

        url = hf_hub_url(self.repo_id, name, repo_type="dataset", revision=self.commit, endpoint=self.endpoint)
        headers = dict(self._headers)
        if start is not None:
            headers["Range"] = f"bytes={start}-{end - 1}"
        response = get_session().get(url, headers=headers, timeout=_TIMEOUT_OF_THREAD.get())
        if response.status_code == 404:
            raise FileNotFoundError(f"404 from {url}")
        if response.status_code in (401, 403):
            raise PermissionError(f"{response.status_code} from {url}: the token is refused or has no access")
        if response.status_code not in (200, 206):
            raise OSError(f"HTTP {response.status_code} from {url}")
        data = response.content
        if start is not None and response.status_code == 200:  # the server ignored the range
            data = data[start:end]
        return data


class _ThreadTimeout(threading.local):
    """The limit of the attempt running in this thread, for clients that take one (the HTTP client)."""

    seconds = 60.0

    def get(self) -> float:
        return self.seconds


_TIMEOUT_OF_THREAD = _ThreadTimeout()


def resolve_location(location: str, *, revision: str | None = None, token: str | None = None,
                     endpoint: str | None = None, timeout: float = 60.0) -> RemoteLocation:
    """The :class:`RemoteLocation` of a Hub dataset repo (``user/name``, ``hf://datasets/user/name[@rev]``; the
    revision is resolved to its commit now) or of any other fsspec URL.  ``FileNotFoundError`` for a repo or
    revision that does not exist, ``ShardReadError`` when the Hub does not answer within ``timeout``."""
    match = _HF_URL.match(location)
    if match or is_repo_id(location):
        repo_id = match["repo"] if match else location
        if match and match["rev"] is not None:
            from urllib.parse import unquote

            if revision is not None and unquote(match["rev"]) != revision:
                raise ValueError(f"{location} names revision {unquote(match['rev'])!r} but revision is {revision!r}")
            revision = unquote(match["rev"])
        commit = _resolve_commit(repo_id, revision, token=token, endpoint=endpoint, timeout=timeout)
        shown = f"hf://datasets/{repo_id}@{commit[:12]}"
        return HubLocation(repo_id, commit, endpoint=endpoint, token=token, url=shown)
    if location.startswith("hf://"):
        raise ValueError(f"{location}: a Hub corpus is hf://datasets/user/name[@revision]")
    if "://" not in location:
        raise FileNotFoundError(f"prepared folder not found: {location}")
    try:
        fs, root = fsspec.core.url_to_fs(location)
    except (ImportError, ValueError) as err:
        raise ValueError(f"cannot open {location}: {_describe(err)}") from None
    return RemoteLocation(fs, root, location)


def _resolve_commit(repo_id: str, revision: str | None, *, token, endpoint, timeout: float) -> str:
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import RepositoryNotFoundError, RevisionNotFoundError

    if constants.HF_HUB_OFFLINE:
        raise ShardReadError(f"cannot read the Hub dataset {repo_id}: offline mode is enabled (HF_HUB_OFFLINE=1)")
    api = HfApi(endpoint=endpoint, token=token)

    def fetch() -> str:
        _TIMEOUT_OF_THREAD.seconds = timeout / 3
        try:
            return api.dataset_info(repo_id, revision=revision, timeout=timeout / 3).sha
        except RevisionNotFoundError:
            raise FileNotFoundError(f"the Hub dataset {repo_id} has no revision {revision!r}") from None
        except RepositoryNotFoundError:
            raise FileNotFoundError(f"no Hub dataset repo {repo_id} at {api.endpoint} (or no access to it)") from None

    return read_with_retries(fetch, None, timeout, f"the Hub dataset {repo_id} at {api.endpoint}",
                             passthrough=(FileNotFoundError,))


def fetch(location: RemoteLocation, name: str, timeout: float, start: int | None = None,
          end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of ``name`` (the whole file when ``start`` is None), retried within ``timeout``."""

    def once() -> bytes:
        _TIMEOUT_OF_THREAD.seconds = timeout / 3
        return location.read(name, start, end)

    size = None if start is None else end - start
    return read_with_retries(once, size, timeout, location.describe(name))


# ---------------------------------------------------------------------------------------------------------
# The cache of fetched ranges


class RangeCache:
    """Byte ranges on local disk under ``folder``, at most about ``limit`` bytes, shared by the processes of one
    machine (see the module docstring).  ``limit`` 0 keeps nothing."""

    _TRAILER = struct.Struct("<I")  # CRC32 of the entry's bytes

    def __init__(self, folder: str | Path, limit: int):
        self.folder, self.limit = Path(folder), int(limit)
        self._written = 0  # bytes this process wrote since it last scanned the folder
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _entry(self, key: str, start: int, end: int) -> Path:
        return self.folder / key[:2] / key / f"{start}-{end}"

    def has(self, key: str, start: int, end: int) -> bool:
        """Whether an entry is there (not whether it is intact: :meth:`get` checks that)."""
        return self.limit > 0 and self._entry(key, start, end).is_file()

    def get(self, key: str, start: int, end: int) -> bytes | None:
        if self.limit == 0:
            return None
        path = self._entry(key, start, end)
        try:
            raw = path.read_bytes()
        except OSError:  # not there, or removed by another process's eviction just now
            self.misses += 1
            return None
        data, trailer = raw[:-self._TRAILER.size], raw[-self._TRAILER.size:]
        if len(data) != end - start or self._TRAILER.unpack(trailer)[0] != zlib.crc32(data):
            path.unlink(missing_ok=True)  # damaged: fetched again
            self.misses += 1
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        self.hits += 1
        return data

    def put(self, key: str, start: int, end: int, data: bytes) -> None:
        if self.limit == 0 or len(data) + self._TRAILER.size > self.limit:
            return
        path = self._entry(key, start, end)
        temporary = path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.write(self._TRAILER.pack(zlib.crc32(data)))
            os.replace(temporary, path)  # atomic: readers see the whole entry or none
        except OSError:  # a full or read-only disk makes the cache useless, not the run
            temporary.unlink(missing_ok=True)
            return
        with self._lock:
            self._written += len(data)
            if self._written * 16 >= self.limit:
                self._written = 0
                self.evict()

    def usage(self) -> list[tuple[float, int, Path]]:
        """``(last use, bytes, path)`` of every entry."""
        entries = []
        for path in self.folder.glob("*/*/*"):
            if path.name.startswith("."):
                continue
            try:
                status = path.stat()
            except OSError:
                continue
            entries.append((status.st_mtime, status.st_size, path))
        return entries

    def evict(self) -> None:
        """Remove the least recently used entries until the folder holds at most 7/8 of the limit (so that the
        next scan is some writes away); also removes temporary files older than an hour (a killed writer's)."""
        entries = sorted(self.usage())
        total = sum(size for _, size, _ in entries)
        for _, size, path in entries:
            if total <= self.limit * 7 // 8:
                break
            path.unlink(missing_ok=True)
            total -= size
        stale = time.time() - 3600
        for path in self.folder.glob("*/*/.*.tmp"):
            try:
                if path.stat().st_mtime < stale:
                    path.unlink(missing_ok=True)
            except OSError:
                pass


# ---------------------------------------------------------------------------------------------------------
# A shard as a file pyarrow reads


class RemoteShardFile(io.RawIOBase):
    """A remote Parquet file, readable and seekable, that fetches whole *regions* through the cache.

    The regions are the byte spans of the file's row groups, of the footer, and of whatever lies between them:
    when pyarrow reads a column chunk of row group g, the whole span of g comes in one ranged read (and the next
    columns of g from memory).  The last two regions fetched are kept in memory; everything else is on disk.
    """

    def __init__(self, location: RemoteLocation, name: str, size: int, key: str, cache: RangeCache, timeout: float):
        super().__init__()
        self.location, self.name, self.size, self.key = location, name, size, key
        self.cache, self.timeout = cache, timeout
        self._position = 0
        self._bounds: list[int] = [0, size]  # region k is [bounds[k], bounds[k + 1])
        self._groups: dict[int, tuple[int, int]] = {}  # row group -> its region
        self._recent: OrderedDict[int, bytes] = OrderedDict()
        self._lock = threading.Lock()

    # -- the regions ------------------------------------------------------------------------------------
    def set_regions(self, metadata: pq.FileMetaData, footer_start: int) -> None:
        starts = {0, footer_start, self.size}
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            first, last = self.size, 0
            for column in range(row_group.num_columns):
                chunk = row_group.column(column)
                start = chunk.data_page_offset
                if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                    start = chunk.dictionary_page_offset
                first, last = min(first, start), max(last, start + chunk.total_compressed_size)
            if first < last <= footer_start:
                starts.update((first, last))
                self._groups[group] = (first, last)
        self._bounds = sorted(starts)
        self._recent.clear()

    def region_bytes(self, group: int) -> int:
        first, last = self._groups.get(group, (0, 0))
        return last - first

    def prefetch(self, group: int) -> None:
        """Bring row group ``group``'s region into the cache (a no-op when it is there): several of these run at
        once when a batch needs row groups that no process of the machine has fetched yet."""
        first, last = self._groups.get(group, (0, 0))
        if first < last and not self.cache.has(self.key, first, last):
            self.cache.put(self.key, first, last, fetch(self.location, self.name, self.timeout, first, last))

    def range(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``, from memory, the cache, or one retried ranged read (then cached)."""
        with self._lock:
            if start in self._recent:
                self._recent.move_to_end(start)
                return self._recent[start][: end - start]
        data = self.cache.get(self.key, start, end)
        if data is None:
            data = fetch(self.location, self.name, self.timeout, start, end)
            self.cache.put(self.key, start, end, data)
        with self._lock:
            self._recent[start] = data
            while len(self._recent) > 2:
                self._recent.popitem(last=False)
        return data

    def _read_at(self, position: int, length: int) -> bytes:
        import bisect

        end = min(position + length, self.size)
        pieces = []
        while position < end:
            k = bisect.bisect_right(self._bounds, position) - 1
            first, last = self._bounds[k], self._bounds[k + 1]
            region = self.range(first, last)
            pieces.append(region[position - first : min(end, last) - first])
            position = min(end, last)
        return b"".join(pieces)

    # -- io.RawIOBase -----------------------------------------------------------------------------------
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._position, 2: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer) -> int:
        data = self._read_at(self._position, len(buffer))
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


def open_remote_parquet(location: RemoteLocation, name: str, size: int, sha256: str, cache: RangeCache,
                        timeout: float) -> pq.ParquetFile:
    """The shard ``name`` (``size`` bytes, content ``sha256`` per the manifest) as a ``ParquetFile`` that reads
    its footer once (cached) and then one region per row group (see :class:`RemoteShardFile`).

    ``PreparedDataError``-worthy damage surfaces as ``pyarrow.ArrowException`` (the footer) or as a page checksum
    failure on decode; a read that fails for good raises :class:`ShardReadError`."""
    handle = RemoteShardFile(location, name, size, sha256, cache, timeout)
    tail_start = max(0, size - _TAIL_BYTES)
    tail = handle.range(tail_start, size)
    if len(tail) < 12 or tail[-4:] != b"PAR1":
        raise pa.ArrowInvalid(f"{name} does not end like a Parquet file")
    footer_length = struct.unpack("<I", tail[-8:-4])[0]
    footer_start = size - 8 - footer_length
    if footer_start < 4:
        raise pa.ArrowInvalid(f"{name}: its footer claims {footer_length} bytes of a {size}-byte file")
    if footer_start < tail_start:  # a footer larger than the first read
        tail = handle.range(footer_start, tail_start) + tail
        tail_start = footer_start
    metadata = pq.read_metadata(pa.BufferReader(tail[footer_start - tail_start :]))
    handle.set_regions(metadata, footer_start)
    parquet = pq.ParquetFile(handle, metadata=metadata, memory_map=False, page_checksum_verification=True)
    parquet.remote_file = handle  # for prefetching its row groups (RemoteShards.prefetch)
    return parquet


# ---------------------------------------------------------------------------------------------------------
# Opening: the small files on local disk, the shards' sizes checked


@dataclass
class RemoteShards:
    """What a remotely read :class:`~hfbert.data.PreparedCorpus` needs to open its shards."""

    location: RemoteLocation
    cache: RangeCache
    timeout: float
    shards: dict[str, ShardRecord]  # name -> the manifest's entry (rows, bytes, sha256, ...)

    #: Ranged reads in flight at once when a batch needs row groups not yet fetched (a window's start).
    CONCURRENT_READS = 8

    def open_parquet(self, name: str) -> pq.ParquetFile:
        shard = self.shards[name]
        return open_remote_parquet(self.location, name, shard.bytes, shard.sha256, self.cache, self.timeout)

    def prefetch(self, files: dict[str, pq.ParquetFile | None], groups: list[tuple[str, int]]) -> dict:
        """Open the shards of ``files`` that are None and fetch the regions of ``groups`` ((shard, row group)
        pairs) into the cache, up to :attr:`CONCURRENT_READS` reads at a time instead of one after the other.
        Returns ``files`` with every shard opened. An error is raised as the sequential read would raise it."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.CONCURRENT_READS, thread_name_prefix="hfbert-remote-read")
        missing = [name for name, file in files.items() if file is None]
        for name, file in zip(missing, self._pool.map(self.open_parquet, missing)):
            files[name] = file
        wanted = sum(files[name].remote_file.region_bytes(group) for name, group in groups)
        if 2 * wanted <= self.cache.limit:  # else the first would be evicted before the last is decoded
            list(self._pool.map(lambda pair: files[pair[0]].remote_file.prefetch(pair[1]), groups))
        return files

    _pool: ThreadPoolExecutor | None = field(default=None, repr=False, compare=False)


def fetch_metadata(location: RemoteLocation, manifest_name: str, cache_dir: Path, timeout: float) -> Path:
    """A local folder with the corpus's manifest and tokenizer files (fetched now, unless this machine already has
    them for this very manifest); returns it.  The shards stay remote."""
    manifest = fetch(location, manifest_name, timeout)
    digest = hashlib.sha256(location.url.encode() + b"\0" + manifest).hexdigest()
    folder = cache_dir / "corpora" / digest[:16]
    if (folder / manifest_name).is_file():
        return folder
    try:
        files = Manifest.read(manifest, location.url).tokenizer.files
    except PreparedDataError:
        files = []  # not a manifest hfbert can read: PreparedCorpus.open says what is wrong with it
    scratch = cache_dir / "corpora" / f".{digest[:16]}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    scratch.mkdir(parents=True)
    for name in files:
        (scratch / name).write_bytes(fetch(location, name, timeout))
    (scratch / manifest_name).write_bytes(manifest)  # last: a folder with a manifest is complete
    try:
        os.rename(scratch, folder)
    except OSError:  # another process of this machine was first: use its folder
        for path in scratch.iterdir():
            path.unlink()
        scratch.rmdir()
    return folder


def list_sizes(location: RemoteLocation, folders: list[str], timeout: float) -> dict[str, int]:
    """``{file: bytes}`` of the files in each of ``folders`` of the corpus (one listing each, retried)."""
    sizes: dict[str, int] = {}
    for folder in folders:
        def listing(folder=folder) -> dict[str, int]:
            _TIMEOUT_OF_THREAD.seconds = timeout / 3
            return location.sizes(folder)

        sizes.update(read_with_retries(listing, None, timeout, f"the listing of {location.describe(folder)}"))
    return sizes


#: Bytes per ranged read of an explicit full download.
DOWNLOAD_CHUNK = 64 << 20


def download_corpus(location: RemoteLocation, manifest_name: str, cache_dir: Path, timeout: float) -> Path:
    """The whole corpus copied to ``cache_dir/downloads/...`` (the explicit choice; reused when this machine has
    it already for this manifest), in ranged reads of :data:`DOWNLOAD_CHUNK` bytes, each retried; returns it."""
    manifest = fetch(location, manifest_name, timeout)
    digest = hashlib.sha256(location.url.encode() + b"\0" + manifest).hexdigest()
    folder = cache_dir / "downloads" / digest[:16]
    if (folder / manifest_name).is_file():
        return folder
    try:
        described = Manifest.read(manifest, location.url)
        files, shards = described.tokenizer.files, [(s.file, int(s.bytes)) for s in described.shards()]
    except (TypeError, ValueError):  # PreparedDataError is a ValueError
        files, shards = [], []  # PreparedCorpus.open says what is wrong with the manifest
    scratch = cache_dir / "downloads" / f".{digest[:16]}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    scratch.mkdir(parents=True)
    for name in files:
        (scratch / name).write_bytes(fetch(location, name, timeout))
    for name, size in shards:
        (scratch / name).parent.mkdir(parents=True, exist_ok=True)
        with open(scratch / name, "wb") as handle:
            for start in range(0, size, DOWNLOAD_CHUNK):
                handle.write(fetch(location, name, timeout, start, min(start + DOWNLOAD_CHUNK, size)))
    (scratch / manifest_name).write_bytes(manifest)
    try:
        os.rename(scratch, folder)
    except OSError:  # another process of this machine was first
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    return folder
