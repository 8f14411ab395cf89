"""One headless Chromium for the report tests (Debian's, driven by Playwright), shared."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"

#: Every canvas under an element, through Bokeh's shadow roots.
_CANVASES = """
(root) => {
  const out = [];
  const walk = (node) => {
    if (node.tagName === 'CANVAS') out.push(node);
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.children || []) walk(child);
  };
  walk(root);
  return out.filter(c => c.width > 0 && c.height > 0).length;
}
"""
_Y_ENDS = """
() => Object.fromEntries(Bokeh.documents.flatMap(d => [...d.all_models])
  .filter(m => m.name && m.y_range).map(m => [m.name, m.y_range.end]))
"""
_DRAWN = (
    "() => window.Bokeh && Bokeh.documents.length > 0 && [...Bokeh.index].length > 0"
    " && [...Bokeh.index].every(v => v.has_finished())"
)


@dataclass
class Opened:
    """What the browser saw of one page."""

    errors: list[str] = field(default_factory=list)
    #: Requests for anything but the page itself (each was aborted).
    requests: list[str] = field(default_factory=list)
    #: data-group -> canvases drawn in that plot's section
    plots: dict[str, int] = field(default_factory=dict)
    figures: int = 0
    text: str = ""
    screenshot: bytes = b""
    dialogs: list[str] = field(default_factory=list)
    #: The header's rank table: [rank, status, why, last step, rows] per rank.
    ranks: list[list[str]] = field(default_factory=list)
    pwned: bool = False
    #: figure name (the plot's group id) -> the end of its y-range, as BokehJS computed it
    y_ends: dict[str, float] = field(default_factory=dict)


@pytest.fixture(scope="session")
def browser():
    """Chromium, launched once. A missing browser fails the tests (scripts/test.sh installs it)."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium "
        "(apt-get install -y chromium)."
    )
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="session")
def open_report(browser):
    """``open_report(path) -> Opened``: load a page offline, wait for Bokeh, look at it."""

    def open_(path: Path) -> Opened:
        seen = Opened()
        url = path.resolve().as_uri()
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.on("pageerror", lambda exc: seen.errors.append(f"pageerror: {exc}"))
            page.on(
                "console",
                lambda msg: (
                    seen.errors.append(f"console: {msg.text}") if msg.type == "error" else None
                ),
            )
            page.on("dialog", lambda d: (seen.dialogs.append(d.message), d.dismiss()))

            def route(r):
                if r.request.url == url:
                    r.continue_()
                else:
                    seen.requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.goto(url)
            page.wait_for_function(_DRAWN, timeout=60_000)
            seen.figures = page.evaluate("() => document.querySelectorAll('.bk-Figure').length")
            for section in page.query_selector_all("section.plot"):
                seen.plots[section.get_attribute("data-group")] = section.evaluate(_CANVASES)
            seen.text = page.inner_text("body")
            seen.y_ends = page.evaluate(_Y_ENDS)
            seen.pwned = bool(page.evaluate("() => window.__pwned === 1"))
            seen.ranks = page.eval_on_selector_all(
                "table.ranks tr",
                "rows => rows.slice(1).map(r => [...r.cells].map(c => c.innerText))",
            )
            # the first plot, as painted: an element's screenshot (a full page takes seconds)
            plot = page.locator("section.plot").first
            seen.screenshot = plot.screenshot() if plot.count() else page.screenshot()
        finally:
            context.close()
        return seen

    return open_


def pixel_spread(png: bytes) -> tuple[float, float]:
    """(standard deviation of the grey levels, share of pixels that are not background)."""
    from PIL import Image, ImageStat

    grey = Image.open(io.BytesIO(png)).convert("L")
    stddev = ImageStat.Stat(grey).stddev[0]
    histogram = grey.histogram()
    background = max(histogram)
    return stddev, 1.0 - background / sum(histogram)
