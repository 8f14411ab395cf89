"""The README's "Write a callback" example runs as written and does what the text says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from obsbus import Run
from obsbus.loggers import InMemoryLogger

README = Path(__file__).resolve().parent.parent / "README.md"


def _section_code(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert blocks, f"no python block under '## {title}'"
    return blocks[0]


@pytest.fixture(scope="module")
def monitor_class():
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(_section_code("Write a callback"), str(README), "exec"), namespace)
    return namespace["ParamNormMonitor"]


def _train(callback, epochs=2, batches=6):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(4, 3), torch.randn(4, 1)) for _ in range(batches)]
    memory = InMemoryLogger()
    with Run(
        model=model,
        optimizers=opt,
        max_duration=f"{epochs}ep",
        callbacks=[callback],
        loggers=[memory],
        run_folder=None,
    ) as run:
        for x, y in run.train(data):
            opt.zero_grad()
            run.backward(run.loss(F.mse_loss, run.forward(model, x), y))
            opt.step()
    return model, memory


def test_every_n_batches(monitor_class):
    model, memory = _train(monitor_class("5ba"))
    series = memory.get_timeseries("param/l2_norm")
    assert series["step"] == [5, 10]
    final = torch.cat([p.detach().flatten() for p in model.parameters()]).norm()
    assert series["param/l2_norm"][-1] != pytest.approx(final.item())  # 10 of 12 batches
    assert all(isinstance(v, float) for v in series["param/l2_norm"])


def test_every_epoch(monitor_class):
    model, memory = _train(monitor_class("1ep"))
    series = memory.get_timeseries("param/l2_norm")
    assert series["step"] == [6, 12]
    final = torch.cat([p.detach().flatten() for p in model.parameters()]).norm()
    assert series["param/l2_norm"][-1] == pytest.approx(final.item())


def test_a_bad_interval_names_the_owner(monitor_class):
    with pytest.raises(ValueError, match="ParamNormMonitor log_interval '10xx'"):
        monitor_class("10xx")
