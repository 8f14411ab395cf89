"""Cost of one ``Engine.run_event(event)``, by number of callbacks.

What is measured
----------------
A real :class:`~obsbus.State`, ``Logger(state, [])`` (no destinations) and
``Engine(state, logger, callbacks)`` are built for 0, 1, 10 and 50
callbacks, in two variants:

- ``noop``: the callbacks are plain :class:`~obsbus.Callback` subclasses that
  override nothing, so no hook handles the event (the engine's dispatch
  table is empty for it);
- ``override``: every callback overrides the event's hook with a trivial body
  (``self.count += 1``).

For each case, ``engine.run_event(event)`` (``batch_end`` unless ``--event``
says otherwise) is called ``--calls`` times in a tight loop timed with
:func:`time.perf_counter_ns`; the loop is repeated ``--rounds`` times and the
median round is reported, in ns per call. The garbage collector is off while
timing (as in :mod:`timeit`).

Columns
-------
- ``raw ns/call``: median time of one loop iteration calling ``run_event``.
- ``net ns/call``: ``raw`` minus the cost of the empty loop (``for _ in
  range(n): pass``, measured the same way), i.e. the cost of ``run_event``
  itself.
- ``hooks ns/call``: for ``override``, the time of calling the same ``n``
  bound hooks directly, ``hook(state, logger)`` in a Python loop, without
  the engine (loop overhead subtracted).
- ``engine adds ns``: ``override net - hooks``, what the engine adds on top
  of the hooks' own cost.
- ``per cb ns``: for ``override``, ``(override net - noop net) / n``: the
  marginal cost of one more callback that handles the event, with the
  no-op dispatch cost subtracted.

The target is a no-op event (nobody overrides the hook) under 1 µs
(1000 ns): the ``noop`` rows, ``net`` column.

Run: ``python bench/bench_events.py`` (``--help`` for options). Imports
only the standard library and obsbus.
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from collections.abc import Callable

import obsbus
from obsbus import Callback, Engine, Event, Logger, State

COUNTS = (0, 1, 10, 50)
TARGET_NOOP_NS = 1000.0


class NoopCallback(Callback):
    """Overrides no hook: the engine never calls it."""


def make_override_callback(hook: str) -> type[Callback]:
    """A ``Callback`` subclass whose ``hook`` increments a counter."""

    def handler(self: Callback, state: State, logger: Logger) -> None:
        self.count += 1  # type: ignore[attr-defined]

    handler.__name__ = hook
    return type("CountingCallback", (Callback,), {hook: handler, "count": 0})


def time_loop(fn: Callable[[int], None], calls: int, rounds: int) -> float:
    """Median over ``rounds`` of ns per iteration of ``fn(calls)``."""
    per_call = []
    fn(min(calls, 10_000))  # warm up
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            fn(calls)
            per_call.append((time.perf_counter_ns() - t0) / calls)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(per_call)


def empty_loop(calls: int) -> None:
    for _ in range(calls):
        pass


def engine_loop(engine: Engine, event: Event) -> Callable[[int], None]:
    run_event = engine.run_event

    def loop(calls: int) -> None:
        for _ in range(calls):
            run_event(event)

    return loop


def direct_loop(
    hooks: list[Callable[[State, Logger], None]], state: State, logger: Logger
) -> Callable[[int], None]:
    def loop(calls: int) -> None:
        for _ in range(calls):
            for hook in hooks:
                hook(state, logger)

    return loop


def build(n: int, variant: str, event: Event) -> tuple[Engine, list[Callback]]:
    state = State(run_name="bench")
    logger = Logger(state, [])
    cls = NoopCallback if variant == "noop" else make_override_callback(event.value)
    callbacks = [cls() for _ in range(n)]
    return Engine(state, logger, callbacks), callbacks


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200_000, help="run_event calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the median is reported")
    parser.add_argument(
        "--event", default=Event.BATCH_END.value, help="event to fire (default: batch_end)"
    )
    args = parser.parse_args(argv)
    event = Event(args.event)
    if event is Event.EXCEPTION:
        parser.error("exception runs every hook under try/except; pick a regular event")

    loop_ns = time_loop(empty_loop, args.calls, args.rounds)
    Row = tuple[str, int, float, float, float | None, float | None, float | None]
    rows: list[Row] = []
    noop_net: dict[int, float] = {}
    for variant in ("noop", "override"):
        for n in COUNTS:
            engine, callbacks = build(n, variant, event)
            raw = time_loop(engine_loop(engine, event), args.calls, args.rounds)
            net = raw - loop_ns
            hooks_ns = per_cb = engine_adds = None
            if variant == "noop":
                noop_net[n] = net
                assert all(cb.__dict__.get("count") is None for cb in callbacks)
            else:
                assert all(cb.count > 0 for cb in callbacks)  # type: ignore[attr-defined]
                hooks = [getattr(cb, event.value) for cb in callbacks]
                direct = time_loop(
                    direct_loop(hooks, engine.state, engine.logger), args.calls, args.rounds
                )
                hooks_ns = direct - loop_ns
                engine_adds = net - hooks_ns
                if n:
                    per_cb = (net - noop_net[n]) / n
            engine.close()
            rows.append((variant, n, raw, net, hooks_ns, engine_adds, per_cb))

    def fmt(x: float | None) -> str:
        return "" if x is None else f"{x:,.0f}"

    print(f"# obsbus event dispatch: `Engine.run_event({event.value!r})`\n")
    print(
        f"python {platform.python_version()}, obsbus {obsbus.__version__}, "
        f"{platform.machine()}; {args.calls:,} calls x {args.rounds} rounds (median); "
        f"empty-loop overhead {loop_ns:.1f} ns/iteration (subtracted in `net`).\n"
    )
    print(
        "| variant | callbacks | raw ns/call | net ns/call | hooks ns/call "
        "| engine adds ns | per cb ns |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for variant, n, raw, net, hooks_ns, engine_adds, per_cb in rows:
        print(
            f"| {variant} | {n} | {fmt(raw)} | {fmt(net)} | {fmt(hooks_ns)} "
            f"| {fmt(engine_adds)} | {fmt(per_cb)} |"
        )
    worst = max(noop_net.values())
    verdict = "MET" if worst < TARGET_NOOP_NS else "MISSED"
    print(
        f"\nTarget: a no-op event costs < {TARGET_NOOP_NS:.0f} ns. "
        f"Worst no-op net cost: {worst:.0f} ns -> {verdict}."
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
