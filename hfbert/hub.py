"""Push a trained folder to the Hugging Face Hub, and load any BERT (hfbert or stock transformers) back.

``push_to_hub`` uploads a finished output folder — model, tokenizer, model card, metrics — in one commit, on
``main`` or on a branch it creates when missing, and can tag the commit. It only reads the folder: whatever goes wrong
(endpoint unreachable, token refused, no write access) the local output is left exactly as it was, and the error
says what happened and what to do.

``load_any_bert`` loads an hfbert or a stock BERT checkpoint (a local folder or a Hub repository, at any revision)
as the matching hfbert class, and refuses any other ``model_type`` with a message naming it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .convert import detect_flavour, head_of, model_class

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


class HubPushError(RuntimeError):
    """A push that did not happen; the message says why. The local folder is untouched."""


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    revision: str
    commit_oid: str
    commit_url: str
    tag: str | None = None


def _is_network_error(err: BaseException) -> bool:
    """Connection refused, DNS failure, timeout: the HTTP client's transport errors, or an OSError.

    Checked after HTTP errors: huggingface_hub's HfHubHTTPError is itself an OSError."""
    names = {cls.__name__ for cls in type(err).__mro__}
    return isinstance(err, OSError) or bool(names & {"TransportError", "NetworkError", "ConnectError",
                                                      "TimeoutException", "ProxyError"})


def _explain(err: BaseException, *, endpoint: str, repo_id: str, folder: Path) -> str | None:
    """A user-facing sentence for a failed push, or None for errors that are not about the Hub."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

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
    if _is_network_error(err):
        return (f"cannot reach the Hub at {endpoint} to push {repo_id} ({type(err).__name__}: {err}). "
                f"Check the network or HF_ENDPOINT and push again. {intact}")
    return None


def _check_folder(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot push {folder}: no such folder")
    files = [p for p in folder.rglob("*") if p.is_file()]
    if not files:
        raise ValueError(f"cannot push {folder}: the folder is empty")
    if not (folder / "config.json").is_file():
        raise ValueError(f"cannot push {folder}: it has no config.json (save the model with save_pretrained first)")
    return files


def push_to_hub(
    folder: str | Path,
    repo_id: str,
    *,
    revision: str | None = None,
    tag: str | None = None,
    private: bool | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    commit_message: str | None = None,
    ignore_patterns: tuple[str, ...] | list[str] = DEFAULT_IGNORE_PATTERNS,
) -> PushResult:
    """Upload ``folder`` to ``repo_id`` in one commit; returns the commit.

    ``revision`` is a branch; it is created from ``main`` when missing. ``tag`` tags the new commit. ``token`` and
    ``endpoint`` default to huggingface_hub's (``HF_TOKEN``, ``HF_ENDPOINT``). Raises ``HubPushError`` with a clear
    message when the Hub cannot be reached or refuses the token; the folder is never modified.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.utils import validate_repo_id

    folder = Path(folder)
    _check_folder(folder)
    validate_repo_id(repo_id)  # HFValidationError (a ValueError) names the bad id
    if revision is not None and (not revision or revision.startswith("refs/")):
        raise ValueError(f"revision must be a branch name, got {revision!r}")
    api = HfApi(endpoint=endpoint, token=token)
    branch = revision or "main"
    try:
        # Creating the repository first fails fast (no retries) when the endpoint is down or the token is refused.
        api.create_repo(repo_id, private=private, exist_ok=True)
        if branch != "main":
            api.create_branch(repo_id, branch=branch, exist_ok=True)
        if tag is not None:  # checked before uploading: a taken tag would otherwise fail after the commit landed
            taken = {ref.name: ref.target_commit for ref in api.list_repo_refs(repo_id).tags}
            if tag in taken:
                raise HubPushError(
                    f"tag {tag!r} already exists in {repo_id} (at commit {taken[tag][:12]}); nothing was uploaded. "
                    f"Choose another tag, or delete that one first (HfApi().delete_tag). Nothing was changed in "
                    f"{folder}.")
        commit = api.upload_folder(
            folder_path=folder,
            repo_id=repo_id,
            revision=branch,
            commit_message=commit_message or f"Upload {folder.name} with hfbert",
            ignore_patterns=list(ignore_patterns),
        )
        if tag is not None:
            api.create_tag(repo_id, tag=tag, revision=commit.oid)
    except Exception as err:
        message = _explain(err, endpoint=api.endpoint, repo_id=repo_id, folder=folder)
        if message is None:
            raise
        raise HubPushError(message) from err
    return PushResult(repo_id, branch, commit.oid, str(commit.commit_url), tag)


def read_config_any(repo_or_dir: str | Path, *, revision: str | None = None, token: str | None = None,
                    **hub_kwargs: Any) -> dict[str, Any]:
    """The ``config.json`` of a local folder or of a Hub repository at ``revision``."""
    path = Path(repo_or_dir)
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise FileNotFoundError(f"{path} has no config.json: it is not a saved model folder")
    else:
        from huggingface_hub import hf_hub_download

        config_path = Path(hf_hub_download(str(repo_or_dir), "config.json", revision=revision, token=token,
                                           **hub_kwargs))
    try:
        return json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"the config.json of {repo_or_dir} is not valid JSON: {err}") from err


def load_any_bert(repo_or_dir: str | Path, head: str | None = None, *, revision: str | None = None,
                  token: str | None = None, **kwargs: Any):
    """Load an hfbert or a stock transformers BERT checkpoint as the hfbert class for ``head``.

    ``head`` is a class-name suffix ("ForMaskedLM", "Model", ...); by default the checkpoint's ``architectures``.
    A stock BERT's config is converted with ``HfBertConfig.from_bert_config`` (the weights have the same names).
    Any other ``model_type`` raises ``ValueError`` naming it. ``kwargs`` go to ``from_pretrained``.
    """
    config = read_config_any(repo_or_dir, revision=revision, token=token)
    flavour = detect_flavour(config, source=f"the config of {repo_or_dir}")
    head = head_of(config, head, source=f"the config of {repo_or_dir}")
    cls = model_class("hfbert", head)
    if flavour == "bert":
        from .configuration_hfbert import HfBertConfig

        kwargs.setdefault("config", HfBertConfig.from_bert_config(config))
    return cls.from_pretrained(repo_or_dir, revision=revision, token=token, **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hfbert push", description="Push a saved model folder to the Hub.")
    parser.add_argument("folder", help="output folder (config.json, weights, tokenizer, README.md, metrics)")
    parser.add_argument("repo_id", help="namespace/name on the Hub")
    parser.add_argument("--revision", default=None, help="branch to push to (created from main when missing)")
    parser.add_argument("--tag", default=None, help="tag the new commit")
    parser.add_argument("--private", action="store_true", default=None, help="create the repository as private")
    parser.add_argument("--commit-message", default=None)
    args = parser.parse_args(argv)
    try:
        result = push_to_hub(args.folder, args.repo_id, revision=args.revision, tag=args.tag, private=args.private,
                             commit_message=args.commit_message)
    except (HubPushError, ValueError, FileNotFoundError) as err:
        parser.exit(1, f"hfbert push: error: {err}\n")
    print(result.commit_url)
    return 0


__all__ = ["DEFAULT_IGNORE_PATTERNS", "HubPushError", "PushResult", "load_any_bert", "main", "push_to_hub",
           "read_config_any"]
