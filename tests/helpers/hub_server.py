"""A small, stdlib-only server that speaks the subset of the Hugging Face Hub protocol the clients use.

It lets the tests drive the unmodified clients (``create_repo``, ``upload_folder``, ``push_to_hub``,
``snapshot_download``, ``hf_hub_download``, ``from_pretrained``, the ``hf`` CLI) against 127.0.0.1 with
no internet. Everything lives in memory: repositories hold commits (a full path -> blob snapshot each),
branches and tags; LFS objects are stored by sha256. Files named like the Hub's default
``.gitattributes`` patterns (``*.safetensors``, ``*.bin``, ...) or larger than 10 MB take the LFS path, the
rest are regular git blobs, so both upload paths are exercised. Xet is never offered: the uploading
process must set ``HF_HUB_DISABLE_XET=1`` before importing huggingface_hub.

Tokens map to a user and a role ("write" or "read"); an unknown token gets the Hub's 401 ("Invalid
credentials in Authorization header"). Requests the server does not know are answered 404 and recorded
in ``HubServer.unknown_routes`` (and logged), so a protocol change in a future client shows up there.

:class:`SilentServer` is the opposite: it accepts connections and never answers, as a hung endpoint does;
:class:`TrickleServer` answers one byte at a time, forever; :class:`FailingHub` answers HTTP 500 in a loop.
:class:`Fault` makes this server misbehave on downloads: answer 500, send fewer bytes than asked, or hold the
request without answering.
"""

from __future__ import annotations

import base64
import fnmatch
import functools
import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

logger = logging.getLogger("hub_server")

LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.onnx", "*.gz", "*.zip")
LFS_SIZE_THRESHOLD = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS).encode()
INVALID_TOKEN = "Invalid credentials in Authorization header"


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Blob:
    data: bytes
    lfs: bool

    # Hashed once per blob, as the Hub stores them: every download answers with them, and hashing a shard of
    # tens of MB per ranged read would be what a remote-read benchmark measures.
    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @functools.cached_property
    def git_oid(self) -> str:  # what git itself stores: the content, or the LFS pointer
        return git_blob_sha1(lfs_pointer(self.sha256, len(self.data)) if self.lfs else self.data)

    def entry(self, path: str) -> dict:
        out = {"type": "file", "oid": self.git_oid, "size": len(self.data), "path": path}
        if self.lfs:
            out["lfs"] = {"oid": self.sha256, "size": len(self.data), "pointerSize": len(lfs_pointer(self.sha256, 1))}
        return out


def directory(path: str) -> dict:
    return {"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(), "size": 0, "path": path}


@dataclass
class Commit:
    oid: str
    parent: str | None
    files: dict[str, Blob]
    title: str
    message: str
    author: str
    date: str = field(default_factory=_now)


@dataclass
class Repo:
    type: str  # "model" | "dataset" | "space"
    id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    prs: int = 0

    def resolve(self, rev: str) -> Commit | None:
        oid = self.branches.get(rev) or self.tags.get(rev)
        if oid is None and re.fullmatch(r"[0-9a-f]{7,40}", rev):
            oid = next((c for c in self.commits if c.startswith(rev)), None)
        return self.commits.get(oid) if oid else None

    def add_commit(self, parent: Commit | None, files: dict[str, Blob], title: str, message: str,
                   author: str) -> Commit:
        seed = json.dumps([parent.oid if parent else None, sorted((p, b.git_oid) for p, b in files.items()),
                           title, len(self.commits), _now()])
        oid = hashlib.sha1(seed.encode()).hexdigest()
        commit = Commit(oid, parent.oid if parent else None, files, title, message, author)
        self.commits[commit.oid] = commit
        return commit


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


@dataclass
class Fault:
    """A misbehaviour of the server on file downloads (``GET .../resolve/...``) whose path contains ``match``:
    ``"500"`` answers HTTP 500, ``"short"`` sends the body less its last byte (headers unchanged, so the client
    gets fewer bytes than it asked for), ``"silent"`` holds the request ``seconds`` (or until the server stops)
    before answering.  ``times``: how many requests it hits (None: all); ``served`` counts them."""

    kind: str
    times: int | None = None
    match: str = ".parquet"
    seconds: float = 30.0
    served: int = 0

    def __post_init__(self):
        if self.kind not in ("500", "short", "silent"):
            raise ValueError(f"unknown fault {self.kind!r}")


T = r"(?P<t>models|datasets|spaces)"
R = r"(?P<ns>[^/]+)/(?P<name>[^/?]+)"
REV = r"(?P<rev>[^/]+)"
P = r"(?P<prefix>datasets/|spaces/)?"
PREFIX_TYPES = {None: "model", "": "model", "datasets/": "dataset", "spaces/": "space"}


class HubServer:
    """The in-memory Hub. ``url`` is set once started; ``tokens`` maps token -> (user, role)."""

    def __init__(self, tokens: dict[str, tuple[str, str]] | None = None):
        self.tokens = tokens or {"hf_write_token": ("user", "write"), "hf_read_token": ("user", "read")}
        self.repos: dict[tuple[str, str], Repo] = {}
        self.lfs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, int]] = []
        self.unknown_routes: list[str] = []
        self.lock = threading.RLock()
        self.url = ""
        self.fault: Fault | None = None
        self.first_request: float | None = None  # time.monotonic() of the first request answered
        self.stopping = threading.Event()  # set when the server stops: ends the waits of "silent" faults
        self.routes = [
            ("POST", r"/api/repos/create", self.create_repo),
            ("DELETE", r"/api/repos/delete", self.delete_repo),
            ("POST", r"/api/validate-yaml", lambda h, m, q, b: {"errors": [], "warnings": []}),
            ("GET", r"/api/whoami-v2", self.whoami),
            # the `hf` CLI's best-effort fetch of the AI-agent registry (huggingface_hub >= 2.x)
            ("GET", r"/api/agent-harnesses", lambda h, m, q, b: {"standardEnvVars": [], "harnesses": {}}),
            ("GET", rf"/api/{T}/{R}(?:/revision/{REV})?", self.info),
            ("GET", rf"/api/{T}/{R}/tree/{REV}(?:/(?P<path>.*))?", self.tree),
            ("POST", rf"/api/{T}/{R}/paths-info/{REV}", self.paths_info),
            ("POST", rf"/api/{T}/{R}/preupload/{REV}", self.preupload),
            ("POST", rf"/api/{T}/{R}/commit/{REV}", self.commit),
            ("GET", rf"/api/{T}/{R}/commits/{REV}", self.commits),
            ("GET", rf"/api/{T}/{R}/refs", self.refs),
            ("POST", rf"/api/{T}/{R}/branch/{REV}", self.create_branch),
            ("DELETE", rf"/api/{T}/{R}/branch/{REV}", self.delete_branch),
            ("POST", rf"/api/{T}/{R}/tag/{REV}", self.create_tag),
            ("DELETE", rf"/api/{T}/{R}/tag/{REV}", self.delete_tag),
            ("POST", rf"/{P}{R}\.git/info/lfs/objects/batch", self.lfs_batch),
            ("PUT", r"/_lfs/(?P<oid>[0-9a-f]{64})", self.lfs_put),
            ("POST", r"/_lfs/(?P<oid>[0-9a-f]{64})/verify", self.lfs_verify),
            ("GET", rf"/{P}{R}/resolve/{REV}/(?P<path>.+)", self.resolve),
            ("HEAD", rf"/{P}{R}/resolve/{REV}/(?P<path>.+)", self.resolve),
        ]

    # --- for the tests ------------------------------------------------------------------------------
    WRITE_TOKEN, READ_TOKEN = "hf_write_token", "hf_read_token"

    def client_env(self, home, token: str | None = WRITE_TOKEN) -> dict[str, str]:
        """The environment of a client subprocess that talks to this server (see :func:`client_env`)."""
        return client_env(self.url, home, token)

    def take_fault(self, method: str, path: str) -> Fault | None:
        """The fault that hits this request, if any (counted)."""
        with self.lock:
            fault = self.fault
            if fault is None or method != "GET" or "/resolve/" not in path or fault.match not in path:
                return None
            if fault.times is not None and fault.served >= fault.times:
                return None
            fault.served += 1
            return fault

    # --- helpers ----------------------------------------------------------------------------------
    def user(self, headers, *, write: bool = False, namespace: str | None = None) -> str | None:
        auth = headers.get("Authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        if token is not None and token not in self.tokens:
            raise HubError(401, INVALID_TOKEN)
        user, role = self.tokens[token] if token else (None, None)
        if write and user is None:
            raise HubError(401, "You must be authenticated to write to the Hub")
        if write and (role != "write" or (namespace is not None and namespace != user)):
            raise HubError(403, f"You don't have the rights to write to the namespace {namespace!r} with this token")
        return user

    def repo(self, m, headers, *, write: bool = False) -> Repo:
        rtype = m["t"][:-1] if m.get("t") else PREFIX_TYPES[m.get("prefix")]
        user = self.user(headers, write=write, namespace=m["ns"])
        repo = self.repos.get((rtype, f"{m['ns']}/{m['name']}"))
        if repo is None or (repo.private and user != m["ns"]):
            raise HubError(404, f"Repository {m['ns']}/{m['name']} not found", "RepoNotFound")
        return repo

    def commit_at(self, repo: Repo, rev: str) -> Commit:
        commit = repo.resolve(rev)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
        return commit

    def repo_url(self, repo: Repo) -> str:
        prefix = "" if repo.type == "model" else f"{repo.type}s/"
        return f"{self.url}/{prefix}{repo.id}"

    # --- repositories -----------------------------------------------------------------------------
    def create_repo(self, h, m, q, body):
        body = json.loads(body)
        ns = body.get("organization") or self.user(h)
        rtype = body.get("type") or "model"
        repo_id = f"{ns}/{body['name']}"
        self.user(h, write=True, namespace=ns)
        private = bool(body.get("private")) or body.get("visibility") == "private"
        repo = Repo(rtype, repo_id, private)
        if (rtype, repo_id) in self.repos:
            raise _Conflict(self.repo_url(repo))
        self.repos[(rtype, repo_id)] = repo
        first = repo.add_commit(None, {".gitattributes": Blob(GITATTRIBUTES, False)}, "initial commit", "", "system")
        repo.branches["main"] = first.oid
        return {"url": self.repo_url(repo), "name": repo_id}

    def delete_repo(self, h, m, q, body):
        body = json.loads(body)
        ns = body.get("organization") or self.user(h)
        self.user(h, write=True, namespace=ns)
        if self.repos.pop((body.get("type") or "model", f"{ns}/{body['name']}"), None) is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        return {}

    def whoami(self, h, m, q, body):
        user = self.user(h)
        if user is None:
            raise HubError(401, "Unauthorized")
        role = self.tokens[h["Authorization"][len("Bearer "):]][1]
        return {"type": "user", "name": user, "fullname": user, "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "test", "role": role}}}

    def info(self, h, m, q, body):
        repo = self.repo(m, h)
        commit = self.commit_at(repo, m.get("rev") or "main")
        blobs = "blobs" in q
        siblings = [{"rfilename": p, **({"size": b.entry(p)["size"], "blobId": b.git_oid} if blobs else {}),
                     **({"lfs": {"sha256": b.sha256, "size": len(b.data)}} if blobs and b.lfs else {})}
                    for p, b in sorted(commit.files.items())]
        return {"_id": repo.id, "id": repo.id, "modelId": repo.id, "author": repo.id.split("/")[0],
                "sha": commit.oid, "private": repo.private, "disabled": False, "gated": False,
                "lastModified": commit.date, "createdAt": commit.date, "downloads": 0, "likes": 0,
                "tags": [], "siblings": siblings}

    def entries(self, commit: Commit, base: str, recursive: bool) -> list[dict]:
        base = base.strip("/")
        files = {p: b for p, b in commit.files.items() if not base or p.startswith(base + "/")}
        if base and not files:
            if base in commit.files:
                return [commit.files[base].entry(base)]
            raise HubError(404, f"{base} does not exist on this revision", "EntryNotFound")
        out, dirs = [], set()
        for path, blob in sorted(files.items()):
            rel = path[len(base) + 1:] if base else path
            parts = rel.split("/")
            for i in range(1, len(parts) if recursive else min(2, len(parts))):
                dirs.add("/".join(([base] if base else []) + parts[:i]))
            if recursive or len(parts) == 1:
                out.append(blob.entry(path))
        return out + [directory(d) for d in sorted(dirs)]

    def tree(self, h, m, q, body):
        commit = self.commit_at(self.repo(m, h), m["rev"])
        return self.entries(commit, m.get("path") or "", q.get("recursive", ["false"])[0].lower() == "true")

    def paths_info(self, h, m, q, body):
        commit = self.commit_at(self.repo(m, h), m["rev"])
        form = parse_qs(body.decode()) if body[:1] != b"{" else {"paths": json.loads(body)["paths"]}
        out = []
        for path in form.get("paths", []):
            if path in commit.files:
                out.append(commit.files[path].entry(path))
            elif any(p.startswith(path.rstrip("/") + "/") for p in commit.files):
                out.append(directory(path))
        return out

    # --- uploads ----------------------------------------------------------------------------------
    @staticmethod
    def is_lfs(path: str, size: int) -> bool:
        return size > LFS_SIZE_THRESHOLD or any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], p) for p in LFS_PATTERNS)

    def preupload(self, h, m, q, body):
        repo = self.repo(m, h, write=True)
        commit = repo.resolve(m["rev"])
        out = []
        for f in json.loads(body)["files"]:
            lfs = self.is_lfs(f["path"], f["size"])
            old = commit.files.get(f["path"]) if commit else None
            oid = (old.sha256 if old.lfs else old.git_oid) if old is not None and old.lfs == lfs else None
            out.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False,
                        "oid": oid})
        return {"files": out, "commitOid": commit.oid if commit else None}

    def lfs_batch(self, h, m, q, body):
        self.repo(m, h, write=True)
        objects = []
        for obj in json.loads(body)["objects"]:
            entry = {"oid": obj["oid"], "size": obj["size"]}
            if obj["oid"] not in self.lfs:
                entry["actions"] = {"upload": {"href": f"{self.url}/_lfs/{obj['oid']}"},
                                    "verify": {"href": f"{self.url}/_lfs/{obj['oid']}/verify"}}
            objects.append(entry)
        return {"transfer": "basic", "objects": objects}

    def lfs_put(self, h, m, q, body):
        if hashlib.sha256(body).hexdigest() != m["oid"]:
            raise HubError(400, "LFS object does not match its oid")
        self.lfs[m["oid"]] = body
        return {}

    def lfs_verify(self, h, m, q, body):
        obj = json.loads(body)
        if obj["oid"] not in self.lfs or len(self.lfs[obj["oid"]]) != obj["size"]:
            raise HubError(404, f"LFS object {obj['oid']} was not uploaded")
        return {}

    def commit(self, h, m, q, body):
        repo = self.repo(m, h, write=True)
        user = self.user(h)
        create_pr = q.get("create_pr", ["0"])[0] == "1"
        parent = self.commit_at(repo, m["rev"])
        if not create_pr and m["rev"] not in repo.branches:
            raise HubError(400, f"Cannot commit to {m['rev']!r}: it is not a branch")
        files = dict(parent.files)
        header = {}
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                header = value
                if value.get("parentCommit") and value["parentCommit"] != parent.oid:
                    raise HubError(412, "A commit has happened since. Please refresh and try again.")
            elif key == "file":
                content = value["content"]
                data = base64.b64decode(content) if value.get("encoding") == "base64" else content.encode()
                files[value["path"]] = Blob(data, self.is_lfs(value["path"], len(data)))
            elif key == "lfsFile":
                if value["oid"] not in self.lfs:
                    raise HubError(422, f"LFS object {value['oid']} of {value['path']} was never uploaded")
                files[value["path"]] = Blob(self.lfs[value["oid"]], True)
            elif key == "deletedFile":
                if files.pop(value["path"], None) is None:
                    raise HubError(404, f"{value['path']} does not exist", "EntryNotFound")
            elif key == "deletedFolder":
                files = {p: b for p, b in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
            else:
                raise HubError(400, f"unknown commit operation {key!r}")
        new = repo.add_commit(parent, files, header.get("summary", ""), header.get("description", ""), user)
        pr_url = None
        if create_pr:
            repo.prs += 1
            repo.branches[f"refs/pr/{repo.prs}"] = new.oid
            pr_url = f"{self.repo_url(repo)}/discussions/{repo.prs}"
        else:
            repo.branches[m["rev"]] = new.oid
        return {"commitOid": new.oid, "commitUrl": f"{self.repo_url(repo)}/commit/{new.oid}", "pullRequestUrl": pr_url}

    # --- refs -------------------------------------------------------------------------------------
    def commits(self, h, m, q, body):
        repo = self.repo(m, h)
        commit, out = self.commit_at(repo, m["rev"]), []
        while commit is not None:
            out.append({"id": commit.oid, "title": commit.title, "message": commit.message,
                        "authors": [{"user": commit.author}], "date": commit.date})
            commit = repo.commits.get(commit.parent) if commit.parent else None
        return out

    def refs(self, h, m, q, body):
        repo = self.repo(m, h)
        def listing(refs: dict[str, str], kind: str) -> list[dict]:
            return [{"name": n, "ref": n if kind == "pr" else f"refs/{kind}/{n}", "targetCommit": o}
                    for n, o in refs.items()]

        prs = {n: o for n, o in repo.branches.items() if n.startswith("refs/pr/")}
        branches = {n: o for n, o in repo.branches.items() if n not in prs}
        return {"branches": listing(branches, "heads"), "tags": listing(repo.tags, "tags"), "converts": [],
                "pullRequests": listing(prs, "pr")}

    def create_branch(self, h, m, q, body):
        repo = self.repo(m, h, write=True)
        if m["rev"] in repo.branches:
            raise HubError(409, f"Branch {m['rev']} already exists")
        start = (json.loads(body) if body else {}).get("startingPoint") or "main"
        repo.branches[m["rev"]] = self.commit_at(repo, start).oid
        return {}

    def delete_branch(self, h, m, q, body):
        repo = self.repo(m, h, write=True)
        if repo.branches.pop(m["rev"], None) is None:
            raise HubError(404, f"Branch {m['rev']} not found", "RevisionNotFound")
        return {}

    def create_tag(self, h, m, q, body):
        repo = self.repo(m, h, write=True)
        tag = json.loads(body)["tag"]
        if tag in repo.tags:
            raise HubError(409, f"Tag {tag} already exists")
        repo.tags[tag] = self.commit_at(repo, m["rev"]).oid
        return {}

    def delete_tag(self, h, m, q, body):
        repo = self.repo(m, h, write=True)
        if repo.tags.pop(m["rev"], None) is None:
            raise HubError(404, f"Tag {m['rev']} not found", "RevisionNotFound")
        return {}

    # --- downloads --------------------------------------------------------------------------------
    def resolve(self, h, m, q, body):
        repo = self.repo(m, h)
        commit = self.commit_at(repo, m["rev"])
        blob = commit.files.get(m["path"])
        if blob is None:
            raise HubError(404, f"{m['path']} does not exist on {m['rev']}", "EntryNotFound")
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{blob.git_oid}"', "Accept-Ranges": "bytes"}
        if blob.lfs:
            headers |= {"X-Linked-Etag": f'"{blob.sha256}"', "X-Linked-Size": str(len(blob.data))}
        data, status = blob.data, 200
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", h.get("Range", ""))
        if rng:
            start, end = int(rng[1]), int(rng[2]) if rng[2] else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[start:end + 1], 206
        return _Raw(status, data, headers)


@dataclass
class _Raw:
    status: int
    data: bytes
    headers: dict


class _Conflict(HubError):
    def __init__(self, url: str):
        super().__init__(409, "You already created this repo")
        self.url = url


def _make_handler(hub: HubServer):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # keep pytest output clean; requests are recorded in hub.requests
            pass

        def read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while (size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(chunks)
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def dispatch(self):
            url = urlsplit(self.path)
            body = self.read_body()
            fault = hub.take_fault(self.command, url.path)
            if fault is not None and fault.kind == "silent":
                hub.stopping.wait(fault.seconds)
            for method, pattern, handler in hub.routes:
                match = re.fullmatch(pattern, url.path)
                if method == self.command and match:
                    groups = {k: unquote(v) if v is not None else None for k, v in match.groupdict().items()}
                    try:
                        with hub.lock:
                            result = handler(self.headers, groups, parse_qs(url.query), body)
                    except _Conflict as err:
                        result = _Raw(409, json.dumps({"error": err.message, "url": err.url}).encode(), {})
                    except HubError as err:
                        hdrs = {"X-Error-Message": err.message} | ({"X-Error-Code": err.code} if err.code else {})
                        result = _Raw(err.status, json.dumps({"error": err.message}).encode(), hdrs)
                    break
            else:
                hub.unknown_routes.append(f"{self.command} {self.path}")
                logger.warning("hub_server: unknown route %s %s", self.command, self.path)
                result = _Raw(404, json.dumps({"error": f"unknown route {self.command} {url.path}"}).encode(), {})
            if not isinstance(result, _Raw):
                result = _Raw(200, json.dumps(result).encode(), {"Content-Type": "application/json"})
            if fault is not None and fault.kind == "500":
                result = _Raw(500, json.dumps({"error": "internal error (injected)"}).encode(), {})
            elif fault is not None and fault.kind == "short" and result.status in (200, 206):
                result = _Raw(result.status, result.data[:-1], result.headers)
            hub.requests.append((self.command, self.path, result.status))
            hub.first_request = hub.first_request or time.monotonic()
            self.send_response(result.status)
            for key, value in result.headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(result.data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(result.data)

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = dispatch

    return Handler


def client_env(url: str, home, token: str | None = HubServer.WRITE_TOKEN) -> dict[str, str]:
    """The environment of a client subprocess: the endpoint ``url``, online, no Xet, its own cache under ``home``.

    huggingface_hub reads HF_ENDPOINT, HF_HUB_OFFLINE and HF_HUB_DISABLE_XET once, at import time, so a
    process that must talk to a server is started with them rather than patched afterwards.
    """
    drop = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE",
            "HF_MODULES_CACHE", "HF_TOKEN_PATH", "HF_ASSETS_CACHE", "HF_XET_CACHE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env |= {"HF_ENDPOINT": url, "HF_HOME": str(home), "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1", "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    if token is not None:
        env["HF_TOKEN"] = token
    return env


class FailingHub(HubServer):
    """A Hub that answers HTTP 500 -- an error huggingface_hub retries where it retries at all -- to every request
    whose path matches ``failing`` (a regular expression; the default matches every request), in a loop."""

    def __init__(self, failing: str = "", tokens: dict[str, tuple[str, str]] | None = None):
        super().__init__(tokens)
        self.failing = failing

    def take_fault(self, method: str, path: str) -> Fault | None:
        if re.search(self.failing, path):
            return Fault("500")
        return super().take_fault(method, path)


def start_hub(tokens: dict[str, tuple[str, str]] | None = None,
              hub: HubServer | None = None) -> tuple[HubServer, ThreadingHTTPServer]:
    """Serve ``hub`` (default: a fresh HubServer with ``tokens``) on 127.0.0.1, a free port, in a thread."""
    hub = hub if hub is not None else HubServer(tokens)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(hub))
    httpd.daemon_threads = True
    hub.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="hub_server", daemon=True).start()
    return hub, httpd


def allow_hub_calls(monkeypatch) -> None:
    """Let this (already imported) huggingface_hub talk to the server: pass ``endpoint=hub.url`` explicitly.

    The test session runs with HF_HUB_OFFLINE=1, read by huggingface_hub at import; Xet must stay off.
    """
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


# A `python -c` prelude that makes hfbert unimportable, whatever is installed: the process then sees the Hub files
# only, as a user who never installed hfbert would.
BLOCK_HFBERT = """
import sys
class _RefuseHfbert:
    def find_spec(self, name, path=None, target=None):
        if name == "hfbert" or name.startswith("hfbert."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, _RefuseHfbert())
try:
    import hfbert
except ImportError:
    pass
else:
    raise SystemExit("hfbert is still importable")
"""


def run_client(code: str, env: dict[str, str], cwd, *args: object, timeout: float = 300) -> dict:
    """Run ``code`` in a fresh interpreter (JSON-encoded ``args`` in sys.argv[1:]); it prints one JSON object last."""
    proc = subprocess.run([sys.executable, "-c", code, *(json.dumps(a) for a in args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"client failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection, reads nothing and never answers.

    The connections are held open until :meth:`close`, so a client sees neither an answer nor a reset: only its
    own timeout ends the wait. ``first_request`` is the ``time.monotonic()`` of the first connection.
    """

    def __init__(self, port: int = 0):
        self.socket = socket.create_server(("127.0.0.1", port))
        self.socket.settimeout(0.05)  # so that the accepting thread notices close()
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        self.first_request: float | None = None
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, name="silent_server", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.first_request = self.first_request or time.monotonic()
            self.connections.append(connection)
            self.serve(connection)

    def serve(self, connection: socket.socket) -> None:
        """What the server does with a new connection: nothing."""

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)
        self.socket.close()
        for connection in self.connections:
            connection.close()


class TrickleServer(SilentServer):
    """A server that answers every connection one byte every ``interval`` seconds, forever: a status line, then a
    header that never ends. Every read of the client makes progress; none ends the answer."""

    def __init__(self, port: int = 0, interval: float = 0.5):
        self.interval = interval
        super().__init__(port)

    def serve(self, connection: socket.socket) -> None:
        threading.Thread(target=self._trickle, args=(connection,), name="trickle_server", daemon=True).start()

    def _trickle(self, connection: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nX-Trickle: "
        sent = 0
        while not self.stopped.wait(self.interval):
            try:
                connection.sendall(answer[sent:sent + 1] if sent < len(answer) else b"a")
            except OSError:  # the client went away
                return
            sent += 1


__all__ = ["BLOCK_HFBERT", "FailingHub", "Fault", "HubServer", "SilentServer", "TrickleServer", "allow_hub_calls",
           "client_env", "git_blob_sha1", "run_client", "start_hub"]
