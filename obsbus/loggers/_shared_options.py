"""The keyword options a family of destinations shares, declared once.

Every tracker (:class:`~obsbus.loggers.WandBLogger`, MLflow, Neptune, Comet,
TensorBoard) takes the same seven options after its own arguments, and both
alert destinations take the same switches and delivery settings. Written out
in each public signature, and again in each ``super().__init__(...)`` call,
they would repeat a dozen lines per class and could drift. Instead a class
takes them as ``**options: Unpack[TrackerOptions]`` (a ``TypedDict``: a type
checker checks each key and value) and :func:`shares_options` puts them back
into its runtime signature with the base class's annotations and defaults, so
``help()``, :func:`inspect.signature`, config checks (``obsbus config keys``)
and IDEs that read the signature show every option, as before. A keyword that
is none of them is refused naming the class, with a "Did you mean".

Example:
    >>> import inspect
    >>> from obsbus.loggers import WandBLogger
    >>> inspect.signature(WandBLogger).parameters["write_period"]
    <Parameter "write_period: 'float' = 1.0">
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, cast

from obsbus._check import did_you_mean

if TYPE_CHECKING:
    from obsbus.time import TimeLike

__all__ = ["SHARED_OPTIONS", "AlertOptions", "TrackerOptions", "shared_options", "shares_options"]

F = TypeVar("F", bound=Callable[..., None])


class TrackerOptions(TypedDict, total=False):
    """The options every tracker takes by keyword, after its own arguments.

    Their meaning and defaults are those of
    :class:`~obsbus.loggers._tracker.TrackerDestination` (MLflow's
    ``logging_rank`` defaults to ``"last"``). ``rank_zero_only`` is shared too
    but is not here: it is one of Composer's positional arguments.
    """

    log_interval: TimeLike
    logging_rank: int | Literal["last"]
    log_env: bool
    log_git: bool
    write_period: float
    close_timeout: float
    max_queue_size: int


#: The options every tracker takes, by these names
#: (see :class:`~obsbus.loggers._tracker.TrackerDestination`).
SHARED_OPTIONS = ("log_interval", "rank_zero_only", "logging_rank", "log_env", "log_git",
                  "write_period", "close_timeout", "max_queue_size")  # fmt: skip


def shared_options(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The shared options out of the arguments (``locals()``) of a tracker that lists them."""
    return {name: arguments[name] for name in SHARED_OPTIONS if name in arguments}


class AlertOptions(TypedDict, total=False):
    """The options both alert destinations take by keyword: which events alert, and delivery.

    Their meaning and defaults are those of
    :class:`~obsbus.loggers._alert_destination.AlertDestination`.
    """

    on_start: bool
    on_finish: bool
    on_failure: bool
    on_nan: bool
    on_hang: bool
    on_loss_spike: bool
    on_upload_failure: bool
    summary_interval: float | None
    rank_zero_only: bool
    timeout: float
    max_attempts: int
    retry_backoff: float
    max_backoff: float
    close_timeout: float
    max_queue_size: int


def shares_options(
    base: Callable[..., None], options: type[Any], **defaults: Any
) -> Callable[[F], F]:
    """Decorate an ``__init__`` that takes ``options``'s keys as ``**options``.

    Its signature then lists them as keyword-only parameters after its own,
    each with ``base``'s annotation and default (``defaults`` overrides some:
    MLflow's ``logging_rank="last"``), and calling it fills those defaults in
    and refuses a keyword it does not take.

    Args:
        base: the ``__init__`` the options go on to, where their defaults are.
        options: the ``TypedDict`` of the options.
        **defaults: defaults of this class that differ from ``base``'s.
    """
    names: Sequence[str] = list(options.__annotations__)
    if not set(defaults) <= set(names):
        raise ValueError(f"shares_options: {sorted(set(defaults) - set(names))} are not options")

    def decorate(init: F) -> F:
        own = inspect.signature(init)
        base_params = inspect.signature(base).parameters
        given = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
        shared = [
            base_params[name].replace(
                kind=inspect.Parameter.KEYWORD_ONLY,
                default=defaults.get(name, base_params[name].default),
            )
            for name in names
        ]
        signature = own.replace(parameters=[*given, *shared])
        keywords = [p.name for p in list(signature.parameters.values())[1:]  # after self
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]  # fmt: skip

        @functools.wraps(init)
        def init_with_options(self: object, *args: Any, **kwargs: Any) -> None:
            for key in kwargs:
                if key not in keywords:
                    raise TypeError(
                        f"{type(self).__name__} got an unexpected keyword argument {key!r}."
                        f"{did_you_mean(key, keywords)}"
                    )
            init(self, *args, **(defaults | kwargs))

        init_with_options.__signature__ = signature  # type: ignore[attr-defined]
        return cast(F, init_with_options)

    return decorate
