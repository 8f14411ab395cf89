"""The options trackers and alert destinations share: declared once, shown in every signature.

A tracker takes them as ``**options: Unpack[TrackerOptions]``;
:func:`~obsbus.loggers._shared_options.shares_options` puts them back into the
runtime signature. These tests hold the pieces together: the ``TypedDict``
says what the base class takes, the signature says what the constructor does,
and a keyword that is no option is refused by the class's name.
"""

from __future__ import annotations

import inspect
import pydoc
from typing import Any, TypedDict

import pytest

from obsbus.loggers import (
    CometMLLogger,
    MLFlowLogger,
    NeptuneLogger,
    TensorboardLogger,
    WandBLogger,
)
from obsbus.loggers._alert_destination import AlertDestination
from obsbus.loggers._shared_options import (
    SHARED_OPTIONS,
    AlertOptions,
    TrackerOptions,
    shares_options,
)
from obsbus.loggers._tracker import TrackerDestination
from obsbus.loggers.alerts import SlackLogger, WebhookLogger
from obsbus.time import Time

#: The trackers that take the shared options as **options, and what builds each offline.
DECORATED: list[tuple[type[Any], dict[str, Any]]] = [
    (WandBLogger, {"mode": "offline"}),
    (MLFlowLogger, {}),
    (CometMLLogger, {"online": False}),
    (TensorboardLogger, {}),
]
ALERTS = [SlackLogger, WebhookLogger]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("SLACK_WEBHOOK_URL", "http://127.0.0.1:9/hooks/options")
    monkeypatch.setenv("OBSBUS_WEBHOOK_URL", "http://127.0.0.1:9/hooks/options")


def _annotations(options: type[Any]) -> dict[str, str]:
    return {name: ref.__forward_arg__ for name, ref in options.__annotations__.items()}


@pytest.mark.parametrize(
    ("options", "base", "not_options"),
    [
        (TrackerOptions, TrackerDestination, {"self", "client", "rank_zero_only"}),
        (AlertOptions, AlertDestination, {"self", "url_env", "format", "token_env", "log_interval",
                                          "include_keys", "formatter_func",
                                          "max_logs_per_message"}),
    ],
    ids=["tracker", "alert"],
)  # fmt: skip
def test_the_typed_dict_is_what_the_base_takes(options, base, not_options):
    """Same names and the same annotations, so the TypedDict can't drift from the base."""
    params = inspect.signature(base.__init__).parameters
    assert _annotations(options) == {
        name: p.annotation for name, p in params.items() if name not in not_options
    }


def test_the_shared_option_names_are_the_typed_dict_and_rank_zero_only():
    assert set(SHARED_OPTIONS) == {*TrackerOptions.__annotations__, "rank_zero_only"}


@pytest.mark.parametrize(("cls", "kwargs"), DECORATED, ids=lambda p: getattr(p, "__name__", ""))
def test_the_signature_shows_each_option_with_the_default_it_gets(cls, kwargs):
    params = inspect.signature(cls).parameters
    assert not [p for p in params.values() if p.kind is p.VAR_KEYWORD]
    built = cls(**kwargs)
    try:
        got = {
            "log_interval": built.log_interval.time,
            "logging_rank": built.logging_rank,
            "log_env": built.log_env,
            "log_git": built.log_git,
            "write_period": built.write_period,
            "close_timeout": built.close_timeout,
            "max_queue_size": built._writer.max_queue_size,
            "rank_zero_only": built.rank_zero_only,
        }
        shown = {name: params[name].default for name in SHARED_OPTIONS}
        shown["log_interval"] = Time.from_timestring(shown["log_interval"])
        assert got == shown
        assert params["log_interval"].default == "1ba"
        assert params["logging_rank"].default == ("last" if cls is MLFlowLogger else 0)
    finally:
        built._writer.close(timeout=1.0)


def test_the_shared_options_follow_the_own_arguments_keyword_only():
    """Composer's positional arguments stay where they were; the options are keywords."""
    params = list(inspect.signature(WandBLogger).parameters.values())
    assert [p.name for p in params[:8]] == [
        "project",
        "group",
        "name",
        "entity",
        "tags",
        "log_artifacts",
        "rank_zero_only",
        "init_kwargs",
    ]
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[:8])
    shared = {p.name: p for p in params if p.name in TrackerOptions.__annotations__}
    assert all(p.kind is p.KEYWORD_ONLY for p in shared.values())
    assert shared["write_period"].annotation == "float"  # fmt: skip


@pytest.mark.parametrize("cls", [c for c, _ in DECORATED] + ALERTS, ids=lambda c: c.__name__)
def test_help_lists_the_options_with_their_defaults(cls):
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "close_timeout: 'float' = " in text
    assert "max_queue_size: 'int' = " in text
    assert "**options" not in text


@pytest.mark.parametrize(("cls", "kwargs"), [*DECORATED, (SlackLogger, {}), (WebhookLogger, {})],
                         ids=lambda p: getattr(p, "__name__", ""))  # fmt: skip
def test_a_misspelt_option_is_refused_by_the_class_name(cls, kwargs):
    with pytest.raises(
        TypeError,
        match=rf"^{cls.__name__} got an unexpected keyword argument 'close_timout'\. "
        r"Did you mean 'close_timeout'\?$",
    ):
        cls(**kwargs, close_timout=5.0)


def test_alert_options_reach_the_destination():
    slack = SlackLogger(["loss/"], None, "2ba", 10, on_start=False, timeout=3.0, max_attempts=2)
    hook = WebhookLogger("OBSBUS_WEBHOOK_URL", "slack", include_keys=["loss/"], max_queue_size=9)
    try:
        assert slack.include_keys == ("loss/",) and slack.max_logs_per_message == 10
        assert not slack.switches["run_started"] and slack.switches["run_failed"]
        assert (slack.timeout, slack.max_attempts, slack.close_timeout) == (3.0, 2, 10.0)
        assert hook.format == "slack" and hook.max_queue_size == 9 and hook.max_attempts == 5
    finally:
        slack.post_close()
        hook.post_close()


def test_neptune_lists_its_options_itself():
    """Its own ``**neptune_kwargs`` leave no room for ``**options``: written out, same defaults."""
    params = inspect.signature(NeptuneLogger).parameters
    base = inspect.signature(TrackerDestination).parameters
    assert {name: params[name].default for name in SHARED_OPTIONS} == {
        name: base[name].default for name in SHARED_OPTIONS
    }
    assert list(params)[-1] == "neptune_kwargs"


class _Base:
    def __init__(self, *, alpha: int = 1, beta: str = "b") -> None:
        self.alpha, self.beta = alpha, beta


class _Options(TypedDict, total=False):
    alpha: int
    beta: str


class _Shares(_Base):
    @shares_options(_Base.__init__, _Options, beta="own")
    def __init__(self, first: int = 0, **options: Any) -> None:
        self.first = first
        super().__init__(**options)


def test_a_default_of_the_class_wins_and_a_subclass_keeps_its_own_signature():
    assert str(inspect.signature(_Shares)) == (
        "(first: 'int' = 0, *, alpha: 'int' = 1, beta: 'str' = 'own') -> 'None'"
    )
    built = _Shares(3)
    assert (built.first, built.alpha, built.beta) == (3, 1, "own")
    assert _Shares(alpha=2, beta="given").beta == "given"

    class Inherits(_Shares):
        pass

    class Own(_Shares):
        def __init__(self, extra: str) -> None:
            super().__init__(alpha=5)
            self.extra = extra

    assert inspect.signature(Inherits) == inspect.signature(_Shares)
    assert str(inspect.signature(Own)) == "(extra: 'str') -> 'None'"
    assert Own("x").alpha == 5


def test_a_default_for_no_option_is_a_mistake_found_at_once():
    with pytest.raises(ValueError, match=r"\['gamma'\] are not options"):
        shares_options(_Base.__init__, _Options, gamma=3)


@pytest.mark.parametrize(
    ("value", "match"),
    [("Last", r"got 'Last'\. Did you mean 'last'\?$"), (-1, r"got -1\.$"), (1.5, r"got 1\.5\.$")],
)
def test_a_wrong_logging_rank_is_a_value_error_with_a_hint(value, match):
    with pytest.raises(ValueError, match=r"TrackerDestination logging_rank must be a rank >= 0 "
                       r"or 'last', " + match):  # fmt: skip
        TrackerDestination(logging_rank=value)
