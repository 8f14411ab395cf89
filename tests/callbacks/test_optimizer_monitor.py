"""OptimizerMonitor: fused gradient and parameter norms, and gradient zeros, at an interval."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Logger, ObsbusWarning, Run, State, Timestamp, Trainer
from obsbus.callbacks.optimizer_monitor import (
    OptimizerMonitor,
    count_zeros,
    fused_l2_norms,
    fused_l2_norms_of_groups,
)
from obsbus.loggers import InMemoryLogger
from obsbus.values import to_host

from ..helpers import regression_data, tiny_model
from ..test_values import SyncsPerBatch, SyncSpy


class Reference(Callback):
    """At batch_end (after the monitor), what the monitor should have seen, by other means."""

    def __init__(self):
        self.grad_norm, self.param_norm, self.grad_zeros = {}, {}, {}

    def batch_end(self, state, logger):
        batch = state.timestamp.batch.value
        params = [p for p in state.model.parameters() if p.requires_grad]
        grads = [p.grad for p in params if p.grad is not None]
        self.grad_norm[batch] = torch.nn.utils.get_total_norm(grads).item()
        self.param_norm[batch] = math.sqrt(
            sum(p.detach().double().pow(2).sum().item() for p in params)
        )
        self.grad_zeros[batch] = sum(int((g == 0).sum()) for g in grads)


def fit(monitor, batches=6, model=None, reference=None, **kwargs):
    model = model or tiny_model()
    mem = InMemoryLogger()
    callbacks = [monitor] + ([reference] if reference else [])
    with Trainer(
        model,
        regression_data(batches),
        f"{batches}ba",
        loss_fn=F.mse_loss,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        callbacks=callbacks,
        loggers=[mem],
        device="cpu",
        **kwargs,
    ) as trainer:
        trainer.fit()
    return mem


def series(mem, key):
    out = mem.get_timeseries(key)
    return dict(zip(out["step"], out[key], strict=True))


def test_global_norms_and_zeros_match_torch_over_a_trainer_run():
    ref = Reference()
    mem = fit(OptimizerMonitor("2ba", log_param_norm=True, log_num_zeros=True), reference=ref, grad_accum=2)
    grad, param, zeros = (
        series(mem, k)
        for k in ("l2_norm/grad/global", "l2_norm/param/global", "num_zeros/grad/global")
    )
    assert list(grad) == list(param) == list(zeros) == [2, 4, 6]
    for batch in (2, 4, 6):
        assert grad[batch] == pytest.approx(ref.grad_norm[batch], rel=1e-6)
        assert param[batch] == pytest.approx(ref.param_norm[batch], rel=1e-6)
        assert zeros[batch] == ref.grad_zeros[batch]
    assert any(ref.grad_zeros.values())  # ReLU leaves some zero gradients: a real count
    assert isinstance(mem.most_recent_values["num_zeros/grad/global"], torch.Tensor)


def test_exact_values_from_gradients_set_by_hand(both_paths):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 2.0], [2.0, 4.0]]))  # norm 5
        model[0].bias.zero_()
        model[1].weight.copy_(torch.tensor([[0.0, 0.0]]))
    model[0].weight.grad = torch.tensor([[3.0, 0.0], [0.0, 0.0]])  # 3 zeros on purpose
    model[0].bias.grad = torch.tensor([0.0, 4.0])  # 1 zero
    # model[1].weight has no gradient: left out of the gradient keys, still in the param norm
    state = State(run_name="r", model=model)
    state.timestamp = Timestamp(batch=10)
    mem = InMemoryLogger()

    OptimizerMonitor(log_per_layer=True, log_param_norm=True, log_num_zeros=True).batch_end(state, Logger(state, [mem]))
    got = to_host(mem.most_recent_values)
    assert got == {
        "l2_norm/grad/global": 5.0,
        "l2_norm/grad/0.weight": 3.0,
        "l2_norm/grad/0.bias": 4.0,
        "num_zeros/grad/global": 4,
        "l2_norm/param/global": 5.0,
        "l2_norm/param/0.weight": 5.0,
        "l2_norm/param/0.bias": 0.0,
        "l2_norm/param/1.weight": 0.0,
    }


def test_per_layer_keys_are_named_after_the_parameters_and_frozen_ones_are_left_out():
    model = tiny_model()
    model[2].bias.requires_grad_(False)
    mem = fit(OptimizerMonitor("3ba", log_per_layer=True, log_param_norm=True), model=model)
    names = ["0.weight", "0.bias", "2.weight"]
    assert {k for k in mem.data if k.startswith("l2_norm/")} == {
        "l2_norm/grad/global",
        "l2_norm/param/global",
        *(f"l2_norm/grad/{n}" for n in names),
        *(f"l2_norm/param/{n}" for n in names),
    }
    per_layer = [series(mem, f"l2_norm/grad/{n}")[6] for n in names]
    assert series(mem, "l2_norm/grad/global")[6] == pytest.approx(
        math.sqrt(sum(v * v for v in per_layer)), rel=1e-6
    )


def test_only_at_the_interval_batches_and_epochs():
    mem = fit(OptimizerMonitor("4ba"), batches=9)
    assert mem.get_timeseries("l2_norm/grad/global")["step"] == [4, 8]
    model = tiny_model()
    mem = InMemoryLogger()
    with Trainer(
        model,
        regression_data(3),
        "2ep",
        loss_fn=F.mse_loss,
        callbacks=[OptimizerMonitor("1ep")],  # the parameter norm is off by default
        loggers=[mem],
        device="cpu",
    ) as trainer:
        trainer.fit()
    assert mem.get_timeseries("l2_norm/grad/global")["step"] == [3, 6]
    assert "l2_norm/param/global" not in mem.data


class ForeachCalls(Callback):
    """How many times ``torch._foreach_norm`` ran during each batch (after the monitor)."""

    def __init__(self, counter):
        self.counter, self.per_batch, self._seen = counter, {}, 0

    def batch_checkpoint(self, state, logger):
        self.per_batch[state.timestamp.batch.value] = self.counter["n"] - self._seen
        self._seen = self.counter["n"]


@pytest.mark.parametrize(
    ("log_param_norm", "per_due_step"), [(False, 1), (True, 1)], ids=["grads", "grads+params"]
)
def test_one_fused_norm_call_per_due_step(monkeypatch, log_param_norm, per_due_step):
    counter = Counter()
    real = torch._foreach_norm

    def counting(*args, **kwargs):
        counter["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_norm", counting)
    calls = ForeachCalls(counter)
    fit(OptimizerMonitor("2ba", log_per_layer=True, log_param_norm=log_param_norm), reference=calls)
    assert calls.per_batch == {k: per_due_step if k % 2 == 0 else 0 for k in range(1, 7)}


def test_never_syncs_even_on_due_steps(both_paths):
    spy = SyncSpy()
    recorder = SyncsPerBatch(spy)
    with spy:
        mem = fit(
            OptimizerMonitor("2ba", log_per_layer=True, log_num_zeros=True), reference=recorder
        )
    if both_paths:  # CPU norms are read where they are on due steps (no device to wait for)
        assert all(set(c) == {"item"} if k % 2 == 0 else c == [] for k, c in recorder.per_batch.items())
    else:  # device tensors: logged as they are, no read even on due steps
        assert recorder.per_batch == {k: [] for k in range(1, 7)}
    assert len(mem.data["l2_norm/grad/global"]) == 3


def test_half_precision_norms_do_not_overflow():
    grads = [
        torch.full((4,), 300.0, dtype=torch.float16),
        torch.full((2,), 100.0, dtype=torch.bfloat16),
    ]
    total, each = fused_l2_norms(grads)
    assert total.dtype == torch.float32
    assert total.item() == pytest.approx(math.sqrt(4 * 300.0**2 + 2 * 100.0**2), rel=1e-6)
    assert [e.item() for e in each] == [600.0, pytest.approx(141.42, rel=1e-3)]
    mixed, _ = fused_l2_norms([torch.tensor([3.0]), torch.tensor([4.0], dtype=torch.float64)])
    assert mixed.dtype == torch.float64 and mixed.item() == 5.0
    assert count_zeros([torch.zeros(3, dtype=torch.bfloat16), torch.tensor([1.0, 0.0])]).item() == 4


@pytest.mark.parametrize("log_param_norm", [False, True], ids=["default", "param-norm"])
def test_a_loop_that_drops_its_gradients_is_told_once(both_paths, log_param_norm):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    mem = InMemoryLogger()

    def drop_gradients_after_each_step():
        with Run(
            model=model,
            optimizers=opt,
            max_duration="3ba",
            callbacks=[OptimizerMonitor("1ba", log_param_norm=log_param_norm)],
            loggers=[mem],
        ) as run:
            for x, y in run.train(regression_data(3)):
                run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
                opt.step()
                opt.zero_grad(set_to_none=True)

    with pytest.warns(
        ObsbusWarning, match="no trainable parameter has a gradient at batch 1"
    ) as record:
        drop_gradients_after_each_step()
    assert len([w for w in record if issubclass(w.category, ObsbusWarning)]) == 1
    assert "l2_norm/grad/global" not in mem.data
    assert len(mem.data.get("l2_norm/param/global", [])) == (3 if log_param_norm else 0)


def test_without_a_model_the_optimizers_parameters_are_used(both_paths):
    weight = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    weight.grad = torch.tensor([0.0, 2.0])
    state = State(run_name="r", optimizers=torch.optim.SGD([weight], lr=0.1))
    state.timestamp = Timestamp(batch=1)
    mem = InMemoryLogger()

    OptimizerMonitor("1ba", log_per_layer=True, log_param_norm=True).batch_end(state, Logger(state, [mem]))
    assert to_host(mem.most_recent_values) == {
        "l2_norm/grad/global": 2.0,
        "l2_norm/grad/optimizer0.group0.0": 2.0,
        "l2_norm/param/global": 5.0,
        "l2_norm/param/optimizer0.group0.0": 5.0,
    }


def test_bad_arguments_are_refused_when_built():
    with pytest.raises(ValueError, match=r"OptimizerMonitor log_interval '5sp' is not supported"):
        OptimizerMonitor("5sp")
    with pytest.raises(
        TypeError, match=r"OptimizerMonitor log_num_zeros must be True or False, got 'yes'"
    ):
        OptimizerMonitor(log_num_zeros="yes")


def test_grouped_norms_equal_separate_ones_across_dtypes():
    grads = [torch.randn(3, dtype=torch.float16), torch.randn(4), torch.randn(2, dtype=torch.float64)]
    params = [torch.randn(5), torch.randn(2, 2, dtype=torch.bfloat16)]
    totals, each = fused_l2_norms_of_groups([grads, params])
    for total, tensors in zip(totals, (grads, params), strict=True):
        expected = torch.linalg.vector_norm(torch.stack([t.double().norm() for t in tensors]))
        assert torch.allclose(total.double(), expected, rtol=1e-3)
    assert [float(n) for n in each] == pytest.approx([t.double().norm().item() for t in grads + params], rel=1e-3)
    with pytest.raises(ValueError, match="every list needs at least one tensor"):
        fused_l2_norms_of_groups([grads, []])


def test_parameters_frozen_between_epochs_leave_the_norms():
    model = tiny_model()
    mem = InMemoryLogger()

    class FreezeFirstLayer(Callback):
        def epoch_end(self, state, logger):
            for p in model[0].parameters():
                p.requires_grad_(False)

    with Trainer(model, regression_data(2), "2ep", loss_fn=F.mse_loss,
                 optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                 callbacks=[OptimizerMonitor("1ba", log_per_layer=True, log_param_norm=True),
                            FreezeFirstLayer()],
                 loggers=[mem], device="cpu") as trainer:
        trainer.fit()
    assert mem.get_timeseries("l2_norm/param/0.weight")["step"] == [1, 2]
    assert mem.get_timeseries("l2_norm/param/2.weight")["step"] == [1, 2, 3, 4]


@pytest.mark.filterwarnings("ignore:Using backward.. with create_graph=True")
def test_gradients_made_with_create_graph_do_not_tie_the_logged_norms_to_autograd(both_paths):
    model = torch.nn.Linear(3, 1)
    loss = model(torch.randn(4, 3)).pow(2).sum()
    loss.backward(create_graph=True)  # type: ignore[no-untyped-call]
    assert model.weight.grad.requires_grad
    state = State(run_name="r", model=model)
    state.timestamp = Timestamp(batch=10)
    mem = InMemoryLogger()
    OptimizerMonitor().batch_end(state, Logger(state, [mem]))
    norm = mem.most_recent_values["l2_norm/grad/global"]
    assert not getattr(norm, "requires_grad", False)
    expected = torch.linalg.vector_norm(torch.stack([p.grad.detach().norm() for p in model.parameters()]))
    assert to_host({"n": norm})["n"] == pytest.approx(expected.item(), rel=1e-6)
    for p in model.parameters():
        p.grad = None  # break the cycle create_graph makes


def test_on_the_cpu_the_global_norm_does_not_overflow_where_its_squares_would():
    model = torch.nn.Linear(1, 1, dtype=torch.float64)
    model.weight.grad = torch.tensor([[1e160]], dtype=torch.float64)
    model.bias.grad = torch.tensor([1e160], dtype=torch.float64)
    state = State(run_name="r", model=model)
    state.timestamp = Timestamp(batch=10)
    mem = InMemoryLogger()
    OptimizerMonitor().batch_end(state, Logger(state, [mem]))
    assert mem.most_recent_values["l2_norm/grad/global"] == pytest.approx(math.sqrt(2) * 1e160)


def test_a_model_cast_mid_epoch_gets_norms_in_float32(both_paths):
    # The layout (device, norm dtype) is kept per epoch; a cast to half within the epoch
    # must still give float32 norms, or the device path's float16 norms overflow.
    model = torch.nn.Linear(4, 1, bias=False)
    state = State(run_name="r", model=model)
    state.timestamp = Timestamp(batch=1)
    mem = InMemoryLogger()
    monitor = OptimizerMonitor("1ba")
    model.weight.grad = torch.ones_like(model.weight)
    monitor.batch_end(state, Logger(state, [mem]))
    model.half()
    model.weight.grad = torch.full_like(model.weight, 300.0)  # squares overflow float16
    state.timestamp = Timestamp(batch=2)
    monitor.batch_end(state, Logger(state, [mem]))
    assert to_host({"n": mem.most_recent_values["l2_norm/grad/global"]})["n"] == 600.0


class ReportingSGD(torch.optim.SGD):
    """An optimizer with Composer's ``report_per_parameter_metrics`` hook (as its
    ``DecoupledAdamW`` has, ``composer/optim/decoupled_weight_decay.py``): it reports
    ``l2_norm/param/{name}`` and a made-up ``l2_norm/moment/{name}`` of twice the parameter."""

    def report_per_parameter_metrics(self, param, name, optimizer_metrics):
        optimizer_metrics[f"l2_norm/param/{name}"] = torch.linalg.vector_norm(param.data)
        optimizer_metrics[f"l2_norm/moment/{name}"] = torch.linalg.vector_norm(2 * param.data)
        optimizer_metrics["l2_norm/grad/global"] = torch.tensor(-1.0)  # the monitor's wins
        return optimizer_metrics


def fit_reporting(monitor, batches=6):
    model, mem = tiny_model(), InMemoryLogger()
    with Trainer(model, regression_data(batches), f"{batches}ba", loss_fn=F.mse_loss,
                 optimizers=ReportingSGD(model.parameters(), lr=0.1), callbacks=[monitor],
                 loggers=[mem], device="cpu") as trainer:
        trainer.fit()
    return model, mem


def test_log_optimizer_metrics_logs_what_the_optimizer_reports_as_composer():
    """Composer's ``OptimizerMonitor(log_optimizer_metrics=True)`` (its default) merges the
    first optimizer's ``report_per_parameter_metrics`` into the metrics it logs."""
    model, mem = fit_reporting(OptimizerMonitor(batch_log_interval=3))
    names = [name for name, _ in model.named_parameters()]
    for name, p in model.named_parameters():
        moment = series(mem, f"l2_norm/moment/{name}")
        assert list(moment) == [3, 6]
        assert float(moment[6]) == pytest.approx(2 * p.detach().norm().item())  # after step 6
        assert f"l2_norm/param/{name}" in mem.data
    assert names and all(v > 0 for v in series(mem, "l2_norm/grad/global").values())


def test_log_optimizer_metrics_false_and_torch_optimizers_add_nothing():
    _, mem = fit_reporting(OptimizerMonitor(log_optimizer_metrics=False, batch_log_interval=3))
    assert not any("moment" in key for key in mem.data)
    mem = fit(OptimizerMonitor(log_optimizer_metrics=True, batch_log_interval=2))  # torch SGD: none
    assert [k for k in mem.data if k.startswith("l2_norm/")] == ["l2_norm/grad/global"]


def test_batch_log_interval_is_composers_name_for_the_interval():
    """Composer: ``OptimizerMonitor(batch_log_interval=10)`` logs when batch % 10 == 0."""
    mem = fit(OptimizerMonitor(batch_log_interval=2), batches=7)
    assert list(series(mem, "l2_norm/grad/global")) == [2, 4, 6]
    assert OptimizerMonitor(batch_log_interval=4).log_interval.batches == 4
    assert OptimizerMonitor().batch_log_interval == 10  # Composer's default


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((False,), {}, TypeError,
         r"Composer's first argument is log_optimizer_metrics; obsbus's is log_interval\. "
         r"To fix, write OptimizerMonitor\(log_optimizer_metrics=False\)"),
        ((), {"batch_log_interval": 5, "log_interval": "2ba"}, ValueError,
         r"batch_log_interval=5 and log_interval='2ba' both set the interval\. To fix, give one"),
        ((), {"batch_log_interval": 0}, ValueError, "batch_log_interval must be a whole number >= 1, got 0"),
        ((), {"batch_log_interval": "10"}, TypeError, "batch_log_interval must be a whole number"),
        ((), {"log_optimizer_metrics": "false"}, TypeError,
         "log_optimizer_metrics must be True or False, got 'false'"),
    ],
    ids=["positional-composer-bool", "both-intervals", "zero", "str", "str-bool"],
)
def test_composer_arguments_are_checked(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        OptimizerMonitor(*args, **kwargs)


class DropsGradsAfterTheStep(Callback):
    """What HF's Trainer does: ``zero_grad(set_to_none=True)`` after ``after_train_batch``."""

    def after_train_batch(self, state, logger):
        state.model.zero_grad(set_to_none=True)


def test_gradients_are_read_before_a_host_drops_them():
    model, mem = tiny_model(), InMemoryLogger()
    expected = []

    class Record(Callback):
        def after_train_batch(self, state, logger):
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
            expected.append(torch.linalg.vector_norm(grads).item())

    with Trainer(model, regression_data(4), "4ba", loss_fn=F.mse_loss, device="cpu",
                 callbacks=[Record(), OptimizerMonitor("2ba"), DropsGradsAfterTheStep()],
                 loggers=[mem], progress_bar=False, log_to_console=False) as trainer:  # fmt: skip
        trainer.fit()
    got = mem.get_timeseries("l2_norm/grad/global")
    assert got["step"] == [2, 4]
    assert [float(v) for v in got["l2_norm/grad/global"]] == pytest.approx(expected[1::2])
