"""Primus's (and TorchTitan's) observability keys, translated into obsbus's config shape.

:func:`from_primus` takes a Primus config as a dict and returns the generic
dict :func:`obsbus.config.build` takes (``run_name``, ``run_folder``,
``log_interval``, ``callbacks``, ``loggers``, ``profiler``, ``logging``).
``logging`` holds :func:`obsbus.log.setup_logging`'s keyword arguments (all
but ``run_folder``), for :meth:`obsbus.config.RunConfig.setup_logging`.

**Accepted shapes.** Either a flat dict of Primus keys (the merged module
config: ``log_interval``, ``disable_tensorboard``, ... beside ``work_group``,
``exp_name``, ...), or a Primus experiment file as Primus nests it::

    work_group: amd
    user_name: ada
    exp_name: llama-7b
    workspace: ./output
    modules:
      pre_trainer:
        framework: megatron          # or torchtitan
        config: pre_trainer.yaml
        model: llama2_7B.yaml
        overrides: {log_interval: 10, disable_tensorboard: false}

Primus's ``${VAR:default}`` placeholders are filled from the environment
(a value that is one placeholder is read as YAML: ``${PROFILE:false}`` is
``False``). Keys directly in the module and under its ``overrides`` are merged (the
overrides win), then over the top-level keys. The module taken is
``pre_trainer``, else the only one; its name becomes ``logging.module``.
``framework``, ``config`` and ``model`` only locate the module. TorchTitan's
sections are nested (``metrics: {log_freq: 10}``) or dotted
(``metrics.log_freq: 10``). The TorchTitan defaults apply when ``framework``
is ``torchtitan`` or a ``metrics``/``profiling`` key is given; otherwise
Megatron's (``trainer_base.yaml``; with ``config: pre_trainer.yaml``,
Primus's Megatron ``pre_trainer.yaml`` sets ``log_interval: 1`` and
``log_throughput: true``).

**Mapping**, key by key: Primus key (Primus's default): what it becomes. Plug-ins are
named as in :mod:`obsbus.registry`; unset keys take Primus's default.

- ``workspace`` (none): ``run_folder`` = ``{workspace}/{work_group}/{user_name}/{exp_name}``
  (workspace default ``./output``, Primus's), when ``exp_name`` and one other part are given
- ``work_group`` (none): ``run_folder`` part; ``logging.team``
- ``user_name`` (none): ``run_folder`` part; ``logging.user``
- ``exp_name`` (none): ``run_name``; ``run_folder`` part; ``logging.exp``
- ``sink_level`` (``null``): ``logging.sink_level``, and both levels below
- ``file_sink_level`` (``DEBUG``): ``logging.file_sink_level``
- ``stderr_sink_level`` (``INFO``): ``logging.stderr_sink_level``
- ``log_interval`` (``100``): ``log_interval: "{n}ba"`` (every plug-in's default) and
  ``loggers.loguru`` (the log line)
- ``log_throughput`` (``false``): ``callbacks.speed_monitor``
- ``log_avg_skip_iterations`` (``2``): ``runtime_estimator.skip_batches``
- ``log_avg_reset_interval`` (``10``): ``runtime_estimator.reset_interval``,
  ``speed_monitor.window_size``
- ``log_progress`` (``false``): ``callbacks.runtime_estimator``
- ``log_params_norm`` (``false``): ``optimizer_monitor.log_param_norm``
- ``log_num_zeros_in_grad`` (``false``): ``optimizer_monitor.log_num_zeros``
- ``use_rocm_mem_info`` (``false``): ``rocm_smi_monitor.log_interval`` = log_interval
- ``use_rocm_mem_info_iters`` (``[1, 2]``): ``rocm_smi_monitor.at_batches``
- ``disable_tensorboard`` (``true``): ``loggers.tensorboard`` when ``false``
- ``tensorboard_dir`` (``null``): ``tensorboard.log_dir`` (null: the run folder's
  ``tensorboard/``, Primus's ``{exp_root}/tensorboard``)
- ``tensorboard_log_interval`` (``1``): ``tensorboard.log_interval: "{n}ba"``
- ``tensorboard_queue_size`` (``1000``): ``tensorboard.queue_size``
- ``log_learning_rate_to_tensorboard`` (``true``): ``tensorboard.log_learning_rate``
- ``log_loss_scale_to_tensorboard`` (``true``): ``tensorboard.log_loss_scale``
- ``log_timers_to_tensorboard`` (``false``): ``tensorboard.log_timers``
- ``log_batch_size_to_tensorboard`` (``false``): ``tensorboard.log_batch_size``
- ``log_memory_to_tensorboard`` (``false``): ``tensorboard.log_memory``
- ``log_world_size_to_tensorboard`` (``false``): ``tensorboard.log_world_size``
- ``log_validation_ppl_to_tensorboard`` (``false``): ``tensorboard.log_validation_ppl``
- ``disable_wandb`` (``true``): ``loggers.wandb`` when ``false``
- ``wandb_project`` (``null``): ``wandb.project`` (null: ``{work_group}_{user_name}``)
- ``wandb_exp_name`` (``null``): ``wandb.name`` (null: the run name, ``exp_name``)
- ``wandb_entity`` (``null``): ``wandb.entity``
- ``wandb_save_dir`` (``null``): ``wandb.save_dir`` (null: the run folder)
- ``disable_mlflow`` (``true``): ``loggers.mlflow`` when ``false``
- ``mlflow_run_name`` (``null``): ``mlflow.run_name``
- ``mlflow_experiment_name`` (``null``): ``mlflow.experiment_name`` (null:
  ``{work_group}_{user_name}``, obsbus's default)
- ``mlflow_upload_traces`` (``false``): ``mlflow.upload_traces``
- ``mlflow_upload_logs`` (``false``): ``mlflow.upload_logs``
- ``mlflow_upload_performance_metrics`` (``false``): ``mlflow.upload_performance_metrics``
- ``profile`` (``false``): ``profiler`` with ``json_trace_handler``
- ``profile_step_start`` (``10``): ``schedule.step_window.profile_step_start``
- ``profile_step_end`` (``12``): ``schedule.step_window.profile_step_end``
- ``profile_ranks`` (``[0]``): ``schedule.step_window.profile_ranks``
- ``use_pytorch_profiler`` (``false``): ``profiler.torch_prof_folder: torch_traces``
- ``torch_profiler_record_shapes`` (``true``): ``profiler.torch_prof_record_shapes``
- ``torch_profiler_with_stack`` (``true``): ``profiler.torch_prof_with_stack``
- ``torch_profiler_use_gzip`` (``false``): ``profiler.torch_prof_use_gzip``
- ``record_memory_history`` (``false``): ``profiler.record_memory_history``
- ``memory_snapshot_path`` (``snapshot.pickle``): ``profiler.memory_snapshot_path`` (only when
  given: obsbus's default is one file per rank)
- ``metrics.log_freq`` (``10``): ``log_interval: "{n}ba"``
- ``metrics.enable_tensorboard`` (``false``): ``loggers.tensorboard``
- ``metrics.save_tb_folder`` (``tb``): ``tensorboard.log_dir``
- ``metrics.enable_wandb`` (``false``): ``loggers.wandb`` (project from ``$WANDB_PROJECT``)
- ``metrics.save_for_all_ranks`` (``false``): ``rank_zero_only`` of tensorboard and wandb
  (negated)
- ``profiling.enable_profiling`` (``false``): ``profiler`` with ``torch.profiler``
- ``profiling.profile_freq`` (``10``): ``schedule.cyclic``: ``wait`` = freq - 4, ``warmup`` 3,
  ``active`` 1, ``repeat`` 0 (TorchTitan's)
- ``profiling.save_traces_folder`` (``profile_traces``): ``profiler.torch_prof_folder``
- ``profiling.enable_memory_snapshot`` (``false``): ``memory_snapshot`` (``interval`` =
  profile_freq) and ``oom_observer``
- ``profiling.save_memory_snapshot_folder`` (``memory_snapshot``): their ``folder``

**Coupling rules** (Primus's):

- ``profile: true`` turns TensorBoard on, whatever ``disable_tensorboard`` says.
- MLflow logs on the last rank: ``mlflow.logging_rank: "last"``, ``rank_zero_only: true``.
- ``use_rocm_mem_info: true`` probes at every log step; otherwise only at
  ``use_rocm_mem_info_iters``. Either only with ``log_throughput: true``
  (Primus probes in the throughput branch of its log line).
- ``sink_level``, when set, is both ``file_sink_level`` and ``stderr_sink_level``.
- A switch that writes what a monitor logs turns that monitor on: with
  TensorBoard on, ``log_learning_rate_to_tensorboard`` adds ``lr_monitor``,
  ``log_memory_to_tensorboard`` ``memory_monitor`` and
  ``log_timers_to_tensorboard`` ``speed_monitor``; with MLflow on,
  ``mlflow_upload_performance_metrics`` adds ``speed_monitor`` (Primus: it
  "implicitly enables throughput calc"). TorchTitan always logs throughput
  and memory: ``speed_monitor`` and ``memory_monitor``.

Keys with no obsbus plug-in (``enable_one_logger``, ``one_logger_*``,
``app_tag_*``, ``log_straggler``, ``timing_log_*``, ``logging_level``,
TraceLens keys, ...), unknown keys, other modules, and switches that have no
effect (``use_rocm_mem_info`` without ``log_throughput``, ...) are listed in
one :class:`~obsbus.ObsbusWarning`. Bad values (a non-bool switch, a negative
interval) and credentials (a key naming one, a value shaped like one) are all
reported in one :class:`~obsbus.config.ConfigError`; a credential's value is
never quoted.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from obsbus._primus_keys import Keys, merge, secrets_in
from obsbus.errors import ObsbusWarning

__all__ = ["from_primus"]

_MEGATRON: dict[str, Any] = {
    "file_sink_level": "DEBUG", "stderr_sink_level": "INFO", "sink_level": None,
    "log_interval": 100, "log_throughput": False, "log_avg_skip_iterations": 2,
    "log_avg_reset_interval": 10, "log_progress": False, "log_params_norm": False,
    "log_num_zeros_in_grad": False, "use_rocm_mem_info": False, "use_rocm_mem_info_iters": [1, 2],
    "disable_tensorboard": True, "tensorboard_dir": None, "tensorboard_log_interval": 1,
    "tensorboard_queue_size": 1000, "log_learning_rate_to_tensorboard": True,
    "log_loss_scale_to_tensorboard": True, "log_timers_to_tensorboard": False,
    "log_batch_size_to_tensorboard": False, "log_memory_to_tensorboard": False,
    "log_world_size_to_tensorboard": False, "log_validation_ppl_to_tensorboard": False,
    "disable_wandb": True, "wandb_project": None, "wandb_exp_name": None, "wandb_entity": None,
    "wandb_save_dir": None, "disable_mlflow": True, "mlflow_run_name": None,
    "mlflow_experiment_name": None, "mlflow_upload_traces": False, "mlflow_upload_logs": False,
    "mlflow_upload_performance_metrics": False, "profile": False, "profile_step_start": 10,
    "profile_step_end": 12, "profile_ranks": [0], "use_pytorch_profiler": False,
    "torch_profiler_record_shapes": True, "torch_profiler_with_stack": True,
    "torch_profiler_use_gzip": False, "record_memory_history": False,
    "memory_snapshot_path": None,
}  # fmt: skip
_PRE_TRAINER = {"log_interval": 1, "log_throughput": True}  # Primus's Megatron pre_trainer.yaml
_TITAN: dict[str, Any] = {
    "metrics.log_freq": 10, "metrics.enable_tensorboard": False, "metrics.save_tb_folder": "tb",
    "metrics.enable_wandb": False, "metrics.save_for_all_ranks": False,
    "profiling.enable_profiling": False, "profiling.profile_freq": 10,
    "profiling.save_traces_folder": "profile_traces", "profiling.enable_memory_snapshot": False,
    "profiling.save_memory_snapshot_folder": "memory_snapshot",
}  # fmt: skip
_EXPERIMENT = ("workspace", "work_group", "user_name", "exp_name")
_TITAN_WARMUP, _TITAN_ACTIVE = 3, 1  # torchtitan's profiler: 3 warm-up steps, 1 recorded
_NO_PLUGIN = {
    "enable_one_logger": "NVIDIA One-Logger telemetry",
    "one_logger_project": "NVIDIA One-Logger telemetry",
    "one_logger_run_name": "NVIDIA One-Logger telemetry",
    "one_logger_async": "NVIDIA One-Logger telemetry",
    "app_tag_run_name": "One-Logger application tag",
    "app_tag_run_version": "One-Logger application tag",
    "log_straggler": "Megatron's straggler detector (speed_monitor logs "
    "throughput/step_time_max_over_min)",
    "timing_log_level": "Megatron's timers", "timing_log_option": "Megatron's timers",
    "logging_level": "deprecated in Primus; stderr_sink_level sets the level",
    "mlflow_upload_tracelens_report": "TraceLens reports",
    "disable_profiler_activity_cpu": "obsbus's torch.profiler always records the CPU",
    "metrics.disable_color_printing": "obsbus colours stderr on a terminal only; set "
    "OBSBUS_LOG_COLOR=0",
}  # fmt: skip


def from_primus(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Translate a Primus config into obsbus's config shape (see the module docstring).

    Raises:
        TypeError: ``cfg`` is not a mapping.
        obsbus.config.ConfigError: every bad value and every credential, each
            with its path in ``cfg``.

    Example:
        >>> out = from_primus({"log_interval": 10, "disable_tensorboard": False})
        >>> out["log_interval"], out["loggers"]["tensorboard"]["queue_size"]
        ('10ba', 1000)
    """
    from obsbus.config import ConfigError

    if not isinstance(cfg, Mapping):
        raise TypeError(f"from_primus takes a Primus config as a mapping, got {cfg!r}.")
    flat, paths, facts = merge(cfg)
    secrets = secrets_in(flat, paths)
    if secrets or facts["problems"]:
        raise ConfigError(secrets + facts["problems"], "the Primus config")
    titan = facts.get("framework") == "torchtitan" or any("." in k for k in flat)
    if titan:
        defaults = dict(_TITAN)
    else:
        defaults = dict(_MEGATRON)
        if facts.get("config") == "pre_trainer.yaml":
            defaults.update(_PRE_TRAINER)
    keys = Keys(flat, paths, defaults)
    out = _translate(keys, facts.get("module"), titan)
    if keys.problems:
        raise ConfigError(keys.problems, "the Primus config")
    left = [
        f"{paths[k]} ({_NO_PLUGIN.get(k, 'unknown key')})"
        for k in flat
        if k not in keys.used and k not in _EXPERIMENT
    ]
    notes = left + keys.notes + facts["notes"]
    if notes:
        warnings.warn(
            f"from_primus did not translate {len(notes)} Primus key(s): " + "; ".join(notes),
            ObsbusWarning,
            stacklevel=2,
        )
    return out


def _translate(keys: Keys, module: str | None, titan: bool) -> dict[str, Any]:
    from obsbus.run_folder import RunFolder

    out: dict[str, Any] = {}
    parts = {k: keys.text(k) for k in _EXPERIMENT}
    work_group, user_name, exp_name = parts["work_group"], parts["user_name"], parts["exp_name"]
    if exp_name is not None:
        out["run_name"] = exp_name
    if exp_name is not None and any(parts[k] for k in ("workspace", "work_group", "user_name")):
        workspace = parts["workspace"] or "./output"
        try:
            RunFolder.from_parts(
                exp_name=exp_name, workspace=workspace, work_group=work_group or "default",
                user_name=user_name,
            )  # fmt: skip
        except (TypeError, ValueError) as exc:
            keys.problems.append(("run_folder", str(exc)))
        else:
            user = user_name if user_name is not None else _os_user()
            out["run_folder"] = "/".join([workspace, work_group or "default", user, exp_name])
    group_name = None
    if work_group is not None or user_name is not None:
        group_name = f"{work_group or 'default'}_{user_name or _os_user()}"

    interval = keys.count("metrics.log_freq" if titan else "log_interval", 1)
    if titan and keys.given("log_interval"):
        mega = keys.count("log_interval", 1)
        if keys.given("metrics.log_freq") and mega != interval:
            keys.bad("log_interval", mega, f"metrics.log_freq ({interval}): give one of the two")
        interval = interval if keys.given("metrics.log_freq") else mega
    every = f"{interval or 1}ba"
    out["log_interval"] = every
    callbacks: dict[str, Any] = {}
    loggers: dict[str, Any] = {"loguru": {}}

    logging: dict[str, Any] = {}
    sink = keys.level("sink_level")
    for name in ("file_sink_level", "stderr_sink_level"):
        level = keys.level(name)
        if level is not None or sink is not None:
            logging[name] = sink or level
    if sink is not None:
        logging["sink_level"] = sink
    for arg, value in (("module", module), ("team", work_group), ("user", user_name),
                       ("exp", exp_name)):  # fmt: skip
        if value is not None:
            logging[arg] = value

    all_ranks = keys.flag("metrics.save_for_all_ranks")
    profile = keys.flag("profile")
    tensorboard_on = not keys.flag("disable_tensorboard") or profile
    tensorboard_on = keys.flag("metrics.enable_tensorboard") or (not titan and tensorboard_on)
    if tensorboard_on:
        loggers["tensorboard"] = _tensorboard(keys, titan, all_ranks, callbacks)
    if keys.flag("metrics.enable_wandb") or (not titan and not keys.flag("disable_wandb")):
        wandb: dict[str, Any] = {}
        _put(wandb, "project", keys.text("wandb_project") or (None if titan else group_name))
        for arg, key in (("name", "wandb_exp_name"), ("entity", "wandb_entity"),
                         ("save_dir", "wandb_save_dir")):  # fmt: skip
            _put(wandb, arg, keys.text(key))
        if titan:
            wandb["rank_zero_only"] = not all_ranks
        loggers["wandb"] = wandb
    if not titan and not keys.flag("disable_mlflow"):
        loggers["mlflow"] = _mlflow(keys, group_name, callbacks)
    else:
        for key in ("mlflow_upload_traces", "mlflow_upload_logs",
                    "mlflow_upload_performance_metrics"):  # fmt: skip
            keys.no_effect(key, "with disable_mlflow: true")

    throughput = keys.flag("log_throughput")
    window = keys.count("log_avg_reset_interval")
    skip = keys.count("log_avg_skip_iterations")
    if throughput or titan:
        callbacks.setdefault("speed_monitor", {})
    if "speed_monitor" in callbacks and window:
        callbacks["speed_monitor"]["window_size"] = window
    if titan:
        callbacks.setdefault("memory_monitor", {})
    if keys.flag("log_progress"):
        estimator = callbacks["runtime_estimator"] = {}
        _put(estimator, "skip_batches", skip)
        _put(estimator, "reset_interval", window)
    norm, zeros = keys.flag("log_params_norm"), keys.flag("log_num_zeros_in_grad")
    if norm or zeros:
        callbacks["optimizer_monitor"] = {"log_param_norm": norm, "log_num_zeros": zeros}
    every_step = keys.flag("use_rocm_mem_info")
    iters = keys.ints("use_rocm_mem_info_iters", 1)
    if throughput and every_step:
        callbacks["rocm_smi_monitor"] = {"log_interval": every}
    elif throughput and iters:
        callbacks["rocm_smi_monitor"] = {"at_batches": iters}
    if not throughput:
        keys.no_effect("use_rocm_mem_info", "without log_throughput: true")
        keys.no_effect("use_rocm_mem_info_iters", "without log_throughput: true")
    elif every_step:
        keys.no_effect("use_rocm_mem_info_iters", "with use_rocm_mem_info: true")

    profiler = _profiler(keys, titan, callbacks)
    out["callbacks"] = callbacks
    out["loggers"] = loggers
    if profiler is not None:
        out["profiler"] = profiler
    if logging:
        out["logging"] = logging
    return out


def _put(args: dict[str, Any], name: str, value: Any) -> None:
    if value is not None:
        args[name] = value


def _os_user() -> str:
    from obsbus.run_folder import os_user

    return os_user()


_TB_SWITCHES = ("learning_rate", "loss_scale", "timers", "batch_size", "memory", "world_size",
                "validation_ppl")  # fmt: skip


def _tensorboard(keys: Keys, titan: bool, all_ranks: bool, callbacks: dict[str, Any]) -> Any:
    args: dict[str, Any] = {}
    if titan:
        _put(args, "log_dir", keys.text("metrics.save_tb_folder"))
        args["rank_zero_only"] = not all_ranks
    _put(args, "log_dir", keys.text("tensorboard_dir"))
    tb_interval = keys.count("tensorboard_log_interval", 1)
    if tb_interval is not None:
        args["log_interval"] = f"{tb_interval}ba"
    _put(args, "queue_size", keys.count("tensorboard_queue_size", 1))
    for switch in _TB_SWITCHES:
        key = f"log_{switch}_to_tensorboard"
        if keys.given(key) or key in keys.defaults:
            args[f"log_{switch}"] = keys.flag(key)
    if args.get("log_learning_rate"):
        callbacks.setdefault("lr_monitor", {})
    if args.get("log_memory"):
        callbacks.setdefault("memory_monitor", {})
    if args.get("log_timers"):
        callbacks.setdefault("speed_monitor", {})
    return args


def _mlflow(keys: Keys, group_name: str | None, callbacks: dict[str, Any]) -> Any:
    args: dict[str, Any] = {"rank_zero_only": True, "logging_rank": "last"}
    _put(args, "experiment_name", keys.text("mlflow_experiment_name") or group_name)
    _put(args, "run_name", keys.text("mlflow_run_name"))
    args["upload_traces"] = keys.flag("mlflow_upload_traces")
    args["upload_logs"] = keys.flag("mlflow_upload_logs")
    performance = keys.flag("mlflow_upload_performance_metrics")
    args["upload_performance_metrics"] = performance
    if performance:
        callbacks.setdefault("speed_monitor", {})
    return args


def _profiler(keys: Keys, titan: bool, callbacks: dict[str, Any]) -> dict[str, Any] | None:
    handlers: dict[str, Any] = {"json_trace_handler": {}}
    freq = keys.count("profiling.profile_freq", _TITAN_WARMUP + _TITAN_ACTIVE)
    if keys.flag("profiling.enable_memory_snapshot"):
        folder = keys.text("profiling.save_memory_snapshot_folder")
        snapshot: dict[str, Any] = {"skip_batches": 0, "interval": f"{freq or 10}ba"}
        _put(snapshot, "folder", folder)
        callbacks["memory_snapshot"] = snapshot
        callbacks["oom_observer"] = {} if folder is None else {"folder": folder}
    if keys.flag("profiling.enable_profiling"):
        if keys.given("profile") and keys.flag("profile"):
            keys.bad("profile", True, "given with profiling.enable_profiling: give one of the two")
        cyclic = {"skip_first": 0, "wait": (freq or 10) - _TITAN_WARMUP - _TITAN_ACTIVE,
                  "warmup": _TITAN_WARMUP, "active": _TITAN_ACTIVE, "repeat": 0}  # fmt: skip
        section: dict[str, Any] = {"schedule": {"cyclic": cyclic}, "trace_handlers": handlers}
        _put(section, "torch_prof_folder", keys.text("profiling.save_traces_folder"))
        return section
    start, end = keys.count("profile_step_start"), keys.count("profile_step_end")
    ranks = keys.ints("profile_ranks", 0)
    torch_keys = ("torch_profiler_record_shapes", "torch_profiler_with_stack",
                  "torch_profiler_use_gzip")  # fmt: skip
    torch_on = keys.flag("use_pytorch_profiler")
    flags = {k: keys.flag(k) for k in torch_keys}
    history = keys.flag("record_memory_history")
    snapshot_path = keys.text("memory_snapshot_path")
    if not keys.flag("profile"):
        for key in ("use_pytorch_profiler", "profile_step_start", "profile_step_end",
                    "profile_ranks", "record_memory_history", "memory_snapshot_path",
                    *torch_keys):  # fmt: skip
            keys.no_effect(key, "with profile: false")
        return None
    if start is not None and end is not None and end <= start:
        keys.bad("profile_step_end", end, f"greater than profile_step_start ({start})")
    window: dict[str, Any] = {}
    _put(window, "profile_step_start", start)
    _put(window, "profile_step_end", end)
    _put(window, "profile_ranks", ranks)
    section = {"schedule": {"step_window": window}, "trace_handlers": handlers}
    if torch_on:
        section["torch_prof_folder"] = "torch_traces"
        for key, value in flags.items():
            section["torch_prof_" + key.removeprefix("torch_profiler_")] = value
    else:
        for key in torch_keys:
            keys.no_effect(key, "with use_pytorch_profiler: false")
    if history:
        section["record_memory_history"] = True
    _put(section, "memory_snapshot_path", snapshot_path)
    return section
