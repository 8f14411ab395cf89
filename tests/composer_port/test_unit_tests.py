"""A representative handful of Composer's observability unit tests, ported to obsbus.

Sources: mosaicml/composer at commit 6405188805a0054b4551ec49e4919c54c971d0e8, the files
named in each test's docstring. ``SimpleModel()`` becomes its module plus ``loss_fn=``,
``DataLoader(RandomClassificationDataset(...))`` the same random batches in memory
(``_common``), ``composer.optim.DecoupledAdamW`` torch's ``AdamW`` (decoupled weight decay;
a stand-in with ``report_per_parameter_metrics`` where OptimizerMonitor reads it);
the rest is Composer's code with ``composer`` changed to ``obsbus`` in the imports.
"""

from __future__ import annotations

import datetime
import math
import re
import time

import pytest
import torch

from tests.composer_port._common import loss_fn, random_classification_data, simple_model


def _assert_no_negative_values(logged_values):
    from obsbus import Time

    for timestamp, v in logged_values:
        del timestamp  # unused
        if isinstance(v, Time):
            assert int(v) >= 0
        elif isinstance(v, datetime.timedelta):
            assert v.total_seconds() >= 0
        else:
            assert v >= 0


def test_event_values():
    """Source: tests/test_events.py::test_event_values."""
    from obsbus.core import Event

    for event in list(Event):
        assert event.name.lower() == event.value


def test_dummy_state_fixture():
    """Source: tests/fixtures/fixtures.py::dummy_state, the State Composer's tests build."""
    from obsbus import State

    model = simple_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    state = State(
        model=model,
        run_name="dummy_run_name",
        device="cpu",
        precision="fp32",
        device_train_microbatch_size=1,
        rank_zero_seed=0,
        optimizers=optimizer,
        max_duration="10ep",
    )
    state.schedulers = scheduler
    state.set_dataloader(random_classification_data(), "train")
    assert state.dataloader_label == "train"


@pytest.mark.xfail(
    strict=True,
    reason=(
        "deliberate difference (README, Coming from Composer): Composer's test reads SpeedMonitor.history_samples (its window of sample counts, len window_size + 1); obsbus's SpeedMonitor has no such attribute"
    ),
)
@pytest.mark.parametrize("flops_per_batch", [False, True])
def test_speed_monitor(flops_per_batch: bool):
    """Source: tests/callbacks/test_speed_monitor.py::test_speed_monitor."""
    from obsbus.callbacks import SpeedMonitor
    from obsbus.loggers import InMemoryLogger
    from obsbus.trainer import Trainer

    # Construct the callbacks
    speed_monitor = SpeedMonitor(window_size=2)
    in_memory_logger = InMemoryLogger()  # track the logged metrics in the in_memory_logger

    model = simple_model()
    if flops_per_batch:
        model.flops_per_batch = lambda batch: len(batch) * 100.0

    # Construct the trainer and train
    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        callbacks=speed_monitor,
        loggers=in_memory_logger,
        train_dataloader=random_classification_data(),
        eval_dataloader=random_classification_data(seed=1),
        max_duration="1ep",
    )
    trainer.fit()

    _assert_no_negative_values(in_memory_logger.data["time/train"])
    _assert_no_negative_values(in_memory_logger.data["time/val"])
    _assert_no_negative_values(in_memory_logger.data["time/total"])
    _assert_no_negative_values(in_memory_logger.data["throughput/batches_per_sec"])
    _assert_no_negative_values(in_memory_logger.data["throughput/samples_per_sec"])
    _assert_no_negative_values(in_memory_logger.data["throughput/device/batches_per_sec"])
    _assert_no_negative_values(in_memory_logger.data["throughput/device/samples_per_sec"])
    assert "throughput/tokens_per_sec" not in in_memory_logger.data
    assert "throughput/device/tokens_per_sec" not in in_memory_logger.data
    if flops_per_batch:
        _assert_no_negative_values(in_memory_logger.data["throughput/flops_per_sec"])
        _assert_no_negative_values(in_memory_logger.data["throughput/device/flops_per_sec"])

    assert trainer.state.dataloader_label is not None
    assert trainer.state.dataloader_len is not None
    calls_per_epoch = trainer.state.dataloader_len - len(speed_monitor.history_samples) + 1
    expected_step_calls = calls_per_epoch * int(trainer.state.timestamp.epoch)
    assert len(in_memory_logger.data["throughput/batches_per_sec"]) == expected_step_calls
    assert len(in_memory_logger.data["throughput/samples_per_sec"]) == expected_step_calls
    assert len(in_memory_logger.data["throughput/device/batches_per_sec"]) == expected_step_calls
    assert len(in_memory_logger.data["throughput/device/samples_per_sec"]) == expected_step_calls
    if flops_per_batch:
        assert len(in_memory_logger.data["throughput/flops_per_sec"]) == expected_step_calls
        assert len(in_memory_logger.data["throughput/device/flops_per_sec"]) == expected_step_calls
    num_batches = int(trainer.state.timestamp.batch)
    assert len(in_memory_logger.data["time/total"]) == num_batches
    assert len(in_memory_logger.data["time/train"]) == num_batches
    assert len(in_memory_logger.data["time/val"]) == num_batches


def test_runtime_estimator():
    """Source: tests/callbacks/test_runtime_estimator.py::test_runtime_estimator, with
    ``time_unit='seconds'`` (Composer parametrizes four units)."""
    from obsbus.callbacks import RuntimeEstimator
    from obsbus.loggers import InMemoryLogger
    from obsbus.trainer import Trainer

    time_unit = "seconds"
    # Construct the callbacks
    skip_batches = 1
    runtime_estimator = RuntimeEstimator(skip_batches=skip_batches, time_unit=time_unit)
    in_memory_logger = InMemoryLogger()  # track the logged metrics in the in_memory_logger

    simple = simple_model()
    original_fwd = simple.forward

    def new_fwd(x):
        time.sleep(0.02)
        return original_fwd(x)

    simple.forward = new_fwd

    # Construct the trainer and train
    trainer = Trainer(
        model=simple,
        loss_fn=loss_fn,
        callbacks=runtime_estimator,
        loggers=in_memory_logger,
        train_dataloader=random_classification_data(),
        eval_dataloader=random_classification_data(seed=1),
        max_duration="2ep",
        eval_interval="1ep",
        train_subset_num_batches=5,
        eval_subset_num_batches=5,
    )
    trainer.fit()

    assert in_memory_logger.hyperparameters["time/remaining_estimate_unit"] == time_unit

    time_remaining_calls = len(in_memory_logger.data["time/remaining_estimate"])
    _assert_no_negative_values(in_memory_logger.data["time/remaining_estimate"])

    expected_calls = int(trainer.state.timestamp.batch) - skip_batches
    assert time_remaining_calls == expected_calls

    ba_2_estimate = in_memory_logger.data["time/remaining_estimate"][1][-1]
    # Should be ~0.2 seconds
    assert ba_2_estimate < 1
    assert ba_2_estimate > 0.1


@pytest.mark.parametrize("should_nan", [True, False])
def test_nan_monitor(should_nan):
    """Source: tests/callbacks/test_nan_monitor.py::test_nan_monitor."""
    from obsbus.callbacks import NaNMonitor
    from obsbus.trainer import Trainer

    # Make the callback
    nan_monitor = NaNMonitor()
    # Test model
    model = simple_model()
    # Construct the trainer and train. Make the LR huge to force a NaN, small if it shouldn't
    lr = 1e20 if should_nan else 1e-10
    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        callbacks=nan_monitor,
        train_dataloader=random_classification_data(),
        optimizers=torch.optim.AdamW(model.parameters(), lr=lr),
        max_duration="100ba",
    )
    # If it should NaN, expect a RuntimeError
    if should_nan:
        with pytest.raises(RuntimeError) as excinfo:
            trainer.fit()
        assert "Train loss contains a NaN." in str(excinfo.value)
    else:
        trainer.fit()


class DecoupledAdamW(torch.optim.AdamW):
    """Stands in for ``composer.optim.DecoupledAdamW`` where the test needs it: an optimizer
    with ``report_per_parameter_metrics`` (obsbus has no optimizers). It reports the norm of
    each parameter's first moment and of its last update, under Composer's key names."""

    def step(self, closure=None):
        before = {p: p.detach().clone() for g in self.param_groups for p in g["params"]}
        loss = super().step(closure)
        self._updates = {p: p.detach() - old for p, old in before.items()}
        return loss

    def report_per_parameter_metrics(self, param, name, optimizer_metrics):
        state = self.state.get(param, {})
        if "exp_avg" in state:
            optimizer_metrics[f"l2_norm/moment/{name}"] = state["exp_avg"].norm()
        if param in getattr(self, "_updates", {}):
            optimizer_metrics[f"l2_norm/update/{name}"] = self._updates[param].norm()
        return optimizer_metrics


@pytest.mark.parametrize("log_optimizer_metrics", [True, False])
@pytest.mark.parametrize("batch_log_interval", [1, 3])
def test_optimizer_monitor(log_optimizer_metrics: bool, batch_log_interval: int):
    """Source: tests/callbacks/test_optimizer_monitor.py::test_optimizer_monitor (Composer
    parametrizes intervals 1, 2, 3, 5). Composer's ``module.2.weight`` is the ComposerClassifier's
    ``module`` attribute plus the parameter's name; the plain module's name is ``2.weight``.

    Deliberate difference (README "Coming from Composer"): Composer's OptimizerMonitor logs
    ``l2_norm/grad/{name}`` for every parameter always; obsbus's only with
    ``log_per_layer=True``, which the port adds."""
    from obsbus.callbacks import OptimizerMonitor
    from obsbus.loggers import InMemoryLogger
    from obsbus.trainer import Trainer

    # Construct the callback
    grad_monitor = OptimizerMonitor(
        log_optimizer_metrics=log_optimizer_metrics,
        batch_log_interval=batch_log_interval,
        log_per_layer=True,
    )
    in_memory_logger = InMemoryLogger()  # track the logged metrics in the in_memory_logger
    model = simple_model()
    # Construct the trainer and train
    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        callbacks=grad_monitor,
        loggers=in_memory_logger,
        train_dataloader=random_classification_data(),
        optimizers=DecoupledAdamW(model.parameters()),
        max_duration="10ba",
    )
    trainer.fit()
    num_train_steps = int(trainer.state.timestamp.batch)
    expected_num_calls = num_train_steps // batch_log_interval

    # Count the logged steps
    grad_norm_calls = len(in_memory_logger.data["l2_norm/grad/global"])
    layer_norm_calls = [
        len(calls) for (k, calls) in in_memory_logger.data.items() if "l2_norm/grad" in k
    ]
    assert "l2_norm/grad/2.weight" in in_memory_logger.data
    if log_optimizer_metrics:
        assert "l2_norm/moment/2.weight" in in_memory_logger.data
        assert "l2_norm/update/2.weight" in in_memory_logger.data

    # Expected to log gradient norm once per step (total batch)
    assert grad_norm_calls == expected_num_calls
    for num_calls in layer_norm_calls:
        assert num_calls == expected_num_calls


def test_early_stopper_train_loss():
    """Source: tests/callbacks/test_early_stopper.py::test_early_stopper, the batch-unit case
    (``dataloader_label='train'``, patience ``Time(3, 'ba')``). Composer feeds a
    torchmetrics ``MulticlassAccuracy`` a fixed sequence through its test-only
    ``MetricSetterCallback``; here the metric is the model's train ``MulticlassAccuracy``
    (issue 14 item 3)."""
    pytest.importorskip("torchmetrics")
    from torchmetrics.classification import MulticlassAccuracy

    from obsbus import Time, TimeUnit, Trainer
    from obsbus.callbacks.early_stopper import EarlyStopper

    early_stopper = EarlyStopper("MulticlassAccuracy", "train", patience=Time(3, TimeUnit.BATCH))
    trainer = Trainer(
        model=simple_model(num_features=5),
        loss_fn=loss_fn,
        train_dataloader=random_classification_data(shape=(5, 1, 1), batch_size=4),
        eval_dataloader=random_classification_data(shape=(5, 1, 1), batch_size=4, seed=1),
        max_duration="30ep",
        train_metrics={"MulticlassAccuracy": MulticlassAccuracy(num_classes=2, average="micro")},
        callbacks=[early_stopper],
    )
    trainer.fit()
    assert trainer.state.timestamp.batch < 30 * 25  # stopped early


def test_in_memory_logger():
    """Source: tests/loggers/test_in_memory_logger.py::test_in_memory_logger."""
    from obsbus import State
    from obsbus.loggers import InMemoryLogger, Logger

    dummy_state = State(run_name="dummy_run_name", max_duration="10ep")
    in_memory_logger = InMemoryLogger()
    logger = Logger(dummy_state, destinations=[in_memory_logger])
    in_memory_logger.init(dummy_state, logger)
    logger.log_metrics({"epoch": 2.2})
    dummy_state.timestamp = dummy_state.timestamp.to_next_batch(samples=1, tokens=1)
    logger.log_metrics({"epoch": 3.3})

    # no batch events should be logged, since the level is epoch
    assert len(in_memory_logger.data["epoch"]) == 2

    # `in_memory_logger.data` should contain everything
    timestamp, data = in_memory_logger.data["epoch"][0]
    assert timestamp.batch == 0
    assert data == 2.2
    timestamp, data = in_memory_logger.data["epoch"][1]
    assert timestamp.batch == 1
    assert data == 3.3

    # the most recent values should have just the last call to epoch
    assert in_memory_logger.most_recent_values["epoch"] == 3.3
    assert in_memory_logger.most_recent_timestamps["epoch"].batch == 1


def test_in_memory_logger_get_timeseries():
    """Source: tests/loggers/test_in_memory_logger.py::test_in_memory_logger_get_timeseries."""
    import numpy as np

    from obsbus import State, Time, Timestamp
    from obsbus.loggers import InMemoryLogger, Logger

    state = State(run_name="minimal_run_name", max_duration="100ep")
    logger = Logger(state=state, destinations=[])
    in_memory_logger = InMemoryLogger()
    in_memory_logger.init(state, logger)
    data = {"accuracy/val": [], "batch": [], "batch_in_epoch": []}
    for i in range(10):
        batch = i
        batch_in_epoch = i % 3
        timestamp = Timestamp(
            epoch=Time(0, "ep"),
            batch=Time(batch, "ba"),
            batch_in_epoch=Time(batch_in_epoch, "ba"),
            sample=Time(0, "sp"),
            sample_in_epoch=Time(0, "sp"),
            token=Time(0, "tok"),
            token_in_epoch=Time(0, "tok"),
        )
        assert in_memory_logger.state is not None
        in_memory_logger.state.timestamp = timestamp
        datapoint = i / 3
        in_memory_logger.log_metrics({"accuracy/val": datapoint}, step=state.timestamp.batch.value)
        data["accuracy/val"].append(datapoint)
        data["batch"].append(batch)
        data["batch_in_epoch"].append(batch_in_epoch)

    timeseries = in_memory_logger.get_timeseries("accuracy/val")
    for k, v in data.items():
        assert np.all(timeseries[k] == np.array(v))


@pytest.mark.xfail(
    strict=True,
    reason=(
        "deliberate difference (README, Coming from Composer): FileLogger's text lines are stamped with the batch and end "
        "without Composer's trailing space ('[hyperparameter][batch=0]: foo: 3', "
        "'[table][batch=0]: test_table: {\"columns\": [...]}' with JSON spaces) where Composer "
        "writes '[hyperparameter]: foo: 3 ' and '[table]: test_table: {\"columns\":[...]}'"
    ),
)
def test_file_logger(tmp_path):
    """Source: tests/loggers/test_file_logger.py::test_file_logger (its FileUploaderTracker
    overrides ``upload_file`` only)."""
    import os

    from obsbus import Event, State
    from obsbus.loggers import FileLogger, Logger, LoggerDestination

    class FileUploaderTracker(LoggerDestination):
        def __init__(self) -> None:
            self.uploaded_files = []

        def upload_file(self, state, remote_file_name, file_path, *, overwrite):
            del state, overwrite  # unused
            self.uploaded_files.append((remote_file_name, file_path))

    dummy_state = State(run_name="dummy_run_name", max_duration="10ep")
    log_file_name = os.path.join(tmp_path, "output.log")
    log_destination = FileLogger(
        filename=log_file_name,
        remote_file_name="{run_name}/rank{rank}.log",
        buffer_size=1,
        flush_interval=1,
    )
    file_tracker_destination = FileUploaderTracker()
    logger = Logger(dummy_state, destinations=[log_destination, file_tracker_destination])
    log_destination.run_event(Event.INIT, dummy_state, logger)
    logger.log_hyperparameters({"foo": 3})
    logger.log_metrics({"loss": 2}, step=1)
    logger.log_table(
        columns=["prompt", "generation"], rows=[["p0", "g0"], ["p1", "g1"]], name="test_table"
    )
    log_destination.run_event(Event.BATCH_END, dummy_state, logger)
    log_destination.close(dummy_state, logger)
    with open(log_file_name) as f:
        assert f.readlines() == [
            "[hyperparameter]: foo: 3 \n",
            "[metric][batch=1]: loss: 2 \n",
            '[table]: test_table: {"columns":["prompt","generation"],"data":[["p0","g0"],["p1","g1"]]}\n',
        ]


_FIRST = pytest.mark.xfail(
    strict=True,
    reason=(
        "deliberate difference (README, Coming from Composer): Composer's ConsoleLogger "
        "also logs the first batch or epoch when the interval is not 1; obsbus's does not (one "
        "logging event fewer)"
    ),
)


@pytest.mark.parametrize(
    ("log_interval", "max_duration", "log_interval_unit", "max_duration_unit"),
    [
        (1, 8, "ba", "ba"),
        pytest.param(3, 10, "ba", "ep", marks=_FIRST),
        pytest.param(2, 9, "ep", "ep", marks=_FIRST),
        pytest.param(2, 11, "ep", "ba", marks=_FIRST),
    ],
)
def test_console_logger_interval(
    tmp_path, log_interval, max_duration, log_interval_unit, max_duration_unit
):
    """Source: tests/loggers/test_console_logger.py::test_console_logger_interval, four of its
    96 cases. ``SimpleModel``'s train metric (``MulticlassAccuracy``) is counted as
    Composer counts it; without torchmetrics the model has none (issue 14 item 3)."""
    console_logger_test_file_path = str(tmp_path / "console_test")
    console_logger_test_stream = open(console_logger_test_file_path, "w")  # noqa: SIM115

    from obsbus.trainer import Trainer

    batch_size = 4
    dataset_size = 17
    batches_per_epoch = math.ceil(dataset_size / batch_size)

    model = simple_model()
    trainer = Trainer(
        model=model,
        loss_fn=loss_fn,
        console_stream=console_logger_test_stream,
        console_log_interval=f"{log_interval}{log_interval_unit}",
        log_to_console=True,
        progress_bar=False,
        train_dataloader=random_classification_data(size=dataset_size, batch_size=batch_size),
        max_duration=f"{max_duration}{max_duration_unit}",
    )
    trainer.fit()
    console_logger_test_stream.flush()
    console_logger_test_stream.close()

    with open(console_logger_test_file_path) as f:
        lines = f.readlines()

    # Make a regular expression for matches for any line that contains "Train" followed by
    # a colon.
    reg_exp = re.compile("Train *:*")
    actual_num_log_lines = sum(
        [
            1
            if bool(reg_exp.search(line)) and ("trainer/" not in line and "time/" not in line)
            else 0
            for line in lines
        ]
    )

    num_metrics = len(trainer.state.train_metrics)
    num_losses = 1
    num_metrics_and_losses_per_logging_event = num_metrics + num_losses

    logs_at_end = None
    if log_interval_unit == max_duration_unit:
        expected_num_logging_events = max_duration // log_interval
        logs_at_end = max_duration % log_interval
    elif log_interval_unit == "ba" and max_duration_unit == "ep":
        expected_num_logging_events = (batches_per_epoch * max_duration) // log_interval
        logs_at_end = (batches_per_epoch * max_duration) % log_interval
    else:  # for the case where log_interval_unit == 'ep' and max_duration == 'ba'.
        total_epochs = max_duration // batches_per_epoch
        expected_num_logging_events = total_epochs // log_interval
        logs_at_end = max_duration % (batches_per_epoch * log_interval)
    if log_interval != 1:
        expected_num_logging_events += 1  # Because we automatically log the first batch or epoch.

    if logs_at_end != 0:
        expected_num_logging_events += 1  # Log for fit

    expected_num_lines = expected_num_logging_events * num_metrics_and_losses_per_logging_event

    assert actual_num_log_lines == expected_num_lines


def test_logger_file_upload():
    """Source: tests/loggers/test_logger.py::test_logger_file_upload (a destination that
    overrides only ``upload_file``; the file need not exist)."""
    import pathlib

    from obsbus.core.state import State
    from obsbus.loggers import Logger, LoggerDestination

    dummy_state = State(run_name="dummy_run_name", max_duration="10ep")
    file_logged = False

    class DummyLoggerDestination(LoggerDestination):
        def upload_file(
            self, state: State, remote_file_name: str, file_path: pathlib.Path, *, overwrite: bool
        ):
            nonlocal file_logged
            file_logged = True
            assert remote_file_name == "foo"
            assert file_path.name == "bar"
            assert overwrite

    logger = Logger(state=dummy_state, destinations=[DummyLoggerDestination()])
    logger.upload_file(
        remote_file_name="foo",
        file_path="bar",
        overwrite=True,
    )

    assert file_logged
