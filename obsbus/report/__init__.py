"""``obsbus report RUN_DIR``: one self-contained HTML page that shows a run.

The page opens offline in any browser (the plotting library's JavaScript is
inlined; nothing is fetched). It shows:

- a header: run name, status (below), start time (the status files, else
  ``config/run.json``), duration, steps, samples, each rank's
  status, every failure obsbus recorded (the failures RunReport saw in the
  logger's failure log, the ``[exception]`` lines of FileLogger's text log,
  metrics that went NaN or inf, ``nan/*`` keys from NaNMonitor, torn or bad
  lines, obsbus's lines in the ``logs/**/warning.log`` of
  :func:`obsbus.log.setup_logging`), and the final value of each ``loss/*``
  and ``metrics/*`` key with its unit, and its best value and step where the
  key says which way is better (the highest for rates, accuracies, MFU; the
  lowest for losses, errors, times per step; none otherwise: the rule is in
  :mod:`obsbus.report._best`);
- plots, all on one shared step axis, every step drawn at the same x in
  each (fixed borders, legends below the plot area, inside its card): loss
  (train and eval), eval metrics, learning rate (``lr-*``), MFU, throughput
  with one plot per kind (batches, samples, tokens, FLOP: each
  ``throughput/{kind}_per_sec`` with its ``throughput/device/`` twin; any
  other rate in a plot of its own), step time, memory, gradient and parameter
  norms (``l2_norm/*``), power, temperature, CPU and GPU utilisation, system
  memory, disk and network, time, other (one plot per prefix such as
  ``hf/``). A group's keys are split into one plot per unit, and eval and
  other metrics also per magnitude (keys three decades apart do not share an
  axis: see :mod:`obsbus.report._groups`). Keys whose series are identical
  on every rank (``throughput/device/*`` on one rank, ``hf/loss`` and
  ``loss/train/total``) are drawn as one line whose legend names them all.
  Every rank's FileLogger JSON Lines are read: up to 4 ranks as one line
  each, more as a min/max band over the ranks plus rank 0's line. A line of
  at most 50 points (after downsampling), and every eval series
  (``metrics/{label}/*`` but ``train``), also gets a circle at each point,
  so one eval logged once is seen (the markers share the line's data: the
  page does not grow). Hovering a point shows its logged step and value;
- the images logged with ``log_images`` (FileLogger's ``images/``: the last
  8 steps of each name and rank, inlined);
- where the run folder has profiler traces (``traces/``), the time per
  event and per callback (the ``event/*`` and ``callback/{Class}/{event}``
  spans), as a table with bars;
- the run's record in ``config/``: hyperparameters, the plug-ins with their
  resolved arguments, git, the environment, the system and the packages.

**Units.** A unit is shown (plot title, y-axis, tooltip, the metrics table)
only where the run declared it: each plug-in's ``metric_units()``, merged
into ``config/units.json`` at start (an exact key wins over a pattern, the
longest pattern over the others). A key with no declared unit, or a run
made before units were recorded, shows none: the page never guesses one
(SpeedMonitor logs ``time/*`` in hours by default, not seconds).

**JSON Lines.** Non-finite values are read as written, either strict JSON's
strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` or the bare tokens of
older files. A metric named like a column (``step``, ``epoch``, ``batch``,
``wall_time``), written as ``metric:<name>``, is shown as the metric
``<name>``; the column stays the run's own count.

Every text taken from the run is HTML-escaped and goes through
:func:`obsbus.masking.mask_secrets` (the ``config/`` files are masked when
written; they are masked again here).

**Status.** Each rank's status comes from, in order:

1. The status file RunReport writes (``run-status-rank{rank}.json``):
   ``finished`` (it saw ``fit_end``), ``failed`` (it saw ``exception``;
   ``killed`` when that exception was ``TrainingTerminated`` (SIGTERM) or
   ``KeyboardInterrupt``), ``finished`` when the run closed without
   ``fit_end``, and ``killed`` when the file still says ``running`` (the
   process ended without an end: SIGKILL, OOM killer, power loss; or the
   run is still going).
2. Without one: ``failed`` (``killed`` for the exceptions above) when
   FileLogger's text log has an ``[exception]`` line; ``killed`` when the
   last JSON Lines row is cut short; else ``unknown``.

The run's status is the worst of its ranks' (failed, killed, unknown,
finished).

**Size.** Each line is downsampled to at most 4,000 points (2,000 min/max
buckets, :func:`minmax_downsample`: every bucket keeps its lowest and
highest point, so no spike is lost), so the page stays responsive and its
size is bounded whatever the run's length: BokehJS (about 1.3 MB, inlined)
plus at most 4,000 points per line. A 1e6-row JSON Lines file (500,000
steps of loss and learning rate) gives a 1.3 MB page;
``tests/report/test_large.py`` checks it stays under 2 MB. Reading is the
slow part: about 4 s for those 1e6 rows (76 MB), 8 s for 1e6 rows of 4 keys
(188 MB); the plots then take about 2 s.

**Choice of library: Bokeh** (``pip install 'obsbus[report]'``), over
Plotly, from measurements: a 100k-step run, 6 plots sharing the step axis,
10 lines of random walks; the HTML each library writes with its JavaScript
inlined (Bokeh's ``file_html`` with ``INLINE``, Plotly's ``to_html`` with
``include_plotlyjs=True``); render time in headless Chromium 156 (Playwright)
from ``goto`` until every plot has drawn, best of 3; Bokeh 3.9.2, Plotly
7.1.0:

=====================  ==========  ===========
                       HTML size   render time
=====================  ==========  ===========
Bokeh, every point     13.1 MB     4.6 s
Bokeh, min/max 2,000   1.8 MB      2.5 s
Plotly, every point    21.6 MB     5.2 s
Plotly, min/max 2,000  5.5 MB      3.6 s
=====================  ==========  ===========

Plotly's ``Scattergl`` (WebGL) did not draw in 30 s in headless Chromium
without a GPU; ``Scatter`` (SVG) was measured. Bokeh's inline JavaScript is
about 1.3 MB against plotly.js's 4.8 MB, and it draws on a canvas. It needs
pandas, Pillow, tornado, Jinja2 and more, so it is an extra, not a core
dependency; ``import obsbus`` never imports it.

Example:
    >>> import tempfile
    >>> from obsbus import Run
    >>> from obsbus.loggers import FileLogger
    >>> folder = tempfile.mkdtemp()
    >>> with Run(max_duration="3ba", run_folder=folder, loggers=[FileLogger()]) as run:
    ...     for batch in run.train([[1], [2], [3]]):
    ...         run.state.loss = 1.0 / batch[0]
    >>> path = write_report(folder)
    >>> path.name, "Loss (train and eval)" in path.read_text()
    ('report.html', True)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from obsbus.errors import MissingExtraError
from obsbus.report._downsample import DEFAULT_BUCKETS, minmax_band, minmax_downsample

if TYPE_CHECKING:
    from obsbus.report._read import RunData

__all__ = [
    "DEFAULT_BUCKETS",
    "add_arguments",
    "build_report",
    "main",
    "minmax_band",
    "minmax_downsample",
    "render",
    "run",
    "write_report",
]

REPORT_NAME = "report.html"


def _bokeh() -> None:
    try:
        import bokeh  # noqa: F401
    except ImportError:
        raise MissingExtraError("report", "obsbus report") from None


def build_report(run_dir: str | Path, *, buckets: int = DEFAULT_BUCKETS) -> str:
    """The report of the run folder ``run_dir``, as one HTML document.

    Raises:
        NotARunError: ``run_dir`` does not exist, is a file, or holds no run (a
            ``NotADirectoryError`` and a ``ValueError``).
        MissingExtraError: Bokeh is not installed (``pip install 'obsbus[report]'``).
    """
    _bokeh()
    from obsbus.report._read import read_run

    return render(read_run(run_dir), buckets=buckets)


def _components(figures: list[Any]) -> tuple[str, Sequence[str]]:
    """Bokeh's ``components`` of ``figures``, one document for them all."""
    from bokeh.document import Document
    from bokeh.embed import components

    doc = Document()
    # Added one by one, each root re-walks every model (the figures share their x-range, so
    # they are all connected): 10 plots cost ~40% more than one walk after the last.
    with doc.models.freeze():
        for figure in figures:
            doc.add_root(figure)
    script, divs = components(figures)
    return script, divs


def render(data: RunData, *, buckets: int = DEFAULT_BUCKETS) -> str:
    """The HTML document for a run folder read by :func:`obsbus.report._read.read_run`."""
    _bokeh()
    from bokeh.resources import Resources

    from obsbus import __version__
    from obsbus.report._html import page
    from obsbus.report._images import images_html, read_images
    from obsbus.report._plots import build_plots
    from obsbus.report._status import summarize
    from obsbus.report._traces import read_traces

    plots = build_plots(data, buckets)
    script, divs = _components([p.figure for p in plots]) if plots else ("", ())
    return page(
        data,
        summarize(data),
        plots,
        list(divs),
        script,
        # Only BokehJS itself: the figures need no widgets, tables, WebGL or MathJax (1.3 MB
        # against 3.9 MB for all of INLINE).
        Resources(mode="inline", components=["bokeh"]).render(),
        read_traces(data.root, data.config),
        images_html(read_images(data.root)),
        __version__,
    )


def write_report(
    run_dir: str | Path, out: str | Path | None = None, *, buckets: int = DEFAULT_BUCKETS
) -> Path:
    """Write the report of ``run_dir`` to ``out`` (default ``{run_dir}/report.html``), whole:
    a reader never sees half a file. Returns its path."""
    html = build_report(run_dir, buckets=buckets)
    path = Path(out) if out is not None else Path(run_dir) / REPORT_NAME
    path = path.expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(html, encoding="utf-8")
    tmp.replace(path)
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``obsbus report`` arguments."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run folder to show")
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="where to write the page (default RUN_DIR/report.html)",
    )
    parser.add_argument(
        "--buckets",
        type=int,
        default=DEFAULT_BUCKETS,
        help=f"min/max buckets per line (at most twice as many points; default {DEFAULT_BUCKETS})",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``obsbus report`` with parsed ``args``: 0 written; 2 a missing extra, a bad
    argument, or a path that is not a run folder (missing, a file, no run in it); 1 a file
    that could not be read or written."""
    prog = "obsbus report"
    try:
        path = write_report(args.run_dir, args.output, buckets=args.buckets)
    except MissingExtraError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except ValueError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    print(f"report -> {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m obsbus.report RUN_DIR [-o FILE]``."""
    parser = argparse.ArgumentParser(
        prog="obsbus report", description="Write a run folder's report: one offline HTML file."
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
