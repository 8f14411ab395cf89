"""Trainer and Run refuse bad arguments when they are built, naming the argument.

Before, ``max_duration`` of ``-1``, ``0`` or ``'0ba'`` trained zero batches
silently, ``callbacks=5`` and friends raised ``'int' object is not
iterable``, and ``optimizers=5``, ``loss_fn=5`` or ``eval_dataloader=5``
failed only inside ``fit``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from obsbus import Run, Trainer
from obsbus.loggers import InMemoryLogger

from .helpers import regression_data, tiny_model


def trainer(**kwargs):
    args = {"loss_fn": F.mse_loss, "device": "cpu", **kwargs}
    return Trainer(tiny_model(), regression_data(2), args.pop("max_duration", "1ep"), **args)


@pytest.mark.parametrize("value", [-1, 0, "0ba", "0ep", 0.0], ids=repr)
@pytest.mark.parametrize("build", [trainer, lambda **kw: Run(**kw)], ids=["Trainer", "Run"])
def test_a_duration_that_trains_nothing_is_refused(build, value):
    with pytest.raises(ValueError, match=r"max_duration must be a positive time .*got "
                       + repr(value).replace(".", r"\.") + ": it would end the run before"):
        build(max_duration=value)


def test_a_positive_duration_still_trains():
    mem = InMemoryLogger()
    with trainer(max_duration="3ba", loggers=mem) as t:
        t.fit()
    assert t.state.timestamp.batch == "3ba"
    assert len(mem.get_timeseries("loss/train/total")["batch"]) == 3


@pytest.mark.parametrize(
    ("param", "error", "match"),
    [
        ("callbacks", TypeError, r"callbacks must be a Callback, a list of Callback .*got 5"),
        ("loggers", TypeError, r"loggers must be a LoggerDestination, a list of .*got 5"),
        ("profiler", TypeError, r"profiler must be an obsbus.profiler.Profiler or None, got 5"),
        ("device", ValueError, r"device must be a device such as 'cpu'.*got 5"),
    ],
)
@pytest.mark.parametrize("owner", ["Trainer", "Run"])
def test_a_number_for_a_plugin_argument_names_the_argument(owner, param, error, match):
    build = trainer if owner == "Trainer" else lambda **kw: Run(**kw)
    with pytest.raises(error, match=f"^{owner} {match}"):
        build(**{param: 5})


@pytest.mark.parametrize(
    ("param", "match"),
    [
        ("optimizers", r"Trainer optimizers must be an optimizer .*got 5"),
        ("schedulers", r"Trainer schedulers must be an LR scheduler .*got 5"),
        ("loss_fn", r"Trainer loss_fn must be a function or None, got 5"),
        ("eval_dataloader", r"Trainer eval_dataloader must be a dataloader .*got 5"),
        ("eval_interval", r"Trainer eval_interval must be a positive number .*got '5xyz'"),
    ],
)
def test_what_fit_would_trip_over_fails_at_construction(param, match):
    value = "5xyz" if param == "eval_interval" else 5
    with pytest.raises(TypeError if value == 5 else ValueError, match=match):
        trainer(**{param: value})


def test_eval_loaders_are_labelled_by_str():
    with pytest.raises(TypeError, match=r"eval_dataloader .*the label 3 is not a non-empty str"):
        trainer(eval_dataloader={3: regression_data(1)})
    with pytest.raises(TypeError, match=r"eval_dataloader .*'val' holds 5"):
        trainer(eval_dataloader={"val": 5})


def test_one_plugin_on_its_own_and_none_are_accepted():
    mem = InMemoryLogger()
    with trainer(max_duration="1ba", loggers=mem, callbacks=None) as t:
        t.fit()
    assert mem.get_timeseries("loss/train/total")["batch"] == [1]


def test_an_optimizer_list_and_a_scheduler_are_accepted():
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    with Trainer(model, regression_data(2), "2ba", optimizers=[opt], schedulers=sched,
                 loss_fn=F.mse_loss, device="cpu") as t:
        t.fit()
    assert sched.last_epoch == 2


@pytest.mark.parametrize(("param", "value"), [("strict", "false"), ("strict", 2),
                                              ("handle_sigterm", "false")])
def test_a_bool_flag_must_be_a_bool(param, value):
    with pytest.raises(TypeError, match=f"Run {param} must be True or False, got {value!r}"):
        Run(**{param: value})


def test_a_device_the_machine_lacks_fails_at_construction():
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        device, match = f"cuda:{count}", f"has {count} cuda device\\(s\\), numbered from 0"
    else:
        device, match = "cuda", "this machine has no cuda device"
    with pytest.raises(ValueError, match=f"Trainer device {device!r}: {match}"):
        trainer(device=device)
