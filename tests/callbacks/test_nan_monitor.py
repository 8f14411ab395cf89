"""NaNMonitor: names the first bad batch, syncs only when it checks, and raises, stops or logs."""

from __future__ import annotations

import copy
import logging
import pickle

import pytest
import torch
import torch.nn.functional as F

from obsbus import Callback, Event, Logger, Run, State, Timestamp, Trainer
from obsbus import values as values_module
from obsbus.callbacks import _kept_losses as kept_module
from obsbus.callbacks.nan_monitor import NaNMonitor, NonFiniteLossError
from obsbus.loggers import InMemoryLogger

from ..helpers import EventCounter, regression_data, tiny_model
from ..test_values import SyncsPerBatch, SyncSpy

BAD = 3  # the batch (counted from 1) whose inputs are NaN


def data_with_nan(batches: int = 8, bad: int = BAD):
    data = regression_data(batches)
    x, y = data[bad - 1]
    data[bad - 1] = (torch.full_like(x, float("nan")), y)
    return data


def trainer(monitor, batches=8, *, data=None, loggers=(), callbacks=()):
    model = tiny_model()
    return Trainer(model, data if data is not None else data_with_nan(batches), "1ep",
                   loss_fn=F.mse_loss, optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                   callbacks=[monitor, *callbacks], loggers=list(loggers), device="cpu")


def test_deferred_names_the_first_bad_batch_at_a_later_check():
    mem, events = InMemoryLogger(), EventCounter()
    t = trainer(NaNMonitor("100ba"), 6, loggers=[mem], callbacks=[events])
    with pytest.raises(NonFiniteLossError, match=r"Train loss contains a NaN\. NaNMonitor saw a NaN or Inf loss first "
                       r"at batch 3, found by the check after batch 6\. To stop at the bad batch itself, "
                       r"use NaNMonitor\(mode='immediate'\)") as info:
        t.fit()
    t.close()
    assert (info.value.batch, info.value.source, info.value.checked_at) == (BAD, "loss", 6)
    assert t.state.timestamp.batch == "6ba"  # no check ran earlier: nothing waited
    assert events.counts[Event.EXCEPTION] == 1
    series = mem.get_timeseries("nan/first_bad_batch")
    assert series["nan/first_bad_batch"] == [BAD] and series["step"] == [6]


def test_deferred_checks_every_interval():
    t = trainer(NaNMonitor("4ba"))
    with pytest.raises(NonFiniteLossError, match="at batch 3, found by the check after batch 4"):
        t.fit()
    t.close()
    assert t.state.timestamp.batch == "4ba"


def test_epoch_interval_checks_at_epoch_end():
    t = trainer(NaNMonitor("1ep"), 4)
    t.state.max_duration = "2ep"
    with pytest.raises(NonFiniteLossError, match="at batch 3, found by the check after batch 4"):
        t.fit()
    t.close()
    assert t.state.timestamp.epoch == "1ep"


def test_immediate_raises_inside_the_bad_batch_before_backward():
    t = trainer(NaNMonitor(mode="immediate"))
    with pytest.raises(NonFiniteLossError) as info:
        t.fit()
    t.close()
    assert str(info.value) == "Train loss contains a NaN. NaNMonitor saw a NaN or Inf loss first at batch 3."
    assert info.value.checked_at == BAD
    assert t.state.timestamp.batch == "2ba"  # batch 3 never finished
    # The bad batch's backward and optimizer step never ran: the weights are intact.
    assert all(torch.isfinite(p).all() for p in t.model.parameters())


def test_stop_ends_the_run_gracefully(caplog):
    mem, events = InMemoryLogger(), EventCounter()
    t = trainer(NaNMonitor("4ba", on_nan="stop"), loggers=[mem], callbacks=[events])
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        t.fit()
    t.close()
    assert t.state.timestamp.batch == "4ba"  # of 8
    assert events.counts[Event.FIT_END] == 1 and events.counts[Event.EXCEPTION] == 0
    assert mem.get_timeseries("nan/first_bad_batch")["nan/first_bad_batch"] == [BAD]
    assert [r.getMessage() for r in caplog.records] == [
        "Train loss contains a NaN. NaNMonitor saw a NaN or Inf loss first at batch 3, found by "
        "the check after batch 4. To stop at the bad batch itself, use NaNMonitor(mode='immediate') (a host sync "
        "per microbatch). Stopping training after this batch (on_nan='stop')."
    ]


def test_log_mode_goes_on_and_reports_each_interval(caplog):
    mem = InMemoryLogger()
    t = trainer(NaNMonitor("4ba", on_nan="log"), loggers=[mem])
    with caplog.at_level(logging.WARNING, logger="obsbus"):
        t.fit()
    t.close()
    assert t.state.timestamp.batch == "8ba"
    series = mem.get_timeseries("nan/first_bad_batch")
    # NaN weights make every later loss NaN: the second window's first bad batch is 5.
    assert (series["nan/first_bad_batch"], series["step"]) == ([3, 5], [4, 8])
    assert len(caplog.records) == 2 and "at batch 5" in caplog.records[1].getMessage()


@pytest.mark.parametrize("read_cpu_now", [False, True], ids=["transfer", "cpu-read"])
def test_steps_that_do_not_check_never_sync(monkeypatch, read_cpu_now):
    # transfer: the path of device tensors, one read per check for the flag and the losses;
    # cpu-read: small CPU tensors are read where they are: the 4 kept 0-d losses one
    # item() each (no stack), then the flag.
    monkeypatch.setattr(values_module, "_READ_CPU_NOW", read_cpu_now)
    reads = ["item"] * 4 + ["tolist"] if read_cpu_now else ["tolist"]
    spy = SyncSpy()
    recorder = SyncsPerBatch(spy)
    t = trainer(NaNMonitor("4ba", check_grad_norm=True), data=regression_data(8),
                callbacks=[recorder])
    with spy:
        t.fit()
    t.close()
    assert set(recorder.per_batch) == set(range(1, 9))
    for batch, calls in recorder.per_batch.items():
        assert calls == ([] if batch % 4 else reads), f"batch {batch}: {calls}"
    assert spy.calls == reads * 2  # fit_end had nothing new to read


def _nan_gradient_loss(bad_batch):
    """MSE, plus at ``bad_batch`` a term whose value is 0 and whose gradient is NaN."""
    def loss_fn(out, y, batch):
        loss = F.mse_loss(out, y)
        if batch == bad_batch:
            loss = loss + 0 * torch.sqrt(out - out.detach()).sum()  # d sqrt(0) = inf; 0 * inf
        return loss
    return loss_fn


@pytest.mark.parametrize(("check_grad_norm", "expected"),
                         [(True, (3, "gradient")), (False, (4, "loss"))],
                         ids=["grad-check-names-the-batch", "loss-goes-bad-one-batch-later"])
def test_gradient_check(check_grad_norm, expected):
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = _nan_gradient_loss(3)
    with pytest.raises(NonFiniteLossError) as info:  # noqa: SIM117
        with Run(model=model, max_duration="6ba",
                 callbacks=[NaNMonitor(check_grad_norm=check_grad_norm)]) as run:
            for x, y in run.train(regression_data(6)):
                opt.zero_grad()
                batch = run.state.timestamp.batch.value + 1
                loss = run.loss(loss_fn, run.forward(model, x), y, batch)
                assert torch.isfinite(loss) or batch > 3
                run.backward(loss)
                opt.step()
    assert (info.value.batch, info.value.source) == expected


LOSSES = {
    "tensor": lambda bad: torch.tensor(bad),
    "vector": lambda bad: torch.tensor([1.0, bad, 2.0]),
    "dict": lambda bad: {"ce": torch.tensor(0.3), "aux": torch.tensor(bad)},
    "list": lambda bad: [torch.tensor(0.3), torch.tensor(bad)],
    "nested": lambda bad: {"parts": (torch.tensor(0.1), {"z": torch.tensor([bad])}), "n": 3},
    "float": lambda bad: bad,
    "dict-of-floats": lambda bad: {"ce": 0.3, "aux": bad},
}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")],
                         ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("kind", LOSSES)
def test_loss_forms(kind, bad):
    state = State(run_name="r")
    logger = Logger(state)
    monitor = NaNMonitor("100ba")
    for batch, value in enumerate([1.0, 0.5, bad, 0.25]):
        state.timestamp = Timestamp(batch=batch)  # completed batches; this is batch + 1
        state.loss = LOSSES[kind](value)
        monitor.after_loss(state, logger)
        monitor.after_train_batch(state, logger)  # already folded: not counted twice
    state.timestamp = Timestamp(batch=4)
    with pytest.raises(NonFiniteLossError, match="at batch 3, found by the check after batch 4"):
        monitor.fit_end(state, logger)
    monitor.fit_end(state, logger)  # reported once; the flags start over


@pytest.mark.parametrize("kind", LOSSES)
def test_finite_losses_pass(kind):
    state = State(run_name="r")
    monitor = NaNMonitor(mode="immediate")
    state.loss = LOSSES[kind](0.5)
    monitor.after_loss(state, Logger(state))
    monitor.fit_end(state, Logger(state))


def test_loop_that_only_sets_state_loss():
    with pytest.raises(NonFiniteLossError, match="at batch 2,"):  # noqa: SIM117
        with Run(max_duration="3ba", callbacks=[NaNMonitor()]) as run:
            for x in run.train([[1.0], [float("nan")], [2.0]]):
                run.state.loss = x[0]


def test_another_error_still_reports_the_nan_and_reaches_the_caller(caplog):
    mem = InMemoryLogger()
    with pytest.raises(ValueError, match="the data loader broke"):  # noqa: SIM117
        with caplog.at_level(logging.WARNING, logger="obsbus"):
            with Run(max_duration="5ba", callbacks=[NaNMonitor()], loggers=[mem]) as run:
                for x in run.train([torch.tensor([v]) for v in (1.0, float("nan"), 2.0)]):
                    run.loss(torch.mean, x)
                    if run.state.timestamp.batch == "2ba":
                        raise ValueError("the data loader broke")
    assert mem.get_timeseries("nan/first_bad_batch")["nan/first_bad_batch"] == [2]
    assert "at batch 2" in caplog.text


def test_error_pickles_with_its_attributes():
    err = pickle.loads(pickle.dumps(NonFiniteLossError(7, "gradient", checked_at=10)))
    assert (err.batch, err.source, err.checked_at) == (7, "gradient", 10)
    assert str(err).startswith("A gradient is not finite. NaNMonitor saw a NaN or Inf gradient first at batch 7,")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"mode": "fast"}, ValueError,
     r"mode must be 'deferred' \(check every check_interval\) or 'immediate' .*got 'fast'"),
    ({"on_nan": "ignore"}, ValueError, r"on_nan must be 'raise', 'stop' .* or 'log' .*got 'ignore'"),
    ({"check_interval": "5sp"}, ValueError,
     r"check_interval '5sp' is not supported: use a positive number of batches or epochs"),
    ({"check_interval": 0}, ValueError, r"check_interval '0ba' is not supported"),
    ({"check_grad_norm": "yes"}, TypeError, r"check_grad_norm must be True or False, got 'yes'"),
], ids=["mode", "on_nan", "interval-unit", "interval-zero", "grad-flag"])
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        NaNMonitor(**kwargs)


def _two_rank_nan(rank):
    """Rank 1 alone sees a NaN at batch 3; both ranks must act at the same check."""
    values = [1.0, 2.0, float("nan") if rank == 1 else 3.0, 4.0, 5.0, 6.0]
    out = {}
    for on_nan in ("raise", "stop"):
        try:
            with Run(max_duration="6ba", run_name="two", handle_sigterm=False,
                     callbacks=[NaNMonitor("4ba", on_nan=on_nan)]) as run:
                for x in run.train([torch.tensor([v]) for v in values]):
                    run.loss(torch.mean, x)
            out[on_nan] = ("finished", run.state.timestamp.batch.value)
        except NonFiniteLossError as err:
            out[on_nan] = ("raised", err.batch, err.ranks, str(err), run.state.timestamp.batch.value)
    return out


@pytest.mark.dist
def test_two_ranks_act_together_and_name_the_rank(tmp_path):
    from tests._dist_utils import run_two_ranks

    message = ("Train loss contains a NaN. NaNMonitor saw a NaN or Inf loss first at batch 3 "
               "on rank 1, found by the check after batch 4.")
    for result in run_two_ranks(_two_rank_nan, tmp_path):
        raised = result["raise"]
        assert raised[:3] == ("raised", 3, (1,)) and raised[3].startswith(message)
        assert raised[4] == 4  # both stopped at the check after batch 4
        assert result["stop"] == ("finished", 4)


def _run_losses(monitor, losses):
    with Run(max_duration=f"{len(losses)}ba", callbacks=[monitor]) as run:
        for _ in run.train([[0]] * len(losses)):
            run.loss(lambda value: value, losses[run.state.timestamp.batch.value])


@pytest.fixture(params=[4096, 0], ids=["read-all", "sum-first"])
def read_all_max(request, monkeypatch):
    """Checks that read every kept loss, and those that sum them first (past 4096 losses)."""
    monkeypatch.setattr(kept_module, "_READ_ALL_MAX", request.param)


def test_a_long_interval_keeps_memory_bounded_and_still_names_the_first_bad_batch(
    read_all_max, both_paths
):
    losses = [torch.tensor(0.5) for _ in range(700)]
    losses[299] = torch.tensor(float("inf"))
    losses[650] = torch.tensor(float("nan"))
    monitor = NaNMonitor("1000ba")
    with pytest.raises(NonFiniteLossError, match="at batch 300, found by the check after batch 700"):
        _run_losses(monitor, losses)
    assert monitor._losses._kept == [] and monitor._losses._stacked == {}


def test_the_stacked_losses_are_bounded_between_checks():
    monitor = NaNMonitor("1000ba")
    seen = []

    class Probe(EventCounter):
        def batch_end(self, state, logger):
            seen.append((len(monitor._losses._kept), sum(len(p) for p in monitor._losses._stacked.values())))

    with Run(max_duration="600ba", callbacks=[monitor, Probe()]) as run:
        for _ in run.train([[0]] * 600):
            run.loss(lambda: torch.tensor(1.0))
    assert max(kept for kept, _ in seen) < 256
    assert seen[-1] == (600 - 512, 2)  # two stacks of 256, the rest kept


def test_cpu_losses_are_read_on_the_host_without_a_stack(monkeypatch):
    # A CPU run's 0-d losses are read one item() each (no stack, no transfer); with the
    # switch off they take the device path: one stacked tensor, read at the check.
    kept = kept_module.KeptLosses()
    losses = [torch.tensor(float(i)) for i in range(300)]
    for i, loss in enumerate(losses):
        kept.keep(i + 1, loss)
    ((batches, numbers),) = kept.take()
    assert batches == list(range(1, 301)) and numbers == [float(i) for i in range(300)]
    assert type(numbers) is list and all(type(x) is float for x in numbers)
    monkeypatch.setattr(values_module, "_READ_CPU_NOW", False)
    for i, loss in enumerate(losses[:3]):
        kept.keep(i + 1, loss)
    ((batches, stacked),) = kept.take()
    assert isinstance(stacked, torch.Tensor) and stacked.tolist() == [0.0, 1.0, 2.0]


def test_mixed_dtypes_and_a_finite_sum_that_overflows_are_not_reported(read_all_max):
    huge = torch.tensor(1.7e308, dtype=torch.float64)
    losses = [torch.tensor(1.0, dtype=torch.bfloat16), huge, huge, torch.tensor([2.0, 3.0])]
    monitor = NaNMonitor("10ba")
    _run_losses(monitor, losses)  # 1.7e308 * 2 overflows in the sum; no value is bad
    losses[3] = torch.tensor([2.0, float("nan")])
    with pytest.raises(NonFiniteLossError, match="at batch 4"):
        _run_losses(NaNMonitor("10ba"), losses)


@pytest.mark.parametrize("weights", [None, (0.5, 0.5)], ids=["mean", "weighted"])
def test_a_bad_microbatch_names_its_batch_in_deferred_mode(weights):
    kept_graphs = []

    class Spy(Callback):
        def batch_end(self, state, logger):
            kept_graphs.extend(t.grad_fn for _, t in monitor._losses._kept)

    monitor = NaNMonitor("10ba")
    w = torch.ones(1, requires_grad=True)
    micro = {2: [1.0, float("inf")], 1: [1.0, 2.0], 3: [0.5, 0.5]}
    with pytest.raises(NonFiniteLossError, match="at batch 2, found by the check after batch 3"):  # noqa: SIM117
        with Run(max_duration="3ba", callbacks=[monitor, Spy()]) as run:
            for (batch,) in run.train([[1], [2], [3]]):
                for i, value in enumerate(micro[batch]):
                    weight = None if weights is None else weights[i]
                    loss = run.loss(lambda v: (w * v).sum(), value, weight=weight)
                    run.backward(loss)
    assert kept_graphs and all(fn is None for fn in kept_graphs)  # no autograd graph kept


def test_hooks_with_nothing_to_do_are_not_dispatched():
    from obsbus.engine import overrides

    def hooks(monitor):
        return {h for h in ("after_loss", "after_backward") if overrides(monitor, h)}

    assert hooks(NaNMonitor()) == set()
    assert hooks(NaNMonitor(mode="immediate")) == {"after_loss"}
    assert hooks(NaNMonitor(check_grad_norm=True)) == {"after_backward"}
    with pytest.raises(AttributeError):
        NaNMonitor().check_grad_norm = True  # fixed at construction: the hooks follow it
    for monitor in (NaNMonitor(), NaNMonitor(mode="immediate"), NaNMonitor(check_grad_norm=True)):
        expected = hooks(monitor)
        assert hooks(pickle.loads(pickle.dumps(monitor))) == expected  # e.g. sent to a worker
        assert hooks(copy.deepcopy(monitor)) == expected


def test_the_error_is_a_runtime_error_as_composers():
    """Composer's ``composer/callbacks/nan_monitor.py`` raises ``RuntimeError('Train loss
    contains a NaN.')``: code written for it, ``except RuntimeError``, catches obsbus's too."""
    t = trainer(NaNMonitor(mode="immediate"))
    with pytest.raises(RuntimeError, match=r"Train loss contains a NaN\.") as info:  # Composer's
        t.fit()
    t.close()
    assert isinstance(info.value, NonFiniteLossError) and info.value.batch == BAD
    assert issubclass(NonFiniteLossError, RuntimeError)
