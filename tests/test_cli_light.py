"""The ``hfbert`` command starts without torch, transformers or datasets: its help, every command's help, a bad
setting and ``hfbert push`` run in processes that never import them; a command that works on models registers the
Auto classes once its settings are read; ``import hfbert`` anywhere else registers them on import.

Each command runs in a fresh process started the way the console script starts it (a program named ``hfbert``
calling ``hfbert.cli.main``), which reports at exit the heavy packages it imported."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hfbert.cli import COMMANDS, PARSERS

HEAVY = ("torch", "transformers", "datasets")

# The console script's own code (pip writes the same two lines), and a report of the heavy packages at exit.
PROGRAM = f"""
import atexit, json, os, sys
from pathlib import Path
atexit.register(lambda: Path(os.environ["IMPORTED"]).write_text(
    json.dumps([name for name in {HEAVY!r} if name in sys.modules])))
from hfbert.cli import main
sys.exit(main())
"""

# One bad setting per command: (arguments, what the one line says).
BAD_SETTINGS = {
    "pretrain": (["--batch_size", "0"], "batch_size must be >= 1, got 0"),
    "train-tokenizer": (["--input", "corpus.txt", "--vocab_size", "3", "--output_dir", "tok"],
                        "--vocab_size (3) must exceed the 5 special tokens"),
    "prepare": (["--output_dir", "prepared", "--num_proc", "0"], "--num_proc must be >= 1"),
    "push": (["folder", "user/x", "--hub_timeout", "-1"], "--hub_timeout must be a positive number of seconds"),
    "convert": (["missing", "out"], "source folder missing does not exist"),
    "evaluate": (["model", "--suite", "local", "--max_train_samples", "0"], "--max_train_samples must be >= 1"),
    "robustness": (["--model", "m", "--data", "d", "--output", "o", "--ber", "2"], "--ber values must be in (0, 1]"),
}


def run_hfbert(args, tmp_path, env=None, timeout=120):
    """``hfbert ARGS`` in a new process in ``tmp_path``; (completed process, heavy packages it imported)."""
    program = tmp_path / "bin" / "hfbert"
    program.parent.mkdir(exist_ok=True)
    program.write_text(PROGRAM)
    imported = tmp_path / "imported.json"
    env = {**(env or os.environ), "IMPORTED": str(imported)}
    done = subprocess.run([sys.executable, str(program), *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return done, json.loads(imported.read_text())


def test_every_command_that_works_on_models_has_a_light_parser():
    assert set(PARSERS) == set(COMMANDS) - {"push"}
    assert set(BAD_SETTINGS) == set(COMMANDS)


def test_the_command_list_loads_nothing_heavy(tmp_path):
    done, imported = run_hfbert(["--help"], tmp_path)
    assert done.returncode == 0 and imported == [], (done.stderr, imported)
    assert all(f"  {name} " in done.stdout for name in COMMANDS)


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_a_command_s_help_loads_nothing_heavy(name, tmp_path):
    done, imported = run_hfbert([name, "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: hfbert {name}"), done.stdout[:200]
    assert "--config FILE" in done.stdout  # the options, not the command list
    assert imported == [], f"hfbert {name} --help imported {imported}"


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_a_bad_setting_is_one_line_and_loads_nothing_heavy(name, tmp_path):
    (tmp_path / "corpus.txt").write_text("a line\n")
    args, message = BAD_SETTINGS[name]
    done, imported = run_hfbert([name, *args], tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"hfbert {name}: error: {message}") and done.stderr.count("\n") == 1, done.stderr
    assert imported == [], f"hfbert {name} with a bad setting imported {imported}"


@pytest.mark.slow
def test_push_to_a_silent_hub_loads_nothing_heavy_and_ends_at_its_limit(silent_server, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "hfbert"}')
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=silent_server.url, HF_TOKEN="hf_test")
    started = time.monotonic()
    done, imported = run_hfbert(["push", "out", "user/x", "--hub_timeout", "2"], tmp_path, env=env)
    assert time.monotonic() - started < 2 + 20  # the limit, plus the start of a Python process on a busy machine
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "did not answer within 2 s" in done.stderr
    assert imported == []


def _heavy_imports(program: list[str], args: list[str], cwd: Path) -> set[str]:
    """The heavy modules ``python -X importtime PROGRAM ARGS`` imported; it must print its usage."""
    done = subprocess.run([sys.executable, "-X", "importtime", *program, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: hfbert"), done.stderr[-2000:]
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return {name for name in modules if name.split(".")[0] in HEAVY}


@pytest.mark.slow
def test_evaluate_against_a_silent_hub_is_one_line(silent_server, tmp_path):
    """A Hub model id looked up before any training: a Hub that does not answer is a usage error, as for
    ``hfbert pretrain --init_from``."""
    rows = [{"text": f"row {i}", "label": i % 2} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "suite.json").write_text(json.dumps({"name": "one", "tasks": [
        {"name": "rows", "type": "classification", "file": "rows.jsonl", "validation_rows": 4,
         "columns": {"text": "text", "label": "label"}, "metrics": ["eval_accuracy"]}]}))
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(HF_ENDPOINT=silent_server.url, HFBERT_HUB_TIMEOUT="2", HF_HOME=str(tmp_path / "hf"))
    done, _ = run_hfbert(["evaluate", "user/x", "--suite", "suite.json", "--seeds", "1"], tmp_path, env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith("hfbert evaluate: error: MODEL user/x: the Hub at "), done.stderr
    assert "did not answer within 2 s" in done.stderr


@pytest.mark.slow
def test_the_installed_console_script_starts_light(tmp_path):
    """The real entry point (pyproject's ``[project.scripts]``), read with ``-X importtime``."""
    script = Path(sys.executable).with_name("hfbert")
    if not script.is_file():
        pytest.skip("the hfbert console script is not installed beside this Python")
    for args in (["--help"], ["pretrain", "--help"]):
        assert not _heavy_imports([str(script)], args, tmp_path), args


@pytest.mark.slow
@pytest.mark.parametrize("program", [["-m", "hfbert.cli"], ["-mhfbert.cli"], ["-B", "-m", "hfbert.cli"]])
def test_python_m_hfbert_cli_starts_light(program, tmp_path):
    for args in (["--help"], ["pretrain", "--help"]):
        assert not _heavy_imports(program, args, tmp_path), (program, args)


@pytest.mark.slow
def test_a_command_that_works_on_models_registers_the_auto_classes(tmp_path):
    """``hfbert convert`` of a transformers BERT folder writes hfbert's ``auto_map``: the classes were registered
    (after the settings were read) in a process whose ``import hfbert`` did not register them."""
    from transformers import BertConfig, BertForMaskedLM

    BertForMaskedLM(BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=37)).save_pretrained(tmp_path / "bert")
    done, imported = run_hfbert(["convert", "bert", "hfbert"], tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(imported) >= {"torch", "transformers"}
    config = json.loads((tmp_path / "hfbert" / "config.json").read_text())
    assert config["model_type"] == "hfbert"
    assert config["auto_map"]["AutoModelForMaskedLM"] == "modeling_hfbert.HfBertForMaskedLM"


@pytest.mark.slow
def test_in_the_command_s_process_a_model_name_registers_on_first_use(tmp_path):
    """What a plugin or a callback running inside the command sees: ``hfbert.HfBertModel`` loads and registers."""
    program = tmp_path / "hfbert"
    program.write_text(textwrap.dedent("""
        import sys
        import hfbert
        assert "torch" not in sys.modules and "HfBertModel" not in vars(hfbert)  # nothing loaded, nothing registered
        assert set(hfbert.__all__) <= set(dir(hfbert))
        hfbert.HfBertModel  # the first use of a name: the model code, and the Auto classes registered
        from transformers import AutoConfig
        print(type(AutoConfig.for_model("hfbert")).__name__)
    """))
    done = subprocess.run([sys.executable, str(program)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "HfBertConfig"


def test_the_parser_reads_training_arguments_as_transformers_does():
    """The recipes' settings (``TrainingArguments`` and their own dataclasses): every option, its default, choices,
    arity and the value each spelling gives, the same as transformers' ``HfArgumentParser``."""
    from transformers import HfArgumentParser, TrainingArguments

    from hfbert.arguments import CommandParser
    from hfbert.recipes.finetune_classification import DataArguments
    from hfbert.tasks.recipe import ModelArguments

    def options(parser):
        return {action.option_strings[0]: action for action in parser._actions
                if action.option_strings and action.dest not in ("help", "config")}

    probes = ["1", "0.5", "true", "no", "steps", "epoch", "linear", "x"]
    for dtype in (TrainingArguments, ModelArguments, DataArguments):
        theirs, ours = options(HfArgumentParser(dtype)), options(CommandParser("x", dtype))
        assert set(theirs) <= set(ours), set(theirs) - set(ours)
        for option, action in theirs.items():
            mine = ours[option]
            if mine.metavar == "JSON":  # a mapping: JSON/YAML text here (transformers reads a string)
                continue
            assert set(action.option_strings) <= set(mine.option_strings), option  # here aliases get dashes too
            got = [(a.nargs, a.const, a.default, a.required, list(a.choices or [])) for a in (mine, action)]
            assert got[0] == got[1], option
            for text in probes if action.type is not None else ():
                assert _read(mine.type, text) == _read(action.type, text), (option, text)


def _read(convert, text):
    try:
        return repr(convert(text))
    except Exception as err:  # noqa: BLE001 -- a refusal is compared by kind
        return type(err).__name__ if type(err).__name__ != "ArgumentTypeError" else "refused"
