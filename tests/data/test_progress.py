"""Progress written to a file or a pipe is plain lines, not a bar's redraws (hfbert.data.progress): hfbert pretrain's
steps and the "Preparing shards" tasks; a bar asked for explicitly is drawn wherever the output goes."""

import io
import subprocess
import sys

import datasets
import pytest

from hfbert.data.engines import run_tasks
from hfbert.data.progress import Progress, on_terminal

from helpers.pretraining import settings, write_config


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_off_a_terminal_and_a_bar_on_one():
    log = io.StringIO()
    with Progress("steps", 40, unit=" steps", every=10, stream=log) as progress:
        for step in range(1, 41):
            progress.update()
            if step % 20 == 0:
                progress.note(loss=f"{1 / step:.3f}")
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue() and not on_terminal(log)
    assert [line.split(",")[0] for line in lines] == [
        "steps: 10/40 steps (25%)", "steps: 20/40 steps (50%)", "steps: 20/40 steps (50%)", "steps: 30/40 steps (75%)",
        "steps: 40/40 steps (100%)", "steps: 40/40 steps (100%)"]
    assert lines[2].startswith("steps: 20/40 steps (50%), loss 0.050, 0:00:0") and lines[2].endswith(" elapsed")
    terminal = Terminal()
    with Progress("steps", 40, stream=terminal, every=10) as progress:
        progress.update(40)
    assert "\r" in terminal.getvalue() and "steps: 40" not in terminal.getvalue()  # the bar, no plain line


@pytest.mark.parametrize("show, expected", [(True, "bar"), (False, "nothing")])
def test_a_bar_asked_for_or_refused_explicitly_is_obeyed_anywhere(show, expected):
    log = io.StringIO()
    with Progress("steps", 4, show=show, every=1, stream=log) as progress:
        progress.update(4)
        progress.note(loss="1.0")
    assert ("\r" in log.getvalue()) == (expected == "bar")
    assert "steps: 4/4" not in log.getvalue()
    assert (log.getvalue() == "") == (expected == "nothing")


def test_preparing_shards_off_a_terminal_writes_plain_lines(capsys):
    shown = not datasets.utils.are_progress_bars_disabled()
    datasets.utils.enable_progress_bars()
    try:
        assert run_tasks(abs, list(range(-20, 0)), desc="Preparing shards") == list(range(20, 0, -1))
    finally:
        if not shown:
            datasets.utils.disable_progress_bars()
    err = capsys.readouterr().err
    assert "\r" not in err
    assert [line.split(",")[0] for line in err.splitlines()] == [
        f"Preparing shards: {n}/20 shards ({n * 5}%)" for n in range(2, 21, 2)]


@pytest.mark.slow
def test_pretrain_to_a_log_file_writes_plain_lines(prepared, tmp_path):
    config = write_config(tmp_path / "run.json", settings([prepared[64]], tmp_path / "out", max_steps=4,
                                                          logging_steps=2, eval_steps=4, save_steps=4,
                                                          progress_bar=None))
    with open(tmp_path / "log.txt", "w") as log:
        done = subprocess.run([sys.executable, "-m", "hfbert.pretrain", "--config", str(config)], stdout=log,
                              stderr=subprocess.STDOUT, timeout=300)
    text = (tmp_path / "log.txt").read_text()
    assert done.returncode == 0, text[-3000:]
    assert "\r" not in text
    lines = [line for line in text.splitlines() if line.startswith("pretraining: ")]
    assert [line.split(",")[0] for line in lines] == ["pretraining: 2/4 steps (50%)", "pretraining: 4/4 steps (100%)"]
    assert all(" loss " in line and line.endswith(" elapsed") for line in lines)
