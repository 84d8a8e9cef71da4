"""Hub push/pull round trips against the Hub-protocol server of tests/helpers/hub_server.py, the clients unmodified.

Pushes run in this process (huggingface_hub with ``endpoint=`` passed explicitly); every pull runs in a fresh
process whose environment points HF_ENDPOINT at the server, as a user's would: once with hfbert imported, once
with hfbert unimportable and the model loaded as remote code.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import threading
import torch

from huggingface_hub import close_session, constants, get_session, set_client_factory
from huggingface_hub.utils import http_backoff

import hfbert
from hfbert.hub import (
    TIMEOUT_ENV,
    HubDownloadError,
    HubPushError,
    HubWaitExceeded,
    download_snapshot,
    hub_timeout,
    main,
    push_to_hub,
    read_config_any,
)
from hfbert.model_source import load_any_bert
from hfbert.tokenization import SPECIAL_TOKENS, bert_tokenizer_from_vocab

from helpers.hub_server import (BLOCK_HFBERT, FailingHub, HubServer, SilentServer, TrickleServer,
                               allow_hub_calls, client_env, run_client, start_hub)
from helpers.pretraining import prepare_folders, write_config
from helpers.pretraining import settings as pretrain_settings

# Seconds an in-process operation may run past its Hub limit: stopping, the error's way up, a loaded machine. Far
# below what it would take without the limit (a hang, or one full wait per retry).
MARGIN = 3
WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "home", "a", "big", "red", "##s", "##ed", ".", ",", "!"]
TEXT = "The big red cats sat on the mat, a dog ran home!"
WRITE = HubServer.WRITE_TOKEN


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def folder_state(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def save_tiny(folder: Path, head: type, seed: int, **config) -> tuple[torch.nn.Module, object]:
    """A tiny hfbert model + the project's tokenizer, saved as a training run would leave them."""
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n", encoding="utf-8")
    tokenizer = bert_tokenizer_from_vocab(folder / "vocab.txt")
    torch.manual_seed(seed)
    cfg = hfbert.HfBertConfig(vocab_size=len(SPECIAL_TOKENS) + len(WORDS), hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=37, max_position_embeddings=64, **config)
    model = head(cfg).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "README.md").write_text("---\nlicense: apache-2.0\nlibrary_name: transformers\n---\n# tiny hfbert\n")
    (folder / "eval_results.json").write_text(json.dumps({"seed": seed, "mlm_accuracy": 0.25}))
    return model, tokenizer


def reference_outputs(cls: type, folder: Path, ids: torch.Tensor) -> dict[str, list]:
    """The local folder's outputs, computed exactly as a client computes them: loaded with from_pretrained (the
    weights' memory alignment decides SIMD summation order, hence the last bit) and single-threaded."""
    model = cls.from_pretrained(folder).eval()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            out = model(ids)
    finally:
        torch.set_num_threads(threads)
    return {k: v.tolist() for k, v in out.items() if isinstance(v, torch.Tensor)}


@dataclass
class Pushed:
    hub: HubServer
    root: Path
    folders: dict[str, Path]
    commits: dict[str, str]
    ids: list[list[int]]
    expected: dict[str, dict[str, list]]


@pytest.fixture(scope="module")
def pushed(tmp_path_factory) -> Pushed:
    """Three versions of a pretraining model (main v1 -> tag v1, branch dev v2, main v3), a classifier and a
    repository whose config is not BERT, pushed with hfbert.hub.push_to_hub to a fresh server."""
    hub, httpd = start_hub()
    root = tmp_path_factory.mktemp("hub")
    folders, commits, expected = {}, {}, {}
    with pytest.MonkeyPatch.context() as mp:
        allow_hub_calls(mp)
        push = dict(token=WRITE, endpoint=hub.url)
        for version, seed in (("v1", 1), ("v2", 2), ("v3", 3)):
            folders[version] = root / version
            _, tokenizer = save_tiny(folders[version], hfbert.HfBertForPreTraining, seed)
            ids = tokenizer(TEXT, return_tensors="pt")["input_ids"]
            expected[version] = reference_outputs(hfbert.HfBertForPreTraining, folders[version], ids)
        expected["tokens"] = {"ids": ids.tolist()}
        expected["base"] = reference_outputs(hfbert.HfBertModel, folders["v3"], ids)
        result = push_to_hub(folders["v1"], "user/tiny", tag="v1", **push)
        commits["v1"] = result.commit_oid
        assert result.tag == "v1" and result.revision == "main"
        commits["v2"] = push_to_hub(folders["v2"], "user/tiny", revision="dev", **push).commit_oid
        commits["v3"] = push_to_hub(folders["v3"], "user/tiny", **push).commit_oid

        folders["cls"] = root / "cls"
        labels = {"id2label": {0: "neg", 1: "neu", 2: "pos"}, "label2id": {"neg": 0, "neu": 1, "pos": 2}}
        save_tiny(folders["cls"], hfbert.HfBertForSequenceClassification, 4, **labels)
        expected["cls"] = reference_outputs(hfbert.HfBertForSequenceClassification, folders["cls"], ids)
        push_to_hub(folders["cls"], "user/tiny-cls", **push)

        folders["gpt2"] = root / "gpt2"
        folders["gpt2"].mkdir()
        (folders["gpt2"] / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 2}))
        push_to_hub(folders["gpt2"], "user/not-bert", **push)
    yield Pushed(hub, root, folders, commits, ids.tolist(), expected)
    httpd.shutdown()
    httpd.server_close()


def assert_same(actual: dict, expected: dict, keys=None) -> None:
    for key in keys or expected:
        assert torch.equal(torch.tensor(actual[key]), torch.tensor(expected[key])), f"{key} differs"


# --- plain files with the stock clients -----------------------------------------------------------------------------
@pytest.mark.slow
def test_plain_files_round_trip_with_stock_clients(hub_server, tmp_path, monkeypatch):
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download

    allow_hub_calls(monkeypatch)
    src = tmp_path / "src"
    (src / "nested" / "deeper").mkdir(parents=True)
    (src / "notes.txt").write_text("plain text\n")
    (src / "README.md").write_text("---\nlicense: mit\n---\n# card\n")
    (src / "nested" / "deeper" / "data.json").write_text('{"a": 1}')
    (src / "weights.safetensors").write_bytes(bytes(range(256)) * 40)  # LFS path
    api = HfApi(endpoint=hub_server.url, token=WRITE)
    url = api.create_repo("user/files")
    assert url == f"{hub_server.url}/user/files"
    assert api.create_repo("user/files", exist_ok=True) == url  # 409 carries the url
    commit = api.upload_folder(folder_path=src, repo_id="user/files")
    assert any(m == "PUT" and p.startswith("/_lfs/") for m, p, _ in hub_server.requests)  # basic LFS, no Xet

    pulled = Path(snapshot_download("user/files", endpoint=hub_server.url, cache_dir=tmp_path / "cache"))
    assert folder_bytes(pulled) == folder_bytes(src) | {".gitattributes": folder_bytes(pulled)[".gitattributes"]}
    one = hf_hub_download("user/files", "nested/deeper/data.json", revision=commit.oid, endpoint=hub_server.url,
                          cache_dir=tmp_path / "cache2")
    assert Path(one).read_text() == '{"a": 1}'
    assert {f.path for f in api.list_repo_tree("user/files", path_in_repo="nested")} == {"nested/deeper"}
    assert api.file_exists("user/files", "notes.txt") and not api.file_exists("user/files", "missing.txt")

    # The `hf` CLI, in its own process: upload a folder, download it elsewhere.
    env = hub_server.client_env(tmp_path / "home")
    hf = [sys.executable, "-c", "from huggingface_hub.cli.hf import main; main()"]
    up = subprocess.run([*hf, "upload", "user/cli", str(src), ".", "--commit-message", "from the cli"], env=env,
                        capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    out = tmp_path / "cli-out"
    down = subprocess.run([*hf, "download", "user/cli", "--local-dir", str(out)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    pulled = {k: v for k, v in folder_bytes(out).items() if not k.startswith(".cache/") and k != ".gitattributes"}
    assert pulled == folder_bytes(src)
    assert [c.title for c in api.list_repo_commits("user/cli")][0] == "from the cli"
    assert hub_server.unknown_routes == []


# --- model round trips -----------------------------------------------------------------------------------------------
PULL_WITH_HFBERT = """
import json, sys, torch
torch.set_num_threads(1)
import hfbert
from hfbert.model_source import load_any_bert
from huggingface_hub import snapshot_download
from transformers import AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification, AutoTokenizer
from hfbert.hub import main as hfbert_push
args = json.loads(sys.argv[1])
ids = torch.tensor(args["ids"])
def outputs(model):
    with torch.no_grad():
        return {k: v.tolist() for k, v in model(ids).items() if isinstance(v, torch.Tensor)}
# `hfbert push`, configured the way a user configures it: HF_ENDPOINT and HF_TOKEN in the environment
out = {"push": hfbert_push([args["folder"], "user/from-cli", "--revision", "exp", "--tag", "t1"])}
out["snapshot"] = snapshot_download("user/tiny")
for name, rev in args["revisions"].items():
    model = AutoModelForPreTraining.from_pretrained("user/tiny", revision=rev).eval()
    out[name] = outputs(model) | {"class": f"{type(model).__module__}.{type(model).__name__}"}
out["base"] = outputs(AutoModel.from_pretrained("user/tiny").eval())
classifier = AutoModelForSequenceClassification.from_pretrained("user/tiny-cls").eval()
out["cls"] = outputs(classifier) | {"labels": classifier.config.id2label}
out["tokens"] = {"ids": AutoTokenizer.from_pretrained("user/tiny")(args["text"])["input_ids"]}
out["any"] = outputs(load_any_bert("user/tiny", revision="v1").eval())
try:
    load_any_bert("user/not-bert")
except ValueError as err:
    out["foreign"] = str(err)
print(json.dumps(out))
"""


@pytest.mark.slow
def test_pull_with_hfbert_imported(pushed, tmp_path):
    revisions = {"main": "main", "dev": "dev", "tag": "v1", "commit": pushed.commits["v1"]}
    out = run_client(PULL_WITH_HFBERT, pushed.hub.client_env(tmp_path / "home"), tmp_path,
                     {"ids": pushed.ids, "text": TEXT, "revisions": revisions, "folder": str(pushed.folders["v2"])})
    assert out["push"] == 0
    repo = pushed.hub.repos[("model", "user/from-cli")]
    assert repo.tags["t1"] == repo.branches["exp"] != repo.branches["main"]
    pushed_files = {k: b.data for k, b in repo.commits[repo.branches["exp"]].files.items() if k != ".gitattributes"}
    assert pushed_files == folder_bytes(pushed.folders["v2"])

    snapshot = Path(out["snapshot"])
    local = folder_bytes(pushed.folders["v3"])
    assert {k: v for k, v in folder_bytes(snapshot).items() if k != ".gitattributes"} == local  # byte-identical

    want = {"main": "v3", "dev": "v2", "tag": "v1", "commit": "v1"}
    for name, version in want.items():
        assert out[name]["class"] == "hfbert.modeling_hfbert.HfBertForPreTraining"
        assert_same(out[name], pushed.expected[version], ["prediction_logits", "seq_relationship_logits"])
    assert not torch.equal(torch.tensor(out["dev"]["prediction_logits"]),
                           torch.tensor(out["main"]["prediction_logits"]))  # the revisions really differ
    assert_same(out["base"], pushed.expected["base"], ["last_hidden_state", "pooler_output"])
    assert_same(out["cls"], pushed.expected["cls"], ["logits"])
    assert out["cls"]["labels"] == {"0": "neg", "1": "neu", "2": "pos"}
    assert out["tokens"]["ids"] == pushed.expected["tokens"]["ids"][0]
    assert_same(out["any"], pushed.expected["v1"], ["prediction_logits"])
    assert "model_type 'gpt2'" in out["foreign"] and "hfbert" in out["foreign"]
    assert pushed.hub.unknown_routes == []


PULL_AS_REMOTE_CODE = BLOCK_HFBERT + """
import json, sys, torch
torch.set_num_threads(1)
from transformers import AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification, AutoTokenizer
args = json.loads(sys.argv[1])
ids = torch.tensor(args["ids"])
def outputs(model):
    with torch.no_grad():
        return {k: v.tolist() for k, v in model(ids).items() if isinstance(v, torch.Tensor)}
out = {}
for name, rev in (("main", "main"), ("tag", "v1")):
    model = AutoModelForPreTraining.from_pretrained("user/tiny", revision=rev, trust_remote_code=True).eval()
    out[name] = outputs(model) | {"module": type(model).__module__}
out["base"] = outputs(AutoModel.from_pretrained("user/tiny", trust_remote_code=True).eval())
out["cls"] = outputs(AutoModelForSequenceClassification.from_pretrained("user/tiny-cls", trust_remote_code=True).eval())
tokenizer = AutoTokenizer.from_pretrained("user/tiny", trust_remote_code=True)
out["tokens"] = {"ids": tokenizer(args["text"])["input_ids"]}
out["hfbert_loaded"] = [m for m in sys.modules if m == "hfbert" or m.startswith("hfbert.")]
print(json.dumps(out))
"""


@pytest.mark.slow
def test_pull_as_remote_code_without_hfbert(pushed, tmp_path):
    out = run_client(PULL_AS_REMOTE_CODE, pushed.hub.client_env(tmp_path / "home"), tmp_path,
                     {"ids": pushed.ids, "text": TEXT})
    assert out["hfbert_loaded"] == []
    assert out["main"]["module"].startswith("transformers_modules.")  # the Hub's copy of modeling_hfbert.py
    assert_same(out["main"], pushed.expected["v3"], ["prediction_logits", "seq_relationship_logits"])
    assert_same(out["tag"], pushed.expected["v1"], ["prediction_logits", "seq_relationship_logits"])
    assert_same(out["base"], pushed.expected["base"], ["last_hidden_state", "pooler_output"])
    assert_same(out["cls"], pushed.expected["cls"], ["logits"])
    assert out["tokens"]["ids"] == pushed.expected["tokens"]["ids"][0]
    assert pushed.hub.unknown_routes == []


# --- bad input -------------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_push_fails_clearly_and_leaves_the_folder_intact(hub_server, tmp_path, monkeypatch):
    allow_hub_calls(monkeypatch)
    folder = tmp_path / "run"
    save_tiny(folder, hfbert.HfBertForMaskedLM, 0)
    before = folder_state(folder)

    with pytest.raises(HubPushError, match=r"cannot reach the Hub at http://127\.0\.0\.1:\d+ .*Nothing was changed"):
        push_to_hub(folder, "user/x", token=WRITE, endpoint=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(HubPushError, match=r"refused the token \(401.*Invalid credentials"):
        push_to_hub(folder, "user/x", token="hf_not_a_token", endpoint=hub_server.url)
    with pytest.raises(HubPushError, match=r"denied writing to user/x \(403"):
        push_to_hub(folder, "user/x", token=HubServer.READ_TOKEN, endpoint=hub_server.url)
    with pytest.raises(HubPushError, match=r"denied writing to someone-else/x"):
        push_to_hub(folder, "someone-else/x", token=WRITE, endpoint=hub_server.url)
    assert folder_state(folder) == before
    assert hub_server.repos == {}  # nothing half-created

    with pytest.raises(FileNotFoundError, match="no such folder"):
        push_to_hub(tmp_path / "missing", "user/x", token=WRITE, endpoint=hub_server.url)
    (tmp_path / "no-config").mkdir()
    (tmp_path / "no-config" / "x.txt").write_text("x")
    with pytest.raises(ValueError, match="no config.json"):
        push_to_hub(tmp_path / "no-config", "user/x", token=WRITE, endpoint=hub_server.url)
    with pytest.raises(ValueError, match="Repo id"):
        push_to_hub(folder, "user/bad//id", token=WRITE, endpoint=hub_server.url)
    with pytest.raises(ValueError, match="branch name"):
        push_to_hub(folder, "user/x", revision="refs/pr/1", token=WRITE, endpoint=hub_server.url)

    # ...and once it works, resumable state is not uploaded.
    (folder / "checkpoint-10").mkdir()
    (folder / "checkpoint-10" / "optimizer.pt").write_bytes(b"state")
    push_to_hub(folder, "user/x", token=WRITE, endpoint=hub_server.url)
    repo = hub_server.repos[("model", "user/x")]
    files = repo.commits[repo.branches["main"]].files
    assert set(files) == set(before) | {".gitattributes"}
    assert all(files[name].data == data for name, (data, _) in before.items())

    # A tag that is taken is refused before anything is uploaded.
    tagged = push_to_hub(folder, "user/x", tag="v1", token=WRITE, endpoint=hub_server.url).commit_oid
    (folder / "notes.txt").write_text("a change worth a commit")
    with pytest.raises(HubPushError, match=r"tag 'v1' already exists in user/x .*nothing was uploaded"):
        push_to_hub(folder, "user/x", tag="v1", token=WRITE, endpoint=hub_server.url)
    assert repo.branches["main"] == repo.tags["v1"] == tagged


def test_push_cli_reports_errors_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "missing"), "user/x"]) == 2
    err = capsys.readouterr().err
    assert err == f"hfbert push: error: cannot push {tmp_path / 'missing'}: no such folder\n"
    (tmp_path / "no-config").mkdir()
    (tmp_path / "no-config" / "x.txt").write_text("x")
    assert main([str(tmp_path / "no-config"), "user/x", "--repo-type", "model"]) == 2
    assert capsys.readouterr().err.startswith("hfbert push: error: cannot push")
    with pytest.raises(SystemExit) as exc:
        main([str(tmp_path), "user/x", "--hub_timeout", "-1"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "hfbert push: error: --hub_timeout must be a positive number of seconds, got -1.0\n"


# --- an endpoint that accepts the connection and never answers ------------------------------------------------------
@pytest.mark.slow
def test_push_to_a_silent_endpoint_times_out_and_leaves_the_folder_intact(silent_server, tmp_path, monkeypatch):
    allow_hub_calls(monkeypatch)
    folder = tmp_path / "run"
    save_tiny(folder, hfbert.HfBertForMaskedLM, 0)
    before = folder_state(folder)
    url = silent_server.url.replace(".", r"\.")

    started = time.monotonic()
    with pytest.raises(HubPushError, match=(
            rf"the Hub at {url} did not answer within 1 s while pushing user/x \(ReadTimeout on POST "
            rf"{url}/api/repos/create\)\. .*--hub_timeout SECONDS \(or {TIMEOUT_ENV}\)\. Nothing was changed in")):
        push_to_hub(folder, "user/x", token=WRITE, endpoint=silent_server.url, timeout=1)
    assert time.monotonic() - started < 1 + MARGIN  # the limit, not a hang (nor five retries)
    assert folder_state(folder) == before
    assert_unlimited_outside_the_blocks(silent_server)

    monkeypatch.setenv(TIMEOUT_ENV, "0.5")  # the setting for code that cannot pass timeout=
    with pytest.raises(HubPushError, match=r"did not answer within 0\.5 s"):
        push_to_hub(folder, "user/x", token=WRITE, endpoint=silent_server.url)
    monkeypatch.setenv(TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=f"{TIMEOUT_ENV} must be a number of seconds, got 'soon'"):
        push_to_hub(folder, "user/x", token=WRITE, endpoint=silent_server.url)
    assert folder_state(folder) == before


@pytest.mark.slow
def test_push_cli_to_a_silent_endpoint_fails_in_one_line(silent_server, tmp_path, monkeypatch, capsys):
    allow_hub_calls(monkeypatch)
    monkeypatch.setattr(constants, "ENDPOINT", silent_server.url)  # what HF_ENDPOINT sets when read at import
    monkeypatch.setenv("HF_TOKEN", WRITE)
    folder = tmp_path / "run"
    save_tiny(folder, hfbert.HfBertForMaskedLM, 0)
    before = folder_state(folder)
    started = time.monotonic()
    assert main([str(folder), "user/x", "--hub-timeout", "1"]) == 1
    assert time.monotonic() - started < 1 + MARGIN
    err = capsys.readouterr().err
    assert err.startswith(f"hfbert push: error: the Hub at {silent_server.url} did not answer within 1 s")
    assert err.count("\n") == 1 and f"Nothing was changed in {folder}." in err
    assert folder_state(folder) == before


@pytest.mark.slow
def test_downloads_from_a_silent_endpoint_time_out(silent_server, tmp_path, monkeypatch):
    allow_hub_calls(monkeypatch)
    started = time.monotonic()
    with pytest.raises(HubDownloadError, match=rf"the Hub at {silent_server.url} did not answer within 1 s while "
                                               "reading the config of user/x"):
        read_config_any("user/x", endpoint=silent_server.url, timeout=1, cache_dir=tmp_path / "cache")
    with pytest.raises(HubDownloadError, match=r"within 1 s while downloading the dataset user/corpus"):
        download_snapshot("user/corpus", repo_type="dataset", endpoint=silent_server.url, timeout=1,
                          cache_dir=tmp_path / "cache")
    assert time.monotonic() - started < 2 * (1 + MARGIN)


@pytest.mark.slow
def test_load_any_bert_from_a_silent_endpoint_raises_the_download_error(silent_server, monkeypatch):
    allow_hub_calls(monkeypatch)
    monkeypatch.setattr(constants, "ENDPOINT", silent_server.url)  # what HF_ENDPOINT sets when read at import
    started = time.monotonic()
    with pytest.raises(HubDownloadError, match=rf"the Hub at {silent_server.url} did not answer within 1 s while "
                                               "listing the files of user/x"):
        load_any_bert("user/x", timeout=1)
    assert time.monotonic() - started < 1 + MARGIN


def assert_unlimited_outside_the_blocks(silent_server) -> None:
    """Outside every hub_timeout block, a request waits what its caller asked for (the limit is gone)."""
    started = time.monotonic()
    with pytest.raises(Exception, match="timed out"):
        get_session().get(silent_server.url, timeout=1.5)
    assert time.monotonic() - started >= 1.4


@pytest.mark.slow
def test_hub_timeout_limits_every_request_and_every_replacement_client(silent_server, monkeypatch):
    allow_hub_calls(monkeypatch)
    with pytest.raises(KeyError), hub_timeout(30) as seconds:
        assert seconds == 30
        started = time.monotonic()
        with hub_timeout(0.5), pytest.raises(Exception, match="timed out|limit passed"):
            get_session().get(silent_server.url, timeout=None)  # a caller's "no limit" is limited too
        assert time.monotonic() - started < 0.5 + MARGIN  # the earliest deadline of the blocks
        close_session()  # what huggingface_hub does after a refused connection: the next client is a new one
        with hub_timeout(0.5), pytest.raises(Exception, match="timed out|limit passed"):
            get_session().get(silent_server.url, timeout=None)
        assert time.monotonic() - started < 2 * (0.5 + MARGIN)
        raise KeyError("boom")
    assert_unlimited_outside_the_blocks(silent_server)
    with pytest.raises(ValueError, match="timeout must be a positive, finite number of seconds, got 0"):
        with hub_timeout(0):
            pass


@pytest.mark.slow
def test_the_limit_keeps_huggingface_hubs_client_and_xet(silent_server, monkeypatch):
    """The limited clients are made like the shared client the first block found -- huggingface_hub's own request
    hook, or a program's own factory's headers and hooks -- and a block leaves the Xet switch alone."""
    allow_hub_calls(monkeypatch)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    seen, client = [], type(get_session())  # huggingface_hub's HTTP client class
    hub_hooks = {kind: [hook for hook in hooks if hook.__module__ != "hfbert.hub_deadlines"]
                 for kind, hooks in get_session().event_hooks.items()}
    set_client_factory(lambda: client(headers={"X-Program": "mine"}, event_hooks={"request": [seen.append]},
                                      follow_redirects=True, timeout=None))
    try:
        with hub_timeout(0.5):
            assert constants.HF_HUB_DISABLE_XET is False
            with pytest.raises(Exception, match="timed out|limit passed"):
                get_session().get(silent_server.url)
        assert len(seen) == 1 and seen[0].headers["X-Program"] == "mine"
        assert_unlimited_outside_the_blocks(silent_server)
    finally:
        set_client_factory(lambda: client(follow_redirects=True, timeout=None, event_hooks=hub_hooks))


@pytest.mark.slow
def test_the_limit_bounds_the_whole_wait_retries_included(silent_server, monkeypatch):
    """The wait is counted from the Hub's last answer: once the limit has passed, no new try starts."""
    allow_hub_calls(monkeypatch)
    with hub_timeout(1.0):
        started = time.monotonic()
        with pytest.raises(HubWaitExceeded, match=r"the limit passed \(1 s for the whole operation, retries included"):
            http_backoff("GET", silent_server.url, base_wait_time=0.1, max_wait_time=0.1)  # five retries
        assert time.monotonic() - started < 1 + MARGIN  # each of the six tries would wait 1 s


class UploadGoesTo(HubServer):
    """A Hub that answers everything, but sends the LFS upload (the weights) to ``upload_url``."""

    upload_url = ""

    def lfs_batch(self, h, m, q, body):
        answer = super().lfs_batch(h, m, q, body)
        for obj in answer["objects"]:
            if "actions" in obj:
                obj["actions"]["upload"]["href"] = f"{self.upload_url}/_lfs/{obj['oid']}"
        return answer


@pytest.mark.slow
def test_a_push_whose_upload_goes_silent_fails_within_the_limit(silent_server, tmp_path, monkeypatch):
    """huggingface_hub retries an upload that timed out five times; each try used to wait the full limit (50 s
    here, where the push must end within 15 s)."""
    seconds = 10
    allow_hub_calls(monkeypatch)
    hub = UploadGoesTo()
    hub.upload_url = silent_server.url
    _, httpd = start_hub(hub=hub)
    folder = tmp_path / "run"
    save_tiny(folder, hfbert.HfBertForMaskedLM, 0)
    try:
        started = time.monotonic()
        with pytest.raises(HubPushError, match=rf"did not answer within {seconds} s while pushing user/x"):
            push_to_hub(folder, "user/x", token=WRITE, endpoint=hub.url, timeout=seconds)
        waited = time.monotonic() - started
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert seconds - 1 < waited < seconds + 5
    assert any(path.endswith("/preupload/main") for _, path, _ in hub.requests)  # it got as far as the upload


@pytest.mark.slow
def test_a_refused_connection_mid_upload_does_not_lift_the_limit(tmp_path, monkeypatch):
    """The upload's first try is refused (huggingface_hub then replaces its client), the next one meets an endpoint
    that never answers: the replacement client has the limit too, so the push fails instead of waiting for good."""
    allow_hub_calls(monkeypatch)
    with hub_timeout(1):
        first = get_session()  # the shared client, with the limit's hooks
    port = free_port()
    silent: list[SilentServer] = []

    class RefusedThenSilent(UploadGoesTo):
        def lfs_batch(self, h, m, q, body):  # nothing listens on the port until a moment after this answer
            threading.Timer(0.5, lambda: silent.append(SilentServer(port))).start()
            return super().lfs_batch(h, m, q, body)

    hub = RefusedThenSilent()
    hub.upload_url = f"http://127.0.0.1:{port}"
    _, httpd = start_hub(hub=hub)
    folder = tmp_path / "run"
    save_tiny(folder, hfbert.HfBertForMaskedLM, 0)
    outcome: list[BaseException] = []

    def push() -> None:
        try:
            push_to_hub(folder, "user/x", token=WRITE, endpoint=hub.url, timeout=3)
        except BaseException as err:  # noqa: BLE001  (reported to the test thread)
            outcome.append(err)

    worker = threading.Thread(target=push, daemon=True)
    started = time.monotonic()
    worker.start()
    worker.join(timeout=30)
    try:
        assert not worker.is_alive(), "the push is still waiting: a client without a limit"
        assert get_session() is not first, "the first upload try was not refused (nor the client replaced)"
        assert len(outcome) == 1 and isinstance(outcome[0], HubPushError), outcome
        assert "did not answer within 3 s" in str(outcome[0])
        assert time.monotonic() - started < 3 + 8 + 5  # the limit, one pause between tries, the set-up
    finally:
        httpd.shutdown()
        httpd.server_close()
        for server in silent:
            server.close()


# --- endpoints that misbehave: one deadline for the whole operation, from the command line ------------------------
LIMIT = 3  # the runs' --hub_timeout
SLACK = 5  # what a push process may take beyond it: stopping, its exit, a loaded machine
PRETRAIN_SLACK = 12  # the same for a training process, whose exit (torch, the run's cleanup) takes longer
MISBEHAVING = ("500", "500 on upload", "trickle", "silent")


class Misbehaving:
    """A misbehaving endpoint of one kind: every request answered HTTP 500 (huggingface_hub does not retry the first
    call of a push, so that push ends at once), the upload's requests answered 500 (retried), one byte every 0.5 s
    forever, or silence."""

    def __init__(self, kind: str):
        self.httpd = None
        if kind.startswith("500"):
            self.server, self.httpd = start_hub(hub=FailingHub("" if kind == "500" else r"/preupload/|/commit/"))
        else:
            self.server = TrickleServer() if kind == "trickle" else SilentServer()
        self.url = self.server.url

    def close(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
        else:
            self.server.close()


@dataclass
class Ended:
    url: str
    returncode: int
    stderr: str
    took: float  # seconds from the endpoint's first request to the end of the process


@dataclass
class MisbehavingRuns:
    folder: Path
    before: dict
    runs: dict[str, Ended]


def hfbert_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "hfbert.cli", *args]


@pytest.fixture(scope="module")
def misbehaving_runs(tmp_path_factory, corpus) -> MisbehavingRuns:
    """``hfbert push DIR user/name --hub_timeout 3`` against each misbehaving endpoint, and a tiny ``hfbert pretrain
    --push_to_hub`` against one that trickles: all at once, each in its own process with HF_ENDPOINT set (a
    process spends seconds importing torch before its first request; together they take that time once)."""
    root = tmp_path_factory.mktemp("misbehaving")
    folder = root / "run"
    save_tiny(folder, hfbert.HfBertForMaskedLM, 0)
    before = folder_state(folder)
    prepared = prepare_folders(corpus, root / "prepared", lengths=(64,))[64]
    config = write_config(root / "pretrain.json", pretrain_settings([prepared], root / "pretrained", max_steps=2,
                                                                    eval_steps=2))
    commands = {kind: hfbert_command("push", str(folder), "user/name", "--hub_timeout", str(LIMIT))
                for kind in MISBEHAVING}
    commands["pretrain"] = hfbert_command("pretrain", "--config", str(config), "--push_to_hub", "user/name",
                                          "--hub_timeout", str(LIMIT))
    endpoints = {name: Misbehaving("trickle" if name == "pretrain" else name) for name in commands}
    processes, ended = {}, {}
    try:
        # The training run after the pushes: its CPU time would slow down how fast a stopped push process exits.
        for group in (MISBEHAVING, ("pretrain",)):
            for name in group:
                env = client_env(endpoints[name].url, root / f"home-{len(processes)}")
                stderr = (root / f"{len(processes)}.err").open("w+")
                processes[name] = (subprocess.Popen(commands[name], env=env, stdout=subprocess.DEVNULL,
                                                    stderr=stderr), stderr)
            deadline = time.monotonic() + 240
            while len(ended) < len(processes) and time.monotonic() < deadline:
                for name, (process, stderr) in processes.items():
                    if name not in ended and process.poll() is not None:
                        now, first = time.monotonic(), endpoints[name].server.first_request
                        stderr.seek(0)
                        ended[name] = Ended(endpoints[name].url, process.returncode, stderr.read(),
                                            now - first if first is not None else float("nan"))
                time.sleep(0.02)
    finally:
        for process, stderr in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            stderr.close()
        for endpoint in endpoints.values():
            endpoint.close()
    assert set(ended) == set(processes), f"still running after 240 s: {set(processes) - set(ended)}"
    print({name: round(run.took, 2) for name, run in ended.items()})  # seconds after the first request (pytest -s)
    return MisbehavingRuns(folder, before, ended)


@pytest.mark.slow
@pytest.mark.parametrize("kind", MISBEHAVING)
def test_push_cli_stops_at_the_deadline_in_one_line(misbehaving_runs, kind):
    run = misbehaving_runs.runs[kind]
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1, run.stderr
    if kind == "500":  # create_repo is not retried: the first answer ends the push
        assert run.stderr.startswith(f"hfbert push: error: the Hub at {run.url} rejected the push of user/name (500")
    else:
        assert run.stderr.startswith(f"hfbert push: error: the Hub at {run.url} did not answer within {LIMIT} s "
                                     "while pushing user/name ("), run.stderr
    assert f"Nothing was changed in {misbehaving_runs.folder}." in run.stderr
    assert run.took < LIMIT + SLACK, f"{kind}: {run.took:.1f} s"
    assert folder_state(misbehaving_runs.folder) == misbehaving_runs.before


def test_pretrain_push_stops_at_the_deadline(misbehaving_runs):
    run = misbehaving_runs.runs["pretrain"]
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.took < LIMIT + PRETRAIN_SLACK, f"{run.took:.1f} s"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"hfbert pretrain: error: the Hub at {run.url} did not answer within {LIMIT} s while "
                           "pushing user/name"), last
    assert (misbehaving_runs.folder.parent / "pretrained" / "config.json").is_file()  # the export is kept


@pytest.mark.slow
def test_downloads_stop_at_the_deadline(trickle_server, tmp_path, monkeypatch):
    """A config read and a snapshot from an endpoint that answers one byte every 0.5 s: each stops at its deadline."""
    allow_hub_calls(monkeypatch)
    started = time.monotonic()
    with pytest.raises(HubDownloadError, match=rf"{trickle_server.url} did not answer within 1\.5 s while reading"):
        read_config_any("user/x", endpoint=trickle_server.url, timeout=1.5, cache_dir=tmp_path / "cache")
    assert time.monotonic() - started < 1.5 + MARGIN
    started = time.monotonic()
    with pytest.raises(HubDownloadError, match=r"within 1\.5 s while downloading the dataset user/files"):
        download_snapshot("user/files", repo_type="dataset", endpoint=trickle_server.url, timeout=1.5,
                          cache_dir=tmp_path / "cache")
    assert time.monotonic() - started < 1.5 + MARGIN
    time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "hfbert-hub-deadline"]  # each block's watch ended


class SteadyDownload(BaseHTTPRequestHandler):
    """Answers 3 MB at a steady 1.5 MB/s: two seconds, more than the limits below, each byte faster than 1 MB/s."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(30 * 100_000))
        self.end_headers()
        for _ in range(30):
            self.wfile.write(b"x" * 100_000)
            time.sleep(2 / 30)

    def log_message(self, fmt, *args):
        pass


@pytest.mark.slow
def test_a_slow_but_steady_transfer_is_not_cut(hub_server, monkeypatch):
    """Each megabyte moved adds a second to the deadline: for a push, its folder's bytes, known at the start; for a
    download, each byte as it arrives."""
    allow_hub_calls(monkeypatch)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SteadyDownload)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        started = time.monotonic()
        with hub_timeout(1):
            body = get_session().get(f"http://127.0.0.1:{httpd.server_address[1]}/big").content
        assert len(body) == 3_000_000 and time.monotonic() - started > 1.5
    finally:
        httpd.shutdown()
        httpd.server_close()
    with hub_timeout(0.5, transfer_bytes=1_000_000):
        time.sleep(0.8)  # hashing a large folder, say
        assert get_session().get(f"{hub_server.url}/api/whoami-v2").status_code == 401  # answered, not refused
    with hub_timeout(0.5), pytest.raises(HubWaitExceeded, match="the limit passed"):
        time.sleep(0.6)
        get_session().get(f"{hub_server.url}/api/whoami-v2")


# --- datasets ------------------------------------------------------------------------------------------------------
def test_dataset_folder_round_trip(hub_server, tmp_path, monkeypatch):
    """A prepared-data folder (no config.json) goes up as a dataset repository and comes back byte for byte."""
    allow_hub_calls(monkeypatch)
    folder = tmp_path / "prepared"
    (folder / "data").mkdir(parents=True)
    (folder / "hfbert_prepare.json").write_text(json.dumps({"format": 1, "max_seq_length": 128}))
    (folder / "data" / "train-00000-of-00001.parquet").write_bytes(bytes(range(256)) * 8)
    (folder / "README.md").write_text("---\nlicense: cc0-1.0\n---\n# prepared corpus\n")
    result = push_to_hub(folder, "user/corpus", repo_type="dataset", tag="v1", token=WRITE, endpoint=hub_server.url)
    repo = hub_server.repos[("dataset", "user/corpus")]
    assert repo.tags["v1"] == result.commit_oid and ("model", "user/corpus") not in hub_server.repos
    pulled = download_snapshot("user/corpus", repo_type="dataset", revision="v1", endpoint=hub_server.url,
                               cache_dir=tmp_path / "cache")
    assert {k: v for k, v in folder_bytes(pulled).items() if k != ".gitattributes"} == folder_bytes(folder)
    with pytest.raises(ValueError, match="repo_type must be one of"):
        push_to_hub(folder, "user/corpus", repo_type="space", token=WRITE, endpoint=hub_server.url)
    assert hub_server.unknown_routes == []


def test_load_any_bert_refuses_other_model_types(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta", "architectures": ["RobertaModel"]}))
    with pytest.raises(ValueError, match="model_type 'roberta'.*only 'hfbert' and 'bert'"):
        load_any_bert(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertLMHeadModel"]}))
    with pytest.raises(ValueError, match="head 'LMHeadModel' is not supported"):
        load_any_bert(tmp_path)
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    with pytest.raises(ValueError, match="neither a model folder .config.json and weights. nor a Google BERT"):
        load_any_bert(tmp_path)
