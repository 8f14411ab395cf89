"""TensorboardLogger, read back with TensorBoard's own EventAccumulator."""

from __future__ import annotations

import hashlib
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from tensorboard.util import tensor_util

from obsbus import Callback, LoggerDestination, Run, Trainer
from obsbus.callbacks import LRMonitor, MemoryMonitor, SpeedMonitor
from obsbus.errors import MissingExtraError
from obsbus.loggers import InMemoryLogger
from obsbus.loggers.tensorboard_logger import TensorboardLogger

from ..helpers import regression_data, tiny_model


def read(path):
    acc = event_accumulator.EventAccumulator(
        str(path), size_guidance={"scalars": 0, "images": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


def scalars(acc):
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def session(acc, which="session_start_info"):
    content = acc.PluginTagToContent("hparams")[f"_hparams_/{which}"]
    return getattr(plugin_data_pb2.HParamsPluginData.FromString(content), which)


def hparam(value):
    kind = value.WhichOneof("kind")
    return getattr(value, kind)


def texts(acc, tag):
    return [
        (e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode()) for e in acc.Tensors(tag)
    ]


def fit(tmp_path, loggers, callbacks=(), duration="2ep", **kwargs):
    return Trainer(
        tiny_model(),
        regression_data(4),
        duration,
        loss_fn=F.mse_loss,
        loggers=loggers,
        callbacks=list(callbacks),
        device="cpu",
        run_folder=tmp_path / "run",
        run_name="r",
        **kwargs,
    )


def expected(memory, keep):
    """The in-memory series, as (step, float32) pairs, of the keys ``keep`` accepts."""
    out = {}
    for key in memory.data:
        if keep(key):
            series = memory.get_timeseries(key)
            out[key] = [
                (s, float(np.float32(v))) for s, v in zip(series["step"], series[key], strict=True)
            ]
    return out


def test_every_scalar_reaches_the_event_file_as_float32_at_its_step(tmp_path):
    tb, memory = TensorboardLogger(), InMemoryLogger()
    callbacks = [LRMonitor(), SpeedMonitor(window_size=2), MemoryMonitor()]
    with fit(
        tmp_path,
        [tb, memory],
        callbacks,
        eval_dataloader=regression_data(2, seed=1),
        hparams={"optim": {"lr": 0.001, "betas": [0.9, 0.99]}, "seed": 7},
    ) as trainer:
        trainer.fit()
    acc = read(tmp_path / "run" / "tensorboard")
    written = scalars(acc)
    # Primus's defaults: learning rate on, timers and memory off.
    want = expected(
        memory, lambda k: not k.startswith(("time/", "memory/", "throughput/step_time_"))
    )
    assert written == want
    assert {
        "loss/train/total",
        "metrics/eval/loss",
        "lr-AdamW/group0",
        "throughput/batches_per_sec",
    } <= set(written)
    assert [s for s, _ in written["loss/train/total"]] == list(range(1, 9))
    assert [s for s, _ in written["metrics/eval/loss"]] == [4, 8]
    assert any(k.startswith("time/") for k in memory.data)
    assert any(k.startswith("memory/") for k in memory.data)
    # Hyperparameters (flattened), the environment and the end status in the HParams plugin.
    start = {k: hparam(v) for k, v in session(acc).hparams.items()}
    assert start["optim/lr"] == 0.001 and start["seed"] == 7.0
    assert start["optim/betas"] == "[0.9, 0.99]" and start["device"] == "cpu"
    assert any(k.startswith("env__") for k in start)
    assert session(acc, "session_end_info").status == api_pb2.STATUS_SUCCESS
    (only,) = (tmp_path / "run" / "tensorboard").iterdir()  # no uploader: one file
    assert only.name.startswith("events.out.tfevents.")


def test_primus_switches_choose_the_keys(tmp_path):
    tb = TensorboardLogger(
        log_learning_rate=False,
        log_timers=True,
        log_memory=True,
        log_batch_size=True,
        log_world_size=True,
        log_validation_ppl=True,
        log_interval="2ba",
    )
    memory = InMemoryLogger()

    class LossScale(Callback):
        def batch_end(self, state, logger):
            logger.log_metrics({"loss_scale": 65536.0})

    callbacks = [LRMonitor(), SpeedMonitor(window_size=2), MemoryMonitor(), LossScale()]
    with fit(
        tmp_path,
        [tb, memory],
        callbacks,
        eval_dataloader=regression_data(2, seed=1),
        hparams={"x": 1},
    ) as trainer:
        trainer.fit()
    written = scalars(read(tmp_path / "run" / "tensorboard"))
    derived = {"batch_size/samples", "world_size", "metrics/eval/perplexity"}
    want = expected(memory, lambda k: not k.startswith("lr-"))
    assert {k: v for k, v in written.items() if k not in derived} == want
    assert any(k.startswith("time/") for k in written) and "loss_scale" in written
    assert any(k.startswith("memory/") for k in written)
    assert not any(k.startswith("lr-") for k in written)
    assert written["batch_size/samples"] == [(s, 8.0) for s in (2, 4, 6, 8)]
    assert written["world_size"] == [(s, 1.0) for s in (2, 4, 6, 8)]
    losses = memory.get_timeseries("metrics/eval/loss")
    assert written["metrics/eval/perplexity"] == [
        (s, float(np.float32(math.exp(v))))
        for s, v in zip(losses["step"], losses["metrics/eval/loss"], strict=True)
    ]


def test_a_run_that_raises_ends_its_session_as_failed_with_every_metric_before_it(tmp_path):
    class Crash(Callback):
        def batch_end(self, state, logger):
            if state.timestamp.batch >= "3ba":
                raise RuntimeError("crash at batch 3")

    tb, memory = TensorboardLogger(log_env=False), InMemoryLogger()
    trainer = fit(tmp_path, [tb, memory], [Crash()], hparams={"seed": 1})
    with pytest.raises(RuntimeError, match="crash at batch 3"):
        trainer.fit()
    # The exception event alone flushed everything to disk.
    assert (
        scalars(read(tmp_path / "run" / "tensorboard"))["loss/train/total"]
        == expected(memory, lambda k: k == "loss/train/total")["loss/train/total"]
    )
    trainer.close()
    assert (
        session(read(tmp_path / "run" / "tensorboard"), "session_end_info").status
        == api_pb2.STATUS_FAILURE
    )


class Uploads(LoggerDestination):
    """Stores a copy of every file handed over, and its hash at that moment."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[str, tuple[Path, str]] = {}

    def can_upload_files(self):
        return True

    def upload_file(self, state, remote_file_name, file_path, *, overwrite=False):
        target = self.folder / remote_file_name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file_path, target)
        self.files[remote_file_name] = (
            Path(file_path),
            hashlib.sha256(target.read_bytes()).hexdigest(),
        )


def test_event_files_are_handed_over_complete_at_flushes_and_never_change(tmp_path):
    uploads = Uploads(tmp_path / "store")
    tb, memory = TensorboardLogger(flush_interval=2, log_env=False), InMemoryLogger()
    seen_at_flush = []
    with Run(
        max_duration="5ba", run_folder=tmp_path / "run", run_name="r", loggers=[tb, memory, uploads]
    ) as run:
        for i, _ in enumerate(run.train([[0]] * 5)):
            run.state.loss = torch.tensor(i + 0.25)
            if i in (2, 4):
                tb._writer.flush()
                seen_at_flush.append(len(uploads.files))
    assert seen_at_flush == [1, 2]  # handed over at the flushes of batches 2 and 4
    local = sorted((tmp_path / "run" / "tensorboard").iterdir())  # names sort in writing order
    assert len(local) == 3 and list(uploads.files) == [f"r/tensorboard/{p.name}" for p in local]
    for path, digest in uploads.files.values():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # unchanged since
    # Each uploaded copy reads on its own; together they hold every value, in order.
    store = tmp_path / "store" / "r" / "tensorboard"
    parts = [scalars(read(p)).get("loss/train/total", []) for p in sorted(store.iterdir())]
    assert (
        all(parts[:2])
        and [v for part in parts for v in part]
        == expected(memory, lambda k: k == "loss/train/total")["loss/train/total"]
    )
    assert scalars(read(store)) == scalars(read(tmp_path / "run" / "tensorboard"))


def test_every_rank_writes_its_own_run_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    every, zero = TensorboardLogger(rank_zero_only=False), TensorboardLogger(log_dir="zero")
    with Run(max_duration="2ba", run_folder=tmp_path / "run", loggers=[every, zero]) as run:
        for _ in run.train([[0], [0]]):
            run.state.loss = 1.5
    assert every.run_dir == tmp_path / "run" / "tensorboard" / "rank1"
    assert scalars(read(every.run_dir))["loss/train/total"] == [(1, 1.5), (2, 1.5)]
    assert not (tmp_path / "run" / "zero").exists()  # rank 1 is not rank 0


def test_log_dir_takes_placeholders_and_absolute_paths(tmp_path):
    relative = TensorboardLogger(log_dir="tb/{run_name}-{rank}", log_env=False)
    absolute = TensorboardLogger(log_dir=tmp_path / "elsewhere", log_env=False)
    with Run(
        max_duration="1ba",
        run_folder=tmp_path / "run",
        run_name="exp",
        loggers=[relative, absolute],
    ) as run:
        for _ in run.train([[0]]):
            run.state.loss = 2.0
    assert relative.run_dir == tmp_path / "run" / "tb" / "exp-0"
    for folder in (relative.run_dir, tmp_path / "elsewhere"):
        assert scalars(read(folder)) == {"loss/train/total": [(1, 2.0)]}


def test_images_text_tables_and_late_hyperparameters(tmp_path, caplog):
    tb = TensorboardLogger(log_env=False, log_git=False)
    chw = torch.zeros(3, 4, 5)
    chw[0] = 1.0  # red
    nhwc = np.full((2, 6, 7, 1), 128, dtype=np.uint8)
    with Run(
        max_duration="2ba", run_folder=tmp_path / "run", loggers=[tb], hparams={"early": 1}
    ) as run:
        for _ in run.train([[0], [0]]):
            run.state.loss = 0.5
            run.logger.log_images(chw, name="red")
            run.logger.log_images(nhwc, name="grey", channels_last=True)
            run.logger.log_traces({"algo": "branch-a"})
            run.logger.log_table(["a", "b"], [[1, "x|y"]], name="tbl")
            run.log_metrics({"vector": torch.tensor([1.0, 2.0])})
        run.logger.log_hyperparameters({"late": "yes"})
    acc = read(tmp_path / "run" / "tensorboard")
    red = acc.Images("red")  # inside batch b the batch count (the default step) is b - 1
    assert [(e.step, e.width, e.height) for e in red] == [(0, 5, 4), (1, 5, 4)]
    import io

    from PIL import Image as pil

    pixel = pil.open(io.BytesIO(red[0].encoded_image_string)).convert("RGB").getpixel((0, 0))
    assert pixel == (255, 0, 0)
    assert [(e.step, e.width, e.height) for e in acc.Images("grey/1")] == [(0, 7, 6), (1, 7, 6)]
    assert texts(acc, "traces/algo") == [(0, "branch-a"), (1, "branch-a")]
    assert texts(acc, "tbl")[0] == (0, "| a | b |\n|---|---|\n| 1 | x\\|y |")
    assert {k: hparam(v) for k, v in session(acc).hparams.items()} == {"early": 1.0}
    assert texts(acc, "hyperparameters") == [(2, "| name | value |\n|---|---|\n| late | yes |")]
    assert "vector" not in acc.Tags()["scalars"]
    warned = [
        r.getMessage() for r in caplog.records if "could not write 'vector'" in r.getMessage()
    ]
    assert len(warned) == 1 and "numbers only, and this value is a list" in warned[0]


def test_secrets_never_reach_the_event_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_API_KEY", "sk-live-tb-0123456789")
    monkeypatch.setenv("SOME_URI", "https://ada:sk-live-tb-0123456789@host/x")
    monkeypatch.setenv("OBSBUS_TEST_VISIBLE", "visible-value")
    with fit(tmp_path, [TensorboardLogger()], duration="2ba") as trainer:
        trainer.fit()
    blobs = [p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert blobs and any(b"visible-value" in b for b in blobs)
    assert not any(b"sk-live-tb-0123456789" in b for b in blobs)
    start = session(read(tmp_path / "run" / "tensorboard")).hparams
    assert "env__MY_API_KEY" not in start and hparam(start["env__SOME_URI"]) == "https://***@host/x"


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"flush_interval": 0}, ValueError, r"flush_interval must be a whole number >= 1, got 0\."),
        (
            {"flush_interval": "10"},
            TypeError,
            r"flush_interval must be a whole number >= 1, got '10'\. To fix, pass the int 10",
        ),
        ({"queue_size": 0}, ValueError, "queue_size must be a whole number >= 1, got 0"),
        (
            {"log_dir": 3},
            TypeError,
            r"log_dir must be a folder path \(str or os.PathLike\) or None, got 3",
        ),
        ({"log_dir": "{rnak}"}, ValueError, "uses unknown placeholder {rnak}"),
        ({"log_memory": "yes"}, TypeError, "log_memory must be True or False, got 'yes'"),
        ({"log_interval": "5sp"}, ValueError, "TensorboardLogger log_interval '5sp'"),
    ],
    ids=[
        "zero-flush",
        "str-flush",
        "zero-queue",
        "int-dir",
        "bad-placeholder",
        "str-switch",
        "sample-interval",
    ],
)
def test_bad_arguments_fail_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        TensorboardLogger(**kwargs)


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=repr)
def test_a_close_timeout_that_never_ends_is_refused(value):
    with pytest.raises(
        ValueError,
        match=rf"TensorboardLogger close_timeout must be a finite "
        rf"number of seconds > 0, got {value!r}",
    ):
        TensorboardLogger(close_timeout=value)


def test_a_file_for_log_dir_fails_at_construction(tmp_path):
    """It was found at fit, when the first event file was opened."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    with pytest.raises(
        NotADirectoryError,
        match=rf"TensorboardLogger log_dir must be a folder, "
        rf"and {str(taken)!r} is an existing file",
    ):
        TensorboardLogger(log_dir=taken)
    with pytest.raises(ValueError, match="is an existing file"):
        TensorboardLogger(log_dir=str(taken))


def test_missing_tensorboard_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'obsbus\[tensorboard\]'"):
        TensorboardLogger()


def test_importing_the_module_does_not_import_tensorboard():
    import subprocess

    code = (
        "import sys, obsbus.loggers.tensorboard_logger; "
        "print(sorted(m for m in sys.modules if m.startswith('tensorboard')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_image_shapes_are_read_as_documented():
    """The one converter, as TensorBoard calls it: CHW unless told, uint8 pixels."""
    from obsbus.loggers._images import image_arrays

    def tb_arrays(images: object, channels_last: bool = False) -> list[np.ndarray]:
        return image_arrays(images, channels_last, uint8=True)

    hw = tb_arrays([[0.0, 1.0], [0.5, 0.25]])  # nested lists: one HW image
    assert len(hw) == 1 and hw[0].shape == (2, 2) and hw[0].tolist() == [[0, 255], [128, 64]]
    assert [a.shape for a in tb_arrays(torch.zeros(2, 3, 4, 5))] == [(4, 5, 3)] * 2
    assert [
        a.shape for a in tb_arrays([np.zeros((4, 5, 4)), np.zeros((6, 7, 1))], channels_last=True)
    ] == [(4, 5, 4), (6, 7)]
    assert tb_arrays(np.array([[True, False]]))[0].tolist() == [[255, 0]]
    assert tb_arrays(torch.tensor([[0, 7]], dtype=torch.int64))[0].tolist() == [[0, 7]]
    with pytest.raises(ValueError, match=r"Can't read an image of shape \(2, 4, 5\)"):
        tb_arrays(np.zeros((2, 4, 5)))  # 2 channels
    # Without channels_last, W&B, MLflow and Neptune have the layout guessed, floats kept.
    (guessed,) = image_arrays(torch.full((4, 5, 3), 0.5))
    assert guessed.shape == (4, 5, 3) and guessed.dtype == np.float32


def test_images_and_table_cells_are_snapshotted_when_logged(tmp_path):
    # The writer thread converts them later; changing the tensors after the call must not show.
    image, cell = torch.zeros(3, 4, 5), torch.tensor(0.25)
    with Run(max_duration="1ba", run_folder=tmp_path / "run",
             loggers=[TensorboardLogger(log_git=False, log_env=False)]) as run:  # fmt: skip
        for _ in run.train([[0]]):
            run.logger.log_images(image, name="img")
            run.logger.log_table(["v"], [[cell]], name="tbl")
            image.fill_(1.0)
            cell.fill_(9.0)
    import io

    from PIL import Image as pil

    acc = read(tmp_path / "run" / "tensorboard")
    pixel = pil.open(io.BytesIO(acc.Images("img")[0].encoded_image_string)).convert("RGB")
    assert pixel.getpixel((0, 0)) == (0, 0, 0)
    assert texts(acc, "tbl")[0] == (0, "| v |\n|---|\n| 0.25 |")


def test_numpy_values_are_scalars_and_numpy_hyperparameters_numbers(tmp_path):
    metrics = {"f32": np.float32(0.5), "f64": np.float64(0.25), "i64": np.int64(7),
               "flag": np.bool_(True), "zero_d": np.array(1.5), "one": np.array([2.0])}  # fmt: skip
    hparams = {"lr": np.float32(0.5), "layers": np.int64(4), "tied": np.bool_(False),
               "sizes": np.array([1, 2])}  # fmt: skip
    with Run(max_duration="1ba", run_folder=tmp_path / "run", hparams=hparams,
             loggers=[TensorboardLogger(log_env=False, log_git=False)]) as run:  # fmt: skip
        for _ in run.train([[1]]):
            run.log_metrics(metrics)
    written = scalars(read(tmp_path / "run" / "tensorboard"))
    assert {k: written[k] for k in metrics} == {
        "f32": [(0, 0.5)],
        "f64": [(0, 0.25)],
        "i64": [(0, 7.0)],
        "flag": [(0, 1.0)],
        "zero_d": [(0, 1.5)],
        "one": [(0, 2.0)],
    }  # fmt: skip (logged in batch 1: step 0)
    start = session(read(tmp_path / "run" / "tensorboard")).hparams
    assert {k: hparam(start[k]) for k in hparams} == {
        "lr": 0.5, "layers": 4.0, "tied": False, "sizes": "[1, 2]"}  # fmt: skip


@pytest.mark.parametrize("log_dir", ["taken", "{run_name}"], ids=["relative", "placeholder"])
def test_a_file_for_a_relative_log_dir_fails_at_init(tmp_path, log_dir):
    """A relative log_dir resolves against the run folder only at init: a file there is named
    then, not found on the writer thread when the first event file opens."""
    (tmp_path / "taken").write_text("a file")
    tb = TensorboardLogger(log_dir=log_dir, log_env=False, log_git=False)  # can't be told yet
    with pytest.raises(
        NotADirectoryError,
        match=r"TensorboardLogger log_dir must be a folder, "
        rf"and {str(tmp_path / 'taken')!r} is an existing file\. To fix",
    ):
        Run(max_duration="1ba", run_name="taken", run_folder=tmp_path, loggers=[tb])


def test_composers_positional_order(tmp_path):
    """Composer's ``TensorboardLogger(log_dir, flush_interval, rank_zero_only)``."""
    tb = TensorboardLogger(str(tmp_path / "tb"), 7, False)
    assert (tb.log_dir, tb.flush_interval, tb.rank_zero_only) == (str(tmp_path / "tb"), 7, False)
