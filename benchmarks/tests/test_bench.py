"""`python benchmarks/bench.py --quick`: what it measures on (changing batches, the same for every contender), the
report's rows, and the measuring tools. No timing assertions: the machine is shared."""

import json
import math

import pytest
import torch

import bench
from hfbert import HfBertConfig
from hfbert.arguments import UsageError
from side_by_side import arguments, flops, harness, inputs, sections
from side_by_side.contenders import PEERS, ContenderSpec, model_config
from side_by_side.report import render


def _positive_finite(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def _quick(tmp_path, *options):
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--output", str(out), "--threads", "1", *options]) == 0
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory):
    return _quick(tmp_path_factory.mktemp("bench"), "--sections", "a", "b")


def test_every_timed_step_gets_a_new_batch_the_same_for_every_contender(quick_report):
    for row in quick_report["pretraining"]:
        assert row["inputs"] == "changing" and row["contenders"] == ["hfbert", "transformers"]
        ours, theirs = row["hfbert"]["batch_digests"], row["transformers"]["batch_digests"]
        assert ours == theirs  # batch k of one contender is batch k of the other
        assert len(ours) == row["steps"] == len(row["hfbert"]["times_s"]) >= 3
        assert all(a != b for a, b in zip(ours, ours[1:]))  # consecutive timed batches differ
    for row in quick_report["inference"]:
        digests = [row[name]["batch_digests"] for name in row["contenders"]]
        assert all(d == digests[0] for d in digests) and len(set(digests[0])) == len(digests[0])


def test_report_has_a_ratio_row_for_each_peer(quick_report):
    report = quick_report
    assert report["command"].startswith("python benchmarks/bench.py --quick")
    assert report["machine"]["torch"] == torch.__version__
    assert "shipped with hfbert" in report["corpus"]["name"]
    assert [(r["preset"], r["length"]) for r in report["pretraining"]] == [("mini", 16), ("mini", 32)]
    for row in report["pretraining"]:
        assert 0 < row["tokens_per_batch"] <= row["padded_tokens_per_batch"] <= row["batch_size"] * row["length"]
        assert row["supervised_per_batch"] > 0
        for side in ("hfbert", "transformers"):
            assert _positive_finite(row[side]["tokens_per_s"]) and _positive_finite(row[side]["peak_memory_mb"])
            assert row[side]["rss_growth_mb"] is not None and row[side]["rss_end_mb"] > 0
        assert _positive_finite(row["hfbert"]["speedup"]) and "speedup" not in row["transformers"]
    kinds = [r["lengths"] for r in report["inference"]]
    assert kinds == ["uniform 16", "uniform 32", "mixed"]
    mixed = report["inference"][-1]
    assert mixed["padding_fraction"] > 0 and _positive_finite(mixed["speedup_padding_free"])
    text = render(report)
    assert "| mini | 16 | 4 |" in text and "| hfbert, padding_free |" in text and "a new batch every step" in text
    for word in ("issue", "target"):
        assert word not in text.lower()


def test_work_ratio_is_transformers_flops_over_the_contenders(quick_report):
    """hfbert computes vocabulary logits at the supervised positions only and the encoder on the real tokens, so it
    does less work per step than transformers on every quick batch; transformers' ratio to itself is 1."""
    for row in quick_report["pretraining"]:
        assert row["hfbert"]["work_ratio"] > 1 and row["transformers"]["work_ratio"] == 1.0
    text = render(quick_report)
    assert "| work ratio |" in text and "| 1.00x | 1.00x |" in text  # transformers: speed-up and work ratio
    config = model_config("mini", 500, quick=True)
    call = {"tokens": 50, "lengths": [16, 16, 10, 8], "rows": 4, "width": 16, "supervised": 8}  # 14 of 64 padding
    theirs, ours = PEERS["transformers"], PEERS["hfbert"]
    assert flops.contender_flops(config, theirs, call) == flops.training_flops(
        config, call["lengths"], 8, padded_width=16, logits_everywhere=True)
    assert flops.contender_flops(config, ours, call) == flops.training_flops(config, call["lengths"], 8)
    assert flops.contender_flops(config, PEERS["hfbert+compile"], call) == flops.training_flops(
        config, call["lengths"], 8, padded_width=16)
    assert flops.work_ratio(config, ContenderSpec("hfbert", backend="eager"), theirs, [call]) == pytest.approx(
        flops.contender_flops(config, theirs, call) / flops.contender_flops(config, ours, call))
    assert flops.model_flops(config, call) == flops.contender_flops(config, ours, call)  # MFU: the useful work


def test_training_flops_against_a_hand_count():
    """One layer, d = 4, I = 8, V = 10; rows of 3 and 2 real tokens padded to 4, 2 supervised positions."""
    config = HfBertConfig(vocab_size=10, hidden_size=4, num_hidden_layers=1, num_attention_heads=1,
                          intermediate_size=8)
    dense = 4 * 4 * 4 + 2 * 4 * 8  # Q, K, V, output projections + feed-forward, per position: 128 multiply-adds
    head = 4 * 4 + 4 * 10  # MLM transform + vocabulary projection, per position with logits: 56
    pooler = 4 * 4 + 2 * 4  # pooler + NSP classifier, per row: 24
    real = 5 * dense + (3 * 3 + 2 * 2) * 2 * 4 + 2 * head + 2 * pooler  # QK^T and AV over each row's real tokens
    padded = 8 * dense + (4 * 4 + 4 * 4) * 2 * 4 + 8 * head + 2 * pooler  # every position, logits at all 8
    assert flops.training_flops(config, [3, 2], 2) == 6 * real == 6 * 904
    assert flops.training_flops(config, [3, 2], 2, padded_width=4, logits_everywhere=True) == 6 * padded == 6 * 1776


def test_a_row_per_attention_backend(tmp_path):
    report = _quick(tmp_path, "--sections", "a", "b", "--lengths", "16", "--attn_implementations", "eager", "sdpa")
    backends = {"hfbert eager": "eager", "hfbert": "sdpa", "transformers": "sdpa"}
    (row,) = report["pretraining"]
    assert row["contenders"] == list(backends)
    assert len({tuple(row[name]["batch_digests"]) for name in backends}) == 1  # the same batches, alternated
    for name, backend in backends.items():
        assert row[name]["attn_implementation"] == backend and _positive_finite(row[name]["tokens_per_s"])
        assert _positive_finite(row[name]["peak_memory_mb"]) and row[name]["work_ratio"] >= 1
    assert _positive_finite(row["hfbert eager"]["speedup"]) and row["speedup"] == row["hfbert"]["speedup"]
    for row in report["inference"]:
        for name in ("hfbert eager", "hfbert"):
            assert row[name]["attn_implementation"] == backends[name]
            assert _positive_finite(row[name]["tokens_per_s"]) and _positive_finite(row[name]["speedup"])
    mixed = report["inference"][-1]
    assert mixed["contenders"] == ["hfbert eager", "hfbert", "transformers", "hfbert eager padding_free",
                                   "hfbert padding_free"]
    assert mixed["hfbert eager padding_free"]["attn_implementation"] == "eager"
    text = render(report)
    assert "| hfbert eager |" in text and "| hfbert eager, padding_free |" in text


def test_an_unknown_attention_backend_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--attn_implementations", "sdpa", "flash_attn", "--output", str(tmp_path / "never.json")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith(f"{arguments.PROG}: error: --attn_implementations")
    assert "'flash_attn'" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "never.json").exists()


def test_repeated_inputs_really_repeat(tmp_path):
    report = _quick(tmp_path, "--sections", "a", "--repeated_inputs", "--lengths", "16")
    for row in report["pretraining"]:
        assert row["inputs"] == "repeated"
        assert len(set(row["hfbert"]["batch_digests"] + row["transformers"]["batch_digests"])) == 1
    assert "one batch repeated" in render(report)


def test_one_contender_alone_in_a_process(tmp_path):
    report = _quick(tmp_path, "--sections", "a", "--contenders", "hfbert", "--lengths", "16")
    (row,) = report["pretraining"]
    assert row["contenders"] == ["hfbert"] and "transformers" not in row and "speedup" not in row["hfbert"]
    assert row["hfbert"]["rss_end_mb"] > 0 and "| hfbert |" in render(report)


def test_compiled_contenders_are_peer_rows_with_their_compile_time(tmp_path, monkeypatch):
    """The wiring of the compiled rows (a real compile takes minutes on a small CPU: that is measured in the docs,
    not in the test suite). The stand-in for torch.compile is slow on its first two calls, as a compile is."""
    compiled = []

    class SlowFirstCalls(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self._orig_mod, self.calls = model, 0

        def forward(self, **batch):
            self.calls += 1
            if self.calls <= 2:
                torch.ones(2**21).cumsum(0)  # stands in for compile work
            return self._orig_mod(**batch)

    monkeypatch.setattr(torch, "compile", lambda model: compiled.append(model) or SlowFirstCalls(model))
    report = _quick(tmp_path, "--sections", "a", "--compile_presets", "mini")
    assert len(compiled) == 4  # hfbert and transformers, at both lengths
    for row in report["pretraining"]:
        assert row["contenders"] == ["hfbert", "transformers", "hfbert+compile", "transformers+compile"]
        digests = {tuple(row[name]["batch_digests"]) for name in row["contenders"]}
        assert len(digests) == 1
        for name in ("hfbert+compile", "transformers+compile"):
            assert _positive_finite(row[name]["speedup"]) and row[name]["compile_s"] >= 0
            assert len(row[name]["warmup_s"]) == harness.WARMUP_STEPS
        assert row["transformers+compile"]["work_ratio"] == 1.0  # compiled hfbert runs the padded encoder:
        assert 1 < row["hfbert+compile"]["work_ratio"] <= row["hfbert"]["work_ratio"]  # only the head saves work
    text = render(report)
    assert "| transformers + torch.compile |" in text and "| hfbert + torch.compile |" in text


def test_pretraining_batches_are_masked_afresh(tmp_path):
    args = arguments.BenchArguments(quick=True)
    corpus = inputs.load_corpus(args, tmp_path)
    assert len(corpus.tokenizer) == args.vocab_size
    draw = inputs.pretraining_draw(corpus, 32, 8, args)
    first, second = draw(), draw()
    for batch in (first, second):
        mask, labels, ids = batch["attention_mask"], batch["labels"], batch["input_ids"]
        assert (ids[:, 0] == corpus.tokenizer.cls_token_id).all() and (labels[mask == 0] == -100).all()
        assert ((labels != -100).sum(1) >= 1).all() and set(batch["next_sentence_label"].tolist()) <= {0, 1}
        assert (ids[labels != -100] == corpus.tokenizer.mask_token_id).float().mean() > 0.5  # 80% [MASK]
    assert inputs.digest(first) != inputs.digest(second)
    again = inputs.pretraining_draw(corpus, 32, 8, args)
    assert inputs.digest(again()) == inputs.digest(first)  # seeded: the same sequence in every run


def test_batch_stream_gives_every_contender_the_same_sequence():
    counter = iter(range(100))
    stream = inputs.BatchStream(lambda: {"k": next(counter)}, ["a", "b"])
    seen_a = [stream.next("a")[1]["k"] for _ in range(3)]
    seen_b = [stream.next("b")[1]["k"] for _ in range(2)]
    assert seen_a == [0, 1, 2] and seen_b == [0, 1]
    assert stream.held == [2]  # batches both have had are dropped
    repeated = inputs.BatchStream(lambda: {"k": next(counter)}, ["a"], repeated=True)
    assert [repeated.next("a")[1]["k"] for _ in range(3)] == [3, 3, 3]


def test_memory_a_step_keeps_shows_as_growth():
    kept = []
    stream = inputs.BatchStream(lambda: {"x": torch.zeros(1)}, ["grows", "steady"])
    grows = harness.Contender("grows", lambda batch: kept.append(torch.ones(8 * 2**20)), stream, torch.device("cpu"))
    steady = harness.Contender("steady", lambda batch: torch.ones(8 * 2**20).sum(), stream, torch.device("cpu"))
    harness.alternate({"grows": grows, "steady": steady}, repeats=3, warmup=1)
    assert grows.memory(1)["rss_growth_mb"] >= 3 * 32 * 0.9  # three timed steps kept 32 MiB each
    assert abs(steady.memory(1)["rss_growth_mb"]) < 16
    del kept


def test_bad_options_are_one_line_errors(tmp_path, capsys):
    for options, message in ((["--sections", "x"], "--sections"), (["--lengths", "5"], "--lengths"),
                             (["--corpus", str(tmp_path / "missing.txt")], "--corpus"),
                             (["--presets", "huge"], "--presets"), (["--repeats", "0"], "--repeats")):
        with pytest.raises(SystemExit) as exit_:
            bench.main([*options, "--output", str(tmp_path / "never.json")])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.startswith(f"{arguments.PROG}: error: ") and message in err, err
        assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "never.json").exists()


def _parse(*options):
    return arguments.BenchParser(arguments.PROG, arguments.BenchArguments).parse_values(list(options))


def test_list_options_take_words_and_the_comma_form():
    spaced = _parse("--presets", "mini", "base", "--lengths", "128", "512", "--sections", "a", "b",
                    "--contenders", "hfbert", "transformers", "--attn_implementations", "eager", "sdpa",
                    "--compile_presets", "mini", "--long_presets", "base")
    commas = _parse("--presets", "mini,base", "--lengths", "128,512", "--sections", "a,b",
                    "--contenders", "hfbert,transformers", "--attn_implementations", "eager,", "sdpa",
                    "--compile_presets", "mini", "--long_presets", "base")
    assert spaced == commas
    assert (spaced.presets, spaced.lengths, spaced.sections) == (["mini", "base"], [128, 512], ["a", "b"])
    assert spaced.contenders == ["hfbert", "transformers"] and spaced.attn_implementations == ["eager", "sdpa"]
    assert spaced.grid() == [("mini", 128), ("base", 128), ("base", 512)]
    assert _parse("--compile_presets", "none").compile_presets == []
    with pytest.raises(UsageError, match="--lengths: expected integers"):
        _parse("--lengths", "128,long")


def test_quick_values_fill_only_the_options_left_unset():
    full, quick = _parse(), _parse("--quick")
    for option, value in arguments.DEFAULTS.items():
        assert getattr(full, option) == value and getattr(quick, option) == arguments.QUICK[option]
    assert quick.batch_size_for("mini", 32) == 4 and full.batch_size_for("base", 512) == 2
    given = _parse("--quick", "--lengths", "64", "--repeats", "2", "--compile_presets", "mini")
    assert (given.lengths, given.repeats, given.compile_presets) == ([64], 2, ["mini"])
    assert given.presets == ["mini"] and given.vocab_size == 500  # the rest stays quick
    assert arguments.BenchArguments(quick=True, repeats=7).repeats == 7


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

    import data_bench

    monkeypatch.setattr(data_bench, "measure_pipeline", fake_measure)
    monkeypatch.setattr(data_bench, "measure_concurrent", fake_concurrent)
    corpus = inputs.BenchCorpus(tmp_path / "c.txt", "c.txt", None, tmp_path, "sentences", None)
    rows = sections.bench_pipeline(corpus, arguments.BenchArguments(quick=True, repeats=3))
    assert calls == [1, 2, "1+1", "1+1", 2, 1, 1, 2, "1+1"]  # alternating rounds
    assert [r["num_proc"] for r in rows] == [1, 2, "1+1"] and all(r["available"] for r in rows)
    assert rows[0]["wall_s_by_round"] == [1.0, 2.0, 1.0]
    assert rows[1]["scaling_vs_1_proc"] == pytest.approx(1 / 0.6)  # per round: 2.0, 1.67, 1.67
    assert rows[1]["scaling_of_medians"] == pytest.approx(1.0 / 0.6)
    assert rows[2]["tokens"] == 2000 and rows[2]["wall_s"] == 1.25  # both builds' tokens, the longer wall
    assert rows[2]["scaling_vs_1_proc"] == pytest.approx(2 * 1.0 / 1.25)
    assert "| 1+1 |" in render({"data_pipeline": rows})


def test_pipeline_failure_is_a_not_available_row(monkeypatch, tmp_path):
    import data_bench

    def broken(*args, **kwargs):
        raise RuntimeError("no corpus")

    monkeypatch.setattr(data_bench, "measure_pipeline", broken)
    monkeypatch.setattr(data_bench, "measure_concurrent", broken)
    corpus = inputs.BenchCorpus(tmp_path / "c.txt", "c.txt", None, tmp_path, "sentences", None)
    rows = sections.bench_pipeline(corpus, arguments.BenchArguments(quick=True))
    assert [r["available"] for r in rows] == [False, False, False] and "no corpus" in rows[0]["reason"]
    assert "not available" in render({"data_pipeline": rows})


def test_peak_memory_counts_the_largest_live_tensor():
    def step():
        a = torch.ones(2**20)  # 4 MiB
        b = a * 2  # 8 MiB live at once
        del a, b

    peak = harness.peak_memory(step, torch.device("cpu"))
    assert peak is not None and 8 * 2**20 <= peak < 16 * 2**20
    assert harness.resident_bytes(torch.nn.Linear(4, 4)) == (16 + 4) * 4


def test_alternate_adds_rounds_for_short_runs_and_pairs_the_ratio():
    order = []

    def fake(name, seconds):
        def run():
            order.append(name)
            return seconds
        return run

    times, warmups = harness.alternate({"a": fake("a", 0.125), "b": fake("b", 0.25)}, repeats=3, warmup=1,
                                     min_seconds=1.0)
    assert order[:2] == ["a", "b"] and order[2:6] == ["a", "b", "b", "a"]  # warm-up, then A B, B A, ...
    assert warmups == {"a": [0.125], "b": [0.25]}
    assert len(times["a"]) == 8 and sum(times["a"]) == 1.0  # 3 rounds were not a second of "a"
    capped, _ = harness.alternate({"a": fake("a", 0.001)}, repeats=2, min_seconds=100.0)
    assert len(capped["a"]) == 8  # at most 4x --repeats
    # A machine that slows down half-way: each round's pair shares the slow-down, the paired ratio stays 2.
    theirs, ours = [2.0, 2.0, 6.0, 6.0, 6.0], [1.0, 1.0, 3.0, 3.0, 3.0]
    assert harness.paired_speedup(theirs, ours) == 2.0
    assert harness.paired_speedup([], []) is None
