"""Values become numbers all at once, and never on a step that does not log."""

from __future__ import annotations

import math
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from obsbus import Callback, Trainer
from obsbus import values as values_module
from obsbus.loggers import ConsoleLogger, InMemoryLogger
from obsbus.values import rows_to_host_async, to_host, to_host_async

from .helpers import regression_data, tiny_model

SYNCS = {"item", "tolist", "__float__", "__int__", "__bool__", "cpu", "numpy", "__index__"}


class SyncSpy(TorchFunctionMode):
    """Records every tensor-to-host conversion made while active."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in SYNCS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


def _many_values():
    values = {f"m{i}": torch.tensor(float(i)) for i in range(20)}
    values["count"] = torch.tensor(7)
    values["flag"] = torch.tensor(True)
    values["vector"] = torch.tensor([1.0, 2.0])
    values["plain"] = 0.5
    return values


def _check_many(values, out):
    assert list(out) == list(values)
    assert out["m3"] == 3.0 and isinstance(out["count"], int) and out["flag"] is True
    assert out["vector"] == [1.0, 2.0] and out["plain"] == 0.5


class OpSpy(TorchFunctionMode):
    """Records the name of every torch function called while active."""

    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.calls.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))


def test_one_transfer_for_many_values(monkeypatch):
    # The path device tensors take (CUDA, ROCm, ...), run here on CPU tensors.
    monkeypatch.setattr(values_module, "_READ_CPU_NOW", False)
    values = _many_values()
    with SyncSpy() as spy:
        out = to_host(values)
    assert spy.calls == ["tolist"]
    _check_many(values, out)


def test_small_cpu_tensors_are_read_where_they_are_without_stacking():
    values = _many_values()
    # over the read-now size: copied (float64 too, which needs no conversion), converted later
    values["big"] = torch.arange(2000.0, dtype=torch.float64)
    with OpSpy() as spy:
        pending = to_host_async(values)
    # One read per small tensor; the big one alone goes through a copy.
    assert spy.calls.count("tolist") == 23 and "stack" not in spy.calls
    values["m3"].fill_(-1.0)  # read already: later changes don't leak in
    values["big"].fill_(-1.0)
    out = pending.result()
    alone = torch.arange(2000.0, dtype=torch.float64)  # alone in its group: no stack to copy it
    pending_alone = to_host_async({"alone": alone})
    alone.fill_(-1.0)
    assert pending_alone.result()["alone"] == [float(i) for i in range(2000)]
    assert out["big"] == [float(i) for i in range(2000)]
    _check_many(values, out)
    assert to_host({"one": torch.tensor([4.0]), "grid": torch.ones(2, 1)}) == {
        "one": 4.0, "grid": [[1.0], [1.0]]}


def test_async_result_is_a_snapshot(both_paths):
    t = torch.tensor(1.0)
    pending = to_host_async({"t": t})
    t.add_(41)  # a loop reusing its accumulator must not change what was logged
    assert pending.result() == {"t": 1.0}
    v = torch.tensor([[1.0, 2.0]])
    pending = to_host_async({"v": v, "after": torch.tensor(3.0)})
    v.resize_(3, 1).fill_(0.0)  # nor a buffer resized in place (its shape is kept too)
    assert pending.result() == {"v": [[1.0, 2.0]], "after": 3.0}


class SyncsPerBatch(Callback):
    """Attributes each host conversion to the batch during which it happened."""

    def __init__(self, spy):
        self.spy, self.per_batch, self._seen = spy, {}, 0

    def batch_checkpoint(self, state, logger):
        calls = self.spy.calls[self._seen:]
        self._seen = len(self.spy.calls)
        self.per_batch[state.timestamp.batch.value] = calls


def test_training_steps_that_do_not_log_never_sync():
    spy = SyncSpy()
    recorder = SyncsPerBatch(spy)
    model = tiny_model()
    trainer = Trainer(model, regression_data(8), "1ep", loss_fn=F.mse_loss,
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.01),
                      callbacks=[recorder], device="cpu",
                      loggers=[InMemoryLogger(), ConsoleLogger(log_interval="4ba", stream="stdout")])
    with spy:
        trainer.fit()
    trainer.close()
    assert set(recorder.per_batch) == set(range(1, 9))
    for batch, calls in recorder.per_batch.items():
        if batch % 4:
            assert calls == [], f"batch {batch} synced: {calls}"
        else:
            assert calls == ["tolist"], f"batch {batch}: {calls}"


def test_mixed_dtypes_and_shapes_keep_their_values_and_order(both_paths):
    values = {
        "loss": torch.tensor(0.25, requires_grad=True) * 2,
        "count": torch.tensor(2**40 + 1),  # exact: not promoted through float32
        "half": torch.tensor(1.5, dtype=torch.bfloat16),
        "vec": torch.tensor([1.0, 2.0]),
        "flag": torch.tensor(True),
        "loss2": torch.tensor(3.0),
        "plain": 7,
    }
    assert to_host(values) == {
        "loss": 0.5, "count": 2**40 + 1, "half": 1.5, "vec": [1.0, 2.0], "flag": True,
        "loss2": 3.0, "plain": 7,
    }
    assert list(to_host(values)) == list(values)


def test_rows_go_over_in_one_transfer_and_come_back_per_row(monkeypatch):
    monkeypatch.setattr(values_module, "_READ_CPU_NOW", False)  # the device path
    rows = [{"loss": torch.tensor(0.5), "lr": 0.1}, {}, {"loss": torch.tensor(0.25), "n": torch.tensor(3)}]
    with SyncSpy() as spy:
        pending = rows_to_host_async(rows)
        out = pending.result()
    assert spy.calls == ["tolist"]
    assert out == [{"loss": 0.5, "lr": 0.1}, {}, {"loss": 0.25, "n": 3}]
    assert [list(r) for r in out] == [list(r) for r in rows]  # each row keeps its key order


def _numpy_values():
    import numpy as np

    return {
        "f32": np.float32(0.5), "f64": np.float64(0.25), "i64": np.int64(2**40 + 1),
        "i8": np.int8(-3), "u64": np.uint64(2**63 + 1), "flag": np.bool_(True),
        "nan32": np.float32("nan"), "zero_d": np.array(1.5), "one": np.array([2.0], np.float32),
        "grid": np.array([[1, 2], [3, 4]]), "bools": np.array([True, False]),
    }  # fmt: skip


_NUMPY_EXPECTED = {
    "f32": 0.5, "f64": 0.25, "i64": 2**40 + 1, "i8": -3, "u64": 2**63 + 1, "flag": True,
    "zero_d": 1.5, "one": 2.0, "grid": [[1, 2], [3, 4]], "bools": [True, False],
}  # fmt: skip


def _assert_python_numbers(out):
    """Plain Python numbers of the exact builtin type, never numpy ones (JSON, TensorBoard)."""
    nan = out.pop("nan32")
    assert type(nan) is float and math.isnan(nan)
    assert out == _NUMPY_EXPECTED
    for key, value in out.items():
        assert type(value) is type(_NUMPY_EXPECTED[key]), (key, type(value))
    assert all(type(v) is int for row in out["grid"] for v in row)
    assert all(type(v) is bool for v in out["bools"])


def test_numpy_scalars_and_arrays_become_python_numbers(both_paths):
    values = {**_numpy_values(), "loss": torch.tensor(0.5), "plain": 3}
    out = to_host(values)
    assert list(out) == list(values)
    assert out.pop("loss") == 0.5 and out.pop("plain") == 3
    _assert_python_numbers(out)
    rows = rows_to_host_async([_numpy_values(), {"x": np.float32(1.0)}]).result()
    _assert_python_numbers(rows[0])
    assert rows[1] == {"x": 1.0} and type(rows[1]["x"]) is float


def test_numpy_values_become_python_numbers_without_torch(monkeypatch):
    # A run that logs numpy values and never imported torch takes the no-tensor path.
    monkeypatch.delitem(sys.modules, "torch")
    _assert_python_numbers(to_host(_numpy_values()))


def test_from_numpy_leaves_other_values_alone():
    from obsbus.values import from_numpy

    marker = object()
    for value in (0.5, 3, True, "text", None, marker, [1, 2], np.str_("s")):
        assert from_numpy(value) is value
    assert type(from_numpy(np.float64(2.0))) is float
