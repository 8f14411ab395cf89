"""The oracle: one run whose truth is known, and every number obsbus shows of it checked.

A real :class:`obsbus.Run` trains a tiny model for ``STEPS`` batches with the
default monitor stack (SpeedMonitor, MemoryMonitor, LRMonitor, NaNMonitor,
OptimizerMonitor), a FileLogger, a TensorboardLogger (timers and memory on) and
a RunReport. What the run does is known, or measured here on our own clock:

- every batch holds ``BATCH`` samples of ``SEQ`` tokens and sleeps ``SLEEP`` s,
  so it takes at least that long (the sleep dominates the step);
- every ``EVAL_EVERY`` batches one evaluation batch sleeps ``EVAL_SLEEP`` s;
- the learning rate follows a ``StepLR`` stepped after each optimizer step,
  and the scheduler's own ``get_last_lr()`` is recorded at the end of each step;
- the train loss of step ``k`` is ``LOSS(k)``; the eval loss and an eval
  accuracy are known per evaluation;
- before step ``ALLOC_AT`` the loop allocates ``ALLOC`` bytes on the host,
  written (so resident), and holds them to the end.

The truth is then compared with what each of them shows: FileLogger's JSON
Lines, TensorBoard's event files read back with TensorBoard's own
``EventAccumulator``, and the report page (its header and the data of its
plots, read from the Bokeh document embedded in the HTML). Units come from
the run's ``config/units.json`` (the units each monitor declares): a number is
true only in the unit it is labeled with.

Tolerances, stated:

- Throughput (samples, tokens and batches per second): between the rates of
  the window's batches on our own clock at its longest (from the end of the
  body before the window to the start of the body after it, evaluation bodies
  out) and at its shortest (the sum of its bodies, each at least ``SLEEP``:
  so never above the physical ``BATCH / SLEEP``). Physical bounds, no
  tolerance: on a quiet machine they are a few percent apart (the hooks
  between bodies), on a loaded one wider, never wrong.
- ``time/train``, ``time/val``, ``time/total``, in the declared unit: at
  least the sleeps they contain and at most the wall time they can span on our
  own clock (a physical bound, no tolerance); ``time/total`` is
  ``time/train + time/val`` to 1e-9.
- Learning rate: exactly the scheduler's; loss: float32 of the known value.
- Memory: current <= peak in every row; the step that follows the
  allocation grows the resident memory by 95%..100% of ``ALLOC`` plus 64 MiB
  (2**28 bytes read as GB is 0.268, as GiB 0.250: a wrong unit fails).
- Step counts: each key at exactly the steps it is due, in every store.
- TensorBoard: the same steps and values as the JSON Lines (float32).
- The report: the header's steps, samples and tokens; each plotted line's
  points equal the JSON Lines; the panel that holds a key names its unit and
  no other; "best" is the max of an accuracy and the min of a loss.

This is the test that would have caught issue 34's section 6: on the tree
before it (9fb5bab) it fails 9 of its cases: no unit declared for the
``time/*``, throughput and memory keys, a host memory peak below its current
value in every row, the time panel titled "Time (s)" over hours, and a hover
that showed the mouse position instead of the logged value.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
import time
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("bokeh")
pytest.importorskip("tensorboard")

STEPS = 16
BATCH = 8  # samples per batch
SEQ = 16  # tokens per sample
SLEEP = 0.04  # seconds each training batch sleeps
EVAL_SLEEP = 0.05  # seconds each evaluation sleeps (one batch)
EVAL_EVERY = 4  # batches
WINDOW = 4  # SpeedMonitor window_size
LR0, GAMMA, LR_STEP = 0.1, 0.5, 3  # StepLR
ALLOC_AT = 10  # the loop allocates before this step's body...
ALLOC = 2**28  # ... this many bytes, written, held to the end
EVALS = {  # step -> (eval loss, eval accuracy, eval samples per second, as HF logs it)
    4: (1.0, 0.5, 13.4),
    8: (0.4, 0.9, 60.0),
    12: (0.3, 0.7, 83.8),
    16: (0.8, 0.6, 70.0),
}
MEMORY_SLACK = 64 * 2**20  # bytes beyond ALLOC other allocations may add in one step

#: seconds in one unit, for the ``time/*`` keys' declared unit
SECONDS = {"s": 1.0, "sec": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
#: bytes in one unit, for the memory keys' declared unit
BYTES = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def LOSS(step: int) -> float:
    """The train loss of ``step``: lowest (0.2) at step 9, 0.9 at the last."""
    return 0.2 + 0.1 * abs(step - 9)


# ------------------------------------------------------------------------------ the run


@dataclass
class Truth:
    """What the run did, on our own clock (``time.perf_counter``)."""

    fit_start: float = 0.0  # at fit_start
    began: float = 0.0  # before the first batch
    ended: float = 0.0  # after the last batch's body (and its evaluation)
    body_start: dict[int, float] = field(default_factory=dict)
    body_end: dict[int, float] = field(default_factory=dict)
    eval_seconds: dict[int, float] = field(default_factory=dict)  # step -> eval body time
    lr: dict[int, float] = field(default_factory=dict)  # step -> scheduler's get_last_lr()


@dataclass
class Seen:
    folder: Path
    truth: Truth
    units: dict[str, str]
    rows: list[dict[str, Any]]  # FileLogger's JSON Lines
    tb: dict[str, list[tuple[int, float]]]  # TensorBoard tag -> (step, value)
    html: str
    report: dict[str, Any]  # see _report_data

    def jsonl(self, key: str) -> list[tuple[int, float]]:
        return [(r["step"], _num(r[key])) for r in self.rows if key in r]

    def unit(self, key: str) -> str | None:
        from obsbus._units import unit_of

        return unit_of(key, self.units)


def _num(value: Any) -> float:
    return float(value) if not isinstance(value, str) else float(value.replace("Infinity", "inf"))


def _train(folder: Path) -> Truth:
    from obsbus import Callback, Run
    from obsbus.callbacks import (
        LRMonitor,
        MemoryMonitor,
        NaNMonitor,
        OptimizerMonitor,
        SpeedMonitor,
    )
    from obsbus.loggers import FileLogger, RunReport, TensorboardLogger

    torch.manual_seed(0)
    model = torch.nn.Linear(SEQ, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=LR_STEP, gamma=GAMMA)
    batches = [(torch.randn(BATCH, SEQ), torch.randn(BATCH, 1)) for _ in range(STEPS)]
    truth = Truth()
    held: list[Any] = []

    def known(value: float):
        # The loss is exactly ``value`` (float32); its gradient is 1 for every weight (and 0
        # for the bias), so the gradient's global L2 norm is sqrt(SEQ) at every step.
        def loss_fn(out: Any, y: Any) -> Any:
            weights = model.weight.sum()
            return value + (weights - weights.detach()) + out.sum() * 0.0

        return loss_fn

    class Clock(Callback):
        """Notes when fit starts, on our clock: where SpeedMonitor starts counting."""

        def fit_start(self, state: Any, logger: Any) -> None:
            truth.fit_start = time.perf_counter()

    def evaluate(run: Run) -> None:
        step = run.state.timestamp.batch.value
        eval_loss, accuracy, speed = EVALS[step]
        began = time.perf_counter()
        for x, y in run.eval([batches[0]]):
            time.sleep(EVAL_SLEEP)
            run.loss(known(eval_loss), run.forward(model, x), y)
            run.log_metrics({"metrics/eval/accuracy": accuracy,
                             "metrics/eval/samples_per_second": speed})  # fmt: skip
        truth.eval_seconds[step] = time.perf_counter() - began

    callbacks = [Clock(), SpeedMonitor(window_size=WINDOW), MemoryMonitor(), LRMonitor(),
                 NaNMonitor(), OptimizerMonitor()]  # fmt: skip
    loggers = [FileLogger(), TensorboardLogger(log_timers=True, log_memory=True, log_env=False,
                                               log_git=False), RunReport()]  # fmt: skip
    with Run(
        model=model,
        optimizers=opt,
        schedulers=sched,
        max_duration=f"{STEPS}ba",
        callbacks=callbacks,
        loggers=loggers,
        run_folder=folder,
        run_name="oracle",
        num_tokens_fn=lambda batch: batch[0].shape[0] * SEQ,
        eval_interval=f"{EVAL_EVERY}ba",
        eval_fn=evaluate,
    ) as run:
        truth.began = time.perf_counter()
        for step, (x, y) in enumerate(run.train(batches), start=1):
            if step == ALLOC_AT:
                held.append(torch.ones(ALLOC, dtype=torch.uint8))  # written: resident
            truth.body_start[step] = time.perf_counter()
            time.sleep(SLEEP)
            opt.zero_grad()
            loss = run.loss(known(LOSS(step)), run.forward(model, x), y)
            run.backward(loss)
            opt.step()
            sched.step()
            truth.lr[step] = sched.get_last_lr()[0]
            truth.body_end[step] = time.perf_counter()
        truth.ended = time.perf_counter()
    del held
    return truth


def _tensorboard(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(folder.rglob("events.out.tfevents.*"))
    assert files, f"no TensorBoard event file under {folder}"
    out: dict[str, list[tuple[int, float]]] = {}
    for path in files:
        acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return {tag: sorted(points) for tag, points in out.items()}


# ----------------------------------------------------------------- the report's embedded data


def _decode(value: Any) -> Any:
    """A Bokeh serialized value as Python: ndarrays (base64 bytes) as lists of floats."""
    import numpy as np

    if isinstance(value, dict) and value.get("type") == "ndarray":
        array = value["array"]
        if isinstance(array, dict) and array.get("type") == "bytes":
            raw = base64.b64decode(array["data"])
            if raw[:2] == b"\x1f\x8b":  # Bokeh gzips arrays it embeds
                raw = gzip.decompress(raw)
            dtype = np.dtype(value["dtype"]).newbyteorder(
                "<" if value.get("order") != "big" else ">"
            )
            return np.frombuffer(raw, dtype=dtype).astype(float).tolist()
        return [float(v) for v in array]
    if isinstance(value, dict) and value.get("type") == "map":
        return {k: _decode(v) for k, v in value.get("entries", [])}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _report_data(html: str) -> dict[str, Any]:
    """What the page's Bokeh document holds: per figure (its name, the report's group id),
    its y-axis labels and, per line, the renderer's name and its (x, y) points."""
    found = re.search(r"const docs_json = '(.*?)';\n", html, re.S)
    assert found is not None, "no Bokeh document in the page"
    docs = json.loads(unescape(found.group(1)))
    objects: dict[str, dict[str, Any]] = {}

    def index(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "id" in node and "name" in node:
                objects.setdefault(node["id"], node)
            for value in node.values():
                index(value)
        elif isinstance(node, list):
            for value in node:
                index(value)

    index(docs)

    def resolve(node: Any) -> dict[str, Any]:
        if isinstance(node, dict) and "name" not in node and "id" in node:
            return objects[node["id"]]
        return node

    figures: dict[str, dict[str, Any]] = {}
    for obj in objects.values():
        if obj.get("name") != "Figure":
            continue
        attrs = obj["attributes"]
        lines: dict[str, tuple[list[float], list[float]]] = {}
        for ref in attrs.get("renderers", []):
            renderer = resolve(ref)
            if renderer.get("name") != "GlyphRenderer":
                continue
            r_attrs = renderer["attributes"]
            glyph = resolve(r_attrs.get("glyph", {}))
            if glyph.get("name") != "Line":
                continue
            source = resolve(r_attrs["data_source"])
            data = _decode(source["attributes"]["data"])
            g_attrs = glyph.get("attributes", {})
            xs = data[_field(g_attrs.get("x", "x"))]
            ys = data[_field(g_attrs.get("y", "y"))]
            lines[r_attrs.get("name")] = (xs, ys)
        labels = [resolve(a).get("attributes", {}).get("axis_label") for a in attrs.get("left", [])]
        title = (
            resolve(attrs["title"]).get("attributes", {}).get("text")
            if attrs.get("title")
            else None
        )
        figures[attrs.get("name")] = {"lines": lines, "y_labels": labels, "title": title}
    return figures


def _field(spec: Any) -> str:
    if isinstance(spec, dict):
        return str(spec.get("field", spec.get("value")))
    return str(spec)


def _panel_titles(html: str) -> dict[str, list[str]]:
    """group id -> the titles of its panels (``<section class="plot" data-group=...><h3>``)."""
    out: dict[str, list[str]] = {}
    for group, title in re.findall(
        r'<section class="plot" data-group="([^"]+)"[^>]*>\s*<h3>(.*?)</h3>', html, re.S
    ):
        out.setdefault(unescape(group), []).append(unescape(re.sub(r"<[^>]+>", "", title)))
    return out


def _header_facts(html: str) -> dict[str, str]:
    facts = re.search(r'<dl class="facts">(.*?)</dl>', html, re.S)
    assert facts is not None
    pairs = re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", facts.group(1), re.S)
    return {unescape(k): unescape(re.sub(r"<[^>]+>", "", v)) for k, v in pairs}


def _metrics_table(html: str) -> dict[str, dict[str, str]]:
    """The header's final/best table: metric -> {column: cell text}."""
    part = html.split('<table class="metrics">', 1)
    assert len(part) == 2, "no final/best metrics table in the report"
    table = part[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
    head = [unescape(h) for h in re.findall(r"<th>(.*?)</th>", rows[0])]
    out = {}
    for row in rows[1:]:
        cells = [
            unescape(re.sub(r"<[^>]+>", "", c))
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        out[cells[0]] = dict(zip(head[1:], cells[1:], strict=True))
    return out


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> Seen:
    folder = tmp_path_factory.mktemp("oracle") / "run"
    truth = _train(folder)
    rows = [json.loads(line) for line in (folder / "metrics-rank0.jsonl").read_text().splitlines()]
    units_file = folder / "config" / "units.json"
    units = json.loads(units_file.read_text())["units"] if units_file.exists() else {}
    html = (folder / "report.html").read_text(encoding="utf-8")
    return Seen(folder, truth, units, rows, _tensorboard(folder), html, _report_data(html))


# -------------------------------------------------------------------------- truths


def _window_seconds(truth: Truth, step: int) -> tuple[float, float]:
    """Bounds on our clock for the seconds of the window of batches that ends at ``step``.

    At least the bodies of its batches (each batch's time holds its body); at most the
    time from the end of the body before the window to the start of the next body (its
    batch_end lies between), less the evaluation bodies in that span (SpeedMonitor takes
    out each evaluation, from before our body to after it).
    """
    first = step - WINDOW + 1
    bodies = sum(truth.body_end[k] - truth.body_start[k] for k in range(first, step + 1))
    evals = sum(s for k, s in truth.eval_seconds.items() if first - 1 <= k <= step)
    return bodies, _next_start(truth, step) - truth.body_end[first - 1] - evals


def _next_start(truth: Truth, step: int) -> float:
    """When our loop resumed after ``step`` (its batch_end, and its evaluation, were done)."""
    return truth.body_start.get(step + 1, truth.ended)


def _seconds(seen: Seen, key: str, value: float) -> float:
    unit = seen.unit(key)
    assert unit in SECONDS, f"{key} declares unit {unit!r}; expected one of {sorted(SECONDS)}"
    return value * SECONDS[unit]


def _steps(points: list[tuple[int, float]]) -> list[int]:
    return sorted({step for step, _ in points})


ALL = list(range(1, STEPS + 1))
NORM_STEPS = [s for s in ALL if s % 10 == 0]  # OptimizerMonitor's default log_interval, 10ba
RATE_STEPS = list(range(WINDOW + 1, STEPS + 1))  # the first batch is left out, then a window
EVAL_STEPS = sorted(EVALS)
DUE = {
    "loss/train/total": ALL,
    "lr-SGD/group0": ALL,
    "memory/host_rss_mem": ALL,
    "memory/host_peak_rss_mem": ALL,
    "time/train": ALL,
    "time/val": ALL,
    "time/eval": ALL,
    "time/total": ALL,
    "l2_norm/grad/global": NORM_STEPS,
    **{f"throughput/{d}{n}_per_sec": RATE_STEPS for d in ("", "device/")
       for n in ("batches", "samples", "tokens")},
    "metrics/eval/loss": EVAL_STEPS,
    "metrics/eval/accuracy": EVAL_STEPS,
    "metrics/eval/samples_per_second": EVAL_STEPS,
}  # fmt: skip


# ------------------------------------------------------------------ FileLogger's JSON Lines


def test_each_key_is_logged_at_exactly_the_steps_it_is_due(seen):
    logged = {key for row in seen.rows for key in row} - {"step", "epoch", "batch", "wall_time"}
    assert logged == set(DUE), f"unexpected: {logged - set(DUE)}, missing: {set(DUE) - logged}"
    wrong = {k: _steps(seen.jsonl(k)) for k, due in DUE.items() if _steps(seen.jsonl(k)) != due}
    assert not wrong, wrong
    assert [r["step"] for r in seen.rows] == sorted(r["step"] for r in seen.rows)


def test_throughput_is_the_rate_measured_on_our_clock(seen):
    for name, per_batch in (("batches", 1), ("samples", BATCH), ("tokens", BATCH * SEQ)):
        for prefix in ("throughput/", "throughput/device/"):  # one rank: device = global
            key = f"{prefix}{name}_per_sec"
            assert seen.unit(key) == f"{name}/s", key
            for step, value in seen.jsonl(key):
                least, most = _window_seconds(seen.truth, step)
                low, high = per_batch * WINDOW / most, per_batch * WINDOW / least
                assert high <= per_batch / SLEEP  # no batch took less than its sleep
                assert low <= value <= high, f"{key} at {step}: {value} not in [{low}, {high}]"


def test_time_keys_are_true_in_the_unit_they_declare(seen):
    """Each row against the physical bounds on our clock, in seconds from the declared unit.

    At an evaluation's step the keys are logged twice: at ``batch_end``, before it, and
    at its end, with it."""
    truth = seen.truth
    rows = list(zip(seen.jsonl("time/train"), seen.jsonl("time/val"), seen.jsonl("time/total"),
                    strict=True))  # fmt: skip
    seen_steps: set[int] = set()
    for (step, train), (val_step, val), (total_step, total) in rows:
        assert step == val_step == total_step
        after_eval = step in seen_steps  # the second row of an evaluation's step
        seen_steps.add(step)
        train = _seconds(seen, "time/train", train)
        bodies = sum(truth.body_end[k] - truth.body_start[k] for k in range(1, step + 1))
        evals_by_next = sum(s for k, s in truth.eval_seconds.items() if k <= step)
        span = _next_start(truth, step) - truth.fit_start - evals_by_next
        assert bodies <= train <= span, f"time/train at {step}: {train} s not in [{bodies}, {span}]"
        val = _seconds(seen, "time/val", val)
        evals = [k for k in EVAL_STEPS if k < step or (k == step and after_eval)]
        # Each evaluation is timed around our eval body, within the gap our loop saw.
        low = sum(truth.eval_seconds[k] for k in evals)
        high = sum(_next_start(truth, k) - truth.body_end[k] for k in evals)
        assert low <= val <= high, f"time/val at {step}: {val} s not in [{low}, {high}]"
        total = _seconds(seen, "time/total", total)
        assert math.isclose(total, train + val, rel_tol=1e-9), (step, total, train, val)
    assert seen_steps == set(ALL) and len(rows) == STEPS + len(EVALS)
    assert seen.jsonl("time/eval") == seen.jsonl("time/val")  # the same value, two names
    final = _seconds(seen, "time/val", seen.jsonl("time/val")[-1][1])
    assert final >= len(EVALS) * EVAL_SLEEP


def test_learning_rate_is_exactly_the_schedulers(seen):
    logged = seen.jsonl("lr-SGD/group0")
    assert logged == [(k, seen.truth.lr[k]) for k in ALL]
    assert logged == [(k, LR0 * GAMMA ** (k // LR_STEP)) for k in ALL]  # StepLR, stepped after


def test_losses_and_the_gradient_norm_are_the_known_values(seen):
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    assert seen.jsonl("loss/train/total") == [(k, f32(LOSS(k))) for k in ALL]
    assert seen.jsonl("metrics/eval/loss") == [(k, f32(EVALS[k][0])) for k in EVAL_STEPS]
    assert seen.jsonl("metrics/eval/accuracy") == [(k, EVALS[k][1]) for k in EVAL_STEPS]
    speeds = seen.jsonl("metrics/eval/samples_per_second")
    assert speeds == [(k, EVALS[k][2]) for k in EVAL_STEPS]
    for step, value in seen.jsonl("l2_norm/grad/global"):
        assert math.isclose(value, math.sqrt(SEQ), rel_tol=1e-6), (step, value)
    assert seen.unit("loss/train/total") is None and seen.unit("lr-SGD/group0") is None


def test_host_memory_peak_is_never_below_current_and_sees_the_allocation(seen):
    current = dict(seen.jsonl("memory/host_rss_mem"))
    peak = dict(seen.jsonl("memory/host_peak_rss_mem"))
    below = {k: (current[k], peak[k]) for k in current if peak[k] < current[k]}
    assert not below, f"peak < current at (step: (current, peak)): {below}"
    unit = seen.unit("memory/host_rss_mem")
    assert unit in BYTES and seen.unit("memory/host_peak_rss_mem") == unit, unit
    grown = (current[ALLOC_AT] - current[ALLOC_AT - 1]) * BYTES[unit]
    assert 0.95 * ALLOC <= grown <= ALLOC + MEMORY_SLACK, (
        f"{ALLOC} bytes allocated before step {ALLOC_AT}; host_rss_mem grew {grown:.0f} "
        f"bytes (read as {unit})"
    )
    assert peak[ALLOC_AT] * BYTES[unit] >= current[ALLOC_AT - 1] * BYTES[unit] + 0.95 * ALLOC


def test_no_nan_was_reported(seen):
    assert not [key for row in seen.rows for key in row if key.startswith("nan/")]


# ------------------------------------------------------------------------- TensorBoard


def test_tensorboard_holds_the_same_values_at_the_same_steps(seen):
    assert set(seen.tb) == set(DUE), set(seen.tb) ^ set(DUE)
    for key in DUE:
        want = sorted(seen.jsonl(key))
        got = seen.tb[key]
        assert [s for s, _ in got] == [s for s, _ in want], key
        for (step, a), (_, b) in zip(got, want, strict=True):
            assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12), (key, step, a, b)


# ------------------------------------------------------------------------------ the report


def test_report_header_counts_the_steps_samples_and_tokens(seen):
    facts = _header_facts(seen.html)
    assert facts["status"] == "finished"
    assert facts["steps"] == str(STEPS)
    assert facts["samples"] == str(STEPS * BATCH)
    assert facts["tokens"] == str(STEPS * BATCH * SEQ)


def _line_key(name: str) -> str:
    """The metric key a line is drawn for: its name up to the first space (the rest, if
    any, names its twins or rank)."""
    return name.split(" ", 1)[0]


def test_report_plots_the_logged_points(seen):
    drawn = {}
    for group, figure in seen.report.items():
        for name, (xs, ys) in figure["lines"].items():
            drawn[_line_key(name)] = group
            key = _line_key(name)
            assert key in DUE, f"{name!r} in {group} is no key the run logged"
            want = sorted(seen.jsonl(key))
            assert sorted(zip(xs, ys, strict=True)) == [(float(s), v) for s, v in want], key
            assert group == _group_of(key), (key, group)


def _group_of(key: str) -> str:
    """The report's panel for ``key`` (its rule: a panel per kind and unit)."""
    if key.startswith(("loss/", "metrics/eval/loss")):
        return "loss"
    if key.startswith("metrics/"):
        return "metrics"
    if key.startswith("throughput/"):
        return "throughput_" + key.rsplit("/", 1)[1].removesuffix("_per_sec")
    return {"lr-": "lr", "memory/": "memory", "l2_norm/": "norms", "time/": "time"}[
        next(p for p in ("lr-", "memory/", "l2_norm/", "time/") if key.startswith(p))
    ]


def test_report_best_follows_each_metrics_direction(seen):
    table = _metrics_table(seen.html)
    assert (
        table["loss/train/total"]["best"] == "0.2"
        and table["loss/train/total"]["best at step"] == "9"
    )
    assert table["loss/train/total"]["final"] == "0.9"
    assert table["metrics/eval/loss"]["best"] == "0.3"
    assert table["metrics/eval/loss"]["best at step"] == "12"
    assert table["metrics/eval/accuracy"]["best"] == "0.9"  # the max, not the min (0.5)
    assert table["metrics/eval/accuracy"]["best at step"] == "8"
    assert table["metrics/eval/accuracy"]["final"] == "0.6"
    speed = table["metrics/eval/samples_per_second"]  # the "best 13.4" against 83.8
    assert (speed["best"], speed["best at step"], speed["final"]) == ("83.8", "12", "70")


def _unit_shown(seen: Seen, group: str) -> list[str]:
    """Everything the report says about a panel's unit: its titles and its y-axis labels."""
    shown = list(_panel_titles(seen.html).get(group, []))
    figure = seen.report.get(group, {})
    shown += [label for label in figure.get("y_labels", []) if label]
    return shown


@pytest.mark.parametrize(
    ("group", "key"),
    [("throughput_samples", "throughput/samples_per_sec"),
     ("throughput_tokens", "throughput/tokens_per_sec"),
     ("throughput_batches", "throughput/batches_per_sec"),
     ("memory", "memory/host_rss_mem")],
)  # fmt: skip
def test_report_panels_name_the_declared_unit(seen, group, key):
    unit = seen.unit(key)
    shown = _unit_shown(seen, group)
    assert unit and any(f"({unit})" in s or s == unit for s in shown), (key, unit, shown)


def test_report_time_panel_names_the_declared_unit(seen):
    unit = seen.unit("time/train")
    shown = _unit_shown(seen, "time")
    assert unit and any(f"({unit})" in s or s == unit for s in shown), (unit, shown)
    wrong = [u for u in SECONDS if u != unit and any(f"({u})" in s for s in shown)]
    assert not wrong, (unit, shown)


def test_report_names_every_logged_key(seen):
    """Each key has a line, or is named on the line of its twin (an identical series)."""
    names = {word for figure in seen.report.values() for name in figure["lines"]
             for word in re.findall(r"[\w/.\-]+", name)}  # fmt: skip
    missing = [key for key in DUE if key not in names]
    assert not missing, missing


def test_report_hover_shows_the_logged_value(seen):
    found = re.search(r"const docs_json = '(.*?)';\n", seen.html, re.S)
    assert found is not None
    text = unescape(found.group(1))
    tooltips = re.findall(r'"tooltips":\s*(\[\[.*?\]\])', text)
    assert tooltips, "no hover tooltips in the page"
    for tips in tooltips:
        fields = [spec for _, spec in json.loads(tips)]
        assert not any(spec.startswith("$y") for spec in fields), tips
        assert any(spec.startswith("@") for spec in fields), tips
