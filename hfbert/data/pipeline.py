"""The pretraining-example pipeline: documents -> pools -> tokens -> NSP pairs -> (static) MLM masks.

Unit of work: the *pool*
    Random-next segments need other documents, and a worker process cannot see the whole corpus without
    shared state.  So documents are grouped, by their index in the input, into pools of ``pool_size``
    consecutive documents (:func:`pool_bounds`; a final run shorter than half a pool joins the previous pool).
    A pool is tokenized and turned into instances in one step, its random-next documents are drawn from the pool
    itself, and each document has its own generator seeded with ``(seed, duplication pass, document index)``.
    Output therefore depends only on the input, the seed and ``pool_size`` -- not on ``num_proc``, not on map
    batch boundaries, and not on whether the input is streamed (streaming and map-style give the same rows
    before shuffling).  Peak memory in streaming mode is one or two pools, whatever the corpus size.
    The original drew random documents from the whole corpus; with pools of dozens of documents or more the
    NSP task is the same (B from an unrelated document), and the difference is documented here.

Row order is pool-major, then duplication pass, then document; with ``shuffle=True`` (map-style default, as
the original shuffles its instances) the rows are shuffled with ``seed``.

Where the time goes
    Tokenization goes through :class:`~hfbert.wordpiece.WordCacheEncoder` (exact `tokenizers` ids, with a
    cached fast path for printable-ASCII text); NSP slices, masks and Arrow columns are computed for a whole
    pool at once.  With ``num_proc > 1`` the pools are the units of work of :mod:`hfbert.data.engines`.

This module builds examples in memory (a ``datasets.Dataset``); :mod:`hfbert.data.writer` builds a corpus of
any size into Parquet shards with the same :class:`PoolBuilder`.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain

import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer
from datasets import Dataset, DatasetInfo, Features, IterableDataset, List, Value
from datasets.table import InMemoryTable

from ..settings import settings_marked
from ..wordpiece import WordCacheEncoder, concat_ranges
from .documents import ReadStats, split_sentences
from .engines import run_tasks
from .masking import MaskingSpec, continuation_table, mask_batch
from .nsp import Pool, create_instances_from_document, document_rng
from .report import build_report, table_digest
from .segmenters import word_char_ids, word_starts_from_offsets
from .settings import DEFAULT_POOL_SIZE, ExampleSettings
from .sources import DocumentRows, DocumentStream, TextFiles, resolve_input

__all__ = ["build_pretraining_dataset", "output_features", "pool_bounds"]

_SHUFFLE_STREAM = 0x73687566
GATHER_ROWS = 1024  # rows per block in shuffled_table
_MASK_STREAM = 0x6D61736B  # separates the pool's masking generator from the documents' NSP generators


def output_features(masking: str, whole_word_mask: bool) -> Features:
    """Columns of the built dataset; the static-mask columns only for static masking, ``word_starts`` only for
    dynamic whole-word masking (the collator needs the word boundaries computed in the map step)."""
    columns = {
        "input_ids": List(Value("int32")),
        "token_type_ids": List(Value("int8")),
        "next_sentence_label": Value("int8"),
    }
    if masking == "static":
        columns["masked_lm_positions"] = List(Value("int32"))
        columns["masked_lm_ids"] = List(Value("int32"))
    elif whole_word_mask:
        columns["word_starts"] = List(Value("int8"))
    return Features(columns)


def pool_bounds(num_documents: int, pool_size: int) -> list[tuple[int, int]]:
    """``[start, end)`` document ranges of the pools: runs of ``pool_size``; a last run shorter than
    ``pool_size // 2`` joins the previous pool (so no pool is left with one or two documents by accident).

    Args:
        num_documents (`int`):
            How many documents there are.
        pool_size (`int`):
            Documents per pool.

    Returns:
        `list[tuple[int, int]]`: the pools' ranges, in order; empty when there are no documents.
    """
    if num_documents <= 0:
        return []
    bounds = [(lo, min(lo + pool_size, num_documents)) for lo in range(0, num_documents, pool_size)]
    if len(bounds) > 1 and bounds[-1][1] - bounds[-1][0] < pool_size // 2:
        bounds[-2:] = [(bounds[-2][0], num_documents)]
    return bounds


def _stream_pools(documents: Iterable, pool_size: int) -> Iterator[tuple[int, list]]:
    """Group a document stream into the same pools as :func:`pool_bounds`, holding at most 1.5 pools."""
    buffer: list = []
    first = 0
    for document in documents:
        buffer.append(document)
        if len(buffer) >= pool_size + pool_size // 2:
            yield first, buffer[:pool_size]
            buffer = buffer[pool_size:]
            first += pool_size
    if buffer:
        yield first, buffer


@dataclass
class TokenizerFacts:
    """What a build reads from the tokenizer, taken from one parse of its JSON: ``get_vocab()`` and a second
    parse for the encoder would each cost more than a small pool's build, before the first pool starts."""

    text: str  # the `tokenizers` pipeline, serialised
    config: dict  # ... parsed
    vocab: dict  # token -> id, as ``tokenizer.get_vocab()`` gives it (model vocabulary and added tokens)

    @classmethod
    def of(cls, tokenizer) -> TokenizerFacts:
        text = tokenizer.backend_tokenizer.to_str()
        config = json.loads(text)
        vocab = (config.get("model") or {}).get("vocab")
        if isinstance(vocab, dict):  # WordPiece and BPE; a Unigram vocabulary is a list of (piece, score)
            vocab = {**vocab, **{t["content"]: t["id"] for t in config.get("added_tokens", [])}}
        else:
            vocab = tokenizer.get_vocab()
        return cls(text, config, vocab)


class PoolBuilder:
    """Turns one pool of documents into an Arrow table of instances plus a stats record (picklable)."""

    def __init__(self, tokenizer, spec: MaskingSpec, settings: ExampleSettings, word_segmenter=None,
                 facts: TokenizerFacts | None = None):
        facts = TokenizerFacts.of(tokenizer) if facts is None else facts
        # A private copy without truncation/padding: sentences must come out whole, as the original tokenizes them.
        # Made on first use (see `backend`), so that worker processes make theirs in parallel.
        self._backend_json, self._config = facts.text, facts.config
        self._backend = self._encoder = None
        self.cls_id, self.sep_id = int(tokenizer.cls_token_id), int(tokenizer.sep_token_id)
        self.spec = spec
        self.continuation = continuation_table(tokenizer, facts.vocab) if spec.whole_word_mask else None
        self.settings, self.segmenter = settings, word_segmenter
        self.max_seq_length, self.short_seq_prob = settings.max_seq_length, settings.short_seq_prob
        self.dupe_factor, self.masking, self.seed = settings.passes, settings.masking, settings.seed
        self.distinct = settings.distinct_random_document
        self.features = output_features(self.masking, spec.whole_word_mask)

    @property
    def backend(self):
        if self._backend is None:
            self._backend = Tokenizer.from_str(self._backend_json)
            self._backend.no_truncation()
            self._backend.no_padding()
        return self._backend

    @property
    def encoder(self) -> WordCacheEncoder:
        if self._encoder is None:
            self._encoder = WordCacheEncoder(self._backend_json, config=self._config)
        return self._encoder

    def __getstate__(self) -> dict:
        # Pickled (spawned workers, datasets' fingerprints) without the tokenizer objects and the word cache.
        return dict(self.__dict__, _backend=None, _encoder=None, _config=None)

    # -- tokenization -------------------------------------------------------------------------------------
    def tokenize(self, documents: list, split_units: bool = False):
        """Tokenize a pool; return the pool, word starts, raw index of each kept document, stats, line hashes.

        A document is a list of sentences, a list of paragraphs (``split_units``) or one raw string."""
        sentences, doc_sizes, skipped, lines = [], [], 0, 0
        for document in documents:
            units = [document] if isinstance(document, str) else (document or [])
            lines += len(units)
            if split_units or isinstance(document, str):
                units = [sentence for unit in units for sentence in split_sentences(unit)] or units[:0]
            kept = [unit.strip() for unit in units if unit and unit.strip()]
            skipped += len(units) - len(kept)
            sentences.extend(kept)
            doc_sizes.append(len(kept))
        if self.segmenter is not None:  # a word segmenter needs the character offsets of the tokens
            encodings = self.backend.encode_batch(sentences, add_special_tokens=False)
            lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
            ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int32,
                              count=int(lengths.sum()))
        else:
            encodings = None
            ids, lengths = self.encoder.encode(sentences)
        word_starts = self._word_starts(ids, sentences, encodings)
        # Sentences that tokenize to nothing (control characters only, ...) are skipped, as the original does.
        nonempty = lengths > 0
        hashes = [int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")
                  for s, keep in zip(sentences, nonempty.tolist()) if keep]
        skipped += int(np.count_nonzero(~nonempty))
        ends = np.cumsum(lengths)
        sent_start, sent_end = (ends - lengths)[nonempty], ends[nonempty]
        doc_of = np.repeat(np.arange(len(doc_sizes)), doc_sizes)
        per_doc = np.bincount(doc_of[nonempty], minlength=len(doc_sizes))
        kept_docs = np.flatnonzero(per_doc).tolist()
        last = np.cumsum(per_doc)[kept_docs] - 1
        pool = Pool(ids, sent_start.tolist(), sent_end.tolist(), (last - per_doc[kept_docs] + 1).tolist(),
                    last.tolist())
        stats = {
            "documents": len(documents),
            "empty_documents": len(documents) - len(kept_docs),
            "units": lines,
            "sentences": int(np.count_nonzero(nonempty)),
            "skipped_empty_lines": skipped,
            "tokens": int(lengths.sum()),
        }
        return pool, word_starts, kept_docs, stats, hashes

    def _word_starts(self, ids, sentences, encodings) -> np.ndarray | None:
        if not self.spec.whole_word_mask:
            return None
        if self.segmenter is None:
            return (~self.continuation[ids]).astype(np.int8)
        parts = [word_starts_from_offsets(word_char_ids(text, list(self.segmenter(text))), enc.offsets)
                 for text, enc in zip(sentences, encodings)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int8)

    # -- instances ----------------------------------------------------------------------------------------
    def build(self, documents: list, first_index: int, split_units: bool = False, *, stream: tuple[int, ...] = (),
              dupe_factor: int | None = None) -> tuple[pa.Table, dict, list]:
        """Instances of every document of the pool, ``dupe_factor`` times; static masks drawn for all at once.

        ``first_index``: the index of the pool's first document in its stream; ``stream``: numbers that name the
        stream (a prepared corpus uses its split and shard), mixed into every generator's seed so that two
        streams never share random draws.  ``dupe_factor`` overrides the builder's (held-out data: 1)."""
        return self._build(documents, first_index, split_units, tuple(stream),
                           self.dupe_factor if dupe_factor is None else dupe_factor)

    def _build(self, documents: list, first_index: int, split_units: bool, stream: tuple,
               dupe_factor: int) -> tuple[pa.Table, dict, list]:
        pool, word_starts, kept_docs, stats, hashes = self.tokenize(documents, split_units)
        slices, counts = [], {"document_passes": 0, "short_target_passes": 0}
        for dupe in range(dupe_factor):
            for local, raw in enumerate(kept_docs):
                rng = document_rng(self.seed, dupe, first_index + raw, stream)
                instances, short = create_instances_from_document(
                    pool, local, rng, max_seq_length=self.max_seq_length, short_seq_prob=self.short_seq_prob,
                    distinct_random_document=self.distinct, random_next_prob=self.settings.random_next_prob)
                slices.extend(instances)
                counts["document_passes"] += 1
                counts["short_target_passes"] += int(short)
        table = self._assemble(pool, word_starts, np.asarray(slices, dtype=np.int64).reshape(-1, 6), first_index,
                               stream)
        random_next = sum(int(s[4]) for s in slices)
        truncated = [s[5] for s in slices if s[5] > 0]
        stats.update(counts, instances=len(slices), random_next=random_next, truncated_instances=len(truncated),
                     truncated_tokens=int(sum(truncated)), pool_documents=pool.num_documents,
                     first_document=first_index)
        return table, stats, hashes

    def _assemble(self, pool: Pool, word_starts, slices: np.ndarray, first_index: int, stream: tuple) -> pa.Table:
        """[CLS] A [SEP] B [SEP] for every instance at once, by gathering from the pool's flat id array."""
        a0, a1, b0, b1 = slices[:, 0], slices[:, 1], slices[:, 2], slices[:, 3]
        n, cls_at, sep_at = len(slices), len(pool.ids), len(pool.ids) + 1
        ones = np.ones(n, dtype=np.int64)
        starts = np.stack([cls_at * ones, a0, sep_at * ones, b0, sep_at * ones], axis=1).ravel()
        lengths = np.stack([ones, a1 - a0, ones, b1 - b0, ones], axis=1).ravel()
        gather = concat_ranges(starts, lengths)
        ids = np.concatenate((pool.ids, [self.cls_id, self.sep_id])).astype(np.int32)[gather]
        row_lengths = lengths.reshape(n, 5).sum(axis=1)
        offsets = np.concatenate(([0], np.cumsum(row_lengths)))
        types = np.repeat(np.tile(np.array([0, 0, 0, 1, 1], dtype=np.int8), n), lengths)
        columns = {"token_type_ids": types, "next_sentence_label": slices[:, 4].astype(np.int8)}
        starts_flat = None
        if word_starts is not None:
            starts_flat = np.concatenate((word_starts, [1, 1])).astype(np.int8)[gather]
            # A segment cut by truncation may begin inside a word: its first token still starts a word.
            starts_flat[offsets[:-1] + 1] = 1
            starts_flat[offsets[:-1] + (a1 - a0) + 2] = 1
        if self.masking == "static":
            candidates = np.ones(len(ids), dtype=bool)
            candidates[offsets[:-1]] = False  # [CLS]
            candidates[offsets[:-1] + (a1 - a0) + 1] = False  # the first [SEP]
            candidates[offsets[1:] - 1] = False  # the last [SEP]
            rng = np.random.default_rng([self.seed, *stream, first_index, _MASK_STREAM])
            ids, positions, labels, counts = mask_batch(ids, offsets, candidates, self.spec, rng, starts_flat)
            mask_offsets = np.concatenate(([0], np.cumsum(counts)))
            columns["masked_lm_positions"] = (positions.astype(np.int32), mask_offsets)
            columns["masked_lm_ids"] = (labels.astype(np.int32), mask_offsets)
        elif starts_flat is not None:
            columns["word_starts"] = starts_flat
        columns["input_ids"] = ids
        return self._table(columns, offsets)

    def _table(self, columns: dict, offsets: np.ndarray) -> pa.Table:
        arrays = []
        for name, feature in self.features.items():
            value = columns[name]
            if isinstance(feature, List):
                values, value_offsets = value if isinstance(value, tuple) else (value, offsets)
                arrays.append(pa.ListArray.from_arrays(pa.array(value_offsets.astype(np.int32)), pa.array(values)))
            else:
                arrays.append(pa.array(value))
        return pa.Table.from_arrays(arrays, schema=self.features.arrow_schema)


def shuffled_table(table: pa.Table, order: np.ndarray) -> pa.Table:
    """``table.take(order)`` (one chunk per column), done with numpy gathers on the offsets and values.

    Why not Arrow's ``take``: on list columns its first call in a process is slow and varies from call to call,
    and this step runs once per shard on all of its rows.  Here the values are gathered ``GATHER_ROWS`` rows at
    a time: index arrays for all rows at once (8 bytes per token) would be fresh memory every time, and their
    page faults would cost more than the gather itself.  Columns with nulls or of other types go through
    ``take``.
    """
    columns = []
    for column in table.columns:
        array = column.chunk(0) if column.num_chunks == 1 else pa.concat_arrays(column.chunks)
        if array.null_count == 0 and pa.types.is_list(array.type) and array.values.null_count == 0 and (
                pa.types.is_integer(array.type.value_type) or pa.types.is_floating(array.type.value_type)):
            offsets = array.offsets.to_numpy()  # positions in array.values (a sliced array keeps its parent's)
            starts, lengths = offsets[:-1][order], np.diff(offsets)[order]
            new_offsets = np.zeros(len(order) + 1, dtype=offsets.dtype)
            np.cumsum(lengths, out=new_offsets[1:])
            source = array.values.to_numpy()
            values = np.empty(int(new_offsets[-1]), dtype=source.dtype)
            for lo in range(0, len(order), GATHER_ROWS):  # small index arrays: reused memory, see below
                hi = min(lo + GATHER_ROWS, len(order))
                at = concat_ranges(starts[lo:hi], lengths[lo:hi])
                np.take(source, at, out=values[new_offsets[lo]:new_offsets[hi]])
            columns.append(pa.ListArray.from_arrays(pa.array(new_offsets), pa.array(values), type=array.type))
        elif array.null_count == 0 and (pa.types.is_integer(array.type) or pa.types.is_floating(array.type)):
            columns.append(pa.array(array.to_numpy()[order], type=array.type))
        else:
            columns.append(array.take(pa.array(order)))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _build_pools(documents: _Documents, bounds: list[tuple[int, int]], builder: PoolBuilder, split_units: bool,
                 num_proc: int) -> tuple[list[pa.Table], list[dict], list[list[int]]]:
    """Build every pool, in pool order: the tables, stats and line hashes of all pools.

    Each pool is one unit of work for :func:`~hfbert.data.engines.run_tasks` (this process, or spawned worker
    processes with ``num_proc > 1``); its rows depend only on its documents and the seed, so they are the same
    whoever builds it.  Tables come back from workers as Arrow IPC bytes (one copy, no per-row pickling).
    """
    tasks = [(builder, documents.slice(lo, hi), lo, split_units) for lo, hi in bounds]
    built = run_tasks(_build_pool, tasks, num_proc=num_proc, desc="Building pretraining examples", unit=" pools")
    tables = [pa.ipc.open_stream(data).read_all() if isinstance(data, bytes) else data for data, _, _ in built]
    return tables, [b[1] for b in built], [b[2] for b in built]


def _build_pool(task: tuple) -> tuple:
    builder, documents, first_index, split_units = task
    table, stats, hashes = builder.build(documents, first_index, split_units)
    if multiprocessing.parent_process() is None:  # in this process: no copy
        return table, stats, hashes
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes(), stats, hashes


def make_builder(tokenizer, settings: ExampleSettings, word_segmenter=None) -> tuple[PoolBuilder, TokenizerFacts]:
    """The pool builder (with its masking spec) that every build runs, and the tokenizer facts it read.

    ``word_segmenter``: a callable text -> words for whole-word masking (default: the one ``settings.segmenter``
    names)."""
    if not getattr(tokenizer, "is_fast", False) or not hasattr(tokenizer, "backend_tokenizer"):
        raise TypeError(f"a transformers fast tokenizer is required, got {type(tokenizer).__name__}")
    for name in ("cls_token_id", "sep_token_id", "mask_token_id"):
        if getattr(tokenizer, name, None) is None:
            raise ValueError(f"the tokenizer has no {name.removesuffix('_id')}; BERT examples need [CLS]/[SEP]/[MASK]")
    if word_segmenter is not None and not callable(word_segmenter):
        raise TypeError(f"word_segmenter must be a callable text -> words, got {type(word_segmenter).__name__}")
    word_segmenter = settings.word_segmenter() if word_segmenter is None else word_segmenter
    if word_segmenter is not None and not settings.whole_word_mask:
        raise ValueError("a word segmenter is only used by whole-word masking: pass whole_word_mask=True")
    facts = TokenizerFacts.of(tokenizer)
    spec = MaskingSpec.from_tokenizer(tokenizer, **settings.masking_options(), vocab=facts.vocab)
    return PoolBuilder(tokenizer, spec, settings, word_segmenter, facts=facts), facts


def build_pretraining_dataset(source, tokenizer, settings: ExampleSettings | None = None, *, word_segmenter=None,
                              num_proc: int = 1, streaming: bool | None = None, shuffle: bool = True,
                              return_report: bool = False, **changes):
    """Build BERT pretraining examples (NSP pairs, optionally statically masked) as a datasets table.

    ``dupe_factor`` defaults to 10 for static masking (the original) and 1 for dynamic masking.

    Args:
        source:
            What :func:`~hfbert.data.sources.resolve_input` reads -- a text file, glob or URL or a list of
            them (``input_layout="sentences"``: the original one-sentence-per-line format; ``"paragraphs"``: one
            paragraph per line, split into sentences, with ``document_boundary`` a regex for heading lines such as
            :data:`~hfbert.data.documents.CHAPTER_HEADING`); a ``datasets.Dataset`` with a ``sentences`` column (list
            of str per document) or a ``text`` column (one raw document per row, split with
            :func:`~hfbert.data.documents.split_sentences`); a ``datasets.IterableDataset`` (streaming); or a Python
            list of such documents.
        tokenizer (`PreTrainedTokenizerFast`):
            Any transformers *fast* BERT tokenizer (with [CLS], [SEP] and [MASK]).
        settings ([`~hfbert.data.ExampleSettings`], *optional*):
            Its vocabulary and sharding fields are :func:`prepare_corpus`'s; by default ``ExampleSettings()``.
        word_segmenter (`Callable[[str], Sequence[str]]`, *optional*):
            Text -> words for whole-word masking (e.g. :class:`~hfbert.data.JiebaSegmenter`); default: the one
            ``settings.segmenter`` names.
        num_proc (`int`, *optional*, defaults to 1):
            Worker processes building the pools; the rows are the same whoever builds them.
        streaming (`bool`, *optional*):
            Build lazily as an ``IterableDataset``; by default when ``source`` is an ``IterableDataset``.
        shuffle (`bool`, *optional*, defaults to `True`):
            Shuffle the examples (seeded), as the original shuffles its instances.
        return_report (`bool`, *optional*, defaults to `False`):
            Also return the health report (map-style only), see :mod:`hfbert.data.report`.
        **changes:
            Any field of ``settings`` as a keyword argument (``max_seq_length=64``), which replaces its value.

    Returns:
        `datasets.Dataset` (`datasets.IterableDataset` when streaming), or ``(dataset, report)`` with
        ``return_report=True``: ``input_ids``, ``token_type_ids`` and ``next_sentence_label`` (0 = actual next,
        1 = random), plus ``masked_lm_positions``/``masked_lm_ids`` for ``masking="static"`` (``input_ids`` are then
        already corrupted) or ``word_starts`` for dynamic whole-word masking;
        :class:`~hfbert.data.collator.DataCollatorForBertPretraining` turns either into model inputs.

    Raises:
        `TypeError`: the tokenizer is not a fast tokenizer, or ``word_segmenter`` is not callable.
        `ValueError`: the tokenizer lacks [CLS]/[SEP]/[MASK], a segmenter without whole-word masking, ``num_proc``
            below 1, ``return_report`` with streaming, an ``IterableDataset`` with ``streaming=False``, an input with
            no documents, or a setting that is not valid.
    """
    settings = (settings or ExampleSettings()).example_settings(**changes)
    if not isinstance(num_proc, int) or num_proc < 1:
        raise ValueError(f"num_proc must be an int >= 1, got {num_proc!r}")
    builder, _ = make_builder(tokenizer, settings, word_segmenter)
    documents = resolve_input(source, input_layout=settings.input_layout, document_boundary=settings.document_boundary,
                              text_column=settings.text_column, streaming=bool(streaming))
    if streaming is None:
        streaming = isinstance(documents, DocumentStream)
    if streaming:
        if return_report:
            raise ValueError("return_report needs a map-style build (streaming=False): the report counts the output")
        return IterableDataset.from_generator(
            partial(_stream_rows, documents=documents, builder=builder, pool_size=settings.pool_size),
            features=builder.features)
    if isinstance(documents, DocumentStream):
        raise ValueError("an IterableDataset is read as a stream: pass streaming=True (or leave it unset)")
    split_units = documents.split_units
    documents, read_stats = _document_table(documents)
    bounds = pool_bounds(len(documents), settings.pool_size)
    if not bounds:
        raise ValueError("the input has no documents")
    tables, pool_stats, hashes = _build_pools(documents, bounds, builder, split_units, num_proc)
    recorded = {key: value for key, value in settings.recorded().items()  # the examples', not a folder's layout
                if key not in settings_marked(ExampleSettings, "folder")}
    return _finish(tables, pool_stats, hashes, read_stats, builder, builder.spec, shuffle, return_report,
                   settings=recorded)


def _finish(tables, pool_stats, hashes, read_stats, builder: PoolBuilder, spec: MaskingSpec, shuffle: bool,
            return_report: bool, settings: dict):
    """The built pools -> one (shuffled) Dataset, and its report when asked."""
    seed = settings["seed"]
    _warn_single_document_pools(pool_stats, stacklevel=4)
    table = pa.concat_tables(tables)
    if shuffle:  # the original shuffles its instances
        table = shuffled_table(table, np.random.default_rng([seed, _SHUFFLE_STREAM]).permutation(table.num_rows))
    else:
        table = table.combine_chunks()
    # The content digest as the fingerprint: datasets would otherwise hash the table by pickling it, and the
    # report needs the digest anyway.
    digest = table_digest(table)
    built = Dataset(InMemoryTable(table), info=DatasetInfo(features=builder.features), fingerprint=digest[:32])
    if not return_report:
        return built
    line_hashes = np.fromiter(chain.from_iterable(hashes), dtype=np.uint64)
    return built, build_report(built, pool_stats, line_hashes, read_stats, settings, spec.mask_token_id, digest)


class _Documents:
    """The map-style input, read by pool: a Python list of documents, or a column of a ``Dataset``."""

    def __init__(self, rows, column: str | None = None):
        self.rows, self.column = rows, column

    def __len__(self) -> int:
        return len(self.rows)

    def slice(self, lo: int, hi: int) -> list:
        return self.rows[lo:hi] if self.column is None else self.rows[lo:hi][self.column]

    def weights(self, bounds: list[tuple[int, int]]) -> list[int]:
        """Work estimate per pool: characters for in-memory documents, documents for a ``Dataset``."""
        if self.column is not None:
            return [hi - lo for lo, hi in bounds]
        sizes = np.fromiter((len(d) if isinstance(d, str) else sum(map(len, d or ())) for d in self.rows),
                            dtype=np.int64, count=len(self.rows))
        return [int(sizes[lo:hi].sum()) for lo, hi in bounds]


def _document_table(source: TextFiles | DocumentRows) -> tuple[_Documents, dict | None]:
    """The whole input in memory, read by pool: every document of the files (and what reading them counted), or the
    rows."""
    if isinstance(source, DocumentRows):
        return _Documents(source.rows, source.column), None
    read_stats = ReadStats()
    documents = list(source.documents(0, 1, read_stats))
    read_stats.files.extend(source.paths)
    return _Documents(documents), read_stats.as_dict()


def _stream_documents(source: TextFiles | DocumentRows | DocumentStream) -> Iterator:
    if isinstance(source, DocumentStream):
        return iter(source)
    return source.documents(0, 1, ReadStats())


def _stream_rows(documents, builder: PoolBuilder, pool_size: int) -> Iterator[dict]:
    for first, pool in _stream_pools(_stream_documents(documents), pool_size):
        table, stats, _ = builder.build(pool, first, documents.split_units)
        _warn_single_document_pools([stats])
        yield from table.to_pylist()


def _warn_single_document_pools(pool_stats: list[dict], stacklevel: int = 3) -> None:
    lonely = [s["first_document"] for s in pool_stats if s["pool_documents"] == 1 and s["instances"] > 0]
    if lonely:
        warnings.warn(
            f"{len(lonely)} pool(s) (starting at document {lonely[:5]}) have a single non-empty document: "
            "random-next segments there come from the same document. Use more documents or a larger pool_size.",
            UserWarning, stacklevel=stacklevel)
