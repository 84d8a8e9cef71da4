"""`hfbert bench --quick`: the report's structure and sane ratios. No timing assertions: the machine is shared."""

import json
import math

import pytest
import torch

from hfbert import bench


def _positive_finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench.json"
    assert bench.main(["--quick", "--sections", "a,b,d", "--output", str(out), "--threads", "1"]) == 0
    return json.loads(out.read_text())


def test_quick_report_structure(quick_report):
    report = quick_report
    assert report["command"].startswith("hfbert bench --quick")
    assert report["machine"]["nproc"] >= 1 and report["machine"]["torch"] == torch.__version__
    assert {"pretraining", "inference", "wordpiece", "targets"} <= report.keys()
    assert [(r["preset"], r["length"]) for r in report["pretraining"]] == [("mini", 16), ("mini", 32)]
    for row in report["pretraining"]:
        for side in ("hfbert", "transformers"):
            assert len(row[side]["times_s"]) == 3  # --quick: 3 alternating repeats
            assert _positive_finite(row[side]["tokens_per_s"]) and _positive_finite(row[side]["peak_memory_mb"])
        assert _positive_finite(row["speedup"]) and _positive_finite(row["memory_ratio"])
    kinds = [r["lengths"] for r in report["inference"]]
    assert kinds.count("uniform") == 2 and kinds.count("mixed") == 1
    for row in report["inference"]:
        assert _positive_finite(row["speedup"])
        if row["lengths"] == "mixed":
            assert row["padding_fraction"] > 0 and _positive_finite(row["speedup_padding_free"])
    assert report["wordpiece"]["available"] and _positive_finite(report["wordpiece"]["mb_per_s"])
    names = {t["target"] for t in report["targets"]}
    assert {"pretraining step mini @128", "inference uniform (min over presets)"} <= names


def test_render_is_markdown(quick_report):
    text = bench.render(quick_report)
    assert "| preset | length | batch |" in text and "Targets" in text


def test_pipeline_section_reports_the_data_measurement(monkeypatch, tmp_path):
    calls = []
    walls = {1: iter([1.0, 2.0, 1.0]), 2: iter([0.5, 1.2, 0.6])}  # round 2 ran on a slow spell of the machine

    def fake_measure(num_proc, corpus, tokenizer_dir, **kwargs):
        calls.append(num_proc)
        wall = next(walls[num_proc])
        return {"num_proc": num_proc, "wall_s": wall, "cpu_s": 1.0 * num_proc, "tokens": 1000,
                "instances": 10, "tokens_per_s": 1000.0 / wall, "tokens_per_cpu_s": 1000.0}

    def fake_concurrent(copies, corpus, tokenizer_dir, **kwargs):
        calls.append("1+1")
        return [{"num_proc": 1, "wall_s": 1.0 + 0.25 * k, "cpu_s": 1.0, "tokens": 1000, "instances": 10,
                 "tokens_per_s": 1000.0, "tokens_per_cpu_s": 1000.0} for k in range(copies)]

    import hfbert.data.bench

    monkeypatch.setattr(hfbert.data.bench, "measure_pipeline", fake_measure)
    monkeypatch.setattr(hfbert.data.bench, "measure_concurrent", fake_concurrent)
    monkeypatch.setattr(bench, "_tokenizer_dir", lambda corpus, scratch, quick: scratch)
    args = bench._parser().parse_args(["--quick", "--repeats", "3"])
    rows = bench.bench_pipeline(args, tmp_path)
    assert calls == [1, 2, "1+1", "1+1", 2, 1, 1, 2, "1+1"]  # alternating rounds
    assert [r["num_proc"] for r in rows] == [1, 2, "1+1"] and all(r["available"] for r in rows)
    assert rows[0]["wall_s_by_round"] == [1.0, 2.0, 1.0]
    assert rows[1]["scaling_vs_1_proc"] == pytest.approx(1 / 0.6)  # per round: 2.0, 1.67, 1.67
    assert rows[1]["scaling_of_medians"] == pytest.approx(1.0 / 0.6)
    assert rows[2]["tokens"] == 2000 and rows[2]["wall_s"] == 1.25  # both builds' tokens, the longer wall
    assert rows[2]["scaling_vs_1_proc"] == pytest.approx(2 * 1.0 / 1.25)
    assert rows[0]["vs_original_per_core"] == pytest.approx(1000 / bench.ORIGINAL_PIPELINE_TOKENS_PER_CORE_S)
    text = bench.render({"data_pipeline": rows, "targets": bench.targets({"data_pipeline": rows})})
    assert "| 1+1 |" in text and "two independent 1-process builds" in text


def test_pipeline_failure_is_a_not_available_row(monkeypatch, tmp_path):
    import hfbert.data.bench

    def broken(*args, **kwargs):
        raise RuntimeError("no corpus")

    monkeypatch.setattr(hfbert.data.bench, "measure_pipeline", broken)
    monkeypatch.setattr(hfbert.data.bench, "measure_concurrent", broken)
    monkeypatch.setattr(bench, "_tokenizer_dir", lambda corpus, scratch, quick: scratch)
    rows = bench.bench_pipeline(bench._parser().parse_args(["--quick"]), tmp_path)
    assert [r["available"] for r in rows] == [False, False, False] and "no corpus" in rows[0]["reason"]
    assert "not available" in bench.render({"data_pipeline": rows})


def test_concurrent_builds_start_together(tmp_path):
    """The barrier: every party waits until all are ready (here: the other party is this test)."""
    import threading
    import time

    from hfbert.data.bench import _wait_for_parties

    released = []
    waiter = threading.Thread(target=lambda: (_wait_for_parties(tmp_path, 2), released.append(time.monotonic())))
    waiter.start()
    time.sleep(0.2)
    assert not released  # still waiting for the second party
    (tmp_path / "ready-other").touch()
    waiter.join(5)
    assert released
    alone = tmp_path / "alone"
    alone.mkdir()
    with pytest.raises(TimeoutError, match="of 3 benchmark processes"):
        _wait_for_parties(alone, 3, timeout=0.05)


def test_peak_memory_counts_the_largest_live_tensor():
    held = torch.zeros(1)

    def step():
        a = torch.ones(2**20)  # 4 MiB
        b = a * 2  # 8 MiB live at once
        del a, b

    peak = bench.peak_memory(step, torch.device("cpu"))
    assert peak is not None and 8 * 2**20 <= peak < 16 * 2**20
    assert bench._resident_bytes(torch.nn.Linear(4, 4)) == (16 + 4) * 4
    del held


def test_pretraining_batch_follows_the_original_layout():
    batch = bench.pretraining_batch(16, 64, 1000, short_seq_prob=0.5, seed=1)
    mask, labels, ids = batch["attention_mask"], batch["labels"], batch["input_ids"]
    assert (ids[:, 0] == bench.CLS).all() and (labels[:, 0] == -100).all()
    assert (labels[mask == 0] == -100).all() and (ids[mask == 0] == bench.PAD).all()
    supervised = (labels != -100).sum(1).float()
    assert torch.allclose(supervised, (mask.sum(1) - 3).float() * 0.15, atol=1)  # 15% of the non-special tokens
    assert (mask.sum(1) < 64).any()  # some rows are short


def test_unknown_section_is_an_error(tmp_path):
    with pytest.raises(SystemExit, match="unknown section"):
        bench.main(["--quick", "--sections", "x", "--output", str(tmp_path / "x.json")])


def test_alternate_adds_rounds_for_short_runs_and_pairs_the_ratio():
    order = []

    def fake(name, seconds):
        def run():
            order.append(name)
            return seconds
        return run

    times = bench.alternate({"a": fake("a", 0.125), "b": fake("b", 0.25)}, repeats=3, warmup=1, min_seconds=1.0)
    assert order[:2] == ["a", "b"] and order[2:6] == ["a", "b", "b", "a"]  # warm-up, then A B, B A, ...
    assert len(times["a"]) == 8 and sum(times["a"]) == 1.0  # 3 rounds were not a second of "a"
    capped = bench.alternate({"a": fake("a", 0.001)}, repeats=2, min_seconds=100.0)
    assert len(capped["a"]) == 8  # at most 4x --repeats
    # A machine that slows down half-way: each round's pair shares the slow-down, the paired ratio stays 2.
    theirs, ours = [2.0, 2.0, 6.0, 6.0, 6.0], [1.0, 1.0, 3.0, 3.0, 3.0]
    assert bench.paired_speedup(theirs, ours) == 2.0
    assert bench.paired_speedup([], []) is None
