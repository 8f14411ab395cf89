"""The report page: a header, the plots, the trace tables and the run's record, all inline."""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any

from obsbus.masking import mask_secrets
from obsbus.report._groups import Plot
from obsbus.report._read import RunData
from obsbus.report._status import Summary
from obsbus.report._traces import SpanStats, TraceSummary

__all__ = ["page"]

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dce3}
h3{font-size:14px;margin:14px 0 4px}
.badge{display:inline-block;padding:2px 10px;border-radius:10px;color:#fff;font-weight:600}
.finished{background:#1f8a4c}.failed{background:#c62828}.killed{background:#b55d00}
.unknown{background:#6b7280}
dl.facts{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:8px 0}
dl.facts dt{color:#5b6474}dl.facts dd{margin:0}
table{border-collapse:collapse;background:#fff;margin:4px 0;font-size:13px}
td,th{border:1px solid #e1e4ea;padding:3px 8px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.plot{background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:8px 12px;margin:10px 0}
.bar{background:#4c78a8;height:10px;min-width:1px}
pre{background:#fff;border:1px solid #e1e4ea;padding:8px;overflow:auto;max-height:480px;
font-size:12px}
ul.failures li{color:#8a1c1c}.note{color:#5b6474;font-size:12px}
.images{display:flex;flex-wrap:wrap;gap:8px}.images figure{margin:0;background:#fff;
border:1px solid #e1e4ea;padding:4px}.images img{display:block;min-width:96px;max-width:320px;
image-rendering:pixelated}.images figcaption{font-size:12px;color:#5b6474}
"""


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    return escape(str(value))


def _text(value: Any) -> str:
    return escape(mask_secrets(str(value)))


def _cell(html: str) -> str:
    return html if html.startswith("<td") else f"<td>{html}</td>"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table; cells are HTML already (escape them first)."""
    top = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><tr>{top}</tr>{body}</table>'


def _n(html: str) -> str:
    """A right-aligned number cell."""
    return f'<td class="n">{html}</td>'


def _badge(status: str) -> str:
    return f'<span class="badge {escape(status)}">{escape(status)}</span>'


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    return str(datetime.timedelta(seconds=round(seconds, 1))).removesuffix("00000")


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "unknown"
    when = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _header(data: RunData, summary: Summary) -> str:
    facts = [
        ("status", _badge(summary.status)),
        ("run folder", _text(data.root)),
        ("started", escape(_when(summary.started))),
        ("duration", escape(_duration(summary.duration_s))),
        ("steps", "unknown" if summary.steps is None else _num(summary.steps)),
        ("samples", "unknown" if summary.samples is None else _num(summary.samples)),
        ("ranks", _num(len(data.ranks))),
    ]
    if summary.tokens:
        facts.append(("tokens", _num(summary.tokens)))
    dl = "".join(f"<dt>{escape(k)}</dt><dd>{v}</dd>" for k, v in facts)
    out = [f"<h1>{_text(data.run_name)}</h1>", f'<dl class="facts">{dl}</dl>']
    rows = []
    for rank, (status, why) in summary.ranks.items():
        info = data.ranks[rank]
        last = "" if info.last_step is None else _num(info.last_step)
        rows.append([_num(rank), _badge(status), _text(why), _n(last), _n(str(info.rows))])
    out.append(_table(["rank", "status", "why", "last step", "rows"], rows, "ranks"))
    out.append("<h2>Failures</h2>")
    if summary.failures:
        items = "".join(f"<li>{_text(f)}</li>" for f in summary.failures)
        out.append(f'<ul class="failures" id="failures">{items}</ul>')
    else:
        out.append('<p id="failures">None recorded.</p>')
    if summary.metrics:
        out.append("<h2>Final and best metrics</h2>")
        rows = [
            [
                _text(row.key),
                _n(_num(row.final)),
                _n("" if row.best is None else _num(row.best)),
                _n("" if row.best_step is None else _num(row.best_step)),
                _text(row.unit or ""),
            ]
            for row in summary.metrics
        ]
        out.append(_table(["metric", "final", "best", "best at step", "unit"], rows, "metrics"))
        out.append(
            '<p class="note">Best is the highest value for rates, accuracies and MFU, the '
            "lowest for losses, errors and times per step; blank where the key does not say "
            "which is better. Units are those the run declared (config/units.json); none is "
            "shown where none was declared.</p>"
        )
    return "\n".join(out)


def _spans(title: str, stats: list[SpanStats], prefix: str, limit: int = 40) -> str:
    if not stats:
        return ""
    top = max(s.total_us for s in stats) or 1.0
    rows = []
    for s in stats[:limit]:
        width = 100.0 * s.total_us / top
        bar = f'<td style="width:260px"><div class="bar" style="width:{width:.1f}%"></div></td>'
        name = _text(s.name.removeprefix(prefix))
        total, mean = f"{s.total_us / 1e3:.3f}", f"{s.mean_us / 1e3:.3f}"
        rows.append([name, _n(str(s.count)), _n(total), _n(mean), bar])
    more = f'<p class="note">{len(stats) - limit} more not shown.</p>' if len(stats) > limit else ""
    head = ["name", "count", "total ms", "mean ms", ""]
    return f"<h3>{escape(title)}</h3>" + _table(head, rows, "spans") + more


def _traces(traces: TraceSummary) -> str:
    if not traces.files and not traces.skipped:
        return ""
    names = ", ".join(p.name for p in traces.files[:10]) + (
        " ..." if len(traces.files) > 10 else ""
    )
    out = [
        "<h2>Where the time went (profiler traces)</h2>",
        f'<p class="note">From {len(traces.files)} trace(s): {_text(names)}. Totals over every '
        "profiled window and rank.</p>",
        _spans("Per event", traces.group("event/"), "event/"),
        _spans("Per callback and event", traces.group("callback/"), "callback/"),
    ]
    out.extend(f'<p class="note">skipped {_text(s)}</p>' for s in traces.skipped)
    return '<section id="traces">' + "\n".join(out) + "</section>"


def _flat(value: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _flat(item, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), value


_KEY_VALUE_FILES = ("run.json", "hparams.json", "git.json", "env.json")


def _record(data: RunData) -> str:
    config = data.config
    if not config:
        return '<h2>Run record</h2><p class="note">No config/ folder in the run folder.</p>'
    out = ["<h2>Run record (config/)</h2>"]
    titles = {
        "run.json": "Run",
        "hparams.json": "Hyperparameters",
        "plugins.json": "Plug-ins (resolved arguments)",
        "git.json": "Git",
        "env.json": "Environment",
        "system.json": "System",
        "packages.txt": "Installed packages",
    }
    order = [n for n in titles if n in config] + sorted(n for n in config if n not in titles)
    for name in order:
        value = config[name]
        title = f"{titles.get(name, name)} ({name})"
        if name == "plugins.json" and isinstance(value, dict):
            rows = [
                [
                    _text(p.get("kind", "")),
                    _text(p.get("class", "")),
                    f"<code>{_text(json.dumps(p.get('args'), default=str))}</code>",
                ]
                for p in value.get("plugins", [])
                if isinstance(p, dict)
            ]
            body = _table(["kind", "class", "arguments"], rows)
        elif name in _KEY_VALUE_FILES and isinstance(value, dict):
            body = _table(["name", "value"], ([_text(k), _text(v)] for k, v in _flat(value)))
        elif isinstance(value, str):
            body = f"<pre>{_text(value)}</pre>"
        else:
            body = f"<pre>{_text(json.dumps(value, indent=2, default=str))}</pre>"
        wide = " open" if name in ("hparams.json", "git.json") else ""
        summary = f"<summary>{escape(title)}</summary>"
        out.append(f'<details{wide} data-file="{escape(name)}">{summary}{body}</details>')
    return '<section id="record">' + "\n".join(out) + "</section>"


def page(
    data: RunData,
    summary: Summary,
    plots: list[Plot],
    divs: list[str],
    script: str,
    resources: str,
    traces: TraceSummary,
    images: str,
    version: str,
) -> str:
    """The whole HTML document. Every text from the run is escaped (and masked)."""
    sections = []
    for plot, div in zip(plots, divs, strict=True):
        note = ""
        if plot.left_out:
            names = _text(", ".join(plot.left_out[:20]))
            note = f'<p class="note">{len(plot.left_out)} more key(s) not drawn: {names}</p>'
        sections.append(
            f'<section class="plot" data-group="{escape(plot.id)}">'
            f"<h3>{_text(plot.title)}</h3>{note}{div}</section>"
        )
    plots_html = "\n".join(sections) if sections else '<p class="note">No metrics were found.</p>'
    made = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>obsbus report: {_text(data.run_name)}</title>
<style>{_CSS}</style>
{resources}
</head><body><main>
{_header(data, summary)}
<h2>Metrics by step</h2>
<p class="note">Each line keeps the lowest and highest point of every bucket of steps, so
every spike is drawn; NaN and inf are gaps. Scroll to zoom the step axis (shared by all plots),
click a legend entry to hide its line.</p>
<section id="plots">{plots_html}</section>
{images}
{_traces(traces)}
{_record(data)}
<p class="note">Made by obsbus {escape(version)} on {made}.</p>
</main>
{script}
</body></html>
"""
