"""Building prepared pretraining corpora: :func:`prepare_corpus` writes a folder of Parquet shards once, and
:func:`push_prepared` uploads one as a Hub dataset.

Shards are the units of work (see :mod:`hfbert.data.shards` and :mod:`hfbert.data.engines`): the output is
byte-identical for every engine and ``num_proc``. The folder's layout and how it is read are in
:mod:`hfbert.data.reader`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import fsspec
from transformers import AutoTokenizer

from ..google_checkpoint import is_google_folder
from ..hub import push_to_hub
from ..model_source import ModelSourceError, locate, source_tokenizer
from ..tokenization import train_wordpiece
from .documents import CorpusError, read_document_range
from .engines import run_tasks
from .manifest import Manifest, ShardRecord, SplitRecord, TokenizerRecord, dataset_card
from .pipeline import TokenizerFacts, make_builder
from .reader import PreparedCorpus, settings_schema
from .report import (
    assemble_report,
    merge_line_sketches,
    merge_pool_summaries,
    merge_row_summaries,
    render_report,
)
from .settings import ExampleSettings
from .shards import ROW_GROUP_SIZE, SPLITS, ShardTask, build_shard, features_metadata, write_atomically
from .sources import BUILTIN_CORPUS, TextFiles, resolve_input

__all__ = ["SHARD_INPUT_BYTES", "auto_num_shards", "prepare_corpus", "push_prepared"]


# Input bytes per shard and duplication pass when num_shards is not given.  A worker holds one shard's rows
# (they are shuffled before writing), so this bounds a worker's memory whatever the corpus size.
SHARD_INPUT_BYTES = 32 << 20


def auto_num_shards(input_bytes: int, dupe_factor: int) -> int:
    """The default shard count: one shard per ``SHARD_INPUT_BYTES`` of input per duplication pass."""
    return max(1, -(-input_bytes * dupe_factor // SHARD_INPUT_BYTES))


def _display(path: str) -> str:
    # The built-in corpus by its name, so the manifest does not depend on where hfbert is installed.
    return f"hfbert:{BUILTIN_CORPUS.name}" if path == str(BUILTIN_CORPUS) else path


# ---------------------------------------------------------------------------------------------------------
# Building


def prepare_corpus(source=None, output_dir: str | Path = "prepared", settings: ExampleSettings | None = None, *,
                   tokenizer=None, num_proc: int = 1, engine: str = "local", scheduler: str | None = None,
                   overwrite: bool = False, **changes) -> Path | str:
    """Build a prepared corpus (see the module docstring) and return its folder.

    Args:
        source (*optional*):
            ``None`` (the built-in Austen corpus: paragraphs, chapters are documents), a text file, glob or
            fsspec URL or a list of them, a ``datasets.Dataset`` (a ``sentences`` or ``text`` column), or a list of
            documents (lists of sentences).
        output_dir (`str` or `Path`, *optional*, defaults to `"prepared"`):
            The folder to write (a local path or an fsspec URL).
        settings ([`~hfbert.data.ExampleSettings`], *optional*):
            Masking, NSP pairs, input layout, the vocabulary trained when ``tokenizer`` is None, shards and the
            held-out split; by default ``ExampleSettings()``.
        tokenizer (*optional*):
            A fast BERT tokenizer, its folder, or a pretrained model's (a model folder, a Google folder, a Hub id);
            ``None`` trains a WordPiece vocabulary of ``settings.vocab_size`` on the input.
        num_proc (`int`, *optional*, defaults to 1):
            Worker processes (with ``engine``, who builds the shards; never changes the output).
        engine (`str`, *optional*, defaults to `"local"`):
            ``"local"`` or ``"dask"`` (:mod:`hfbert.data.engines`); never changes the output.
        scheduler (`str`, *optional*):
            The address of a Dask scheduler (``engine="dask"`` only); never changes the output.
        overwrite (`bool`, *optional*, defaults to `False`):
            Replace what a non-empty ``output_dir`` holds.
        **changes:
            Any field of ``settings`` as a keyword argument (``max_seq_length=64``), which replaces its value.

    Returns:
        `Path` (a `str` for an fsspec URL): the folder written.

    Raises:
        [`~hfbert.data.CorpusError`]: the input has no documents.
        `FileExistsError`: ``output_dir`` is a file, or is not empty and ``overwrite`` is not set.
        `ValueError`: ``num_proc`` is not an int >= 1, or a setting is not valid.
    """
    settings = (settings or ExampleSettings()).example_settings(**changes)
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be an int >= 1, got {num_proc!r}")
    source = resolve_input(source, input_layout=settings.input_layout, document_boundary=settings.document_boundary,
                           text_column=settings.text_column)
    output = str(output_dir)
    _claim_output(output, overwrite)
    tokenizer = _tokenizer(tokenizer, source, settings)
    builder, facts = make_builder(tokenizer, settings)
    num_shards = settings.num_shards
    if num_shards is None:
        size = sum(source.sizes) if isinstance(source, TextFiles) else sum(map(_document_bytes, source.rows))
        num_shards = auto_num_shards(size, settings.passes)
    schema = builder.features.arrow_schema.with_metadata(features_metadata(builder.features))
    tasks = [ShardTask(k, num_shards, source, builder, output, schema, settings.seed, settings.pool_size,
                       settings.eval_fraction, builder.spec.mask_token_id) for k in range(num_shards)]
    sketches = {split: merge_line_sketches([]) for split in SPLITS}

    def fold_sketches(result: dict) -> dict:  # one running sketch per split instead of one per shard
        for split, entry in result["splits"].items():
            sketches[split] = merge_line_sketches([sketches[split], entry.pop("lines")])
        return result

    results = run_tasks(build_shard, tasks, engine=engine, num_proc=num_proc, scheduler=scheduler,
                        desc="Preparing shards", on_result=fold_sketches)
    settings = {**settings.recorded(), "num_shards": num_shards, "validation_dupe_factor": 1,
                "row_group_size": ROW_GROUP_SIZE}
    used = sum(e["pools"]["documents"] - e["pools"]["empty_documents"] for r in results for e in r["splits"].values())
    if used == 0:
        _remove_outputs(output)
        raise CorpusError(f"{_input_name(source)}: the input has no documents (no line of text)")
    report = _report(results, sketches, source, settings)
    _finish_output(output, tokenizer, facts, source, settings, results, report)
    return Path(output) if "://" not in output else output


def _document_bytes(document) -> int:
    return len(document) if isinstance(document, str) else sum(map(len, document or ()))


def _input_name(source) -> str:
    return ", ".join(map(_display, source.paths)) if isinstance(source, TextFiles) else source.name


def _tokenizer(tokenizer, source, settings: ExampleSettings):
    """The tokenizer to build with: trained on the input (None), a tokenizer folder (a prepared corpus too), or the
    tokenizer of a pretrained model anywhere :func:`hfbert.model_source.locate` finds one (a model folder, a
    Google folder, a Hub id), in the casing ``do_lower_case`` asks for."""
    if tokenizer is None:
        return train_wordpiece(_texts(source), vocab_size=settings.vocab_size, lowercase=settings.lowercase)
    if not isinstance(tokenizer, (str, Path)):
        return tokenizer
    path = Path(tokenizer)
    if path.is_dir() and not (path / "config.json").is_file() and not is_google_folder(path):
        return AutoTokenizer.from_pretrained(str(path))
    try:
        found, notes = source_tokenizer(locate(str(tokenizer)), settings.do_lower_case)
    except ModelSourceError as err:
        raise ValueError(f"tokenizer: {err}") from None
    for warning in notes:
        print(f"warning: {warning}", file=sys.stderr)
    return found


def _texts(source):
    """Every text unit of the input, for training a vocabulary (held-out documents included, as Google's
    vocabularies were learned on the whole corpus)."""
    if isinstance(source, TextFiles):
        for path in source.paths:
            for document in read_document_range(path, layout=source.layout, boundary=source.boundary):
                yield from document
        return
    for start in range(0, len(source.rows), 1024):
        batch = source.rows[start:start + 1024] if source.column is None else source.rows[start:start + 1024][
            source.column]
        for document in batch:
            yield from ([document] if isinstance(document, str) else document)


def _fs(output: str):
    return fsspec.core.url_to_fs(output)


def _claim_output(output: str, overwrite: bool) -> None:
    """Refuse a folder that holds anything unless ``overwrite``; then clear what a previous build wrote (a stale
    shard of another shard count would otherwise be picked up by ``load_dataset``'s patterns)."""
    if "://" in output:
        fs, root = _fs(output)
        taken = fs.exists(root) and bool(fs.ls(root))
    else:
        root = Path(output)
        if root.exists() and not root.is_dir():
            raise FileExistsError(f"output_dir {output} is a file")
        taken = root.is_dir() and any(root.iterdir())
    if taken and not overwrite:
        raise FileExistsError(f"output_dir {output} is not empty; choose another or pass overwrite_output_dir")
    if taken:
        _remove_outputs(output, everything=True)


def _remove_outputs(output: str, everything: bool = False) -> None:
    if "://" in output:
        fs, root = _fs(output)
        for child in fs.ls(root) if everything else [f"{root.rstrip('/')}/data"]:
            if fs.exists(child):
                fs.rm(child, recursive=True)
        return
    root = Path(output)
    for child in list(root.iterdir()) if everything and root.is_dir() else [root / "data"]:
        if child.is_dir():
            shutil.rmtree(child)
        elif child.exists():
            child.unlink()


def _report(results: list[dict], sketches: dict, source, settings: dict) -> dict:
    pools, rows, lines, splits, digests = [], [], [], {}, []
    for split in SPLITS:
        entries = [r["splits"][split] for r in results if split in r["splits"]]
        if not entries:
            continue
        for entry in entries:
            pools.append(entry["pools"])
            rows.append(entry["rows_summary"])
            digests.append(f"{entry['file']}:{entry['digest']}")
        lines.append(sketches[split])
        splits[split] = {"rows": sum(e["rows"] for e in entries),
                         "documents": sum(e["pools"]["documents"] - e["pools"]["empty_documents"] for e in entries)}
    read_stats = None
    if isinstance(source, TextFiles):
        read_stats = {key: sum(r["read_stats"][key] for r in results) for key in results[0]["read_stats"]
                      if key != "files"}
        read_stats = {"files": [_display(p) for p in source.paths], **read_stats}
    digest = hashlib.sha256("\n".join(digests).encode()).hexdigest()
    pools = merge_pool_summaries(pools)
    report = assemble_report(pools, merge_row_summaries(rows), merge_line_sketches(lines), read_stats, settings,
                             digest)
    report["splits"] = splits
    report["warnings"] = _warnings(pools, splits, settings)
    return report


def _warnings(pools: dict, splits: dict, settings: dict) -> list[str]:
    messages = []
    lonely = pools["single_document_pools_with_rows"]
    if lonely:
        messages.append(f"{lonely} pool(s) have a single non-empty document: random-next segments there come from "
                        "the same document; use more documents per shard (fewer shards) or a larger pool_size")
    if settings["eval_fraction"] > 0 and splits.get("validation", {}).get("rows", 0) == 0:
        messages.append("no document was held out for validation: the corpus has too few documents for "
                        f"eval_fraction {settings['eval_fraction']}")
    for message in messages:
        warnings.warn(message, UserWarning, stacklevel=4)
    return messages


def _finish_output(output: str, tokenizer, facts: TokenizerFacts, source, settings: dict, results: list[dict],
                   report: dict) -> None:
    """The client's part: tokenizer files, manifest, report and card (the shards are in place already)."""
    with tempfile.TemporaryDirectory(prefix="hfbert-tokenizer-") as scratch:
        tokenizer.save_pretrained(scratch)
        files = {path.name: path.read_bytes() for path in sorted(Path(scratch).iterdir()) if path.is_file()}
    for name, data in files.items():
        write_atomically(output, name, data)
    specials = {name: getattr(tokenizer, f"{name}_token_id") for name in ("pad", "unk", "cls", "sep", "mask")}
    splits = {}
    for split in SPLITS:
        entries = [r["splits"][split] for r in results if split in r["splits"]]
        if entries:
            shards = [ShardRecord(e["file"], e["rows"], e["tokens"], e["digest"], e["sha256"], e["bytes"],
                                  e["row_groups"]) for e in entries]
            splits[split] = SplitRecord(sum(e["rows"] for e in entries), sum(e["tokens"] for e in entries), shards)
    input_description = source.describe()
    if "files" in input_description:
        input_description["files"] = [_display(p) for p in input_description["files"]]
    manifest = Manifest(
        settings=settings,
        input=input_description,
        tokenizer=TokenizerRecord(hashlib.sha256(files["tokenizer.json"]).hexdigest(), len(facts.vocab), specials,
                                  sorted(files)),
        columns={field.name: str(field.type) for field in settings_schema(settings)},
        splits=splits,
        report=report,
    )
    write_atomically(output, "report.json", (json.dumps(report, indent=2, ensure_ascii=False) + "\n").encode())
    write_atomically(output, "report.txt", render_report(report).encode())
    write_atomically(output, "README.md", dataset_card(manifest).encode())
    manifest.write(output)
    _remove_leftovers(output)


def _remove_leftovers(output: str) -> None:
    """Temporary files of tasks that died mid-write (their retries wrote the shard again)."""
    if "://" in output:
        fs, root = _fs(output)
        for path in fs.glob(f"{root.rstrip('/')}/data/.*.tmp"):
            fs.rm(path)
        return
    for path in (Path(output) / "data").glob(".*.tmp"):
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------------------
# The Hub


def push_prepared(folder: str | Path, repo_id: str, *, token: str | None = None, revision: str | None = None,
                  private: bool | None = None, endpoint: str | None = None, commit_message: str | None = None,
                  timeout: float | None = None):
    """Upload a prepared folder as a Hub *dataset* repo in one commit (:func:`hfbert.hub.push_to_hub`).

    The folder is opened first: one that does not read back is never uploaded. :meth:`PreparedCorpus.open` and
    ``load_dataset`` read the repo back by its id.

    Args:
        folder (`str` or `Path`):
            The prepared folder.
        repo_id (`str`):
            ``namespace/name`` of the dataset repo; created when missing.
        token (`str`, *optional*):
            Defaults to huggingface_hub's.
        revision (`str`, *optional*):
            A branch, created when missing; by default ``main``.
        private (`bool`, *optional*):
            Create the repo as private.
        endpoint (`str`, *optional*):
            Defaults to huggingface_hub's (``HF_ENDPOINT``).
        commit_message (`str`, *optional*):
            By default ``"hfbert prepare: "`` and the rows of each split.
        timeout (`float`, *optional*):
            The limit of :func:`hfbert.hub.hub_timeout`.

    Returns:
        [`~hfbert.hub.PushResult`]: the commit.

    Raises:
        [`~hfbert.data.PreparedDataError`]: the folder is not a prepared corpus that reads back.
        [`~hfbert.hub.HubPushError`]: the Hub cannot be reached, does not answer in time or refuses the push.
    """
    corpus = PreparedCorpus.open(folder)  # never upload a folder that does not read back
    rows = {split: corpus.num_rows(split) for split in corpus.splits}
    return push_to_hub(corpus.path, repo_id, repo_type="dataset", revision=revision, private=private, token=token,
                       endpoint=endpoint, commit_message=commit_message or f"hfbert prepare: {rows}", timeout=timeout)
