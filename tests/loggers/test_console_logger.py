from __future__ import annotations

import io
import re

import pytest
import torch.nn.functional as F

from obsbus import Trainer
from obsbus.loggers import ConsoleLogger

from ..helpers import regression_data, tiny_model


def fit(console, duration="2ep", **kwargs):
    with Trainer(tiny_model(), regression_data(4), duration, loss_fn=F.mse_loss,
                 loggers=[console], device="cpu", progress_bar=False, **kwargs) as trainer:
        trainer.fit()
    return trainer


def test_prints_every_n_batches_with_progress():
    out = io.StringIO()
    fit(ConsoleLogger(log_interval="2ba", stream=out))
    text = out.getvalue()
    headers = re.findall(r"^\[epoch=\d+\]\[batch=\d+/\d+\]:$", text, flags=re.M)
    assert headers == ["[epoch=1][batch=2/4]:", "[epoch=1][batch=4/4]:", "[epoch=2][batch=2/4]:",
                       "[epoch=2][batch=4/4]:"]
    # Composer's line shape: a tab, a space, the Train prefix, the key.
    values = re.findall(r"^\t Train loss/train/total: (\d+\.\d{4})$", text, flags=re.M)
    assert len(values) == 4


def test_epoch_interval_and_eval_metrics():
    out = io.StringIO()
    fit(ConsoleLogger(log_interval="1ep", stream=out),
        eval_dataloader=regression_data(2, seed=1))
    text = out.getvalue()
    # At epoch_end Composer shows the epoch just ended, with all its batches.
    assert text.count("[epoch=1][batch=4/4]:") == 1 and text.count("[epoch=2][batch=4/4]:") == 1
    assert text.count("[Eval batch=2/2] Eval on eval data:") == 2
    assert len(re.findall(r"^\t Eval metrics/eval/loss: \d+\.\d{4}$", text, flags=re.M)) == 2
    # The eval block holds only what the evaluation logged; train values wait for their block.
    blocks = text.split("[Eval batch=2/2] Eval on eval data:")[1:]
    assert all("Train" not in block.split("\n[")[0] for block in blocks)


def test_hyperparameters_printed_once_at_fit_start():
    out = io.StringIO()
    trainer = Trainer(tiny_model(), regression_data(2), "1ep", loss_fn=F.mse_loss,
                      loggers=[ConsoleLogger(stream=out)], device="cpu", hparams={"lr": 0.5})
    assert out.getvalue() == ""
    trainer.fit()
    trainer.fit(duration="1ep")
    trainer.close()
    assert out.getvalue().count("Hyperparameters:") == 1
    assert "    lr: 0.5" in out.getvalue()


def test_only_local_rank_zero_prints(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = io.StringIO()
    fit(ConsoleLogger(stream=out), duration="2ba")
    assert out.getvalue() == ""


def test_stdout_stream_is_resolved_at_write_time(capsys):
    fit(ConsoleLogger(log_interval="1ba", stream="stdout"), duration="1ba")
    assert "[batch=1/1]:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"log_interval": "10sp"}, ValueError, r"'10sp' is not supported.*'10ba' or '1ep'"),
        ({"log_interval": "0ba"}, ValueError, r"'0ba' is not supported"),
        ({"log_interval": "abc"}, ValueError, r"'abc'"),
        ({"stream": "stdlog"}, ValueError, r"ConsoleLogger stream must be 'stdout', 'stderr' or a text stream .*got 'stdlog'\. Did you mean 'stdout'\?"),
        ({"stream": None}, TypeError, r"stream must be 'stdout', 'stderr' or a text stream .*got None"),
        ({"stream": 5}, TypeError, r"ConsoleLogger stream must be .*got 5\."),
        ({"log_traces": "false"}, TypeError, r"ConsoleLogger log_traces must be True or False, got 'false'"),
        ({"log_traces": 2}, TypeError, r"ConsoleLogger log_traces must be True or False, got 2"),
    ],
    ids=["samples", "zero", "garbage", "stream", "stream-none", "stream-int", "traces-str",
         "traces-int"],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        ConsoleLogger(**kwargs)


@pytest.mark.parametrize(("duration", "header"), [("6ba", "[batch=6/6]:"), ("48sp", "[sample=48/48]:")],
                         ids=["batches", "samples"])
def test_the_header_counts_in_the_unit_of_max_duration(duration, header):
    """Composer's _get_progress_string: ``[{unit}={done}/{total}]`` outside epochs."""
    out = io.StringIO()
    fit(ConsoleLogger(log_interval="3ba", stream=out), duration=duration)
    assert header in out.getvalue().splitlines()


def test_train_values_held_during_an_eval_print_in_the_next_train_block():
    """Composer clears them at eval_start; obsbus keeps them for the train block."""
    from obsbus import Run

    out = io.StringIO()

    def evaluate(run):
        for _ in run.eval([[0]]):
            run.log_metrics({"metrics/eval/acc": 0.5})

    with Run(max_duration="2ba", loggers=[ConsoleLogger(log_interval="2ba", stream=out)],
             eval_interval="1ba", eval_fn=evaluate) as run:
        for (i,) in run.train([[1], [2]]):
            run.log_metrics({f"trainer/x{i}": float(i)})
    text = out.getvalue()
    assert text.count("\t Eval metrics/eval/acc: 0.5000") == 2
    train = "[batch=2/2]:\n\t Train trainer/x1: 1.0000\n\t Train trainer/x2: 2.0000\n"
    assert text.index("Eval on eval data") < text.index(train) < text.rindex("Eval on eval data")
