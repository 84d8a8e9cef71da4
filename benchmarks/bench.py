"""hfbert against transformers' BERT, side by side, in one process.

    python benchmarks/bench.py [--quick] [--sections a b c d] [--output bench.json] [--markdown bench.md]

Sections (``--sections a b c d``):

a. pretraining step (forward + backward + AdamW step): tokens/s, peak tensor memory and process memory growth of
   ``HfBertForPreTraining`` vs ``transformers.BertForPreTraining`` (SDPA), same weights, same batches; for the
   presets in ``--compile_presets`` also both under ``torch.compile``, with the compile time reported apart;
b. inference tokens/s, ``HfBertModel`` vs ``transformers.BertModel`` (SDPA), on full-length batches and on
   batches of real sentences padded to the longest in the batch (as ``DataCollatorWithPadding`` does);
c. data pipeline tokens/s (tokenize + build NSP pairs + mask) for 1 and 2 processes, and for two independent
   1-process builds started together (what the machine gives two processes; ``data_bench.py``);
d. WordPiece training MB/s (``hfbert.tokenization.train_wordpiece``).

In a and b hfbert runs once per attention backend of ``--attn_implementations`` (default sdpa, the row "hfbert";
the others are "hfbert eager", "hfbert flex_attention"), each a copy with the same weights and its own optimizer;
transformers and the compiled rows stay on sdpa.

Inputs. Every timed step gets a new batch, as in training: NSP pairs built from the corpus (the shipped Austen
novels, or ``--corpus``) by ``hfbert.data.build_pretraining_dataset``, drawn in a seeded random order and masked
afresh by ``DataCollatorForBertPretraining``, so row lengths, padding width and the masked positions change from
step to step. A code path whose speed depends on seeing the same shapes again (kernels compiled or cached per
shape) is measured as it runs in training. ``--repeated_inputs`` times one batch again and again instead (the
figure such caches give at best). The text is tokenized with ``--tokenizer``, or with a WordPiece vocabulary
learned from the corpus and filled with ``[unused]`` entries up to ``--vocab_size`` (default 30522, the size of
bert-base-uncased's, so the output layer costs what BERT's does).

Method. The machine this runs on may be shared, so absolute figures drift. Every comparison therefore runs in one
process, all contenders on the same sequence of batches (batch k of every contender is the same batch), alternating
the contenders round by round (A B C, C B A, ...) after two warm-up steps each, at least ``--repeats`` rounds and
more for short runs (``--min_seconds``). Reported: the medians, and as the speed-up the median of the per-round
ratios against transformers without compilation: the runs of a round are adjacent in time and on the same batch,
so a slow spell of the machine affects both (the ratio of the medians is in the JSON too). Tokens are real
(non-padding) tokens.

Work ratio. Each pretraining row also carries transformers' model FLOPs per step over the contender's on the same
batches (``contender_flops``: transformers runs the encoder on every padded position and computes vocabulary logits
at every position; hfbert runs the encoder on the real tokens, the padded ones when compiled, and the logits at the
supervised positions only). It is the speed-up the contender would have at equal FLOP efficiency, so beside the
measured speed-up it shows how much of a lead is less work and how much is faster work. The FLOPs are
:func:`.flops.training_flops` (attention counted over the real tokens of each row, or over the padded width where
the encoder runs padded).

Memory. Peak tensor memory is the largest amount of tensor memory live at any moment of one training step: the
bytes held before the step (parameters and AdamW state, identical on both sides) plus the peak of the running sum
of every allocation and free recorded by ``torch.profiler`` (``profile_memory=True``) during that step (on CUDA:
``torch.cuda.max_memory_allocated``). Process memory (resident set size, Linux) is read right before and right
after every timed step; a contender's growth is the sum over its own timed steps, so memory a path keeps between
steps (kernels cached per shape, allocator pools) shows there, while a peak it frees again does not.

torch.compile. Compiled contenders compile on their first step and again when a shape first changes (dynamic
shapes); ``compile_s`` is the wall time of the two warm-up steps minus two median steps. Compiling takes minutes
for the larger presets on a small CPU, which is why ``--compile_presets`` defaults to the two smallest.

flex_attention. FlexAttention compiles its kernel on the first calls too; ``first_steps_s`` is the same difference
for its rows. torch's FlexAttention has no backward on CPU, so there its pretraining row is not run (the report's
``not_run`` says so); on CUDA it trains with attention-probability dropout off, as transformers' flex backend takes
no dropout (the row's ``attention_dropout`` is 0).

On CUDA (``--device cuda``) the step runs under bf16 autocast; the JSON then also carries the model FLOPs
utilisation of each run when ``--peak_tflops`` is given, of the useful work (:func:`.flops.model_flops`: the same
FLOPs for every contender, as ``gpu_check.py`` counts them).

The modules: ``arguments`` (the options, their full-run and ``--quick`` values), ``contenders`` (what each contender
is, and its models), ``inputs`` (the corpus and the batches), ``harness`` (timing, alternation, memory), ``flops``
(the FLOP model), ``sections`` (a-d), ``report`` (the tables), all in ``side_by_side/``; this script runs the
sections and writes the report.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from hfbert.arguments import run_command
from side_by_side.arguments import PROG, BenchArguments, command_parser


def run(args: BenchArguments) -> dict:
    """The sections asked for, in order, as one report (machine, settings, corpus, each section's rows)."""
    import torch

    from side_by_side.inputs import LEARNED_VOCAB_SIZE, load_corpus, sentence_draw, uniform_draw
    from side_by_side.report import machine, speedups
    from side_by_side.sections import bench_inference, bench_pipeline, bench_pretraining, bench_wordpiece

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sections = args.sections
    report: dict = {"machine": machine(), "settings": asdict(args)}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hfbert-bench-") as scratch:
        corpus = load_corpus(args, Path(scratch))
        report["corpus"] = {"name": corpus.name, "layout": corpus.layout, "boundary": corpus.boundary,
                            "megabytes": corpus.path.stat().st_size / 1e6,
                            "tokenizer": args.tokenizer or f"WordPiece learned from the corpus "
                                         f"({min(args.vocab_size, LEARNED_VOCAB_SIZE)} entries, filled with "
                                         f"[unused] to {args.vocab_size})"}
        compile_presets = set(args.compile_presets)
        if "a" in sections:
            report["pretraining"] = []
            for preset, length in args.grid():
                compiled = preset in compile_presets and length <= 128
                row = bench_pretraining(preset, length, args.batch_size_for(preset, length), corpus, args, device,
                                        compiled)
                report["pretraining"].append(row)
                print(f"[a] {preset} @{length}: " + speedups(row), flush=True)
        if "b" in sections:
            report["inference"] = []
            sentences = corpus.sentences(max(args.lengths))
            for preset in args.presets:
                for length in sorted({n for p, n in args.grid() if p == preset}):
                    draw = uniform_draw(sentences, args.batch_size_for(preset, length), length, corpus.tokenizer,
                                        args.seed)
                    row = bench_inference(preset, draw, f"uniform {length}", args, device, padding_free=False)
                    report["inference"].append(row)
                    print(f"[b] {preset} uniform @{length}: " + speedups(row), flush=True)
                draw = sentence_draw(sentences, args.inference_batch_size, args.inference_batches,
                                     corpus.tokenizer.pad_token_id, args.seed)
                row = bench_inference(preset, draw, "mixed", args, device, padding_free=True)
                report["inference"].append(row)
                print(f"[b] {preset} mixed: " + speedups(row), flush=True)
        if "c" in sections:
            report["data_pipeline"] = bench_pipeline(corpus, args)
            print("[c] data pipeline done", flush=True)
        if "d" in sections:
            report["wordpiece"] = bench_wordpiece(corpus, args)
            print("[d] wordpiece done", flush=True)
    report["machine"]["load_average_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["wall_s"] = time.perf_counter() - started
    return report


def main(argv: list[str] | None = None) -> int:
    args = command_parser().parse(argv)

    def body() -> int:
        from side_by_side.report import render

        report = run(args)
        report["command"] = " ".join([PROG, *(sys.argv[1:] if argv is None else argv)])
        text = render(report)
        print(text)
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        if args.markdown:
            Path(args.markdown).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
        return 0

    return run_command(PROG, body)


if __name__ == "__main__":
    raise SystemExit(main())
