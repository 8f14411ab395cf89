"""`import obsbus` stays light: no torch, no tracker, no side effects."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "numpy", "loguru", "tqdm", "psutil", "tensorboard", "wandb", "mlflow",
         "comet_ml", "neptune", "boto3", "fsspec")


def _probe(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_import_obsbus_loads_no_heavy_module_and_installs_no_handler():
    result = _probe(
        "import json, signal, sys, atexit, logging, threading, queue\n"
        "before = signal.getsignal(signal.SIGTERM)\n"
        "n_atexit = atexit._ncallbacks()\n"
        "import obsbus, obsbus.callbacks, obsbus.loggers\n"
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


def test_public_names_are_sorted_and_resolvable():
    import obsbus

    assert obsbus.__all__ == sorted(obsbus.__all__)
    for name in obsbus.__all__:
        assert getattr(obsbus, name) is not None
