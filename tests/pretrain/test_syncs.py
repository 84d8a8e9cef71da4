"""The training step reads the device once: counted on the host.

A GPU runs what the host has queued while the host queues more. Each time the host reads a value the device computes
(``.item()``, ``int()``, ``.tolist()``, ``.cpu()``, an op whose output size depends on values), it waits until the
device has caught up, and the device idles until the next kernels come. :class:`DeviceReads` counts such reads.

These tests run on a CPU, where no read waits for anything: they prove where the code would read the device, not the
time a GPU would lose there. What they count and what they cannot see:

* ``aten._local_scalar_dense`` (what ``.item()``, ``int()``, ``float()`` and ``bool()`` of a tensor dispatch to),
  except torch.optim's reads of its step counters: ``state["step"]`` is a host tensor on every device (unless the
  optimizer is ``capturable`` or ``fused``, which do not read it).
* Ops whose output size depends on the values (``nonzero``, ``masked_select``, boolean indexing): on a GPU the host
  waits for the count.
* ``Tensor.tolist()`` and ``Tensor.numpy()``: on a CPU tensor ``tolist`` dispatches no op, on a GPU tensor it is a
  copy to the host and a wait. A copy of a device tensor to the host (``aten._to_copy``) is counted too, but is seen on
  a GPU only: on a CPU, ``.cpu()`` returns the tensor itself, so a ``.cpu()`` read is seen as the ``tolist`` or
  ``item`` that follows it.
* Not seen: copies from the host to a GPU that wait (``.to("cuda")`` of unpinned memory without ``non_blocking``; on
  a CPU nothing is copied), and waits inside a kernel that dispatches nothing the mode sees. Reads of tensors that
  would stay on the host on a GPU are counted as if they were on the device (they only raise the count).

Modes are per thread: the read-ahead thread, which collates on the host, is not counted.
"""

from __future__ import annotations

import sys
import traceback

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import hfbert.pretrain.loop
from hfbert import HfBertConfig, HfBertForPreTraining
from hfbert.data import PreparedCorpus, PreparedDataError
from hfbert.pretrain import PretrainCallback, PretrainConfig, pretrain
from hfbert.pretrain.batches import BatchPlan, HostLayout, training_batch
from hfbert.pretrain.corpora import corpus_collator
from hfbert.pretrain.loop import StepDataError

aten = torch.ops.aten
SIZE_FROM_VALUES = {aten.nonzero.default, aten.masked_select.default}


def _reads_optimizer_step_counter() -> bool:
    frame = sys._getframe(2)
    for _ in range(8):  # torch's wrappers of .item() sit between the mode and torch.optim
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name == "_get_value" and "torch/optim" in code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


class DeviceReads(TorchDispatchMode):
    """Records every read of a tensor's values by the host (see the module docstring) on the thread that enters it:
    ``events`` holds (what, where) pairs, ``where`` the last hfbert frame of the stack."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self._methods = _Methods(self)

    def __enter__(self):
        self._methods.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        return self._methods.__exit__(*exc)

    def note(self, what: str) -> None:
        ours = [f"{frame.name} ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno})"
                for frame in traceback.extract_stack() if "/hfbert/" in frame.filename.replace("\\", "/")]
        self.events.append((what, ours[-1] if ours else "?"))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is aten._local_scalar_dense.default:
            if not _reads_optimizer_step_counter():
                self.note("item")
        elif func in SIZE_FROM_VALUES or (func is aten.index.Tensor and any(
                index is not None and index.dtype in (torch.bool, torch.uint8) for index in args[1])):
            self.note(str(func))
        elif (func is aten._to_copy.default and args[0].device.type != "cpu"
              and kwargs.get("device") == torch.device("cpu")):
            self.note("copy to the host")
        return func(*args, **kwargs)


class _Methods(TorchFunctionMode):
    """The reads that dispatch no op on a CPU tensor."""

    def __init__(self, reads: DeviceReads):
        super().__init__()
        self.reads = reads

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in (torch.Tensor.tolist, torch.Tensor.numpy):
            self.reads.note(func.__name__)
        return func(*args, **(kwargs or {}))


def test_the_counter_sees_each_kind_of_read():
    x = torch.arange(6.0)
    with DeviceReads() as reads:
        x.sum().item(), int(x[0]), bool(x.max() > 0), x.tolist(), x[x > 2], x.nonzero(), x.cpu()
    assert [what for what, _ in reads.events] == ["item", "item", "item", "tolist", "aten.index.Tensor",
                                                  "aten.nonzero.default"]


def job(folder, output_dir, **overrides) -> PretrainConfig:
    values = {
        "prepared": [str(folder)], "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                                             "intermediate_size": 37},
        "batch_size": 4, "max_seq_length": 32, "max_steps": 8, "logging_steps": 3, "eval_steps": 100,
        "save_steps": 100, "gradient_accumulation_steps": 2, "max_eval_examples": 8, "max_time_minutes": 60,
        "progress_bar": False, "report_to": ["jsonl"], "output_dir": str(output_dir),
        "fill_mask_text": "She was [MASK] happy.", "mixed_precision": "no",
    }
    return PretrainConfig.from_dict({**values, **overrides})


@pytest.mark.slow
def test_an_optimizer_step_reads_the_device_once(prepared_32, tmp_path):
    """Two micro-batches a step, a time limit, logging every third step: between the ends of two steps (the log line
    included) the training thread reads the device once, the step's agreed statistics and flags."""
    reads = DeviceReads()
    ends = []

    class Mark(PretrainCallback):
        def on_step_end(self, step, **kwargs):
            ends.append(len(reads.events))

    with reads:
        pretrain(job(prepared_32, tmp_path / "run"), callbacks=[Mark()])
    assert len(ends) == 8
    per_step = [later - earlier for earlier, later in zip(ends, ends[1:])]
    between = reads.events[ends[0] : ends[-1]]
    assert per_step == [1] * 7, between
    assert {what for what, _ in between} == {"tolist"} and all(where.startswith("train_step") for _, where in between)


@pytest.mark.parametrize("lengths", [[32, 27, 9], [32, 32, 32]], ids=["padded", "full"])
def test_the_model_reads_nothing_of_a_batch_its_caller_checked_and_laid_out(lengths):
    config = HfBertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                          intermediate_size=37, max_position_embeddings=32)
    model = HfBertForPreTraining(config)
    lengths = torch.tensor(lengths)
    ids = torch.randint(1, 99, (3, 32))
    labels = torch.full_like(ids, -100)
    labels[:, 3] = ids[:, 3]
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "labels": labels,
             "attention_mask": (torch.arange(32) < lengths[:, None]).long(),
             "next_sentence_label": torch.zeros(3, dtype=torch.long)}
    known = HostLayout.of(labels, lengths).model_inputs()
    with DeviceReads() as reads:
        model(**batch, **known, inputs_checked=True).loss.backward()
    assert reads.events == []
    with DeviceReads() as reads:  # not told: on a CPU the ids' range is read on the host (a GPU asserts it)
        model(**batch, **known)
    assert len(reads.events) == 4 and all(where.startswith("check_inputs") for _, where in reads.events)


def test_the_reader_checks_the_ids_of_a_batch_against_the_model(prepared_32):
    corpus = PreparedCorpus.open(prepared_32)
    collator = corpus_collator(corpus, corpus.load_tokenizer())
    plan = BatchPlan(corpus.blocks("train"), 4, 1, 42, 0)
    fits = HfBertConfig(vocab_size=300, max_position_embeddings=32)
    training_batch(corpus, collator, plan, 0, 0, model_config=fits)
    for config, message in ((HfBertConfig(vocab_size=50), r"input id \d+ is outside the vocabulary \[0, vocab_size=50"),
                            (HfBertConfig(vocab_size=300, type_vocab_size=1), "token type id 1 is outside"),
                            (HfBertConfig(vocab_size=300, max_position_embeddings=16), "sequence length 32 is longer")):
        with pytest.raises(PreparedDataError, match=f"rows of {prepared_32} do not fit the model: {message}"):
            training_batch(corpus, collator, plan, 0, 0, model_config=config)


def test_rows_that_cannot_be_read_stop_the_step_before_its_update(prepared_32, tmp_path, monkeypatch):
    """The process trains on a stand-in for the rows it could not read (so that, with several processes, its
    collectives meet the others'), and the step stops at its one read, before the weights move."""
    read = hfbert.pretrain.loop.training_batch

    def failing(corpus, collator, plan, micro, *args, **kwargs):
        if micro == 3:  # the second micro-batch of the second step
            raise PreparedDataError("shard data/train-00000.parquet is corrupt")
        return read(corpus, collator, plan, micro, *args, **kwargs)

    monkeypatch.setattr(hfbert.pretrain.loop, "training_batch", failing)
    kept = []

    class Keep(PretrainCallback):
        def on_step_end(self, step, model, **kwargs):
            kept.append((model, {name: p.detach().clone() for name, p in model.named_parameters()}))

    with pytest.raises(StepDataError, match="step 2: shard data/train-00000.parquet is corrupt"):
        pretrain(job(prepared_32, tmp_path / "run"), callbacks=[Keep()])
    assert len(kept) == 1
    model, after_first_step = kept[0]
    assert all(torch.equal(p, after_first_step[name]) for name, p in model.named_parameters())
    assert all(p.grad is None for p in model.parameters())
