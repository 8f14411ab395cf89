"""Where SpeedMonitor's FLOPs come from in each home: its argument, the home's
``state.batch_num_flops`` (HF's ``current_flos``, Lightning's ``flops_per_batch``),
the model's ``flops_per_batch``, HF's ``floating_point_ops``."""

from __future__ import annotations

import warnings

import pytest
import torch

from obsbus import Callback, Run
from obsbus.callbacks import SpeedMonitor
from obsbus.loggers import InMemoryLogger

from ..helpers import regression_data


class StepFlops(Callback):
    """``state.batch_num_flops`` at every ``batch_end``."""

    def __init__(self) -> None:
        self.seen: list[float | None] = []

    def batch_end(self, state, logger):
        self.seen.append(state.batch_num_flops)


def _rates(memory):
    return memory.get_timeseries("throughput/flops_per_sec")["throughput/flops_per_sec"]


def _quiet_speed(**kwargs):
    return SpeedMonitor(window_size=1, gpu_flops_available=None, **kwargs)


class WithMethod(torch.nn.Linear):
    def flops_per_batch(self, batch):
        return 100.0 * len(batch[0])


def _run(model, batches, callbacks, loggers, per_batch=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the CPU has no MFU peak
        with Run(model=model, max_duration=f"{len(batches)}ba", callbacks=callbacks,
                 loggers=loggers) as run:  # fmt: skip
            for batch in run.train(batches):
                if per_batch is not None:
                    run.state.batch_num_flops = per_batch(batch)
                run.state.loss = torch.tensor(0.0)


def test_sources_in_order_under_run():
    data = regression_data(4, batch_size=8)
    # The model's method: 100 per sample, 8 samples a batch.
    memory = InMemoryLogger()
    speed = _quiet_speed()
    _run(WithMethod(4, 1), data, [speed], [memory])
    rates = _rates(memory)
    secs = memory.get_timeseries("throughput/batches_per_sec")["throughput/batches_per_sec"]
    assert rates == pytest.approx([800.0 * s for s in secs])
    # What the loop sets beats the model's method.
    memory = InMemoryLogger()
    _run(WithMethod(4, 1), data, [_quiet_speed()], [memory], per_batch=lambda b: 5.0)
    secs = memory.get_timeseries("throughput/batches_per_sec")["throughput/batches_per_sec"]
    assert _rates(memory) == pytest.approx([5.0 * s for s in secs])
    # The argument beats both.
    memory = InMemoryLogger()
    _run(WithMethod(4, 1), data, [_quiet_speed(flops_per_batch=lambda b: 7.0)], [memory],
         per_batch=lambda b: 5.0)  # fmt: skip
    secs = memory.get_timeseries("throughput/batches_per_sec")["throughput/batches_per_sec"]
    assert _rates(memory) == pytest.approx([7.0 * s for s in secs])
    # No source: no FLOPs keys; a batch whose FLOPs the loop does not know leaves them out.
    memory = InMemoryLogger()
    _run(torch.nn.Linear(4, 1), data, [_quiet_speed()], [memory])
    assert "throughput/flops_per_sec" not in memory.most_recent_values
    memory = InMemoryLogger()
    _run(torch.nn.Linear(4, 1), data, [SpeedMonitor(window_size=2)], [memory],
         per_batch=lambda b: None)  # fmt: skip
    assert "throughput/flops_per_sec" not in memory.most_recent_values


def test_a_tensor_from_the_loop_is_refused_with_the_fix():
    memory = InMemoryLogger()
    refused = pytest.raises(TypeError, match=r"state.batch_num_flops gave tensor.*Python number")
    with refused, Run(max_duration="3ba", callbacks=[_quiet_speed()], loggers=[memory],
                      strict=True) as run:  # fmt: skip
        for _ in run.train([[1], [2], [3]]):
            run.state.batch_num_flops = torch.tensor(3.0)


transformers = pytest.importorskip("transformers")


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64,
                                      n_positions=16, bos_token_id=0, eos_token_id=0))  # fmt: skip


class _Holder:
    def __init__(self, model):
        self.model = model


def test_hf_floating_point_ops_under_run_for_a_dict_batch():
    model = _gpt2()
    batches = [{"input_ids": torch.randint(0, 64, (4, 8))} for _ in range(3)]
    # What HF's Trainer counts for a microbatch (transformers 5; 4 has it on the model).
    expected = float(transformers.Trainer.floating_point_ops(_Holder(model), batches[0]))
    assert expected == 6 * 32 * model.num_parameters(exclude_embeddings=True) > 0
    memory = InMemoryLogger()
    _run(model, batches, [_quiet_speed()], [memory])
    secs = memory.get_timeseries("throughput/batches_per_sec")["throughput/batches_per_sec"]
    assert _rates(memory) == pytest.approx([expected * s for s in secs])


def test_hf_bridge_flops_are_hf_own_total_flos(tmp_path):
    from obsbus.integrations.transformers import ObsbusCallback

    from .test_transformers import make_trainer

    steps, memory = StepFlops(), InMemoryLogger()
    cb = ObsbusCallback(callbacks=[_quiet_speed(), steps], loggers=[memory], log_hf_logs=False,
                        run_folder=tmp_path / "run")  # fmt: skip
    trainer = cb.wrap(make_trainer(tmp_path, [cb], eval_n=0, num_train_epochs=1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.train()
    micro = {"input_ids": torch.zeros(4, 8, dtype=torch.long)}
    per_step = 2 * float(trainer.floating_point_ops(micro))  # two microbatches a step
    assert steps.seen == pytest.approx([per_step] * 3)
    assert sum(steps.seen) == pytest.approx(trainer.state.total_flos)
    secs = memory.get_timeseries("throughput/batches_per_sec")["throughput/batches_per_sec"]
    assert _rates(memory) == pytest.approx([per_step * s for s in secs])


def test_hf_bridge_without_wrap_has_no_flops(tmp_path):
    from obsbus.integrations.transformers import ObsbusCallback

    from .test_transformers import make_trainer

    steps = StepFlops()
    cb = ObsbusCallback(callbacks=[steps], log_hf_logs=False, run_folder=tmp_path / "run")
    make_trainer(tmp_path, [cb], eval_n=0, num_train_epochs=1).train()
    assert steps.seen == [None, None, None]


pl = pytest.importorskip("lightning.pytorch")


def test_lightning_flops_from_measure_flops_summed_over_microbatches():
    from lightning.fabric.utilities.throughput import measure_flops

    from obsbus.integrations.lightning import ObsbusCallback

    from .test_lightning import ACCUM, Tiny, fit

    with torch.device("meta"):
        meta = Tiny(log=False)
        x = torch.randn(8, 4)
    per_batch = measure_flops(meta, lambda: meta.net(x), lambda y: y.sum())
    assert per_batch > 0
    steps, memory = StepFlops(), InMemoryLogger()
    bus = ObsbusCallback(callbacks=[_quiet_speed(), steps], loggers=[memory],
                         flops_per_batch=lambda batch: per_batch * len(batch[0]) / 8)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit(bus, Tiny(log=False))
    assert steps.seen == [ACCUM * per_batch] * len(steps.seen) and len(steps.seen) == 6
    secs = memory.get_timeseries("throughput/batches_per_sec")["throughput/batches_per_sec"]
    assert _rates(memory) == pytest.approx([ACCUM * per_batch * s for s in secs])


def test_lightning_flops_default_to_the_module_method_and_bad_values_say_so():
    from obsbus.integrations.lightning import ObsbusCallback

    from .test_lightning import ACCUM, Tiny, fit

    class Counted(Tiny):
        def flops_per_batch(self, batch):
            return 10 * len(batch[0])

    steps = StepFlops()
    fit(ObsbusCallback(callbacks=[steps]), Counted(log=False))
    assert steps.seen == [ACCUM * 80.0] * 6
    with pytest.raises(TypeError, match=r"ObsbusCallback flops_per_batch"):
        ObsbusCallback(flops_per_batch=3)
    bad = ObsbusCallback(flops_per_batch=lambda batch: torch.tensor(1.0))
    with pytest.raises(TypeError, match=r"flops_per_batch gave tensor.*Python number"):
        fit(bad, Tiny(log=False))
