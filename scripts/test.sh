#!/usr/bin/env bash
# The test command: set up .venv (torch==2.13.0 first, then obsbus with its test
# extra) if needed, then run the test suite. Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
# torch first: 2.13.0 is the CPU build on this machine's disk; any other pulls CUDA.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
# The test extra (transformers, lightning, accelerate, trackers) must keep that torch.
.venv/bin/python -c 'import importlib.metadata as m, sys; v = m.version("torch"); sys.exit(None if v.split("+")[0] == "2.13.0" else f"the test extra replaced torch 2.13.0 with {v}: pin the package that pulled it")'
# The report tests open pages in Debian's chromium, driven by Playwright (no browser download).
if [ ! -x /usr/bin/chromium ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# -X faulthandler: a crash prints every thread's stack. (Without it, two CI runs on
# 2026-12-03 died with SIGSEGV and no stack, somewhere after 26% of the suite; with it the
# same checkout passed. Not understood yet: see the session note.)
exec .venv/bin/python -X faulthandler -m pytest "$@"
