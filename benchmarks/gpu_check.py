"""The model on one GPU: bf16 pretraining steps and mixed-length inference, each attention backend against
transformers' BERT, with model FLOPs utilisation. Written for one H100/H200, under 8 minutes.

Answered in benchmarks/results/bench.md (GPU).

    bash benchmarks/gpu_check.sh --peak_tflops 989 --output gpu_check.json

Pretraining (BERT-Base, vocabulary 30522, bf16 autocast over float32 weights, fused AdamW, a fresh batch every step:
full rows except 10% shorter ones, 15% of the tokens masked): hfbert with every backend of
``hfbert.unpadding_hfbert.ATTENTION_BACKENDS`` that trains here: ``eager``, ``sdpa``, ``flex_attention`` and, where the
kernel is installed, ``flash_attention_2`` (the packed rows then run FlashAttention's variable-length kernel, and
flex_attention takes them as one sequence with a document mask); ``sdpa_padded`` and ``flex_attention_padded`` are
hfbert computing every padding position, for attribution; transformers' ``BertForPreTraining`` with ``sdpa`` and the
installed kernels. Attention dropout is 0 for every row, since
flex_attention takes none. Inference: the bare encoder in bf16 on batches of sentence-like lengths padded to their
longest row, hfbert as configured and with ``padding_free=True``, against transformers.

Before timing, two checks: the precision ``hfbert pretrain`` chooses by default on this machine (bf16 on a GPU that
computes it natively), and the packed path on every backend: one fp32 pretraining step's loss and gradients with
packed rows against the same step computed on every padding position.

Model FLOPs are ``side_by_side.flops.model_flops``, the FLOP model the bench (``bench.py``) uses: the work of the
original model on the real tokens (the encoder on every real token, attention over the real tokens of each row, the
MLM head on the supervised positions, forward + backward = 3 x forward), the same figure for every row, so MFU
ratios are speed ratios. The JSON holds every row's median step time, tokens/s, MFU, peak memory and loss.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import math
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import transformers

from hfbert import HfBertConfig, HfBertForPreTraining, HfBertModel, unpadding_hfbert
from hfbert.arguments import CommandParser, UsageError, run_command
from hfbert.pretrain.config import PretrainConfig, native_mixed_precision
from side_by_side.flops import model_flops
from hfbert.unpadding_hfbert import ATTENTION_BACKENDS

PROG = "gpu_check"
PAD, CLS, SEP, MASK, FIRST_WORD = 0, 101, 102, 103, 1000
BASELINE = "sdpa"  # transformers' row every speed-up is against
PADDED_ROWS = ("sdpa", "flex_attention")  # backends also timed computing every padding position, for attribution
LAYOUT_NOTE = {"varlen": " (packed varlen)", "document_mask": " (packed, document mask)", "padded": ""}


@dataclass
class GpuCheckArguments:
    output: str = field(default="gpu_check.json", metadata={"help": "where the JSON report goes"})
    peak_tflops: float = field(default=989.0, metadata={
        "help": "the GPU's dense bf16 peak in TFLOP/s for MFU (H100/H200 SXM: 989)"})
    lengths: list[int] = field(default_factory=lambda: [128, 512], metadata={"help": "pretraining sequence lengths"})
    batch_tokens: int = field(default=16384, metadata={
        "help": "rows x length of a pretraining batch (128 -> 128 rows, 512 -> 32 rows)"})
    steps: int = field(default=10, metadata={"help": "timed steps per row, after the warm-up"})
    warmup: int = field(default=3, metadata={"help": "untimed steps per row (flex_attention compiles here)"})
    budget_seconds: float = field(default=420.0, metadata={
        "help": "rows not started by then are skipped and say so (the whole check must end in 8 minutes)"})
    allow_cpu: bool = field(default=False, metadata={
        "help": "check the script itself on a CPU: a tiny model, no flex or flash, no MFU; figures mean nothing"})

    def __post_init__(self):
        if not self.lengths or any(n < 8 or n > 512 for n in self.lengths):
            raise UsageError(f"--lengths must lie in [8, 512], got {self.lengths}")
        for name in ("peak_tflops", "batch_tokens", "steps", "budget_seconds"):
            if not getattr(self, name) > 0:
                raise UsageError(f"--{name} must be positive, got {getattr(self, name)!r}")


def pretraining_batches(count: int, rows: int, length: int, vocab_size: int, seed: int) -> list[dict]:
    """Batches shaped like create_pretraining_data.py output: [CLS] A [SEP] B [SEP], 10% of the rows shorter, 15% of
    the tokens supervised (80% [MASK], 10% random, 10% kept)."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        lengths = torch.where(torch.rand(rows, generator=g) < 0.1, torch.randint(8, length + 1, (rows,), generator=g),
                              length)
        real = torch.arange(length) < lengths[:, None]
        ids = torch.randint(FIRST_WORD, vocab_size, (rows, length), generator=g)
        split = (lengths // 2)[:, None]
        position = torch.arange(length)
        ids[:, 0] = CLS
        ids[position == split] = SEP
        ids[position == (lengths - 1)[:, None]] = SEP
        special = (position == 0) | (position == split) | (position == (lengths - 1)[:, None])
        chosen = (torch.rand(rows, length, generator=g) < 0.15) & real & ~special
        labels = torch.where(chosen, ids, -100)
        action = torch.rand(rows, length, generator=g)
        ids = torch.where(chosen & (action < 0.8), MASK, ids)
        ids = torch.where(chosen & (action >= 0.8) & (action < 0.9),
                          torch.randint(FIRST_WORD, vocab_size, (rows, length), generator=g), ids)
        batches.append({"input_ids": torch.where(real, ids, PAD), "attention_mask": real.long(),
                        "token_type_ids": (real & (position > split)).long(), "labels": labels,
                        "next_sentence_label": torch.randint(0, 2, (rows,), generator=g)})
    return batches


def sentence_batches(count: int, rows: int, vocab_size: int, seed: int) -> list[dict]:
    """Sentence-like lengths (log-normal, median 24 tokens, up to 512), each batch padded to its longest row."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        lengths = torch.exp(torch.randn(rows, generator=g) * 0.8 + math.log(24)).round().clamp(4, 512).long()
        width = int(lengths.max())
        real = torch.arange(width) < lengths[:, None]
        ids = torch.randint(FIRST_WORD, vocab_size, (rows, width), generator=g)
        batches.append({"input_ids": torch.where(real, ids, PAD), "attention_mask": real.long()})
    return batches


def cuda_timer(device):
    if device.type != "cuda":
        start = time.perf_counter()
        return lambda: time.perf_counter() - start
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()

    def stop():
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1000

    return stop


@contextlib.contextmanager
def padded_encoder():
    """hfbert computing every padding position: the packing step finds nothing to skip."""
    original = unpadding_hfbert.PackedRows.from_mask
    unpadding_hfbert.PackedRows.from_mask = classmethod(lambda cls, mask: None)
    try:
        yield
    finally:
        unpadding_hfbert.PackedRows.from_mask = original


def packed_agreement(config: HfBertConfig, batch: dict, backend: str, device) -> dict:
    """One fp32 step of hfbert on ``backend``, packed against computed on every padding position: the loss and the
    largest gradient difference relative to the largest gradient."""
    results = []
    for padded in (False, True):
        model = build("hfbert", config, backend, device).eval()  # no dropout: the two must compute the same
        with padded_encoder() if padded else contextlib.nullcontext():
            loss = model(**{k: v.to(device) for k, v in batch.items()}).loss
        loss.backward()
        results.append((loss.item(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])))
    (packed_loss, packed_grad), (padded_loss, padded_grad) = results
    return {"backend": backend, "packed_loss": packed_loss, "padded_loss": padded_loss,
            "grad_max_rel_diff": float((packed_grad - padded_grad).abs().max() / padded_grad.abs().max())}


def trains_here(backend: str, device) -> bool:
    """Whether ``backend`` can train on ``device``: on a CPU the torch backends with a CPU backward, on a GPU those
    and the kernels that are installed."""
    spec = ATTENTION_BACKENDS[backend]
    if device.type == "cpu":
        return spec.kernel is None and spec.backward_on_cpu
    return spec.kernel is None or importlib.util.find_spec(spec.kernel) is not None


def kernels(device) -> list[str]:
    """The backends from kernels outside torch that run on ``device``."""
    return [b for b, spec in ATTENTION_BACKENDS.items() if spec.kernel is not None and trains_here(b, device)]


def contenders(device) -> list[tuple[str, str, str]]:
    """(row name, library, attention backend): hfbert on every backend that trains here, transformers on sdpa and the
    kernels."""
    rows = []
    for backend, spec in ATTENTION_BACKENDS.items():
        if not trains_here(backend, device):
            continue
        rows.append((f"hfbert {backend}{LAYOUT_NOTE[spec.layout(device)]}", "hfbert", backend))
        if backend in PADDED_ROWS:
            rows.append((f"hfbert {backend}_padded", "hfbert", backend))
    return rows + [(f"transformers {backend}", "transformers", backend) for backend in (BASELINE, *kernels(device))]


def build(library: str, config: HfBertConfig, backend: str, device, seed: int = 0):
    torch.manual_seed(seed)
    ours = HfBertForPreTraining(config)
    if library == "hfbert":
        model = ours
    else:
        model = transformers.BertForPreTraining(config.to_bert_config())
        model.load_state_dict(ours.state_dict(), strict=False)
    model.set_attn_implementation(backend)
    return model.to(device).train()


def pretraining_row(name, library, backend, config, batches, args, device) -> dict:
    model = build(library, config, backend, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    padded = padded_encoder() if name.endswith("_padded") else contextlib.nullcontext()
    times, losses = [], []
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with padded:
        for i, batch in enumerate(batches):
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            stop = cuda_timer(device)
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seconds = stop()
            losses.append(float(loss.detach()))
            if i >= args.warmup:
                times.append(seconds)
    step = statistics.median(times)
    tokens = statistics.mean(float(b["attention_mask"].sum()) for b in batches[args.warmup:])
    flops = statistics.mean(model_flops(config, {"lengths": b["attention_mask"].sum(1).tolist(),
                                                 "supervised": int((b["labels"] != -100).sum())})
                            for b in batches[args.warmup:])
    row = {"row": name, "library": library, "attn_implementation": backend, "step_s": step,
           "tokens_per_s": tokens / step,
           "first_loss": losses[0],  # before any update: the same model on the same batch in every row
           "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else None,
           "mfu": None if args.allow_cpu else flops / step / (args.peak_tflops * 1e12)}
    del model, optimizer
    return row


def inference_rows(config, args, device) -> list[dict]:
    batches = sentence_batches(args.warmup + args.steps, 64 if not args.allow_cpu else 4, config.vocab_size, seed=7)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    ours = HfBertModel(config)
    theirs = transformers.BertModel(config.to_bert_config())
    theirs.load_state_dict(ours.state_dict(), strict=False)
    runs = [(f"hfbert {BASELINE}", ours, BASELINE, False), (f"hfbert {BASELINE} padding_free", ours, BASELINE, True),
            (f"transformers {BASELINE}", theirs, BASELINE, False)]
    for backend in kernels(device):
        runs += [(f"hfbert {backend} padding_free ({ATTENTION_BACKENDS[backend].layout(device)})", ours, backend, True),
                 (f"transformers {backend}", theirs, backend, False)]
    rows = []
    for name, model, backend, free in runs:
        model = model.to(device=device, dtype=dtype).eval()
        model.set_attn_implementation(backend)
        if hasattr(model.config, "padding_free"):
            model.config.padding_free = free
        times = []
        with torch.no_grad():
            for i, batch in enumerate(batches):
                batch = {k: v.to(device) for k, v in batch.items()}
                stop = cuda_timer(device)
                model(**batch)
                if i >= args.warmup:
                    times.append(stop())
                else:
                    stop()
        tokens = sum(float(b["attention_mask"].sum()) for b in batches[args.warmup:])
        padded = sum(b["attention_mask"].numel() for b in batches[args.warmup:])
        rows.append({"row": name, "tokens_per_s": tokens / sum(times), "padding_fraction": 1 - tokens / padded})
        model.to("cpu")
    return rows


def check(args: GpuCheckArguments) -> int:
    if not torch.cuda.is_available() and not args.allow_cpu:
        raise UsageError("no CUDA GPU is visible (torch.cuda.is_available() is False); this check needs one "
                         "H100/H200-class GPU (--allow_cpu only checks the script itself)")
    device = torch.device("cuda" if torch.cuda.is_available() and not args.allow_cpu else "cpu")
    if args.allow_cpu:
        config = HfBertConfig(vocab_size=1200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=64, attention_probs_dropout_prob=0.0)
    else:
        config = HfBertConfig.from_preset("base", attention_probs_dropout_prob=0.0)
    started = time.monotonic()
    report = {
        "what": "bf16 pretraining step (BERT-Base) and mixed-length inference, hfbert vs transformers",
        "device": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "kernels_installed": kernels(device), "settings": {k: v for k, v in dataclasses.asdict(args).items()},
        "pretraining": [], "inference": [], "skipped": [],
    }
    default_precision = PretrainConfig().mixed_precision
    report["default_mixed_precision"] = {"chosen": default_precision, "why": native_mixed_precision()[1]}
    print(f"hfbert pretrain's default precision here: {default_precision} ({native_mixed_precision()[1]})")
    bf16_gpu = device.type == "cuda" and torch.cuda.is_bf16_supported(including_emulation=False)
    if bf16_gpu and default_precision != "bf16":
        report["skipped"].append(f"the default precision on this bf16 GPU is {default_precision}, not bf16")
    report["packed_vs_padded"] = []
    sample = pretraining_batches(1, 4, 64, config.vocab_size, seed=1)[0]
    for row, length in ((1, 20), (2, 41)):  # rows of their own lengths, so that there is padding to skip
        sample["attention_mask"][row, length:] = 0
        sample["input_ids"][row, length:] = PAD
        sample["labels"][row, length:] = -100
    for backend in sorted({b for _, library, b in contenders(device) if library == "hfbert"}):
        try:
            row = packed_agreement(config, sample, backend, device)
        except (RuntimeError, ValueError, ImportError) as error:
            report["skipped"].append(f"packed check {backend}: {type(error).__name__}: {error}"[:500])
            continue
        report["packed_vs_padded"].append(row)
        print(f"packed vs padded {backend:20s} loss {row['packed_loss']:.6f} / {row['padded_loss']:.6f}  "
              f"grad rel diff {row['grad_max_rel_diff']:.2e}", flush=True)
    for length in args.lengths:
        rows = max(1, args.batch_tokens // length) if not args.allow_cpu else 4
        batches = pretraining_batches(args.warmup + args.steps, rows, length, config.vocab_size, seed=length)
        for name, library, backend in contenders(device):
            if time.monotonic() - started > args.budget_seconds:
                report["skipped"].append(f"{name} at {length}: over --budget_seconds")
                continue
            try:
                row = pretraining_row(name, library, backend, config, batches, args, device)
            except (RuntimeError, ValueError, ImportError) as error:  # one backend failing must not hide the others
                report["skipped"].append(f"{name} at {length}: {type(error).__name__}: {error}"[:500])
                continue
            row.update(length=length, rows=rows)
            report["pretraining"].append(row)
            print(f"{length:4d} {name:45s} {row['step_s'] * 1e3:8.1f} ms  {row['tokens_per_s']:10.0f} tok/s  "
                  f"MFU {row['mfu'] or 0:.3f}", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    baseline = {r["length"]: r["step_s"] for r in report["pretraining"] if r["row"] == f"transformers {BASELINE}"}
    for row in report["pretraining"]:
        if row["length"] in baseline:
            row["speedup_vs_transformers_sdpa"] = baseline[row["length"]] / row["step_s"]
    if time.monotonic() - started <= args.budget_seconds:
        report["inference"] = inference_rows(config, args, device)
        for row in report["inference"]:
            print(f"inference {row['row']:45s} {row['tokens_per_s']:10.0f} tok/s", flush=True)
    else:
        report["skipped"].append("inference: over --budget_seconds")
    report["seconds"] = time.monotonic() - started
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output} ({report['seconds']:.0f} s; skipped: {report['skipped'] or 'none'})")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = CommandParser(PROG, GpuCheckArguments, description=__doc__.split("\n\n")[0]).parse(argv)
    return run_command(PROG, lambda: check(args))


if __name__ == "__main__":
    sys.exit(main())
