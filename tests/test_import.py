"""`import obsbus` stays light: no torch, no tracker, no side effects."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

HEAVY = (
    "torch",
    "numpy",
    "loguru",
    "tqdm",
    "psutil",
    "tensorboard",
    "wandb",
    "mlflow",
    "comet_ml",
    "neptune",
    "boto3",
    "fsspec",
)


def _probe(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_import_obsbus_loads_no_heavy_module_and_installs_no_handler():
    result = _probe(
        "import json, signal, sys, atexit, logging, threading, queue\n"
        "before = signal.getsignal(signal.SIGTERM)\n"
        "n_atexit = atexit._ncallbacks()\n"
        "import obsbus, obsbus.callbacks, obsbus.loggers, obsbus.core\n"
        "import obsbus.core.callback, obsbus.core.engine, obsbus.core.event\n"
        "import obsbus.core.state, obsbus.core.time\n"
        "mods = sorted({m.split('.')[0] for m in sys.modules})\n"
        "print(json.dumps({'mods': mods, 'same_handler': signal.getsignal(signal.SIGTERM) is before,"
        " 'atexit': atexit._ncallbacks() - n_atexit}))"
    )
    heavy = [m for m in HEAVY if m in result["mods"]]
    assert heavy == []
    assert result["same_handler"]
    assert result["atexit"] == 0


def test_trainer_loads_torch_lazily():
    result = _probe(
        "import json, sys\n"
        "import obsbus\n"
        "before = 'torch' in sys.modules\n"
        "obsbus.Trainer\n"
        "print(json.dumps({'before': before, 'after': 'torch' in sys.modules}))"
    )
    assert result == {"before": False, "after": True}


@pytest.mark.parametrize(
    "package", ["obsbus", "obsbus.core", "obsbus.loggers", "obsbus.callbacks", "obsbus.profiler"]
)
def test_public_names_are_sorted_and_resolvable(package):
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None


@pytest.mark.parametrize("package", ["obsbus.core", "obsbus.loggers", "obsbus.callbacks"])
def test_each_composer_style_package_alone_is_light(package):
    """``from obsbus.core import State`` (Composer's ``composer.core``) imports no torch either."""
    result = _probe(
        f"import json, sys\nimport {package}\n"
        "print(json.dumps({'mods': sorted({m.split('.')[0] for m in sys.modules})}))"
    )
    assert [m for m in HEAVY if m in result["mods"]] == []
