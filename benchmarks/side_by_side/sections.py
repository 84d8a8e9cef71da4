"""The four sections of the bench: a. the pretraining step (:func:`bench_pretraining`), b. inference
(:func:`bench_inference`), c. the data pipeline (:func:`bench_pipeline`), d. WordPiece training
(:func:`bench_wordpiece`). Each builds its contenders, runs them through the harness and returns its report rows.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from functools import partial

import torch
import transformers

import data_bench
from hfbert import HfBertForPreTraining, HfBertModel, train_wordpiece
from hfbert.arguments import UsageError
from hfbert.data import CHAPTER_HEADING
from hfbert.unpadding_hfbert import ATTENTION_BACKENDS

from .arguments import BenchArguments
from .contenders import (
    BASELINE,
    PEERS,
    ContenderSpec,
    model_config,
    twins,
    with_attention,
    without_attention_dropout,
)
from .flops import model_flops, work_ratio
from .harness import (
    WARMUP_STEPS,
    Contender,
    alternate,
    autocast,
    mb,
    paired_speedup,
    peak_memory,
    peak_resident_bytes,
    ratio,
    to_device,
)
from .inputs import (
    LEARNED_VOCAB_SIZE,
    BatchStream,
    BenchCorpus,
    inference_stats,
    pretraining_draw,
    pretraining_stats,
)


def contender_row(contender: Contender, spec: ContenderSpec, times: list[float], warmups: list[float],
                  baseline: list[float] | None) -> dict:
    """The report's row of one contender: its medians, every timed step, its memory, its speed-up over
    ``baseline`` (the baseline's step times, paired round by round) and what the contender is."""
    calls = contender.timed(WARMUP_STEPS)
    seconds = statistics.median(times)
    row = {"step_s": seconds, "tokens_per_s": statistics.median(c["tokens"] / t for c, t in zip(calls, times)),
           "times_s": times, "warmup_s": warmups, "batch_digests": [c["digest"] for c in calls],
           **contender.memory(WARMUP_STEPS)}
    if spec.compiled:
        row["compile_s"] = max(0.0, sum(warmups) - len(warmups) * seconds)
    elif spec.compiles_first:  # FlexAttention compiles its kernel for the first shapes it meets
        row["first_steps_s"] = max(0.0, sum(warmups) - len(warmups) * seconds)
    if spec.compiles_first:
        row["graphs_compiled_warmup"], row["graphs_compiled_timed"] = contender.graphs(WARMUP_STEPS)
    if not spec.baseline and baseline is not None:
        row["speedup"] = paired_speedup(baseline, times)
        row["speedup_of_medians"] = ratio(statistics.median(baseline), seconds)
    row.update(spec.row())
    return row


def bench_pretraining(preset: str, length: int, batch_size: int, corpus: BenchCorpus, args: BenchArguments,
                      device: torch.device, compiled: bool) -> dict:
    config = model_config(preset, args.vocab_size, args.quick)
    hf, tf = twins(HfBertForPreTraining, transformers.BertForPreTraining, config, device, args.seed)
    wanted = [spec for name, spec in PEERS.items() if name in args.contenders]  # in this order, however given
    models, specs, not_run = {}, {}, {}
    for peer in wanted:
        if peer.compiled:
            continue
        if peer.library == "hfbert":  # a row per attention backend, each model a copy with the same weights
            for backend in args.backends():
                spec = ContenderSpec("hfbert", backend=backend)
                if device.type == "cpu" and not ATTENTION_BACKENDS[backend].backward_on_cpu:
                    not_run[spec.name] = f"torch's {backend} has no backward on CPU"
                    continue
                models[spec.name], specs[spec.name] = with_attention(hf, backend), spec
                if not spec.attention_dropout:
                    without_attention_dropout(models[spec.name])
        else:
            models[peer.name], specs[peer.name] = tf, peer
    if compiled:  # their own copies (same initial weights), so each optimizer moves only its contender's weights
        # As `hfbert pretrain --torch_compile` does: counts read from the data (the supervised rows) are traced as
        # symbols instead of breaking the graph, for both contenders.
        torch._dynamo.config.capture_dynamic_output_shape_ops = True
        torch._dynamo.config.capture_scalar_outputs = True
        for peer in wanted:
            if peer.compiled:
                models[peer.name] = torch.compile(copy.deepcopy(hf if peer.library == "hfbert" else tf))
                specs[peer.name] = peer
    del hf, tf
    if not models:
        raise UsageError(f"--contenders {' '.join(args.contenders)}: none of them runs for {preset} (compiled "
                         f"contenders run only for --compile_presets)"
                         f"{''.join(f'; {n}: {r}' for n, r in not_run.items())}")
    # The same optimizer on every side; the fused kernel is the fastest torch offers on CPU and CUDA alike.
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True) for name, model in models.items()}

    layout = ("packed_rows", "supervised_positions")  # found on the host with the batch, as hfbert pretrain does

    def step(name: str, batch: dict) -> None:
        model, optimizer = models[name], optimizers[name]
        spec = specs[name]
        takes_layout = spec.library == "hfbert" and not spec.compiled  # as the loop decides
        inputs = {k: v for k, v in batch.items() if takes_layout or k not in layout}
        model.train()
        with autocast(device):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    stream = BatchStream(pretraining_draw(corpus, length, batch_size, args), models, args.repeated_inputs)
    contenders = {name: Contender(name, partial(step, name), stream, device, pretraining_stats) for name in models}
    times, warmups = alternate(contenders, args.repeats, warmup=WARMUP_STEPS, min_seconds=args.min_seconds)
    calls = next(iter(contenders.values())).timed(WARMUP_STEPS)
    result = {"preset": preset, "length": length, "batch_size": batch_size,
              "inputs": "repeated" if args.repeated_inputs else "changing", "steps": len(calls),
              "tokens_per_batch": statistics.mean(c["tokens"] for c in calls),
              "padded_tokens_per_batch": statistics.mean(c["rows"] * c["width"] for c in calls),
              "supervised_per_batch": statistics.mean(c["supervised"] for c in calls),
              "widths": sorted({c["width"] for c in calls}), "contenders": list(models)}
    for name, contender in contenders.items():
        spec = specs[name]
        result[name] = contender_row(contender, spec, times[name], warmups[name], times.get(BASELINE))
        if not spec.attention_dropout:
            result[name]["attention_dropout"] = 0.0
        result[name]["work_ratio"] = work_ratio(config, spec, PEERS[BASELINE], contender.timed(WARMUP_STEPS))
        if device.type == "cuda" and args.peak_tflops:
            flops = sum(model_flops(config, c) for c in contender.timed(WARMUP_STEPS))
            result[name]["mfu"] = flops / sum(times[name]) / (args.peak_tflops * 1e12)
    for name, model in models.items():  # one untimed step each, on the same next batch
        _, batch = stream.next(name)
        resident = (getattr(model, "_orig_mod", model), optimizers[name])
        result[name]["peak_memory_mb"] = mb(peak_memory(partial(step, name, to_device(batch, device)), device,
                                                        *resident))
    if "hfbert" in models and BASELINE in models:
        result["speedup"] = result["hfbert"]["speedup"]
        result["memory_ratio"] = ratio(result["hfbert"]["peak_memory_mb"], result[BASELINE]["peak_memory_mb"])
    if not_run:
        result["not_run"] = not_run
    result["process_peak_rss_mb"] = mb(peak_resident_bytes())
    del models, optimizers, contenders, stream
    return result


def bench_inference(preset: str, draw: Callable[[], list[dict]], kind: str, args: BenchArguments,
                    device: torch.device, padding_free: bool) -> dict:
    """tokens/s of the bare encoder, a new set of batches every run; hfbert runs once per attention backend of
    ``--attn_implementations`` as configured by default and, with ``padding_free``, each also with
    ``config.padding_free = True`` (padding positions skipped)."""
    config = model_config(preset, args.vocab_size, args.quick)
    ours, theirs = twins(HfBertModel, transformers.BertModel, config, device, args.seed)
    ours.eval(), theirs.eval()
    hfbert = [ContenderSpec("hfbert", backend=backend) for backend in args.backends()]
    specs = [*hfbert, PEERS[BASELINE]]
    if padding_free:
        specs += [ContenderSpec("hfbert", backend=spec.backend, padding_free=True) for spec in hfbert]
    models = {spec.backend: with_attention(ours, spec.backend) for spec in hfbert}

    def forward(spec: ContenderSpec, batches: list[dict]) -> None:
        model = theirs if spec.library == "transformers" else models[spec.backend]
        if model is not theirs:
            model.config.padding_free = spec.padding_free
        with torch.inference_mode(), autocast(device):
            for batch in batches:
                model(**batch)

    runs = {spec.name: partial(forward, spec) for spec in specs}
    stream = BatchStream(draw, runs, args.repeated_inputs)
    contenders = {name: Contender(name, run, stream, device, inference_stats) for name, run in runs.items()}
    times, warmups = alternate(contenders, args.repeats, warmup=WARMUP_STEPS, min_seconds=args.min_seconds)
    for model in models.values():
        model.config.padding_free = False
    calls = contenders[BASELINE].timed(WARMUP_STEPS)
    tokens, padded_tokens = sum(c["tokens"] for c in calls), sum(c["padded"] for c in calls)
    result = {"preset": preset, "lengths": kind, "batches_per_run": calls[0]["batches"],
              "inputs": "repeated" if args.repeated_inputs else "changing", "runs": len(calls),
              "batch_size": calls[0]["rows"], "max_length": max(c["width"] for c in calls),
              "tokens_per_run": tokens / len(calls), "padding_fraction": 1 - tokens / padded_tokens,
              "contenders": list(runs)}
    for spec in specs:
        result[spec.name] = contender_row(contenders[spec.name], spec, times[spec.name], warmups[spec.name],
                                          times[BASELINE])
    if "hfbert" in result:
        result["speedup"] = result["hfbert"]["speedup"]
        if padding_free:
            result["speedup_padding_free"] = result["hfbert padding_free"]["speedup"]
    return result


def bench_pipeline(corpus: BenchCorpus, args: BenchArguments) -> list[dict]:
    """1 process, 2 processes, and two independent 1-process builds started together ("1+1": what this machine
    gives two busy processes that share nothing), ``args.repeats`` rounds in alternating order, each build in a
    fresh interpreter.  Each row is the run with the median wall time (``wall_s_by_round``: all of them);
    ``scaling_vs_1_proc`` is the median over rounds of the 1-process wall time over the other's (the runs of a
    round are adjacent in time), ``scaling_of_medians`` the ratio of the two medians."""
    boundary = "chapter" if corpus.boundary == CHAPTER_HEADING else corpus.boundary
    settings = {"layout": corpus.layout, "boundary": boundary}
    contenders = {1: partial(data_bench.measure_pipeline, 1, corpus.path, corpus.tokenizer_dir, **settings),
                  2: partial(data_bench.measure_pipeline, 2, corpus.path, corpus.tokenizer_dir, **settings),
                  "1+1": lambda: _together(data_bench.measure_concurrent(2, corpus.path, corpus.tokenizer_dir,
                                                                         **settings))}
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
        rows.append({"available": True, "corpus": corpus.name, **median,
                     "wall_s_by_round": [m["wall_s"] for m in measured]})
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


def bench_wordpiece(corpus: BenchCorpus, args: BenchArguments) -> dict:
    vocab_size = 400 if args.quick else LEARNED_VOCAB_SIZE
    size = corpus.path.stat().st_size
    times = []
    for _ in range(max(1, min(args.repeats, 3))):
        start = time.perf_counter()
        train_wordpiece([corpus.path], vocab_size=vocab_size, min_frequency=1 if args.quick else 2)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    return {"corpus": corpus.name, "megabytes": size / 1e6, "vocab_size": vocab_size, "train_s": seconds,
            "mb_per_s": size / 1e6 / seconds, "times_s": times}
