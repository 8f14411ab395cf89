from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from obsbus import Trainer
from obsbus.loggers import InMemoryLogger

from ..helpers import regression_data, tiny_model


def test_records_series_with_timestamps_and_steps():
    mem = InMemoryLogger()
    with Trainer(tiny_model(), regression_data(4), "2ep", loss_fn=F.mse_loss, loggers=[mem],
                 eval_dataloader=regression_data(2, seed=1), device="cpu",
                 hparams={"lr": 0.001, "model": {"width": 8}}) as trainer:
        trainer.fit()
    loss = mem.get_timeseries("loss/train/total")
    assert loss["batch"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert loss["step"] == loss["batch"]
    assert loss["epoch"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(isinstance(v, float) and v > 0 for v in loss["loss/train/total"])
    evals = mem.get_timeseries("metrics/eval/loss")
    assert evals["batch"] == [4, 8] and evals["epoch"] == [1, 2]
    assert mem.hyperparameters["lr"] == 0.001
    assert mem.hyperparameters["max_duration"] == "2ep"
    assert mem.hyperparameters["model"] == {"width": 8}


def test_keeps_tensors_as_logged_until_asked():
    mem = InMemoryLogger()
    value = torch.tensor(1.5)
    mem.log_metrics({"x": value, "y": 2}, step=4)
    assert mem.most_recent_values["x"] is value
    series = mem.get_timeseries("x")
    assert series["x"] == [1.5] and series["step"] == [4]


def test_unknown_key_lists_known_ones():
    mem = InMemoryLogger()
    mem.log_metrics({"loss": 1.0})
    with pytest.raises(KeyError, match=r"No metric 'lss' was logged; logged keys: \['loss'\]"):
        mem.get_timeseries("lss")


def test_tables_traces_images():
    mem = InMemoryLogger()
    mem.log_table(["a", "b"], [[1, 2], [3, 4]], name="preds", step=3)
    mem.log_traces({"algorithm/x": "on"})
    mem.log_images(torch.zeros(3, 4, 4), name="img", step=2)
    assert mem.tables["preds"] == {"columns": ["a", "b"], "rows": [[1, 2], [3, 4]], "step": 3}
    assert mem.traces == {"algorithm/x": "on"}
    assert mem.images[0][:2] == ("img", 2)
