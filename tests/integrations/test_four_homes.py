"""The same plug-in instances in four homes: obsbus's Trainer, a Run loop, HF's Trainer, Lightning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch

from obsbus import Run, Trainer
from obsbus.callbacks import LRMonitor, MemoryMonitor, NaNMonitor, OptimizerMonitor, SpeedMonitor
from obsbus.loggers import FileLogger, TensorboardLogger

transformers = pytest.importorskip("transformers")
pl = pytest.importorskip("lightning.pytorch")
pytest.importorskip("tensorboard")

from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments  # noqa: E402

VOCAB, SEQ, BATCH, ACCUM, STEPS = 64, 8, 4, 2, 4


def gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB,
                                      n_positions=16, bos_token_id=0, eos_token_id=0))  # fmt: skip


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=torch.Generator().manual_seed(0))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def loader(batch_size=BATCH * ACCUM):
    return torch.utils.data.DataLoader(Tokens(BATCH * ACCUM * STEPS), batch_size=batch_size)


class LM(torch.nn.Module):
    """GPT-2 taking the batch dict: obsbus's Trainer calls ``model(batch)``."""

    def __init__(self):
        super().__init__()
        self.gpt = gpt2()

    def forward(self, batch):
        return self.gpt(**batch)

    def flops_per_batch(self, batch):
        return 6.0 * batch["input_ids"].numel() * self.gpt.num_parameters(exclude_embeddings=True)


def plugins():
    return dict(
        callbacks=[
            SpeedMonitor(window_size=2),
            MemoryMonitor(),
            LRMonitor(),
            NaNMonitor(),
            OptimizerMonitor(log_interval="1ba"),
        ],
        loggers=[FileLogger(), TensorboardLogger(log_env=False, log_git=False)],
    )


def run_trainer(p, folder):
    model = LM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with Trainer(model, loader(), f"{STEPS}ba", optimizers=opt, grad_accum=ACCUM,
                 run_folder=folder, device="cpu", progress_bar=False, log_to_console=False,
                 **p) as trainer:  # fmt: skip
        trainer.fit()


def run_run(p, folder):
    model = gpt2()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with Run(model=model, optimizers=opt, max_duration=f"{STEPS}ba", grad_accum=ACCUM,
             run_folder=folder, **p) as run:  # fmt: skip
        for batch in run.train(loader()):
            opt.zero_grad()
            for i in range(ACCUM):
                micro = {k: v[i * BATCH : (i + 1) * BATCH] for k, v in batch.items()}
                loss = model(**micro).loss
                run.backward(loss / ACCUM)
            run.state.loss = loss.detach()
            opt.step()


def run_hf(p, folder):
    from obsbus.integrations.transformers import ObsbusCallback

    cb = ObsbusCallback(run_folder=folder, log_hf_logs=False, **p)
    args = TrainingArguments(output_dir=str(folder / "hf"), per_device_train_batch_size=BATCH,
                             gradient_accumulation_steps=ACCUM, max_steps=STEPS, learning_rate=1e-3,
                             logging_steps=1, save_strategy="no", report_to="none", use_cpu=True,
                             disable_tqdm=True, seed=0)  # fmt: skip
    trainer = transformers.Trainer(model=gpt2(), args=args, train_dataset=Tokens(BATCH * ACCUM * STEPS),
                                   callbacks=[cb])  # fmt: skip
    cb.wrap(trainer).train()


class LitLM(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.gpt = gpt2()

    def training_step(self, batch, batch_idx):
        return self.gpt(**batch).loss

    flops_per_batch = LM.flops_per_batch

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def run_lightning(p, folder):
    from obsbus.integrations.lightning import ObsbusCallback

    bus = ObsbusCallback(run_folder=folder, **p)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=STEPS, accumulate_grad_batches=ACCUM,
                         logger=False, callbacks=[bus], enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(LitLM(), loader(BATCH))


HOMES = {"trainer": run_trainer, "run": run_run, "hf": run_hf, "lightning": run_lightning}


@pytest.fixture(scope="module")
def homes(tmp_path_factory):
    p = plugins()
    base = tmp_path_factory.mktemp("homes")
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fn in HOMES.items():
            folder = base / name
            fn(p, folder)
            out[name] = folder
    return out


# The keys every home gives, with the steps they are logged at (4 optimizer steps; the
# README's table). SpeedMonitor(window_size=2) skips the first batch (warm-up) and logs
# once its window is full; NaNMonitor logs only when it finds a bad value.
EVERY = [1, 2, 3, 4]
FULL_WINDOW = [3, 4]
EXPECTED = {
    "loss/train/total": EVERY,
    "lr-AdamW/group0": EVERY,
    "memory/host_rss_mem": EVERY,
    "memory/host_peak_rss_mem": EVERY,
    "l2_norm/grad/global": EVERY,
    **{f"time/{k}": EVERY for k in ("train", "val", "eval", "total")},
    **{f"throughput/{d}{k}_per_sec": FULL_WINDOW
       for d in ("", "device/") for k in ("batches", "samples", "tokens", "flops")},
}  # fmt: skip
# HF's Trainer puts the parameters without weight decay (biases, norms) in a second group.
EXTRA = {"hf": {"lr-AdamW/group1": EVERY}}
COLUMNS = {"step", "epoch", "batch", "wall_time"}
PLUGINS = {"SpeedMonitor", "MemoryMonitor", "LRMonitor", "NaNMonitor", "OptimizerMonitor",
           "FileLogger", "TensorboardLogger"}  # fmt: skip


def _rows(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]


def _steps(rows: list[dict]) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in rows:
        for key in row.keys() - COLUMNS:
            found.setdefault(key, []).append(row["step"])
    return found


@pytest.mark.parametrize("home", list(HOMES))
def test_the_documented_keys_at_their_steps(homes, home):
    steps = _steps(_rows(homes[home]))
    assert steps == {**EXPECTED, **EXTRA.get(home, {})}
    assert not [k for k in steps if k.startswith("nan/")]


@pytest.mark.parametrize("home", list(HOMES))
def test_throughput_counts_the_same_batch_everywhere(homes, home):
    last = {}
    for row in _rows(homes[home]):
        last.update(row)
    per_batch = {"samples": BATCH * ACCUM, "tokens": BATCH * ACCUM * SEQ}
    params = gpt2().num_parameters(exclude_embeddings=True)
    per_batch["flops"] = 6.0 * per_batch["tokens"] * params  # HF's count, in every home
    rate = last["throughput/batches_per_sec"]
    for kind, count in per_batch.items():
        assert last[f"throughput/{kind}_per_sec"] == pytest.approx(count * rate, rel=1e-6), kind
    assert last["time/total"] >= last["time/train"] > 0


@pytest.mark.parametrize("home", list(HOMES))
def test_tensorboard_holds_the_same_series(homes, home):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(homes[home] / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    written = {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    # Primus's defaults: timers and memory stay out of TensorBoard (log_timers, log_memory).
    expected = {k: v for k, v in {**EXPECTED, **EXTRA.get(home, {})}.items()
                if not k.startswith(("time/", "memory/"))}  # fmt: skip
    assert written == expected


@pytest.mark.parametrize("home", list(HOMES))
def test_every_home_writes_the_run_record(homes, home):
    plugins = json.loads((homes[home] / "config" / "plugins.json").read_text())
    names = {entry["class"].rsplit(".", 1)[-1] for entry in plugins["plugins"]}
    assert names >= PLUGINS, names
