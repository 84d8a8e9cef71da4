"""How long a push or a pull to a Hub that never answers takes, from the process's start to its end: hfbert's limit
(``hfbert.hub_deadlines.hub_timeout``) against huggingface_hub's own public settings (``HF_HUB_ETAG_TIMEOUT``,
``HF_HUB_DOWNLOAD_TIMEOUT``), and a push whose Xet storage goes silent with Xet left on.

Answered in docs/ecosystem.md (the Hub limit).

    python benchmarks/ecosystem_hub_deadline.py [--limit 3] [--repeats 3] [--cap 60]

Every case is a fresh ``python`` process with HF_ENDPOINT pointing at a local endpoint of the tests
(tests/hub_server.py): ``silent`` accepts connections and never answers, ``trickle`` answers one byte every 0.5 s,
``xet`` is the tests' Hub answering everything but sending the Xet transfer to a silent storage server. A case still
running after ``--cap`` seconds is killed and reported as such. The cases of one repeat run side by side (they
wait, they do not compute); each row gives the median over the repeats of the seconds from the process's start to
its end, and from the endpoint's first connection to the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the tests' endpoints; a study script, not the package

from hub_server import HubServer, SilentServer, TrickleServer, _Raw, client_env, start_hub  # noqa: E402

PUSH_HF = """
import sys
from huggingface_hub import HfApi
api = HfApi()
api.create_repo("user/x", exist_ok=True)
api.upload_folder(folder_path=sys.argv[1], repo_id="user/x")
"""
PULL_HF = "from huggingface_hub import snapshot_download; snapshot_download('user/x')"
PULL_HFBERT = ("import sys; from hfbert.hub import download_snapshot; "
               "download_snapshot('user/x', timeout=float(sys.argv[1]))")


class XetHub(HubServer):
    """The tests' Hub, with Xet: the write token sends the transfer to ``cas_url`` (a server that never answers)."""

    cas_url = ""

    def __init__(self):
        super().__init__()
        self.routes.insert(0, ("GET", r"/api/(?P<t>models)/(?P<ns>[^/]+)/(?P<name>[^/]+)/xet-write-token/.*",
                               self.xet_token))

    def xet_token(self, h, m, q, body):
        return _Raw(200, b"{}", {"X-Xet-Cas-Url": self.cas_url, "X-Xet-Access-Token": "xet-token",
                                 "X-Xet-Token-Expiration": str(int(time.time()) + 3600)})


def folder(root: Path) -> Path:
    """A small model folder: a config, a README and 2 MB of weights (an LFS file, so Xet when Xet is on)."""
    out = root / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32}))
    (out / "README.md").write_text("---\nlicense: apache-2.0\n---\n# x\n")
    (out / "model.safetensors").write_bytes(bytes(range(256)) * 8192)
    return out


def cases(run: Path, limit: float) -> dict[str, tuple[str, list[str], dict[str, str]]]:
    """name -> (endpoint kind, command, extra environment)."""
    python = sys.executable
    eco = {"HF_HUB_ETAG_TIMEOUT": str(int(limit)), "HF_HUB_DOWNLOAD_TIMEOUT": str(int(limit))}
    push_hfbert = [python, "-m", "hfbert.cli", "push", str(run), "user/x", "--hub_timeout", str(limit)]
    return {
        "push, silent, hfbert": ("silent", push_hfbert, {}),
        "push, silent, huggingface_hub": ("silent", [python, "-c", PUSH_HF, str(run)], eco),
        "pull, silent, hfbert": ("silent", [python, "-c", PULL_HFBERT, str(limit)], {}),
        "pull, silent, huggingface_hub": ("silent", [python, "-c", PULL_HF], eco),
        "pull, trickle, hfbert": ("trickle", [python, "-c", PULL_HFBERT, str(limit)], {}),
        "pull, trickle, huggingface_hub": ("trickle", [python, "-c", PULL_HF], eco),
        "push, Xet storage silent, hfbert (Xet on)": ("xet", push_hfbert, {"HF_HUB_DISABLE_XET": ""}),
    }


def endpoint(kind: str):
    """(url, object with .first_request, closer)."""
    if kind == "xet":
        cas = SilentServer()
        hub = XetHub()
        hub.cas_url = cas.url
        _, httpd = start_hub(hub=hub)

        def close():
            hub.stopping.set()
            httpd.shutdown()
            httpd.server_close()
            cas.close()
        return hub.url, hub, close
    server = SilentServer() if kind == "silent" else TrickleServer()
    return server.url, server, server.close


def one_repeat(run: Path, limit: float, cap: float, home: Path) -> dict[str, dict]:
    started, processes = {}, {}
    for i, (name, (kind, command, extra)) in enumerate(cases(run, limit).items()):
        url, server, close = endpoint(kind)
        env = client_env(url, home / f"home-{i}") | extra
        env = {k: v for k, v in env.items() if v != ""}
        started[name] = time.monotonic()
        processes[name] = (subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                            text=True), server, close)
    results = {}
    while len(results) < len(processes):
        for name, (process, server, close) in processes.items():
            if name in results:
                continue
            now = time.monotonic()
            if process.poll() is None and now - started[name] < cap:
                continue
            killed = process.poll() is None
            if killed:
                process.kill()
            process.wait()
            first = server.first_request
            results[name] = {"seconds": now - started[name], "after_first_request": now - first if first else None,
                             "killed": killed, "returncode": process.returncode,
                             "last_line": (process.stderr.read().strip().splitlines() or [""])[-1][:300]}
            close()
        time.sleep(0.02)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=3.0, help="hfbert's --hub_timeout, and the ecosystem's "
                        "HF_HUB_ETAG_TIMEOUT / HF_HUB_DOWNLOAD_TIMEOUT")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cap", type=float, default=60.0, help="seconds after which a case is killed")
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="hfbert-eco-hub-") as tmp:
        run = folder(Path(tmp))
        for repeat in range(args.repeats):
            runs.append(one_repeat(run, args.limit, args.cap, Path(tmp) / f"r{repeat}"))
    table = {}
    for name in runs[0]:
        rows = [r[name] for r in runs]
        after = [row["after_first_request"] for row in rows if row["after_first_request"] is not None]
        table[name] = {"median_seconds_from_start": round(statistics.median(row["seconds"] for row in rows), 2),
                       "median_seconds_after_first_request": round(statistics.median(after), 2) if after else None,
                       "killed_at_cap": sum(row["killed"] for row in rows), "last_line": rows[-1]["last_line"]}
    print(json.dumps({"limit": args.limit, "cap": args.cap, "repeats": args.repeats, "cases": table}, indent=1))


if __name__ == "__main__":
    main()
