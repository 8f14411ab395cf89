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
                 loggers=[console], device="cpu", **kwargs) as trainer:
        trainer.fit()
    return trainer


def test_prints_every_n_batches_with_progress():
    out = io.StringIO()
    fit(ConsoleLogger(log_interval="2ba", stream=out))
    text = out.getvalue()
    headers = re.findall(r"^\[epoch=\d+\]\[batch=\d+/\d+\]:$", text, flags=re.M)
    assert headers == ["[epoch=1][batch=2/4]:", "[epoch=1][batch=4/4]:", "[epoch=2][batch=2/4]:",
                       "[epoch=2][batch=4/4]:"]
    values = re.findall(r"^    loss/train/total: (\d+\.\d{4})$", text, flags=re.M)
    assert len(values) == 4


def test_epoch_interval_and_eval_metrics():
    out = io.StringIO()
    fit(ConsoleLogger(log_interval="1ep", stream=out),
        eval_dataloader=regression_data(2, seed=1))
    text = out.getvalue()
    assert text.count("[epoch=1][end]:") == 1 and text.count("[epoch=2][end]:") == 1
    assert text.count("[eval eval] after 4ba:") == 1 and text.count("[eval eval] after 8ba:") == 1
    assert len(re.findall(r"^    metrics/eval/loss: \d+\.\d{4}$", text, flags=re.M)) == 2


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
    assert "[epoch=1][batch=1/4]:" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"log_interval": "10sp"}, ValueError, r"'10sp' is not supported.*'10ba' or '1ep'"),
        ({"log_interval": "0ba"}, ValueError, r"'0ba' is not supported"),
        ({"log_interval": "abc"}, ValueError, r"'abc'"),
        ({"stream": "stdlog"}, ValueError, r"'stdlog' is not supported.*'stdout', 'stderr'"),
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
