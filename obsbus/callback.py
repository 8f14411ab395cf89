"""The base class of every monitor and destination."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from obsbus._init_args import record_init_args

if TYPE_CHECKING:
    from obsbus.event import Event
    from obsbus.logger import Logger
    from obsbus.state import State

__all__ = ["Callback"]


class Callback:
    """A plug-in that reacts to :class:`~obsbus.Event` s.

    Every hook is a no-op with the same ``(state, logger)`` signature; a
    subclass overrides the hooks it needs (marked ``@typing.override``) and
    nothing else. The :class:`~obsbus.Engine` calls only the hooks a callback
    overrides, so an unused hook costs nothing. Composer's other way works
    too: override :meth:`run_event` and receive every event.

    A hook a run turns out not to need (known in ``__init__`` or ``init``)
    can be dropped for that run: set the instance attribute to the base
    class's hook, ``self.after_forward = super().after_forward``, and the
    engine, which looks at its plug-ins again after ``init``, stops calling
    it (:class:`~obsbus.callbacks.NaNMonitor` and
    :class:`~obsbus.callbacks.SpeedMonitor` do this).

    Beyond the hooks: :meth:`close` (release resources; runs once, at the end),
    :meth:`post_close` (after every plug-in closed), :meth:`state_dict` and
    :meth:`load_state_dict` (resume), and :meth:`metric_units` (the units of
    the keys it logs, which the console and the report show).

    Example:
        >>> from typing_extensions import override
        >>> class CountBatches(Callback):
        ...     def __init__(self):
        ...         self.batches = 0
        ...     @override
        ...     def batch_end(self, state, logger):
        ...         self.batches += 1
        >>> from obsbus import Event
        >>> cb = CountBatches()
        >>> cb.run_event(Event.BATCH_END, None, None); cb.batches
        1

        Composer's second way, one method for every event:

        >>> from collections import Counter
        >>> class CountEvents(Callback):
        ...     def __init__(self):
        ...         self.counts = Counter()
        ...     @override
        ...     def run_event(self, event, state, logger):
        ...         self.counts[event] += 1
        >>> from obsbus import Engine, Logger, State
        >>> state = State(run_name="r")
        >>> counter = CountEvents()
        >>> engine = Engine(state, Logger(state), [counter])
        >>> engine.run_event(Event.FIT_START); engine.run_event("batch_end")
        >>> dict(counter.counts)
        {<Event.FIT_START: 'fit_start'>: 1, <Event.BATCH_END: 'batch_end'>: 1}
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # Keeps each plug-in's constructor arguments, for the run's config/plugins.json.
        super().__init_subclass__(**kwargs)
        record_init_args(cls)

    def run_event(self, event: Event, state: State, logger: Logger) -> None:
        """Call the hook method for ``event``.

        As in Composer, a subclass may override this instead of the hooks:
        the :class:`~obsbus.Engine` then calls it at every event, in order
        (``exception`` included), and the hook methods run only if it calls
        ``super().run_event(event, state, logger)``. Without an override the
        engine calls the overridden hooks directly, skipping this method.
        """
        getattr(self, str(event))(state, logger)

    def init(self, state: State, logger: Logger) -> None:
        """Once, when the run is set up, before anything else; destinations run first here."""

    def before_load(self, state: State, logger: Logger) -> None:
        """Before a checkpoint would be loaded."""

    def after_load(self, state: State, logger: Logger) -> None:
        """After a checkpoint would be loaded; callbacks may restore their own state here."""

    def fit_start(self, state: State, logger: Logger) -> None:
        """At the start of each ``fit()`` (or ``Run`` start)."""

    def iteration_start(self, state: State, logger: Logger) -> None:
        """At the start of the run's iteration: the first ``fit()`` (a later one continues it)."""

    def epoch_start(self, state: State, logger: Logger) -> None:
        """At the start of each epoch."""

    def before_dataloader(self, state: State, logger: Logger) -> None:
        """Before the next batch is taken from the dataloader."""

    def after_dataloader(self, state: State, logger: Logger) -> None:
        """After the batch is taken; ``state.batch`` holds it."""

    def batch_start(self, state: State, logger: Logger) -> None:
        """At the start of a training batch."""

    def before_train_batch(self, state: State, logger: Logger) -> None:
        """Before the microbatches of a batch run."""

    def before_forward(self, state: State, logger: Logger) -> None:
        """Before the forward pass of each microbatch."""

    def after_forward(self, state: State, logger: Logger) -> None:
        """After the forward pass; ``state.outputs`` holds the outputs."""

    def before_loss(self, state: State, logger: Logger) -> None:
        """Before the loss of each microbatch is computed."""

    def after_loss(self, state: State, logger: Logger) -> None:
        """After the loss; ``state.loss`` holds this microbatch's loss."""

    def before_backward(self, state: State, logger: Logger) -> None:
        """Before the backward pass of each microbatch."""

    def after_backward(self, state: State, logger: Logger) -> None:
        """After the backward pass; gradients are populated."""

    def after_train_batch(self, state: State, logger: Logger) -> None:
        """After the optimizer step; ``state.loss`` holds the batch's loss."""

    def batch_end(self, state: State, logger: Logger) -> None:
        """At the end of a batch; ``state.timestamp`` already counts it."""

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        """After ``batch_end`` (and any eval it triggers): time to save a checkpoint."""

    def epoch_end(self, state: State, logger: Logger) -> None:
        """At the end of a complete epoch; ``state.timestamp`` already counts it."""

    def epoch_checkpoint(self, state: State, logger: Logger) -> None:
        """After ``epoch_end`` (and any eval it triggers): time to save a checkpoint."""

    def iteration_end(self, state: State, logger: Logger) -> None:
        """At the end of an iteration: never fired by obsbus's loops, as Composer's without an
        ``iteration_length`` (a trainer with iterations fires it)."""

    def iteration_checkpoint(self, state: State, logger: Logger) -> None:
        """After ``iteration_end``."""

    def fit_end(self, state: State, logger: Logger) -> None:
        """At the end of ``fit()``; destinations flush here."""

    def eval_before_all(self, state: State, logger: Logger) -> None:
        """Before evaluation inside fit runs over every eval dataloader."""

    def eval_start(self, state: State, logger: Logger) -> None:
        """At the start of evaluation on one dataloader."""

    def eval_batch_start(self, state: State, logger: Logger) -> None:
        """At the start of an eval batch."""

    def eval_before_forward(self, state: State, logger: Logger) -> None:
        """Before the eval forward pass."""

    def eval_after_forward(self, state: State, logger: Logger) -> None:
        """After the eval forward pass."""

    def eval_batch_end(self, state: State, logger: Logger) -> None:
        """At the end of an eval batch."""

    def eval_end(self, state: State, logger: Logger) -> None:
        """At the end of evaluation on one dataloader; ``state.eval_metrics`` is filled."""

    def eval_after_all(self, state: State, logger: Logger) -> None:
        """After evaluation inside fit ran over every eval dataloader."""

    def eval_standalone_start(self, state: State, logger: Logger) -> None:
        """At the start of a standalone ``eval()`` (outside fit)."""

    def eval_standalone_end(self, state: State, logger: Logger) -> None:
        """At the end of a standalone ``eval()``."""

    def predict_start(self, state: State, logger: Logger) -> None:
        """At the start of ``predict()``."""

    def predict_batch_start(self, state: State, logger: Logger) -> None:
        """At the start of a predict batch."""

    def predict_before_forward(self, state: State, logger: Logger) -> None:
        """Before the predict forward pass."""

    def predict_after_forward(self, state: State, logger: Logger) -> None:
        """After the predict forward pass."""

    def predict_batch_end(self, state: State, logger: Logger) -> None:
        """At the end of a predict batch."""

    def predict_end(self, state: State, logger: Logger) -> None:
        """At the end of ``predict()``."""

    def exception(self, state: State, logger: Logger) -> None:
        """When the loop raises (SIGTERM included), before the error reaches the caller.

        ``state.exception`` holds the error. Flush what you hold; an error raised
        here is logged and does not hide the original one."""

    def close(self, state: State, logger: Logger) -> None:
        """Release resources and flush; called once by ``Engine.close``."""

    def post_close(self) -> None:
        """After every plug-in closed, if this one's ``close`` succeeded."""

    def metric_units(self) -> dict[str, str]:
        """The units of the metric keys this plug-in logs: key or pattern -> unit.

        A key is an exact metric key (``"time/train"``) or an :mod:`fnmatch`
        pattern (``"memory/*_mem"``, ``"throughput/*samples_per_sec"``); a
        unit is a short string: ``"s"``, ``"min"``, ``"h"``, ``"d"``, ``"B"``,
        ``"GB"``, ``"GiB"``, ``"MB/s"``, ``"%"``, ``"samples/s"``,
        ``"tokens/s"``, ``"batches/s"``, ``"flops/s"``... It may depend on the
        instance (``SpeedMonitor(time_unit="hours")`` says ``"h"`` for its
        ``time/*`` keys). An exact key wins over a pattern, and the longest
        matching pattern over shorter ones. A key with no declared unit is
        shown with none: declare no unit for a ratio or a count.

        The run writes every plug-in's units, merged, to
        ``config/units.json`` at start; the console and the run report show
        them after each value. Default: no units.

        Example:
            >>> class Latency(Callback):
            ...     def metric_units(self):
            ...         return {"latency/*": "ms"}
            >>> from obsbus._units import unit_of
            >>> unit_of("latency/p99", Latency().metric_units())
            'ms'
        """
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What this callback needs to resume; must be picklable."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`state_dict`."""
