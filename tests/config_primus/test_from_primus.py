"""from_primus: Primus's keys (the reference pages' defaults) -> obsbus's generic config."""

from __future__ import annotations

import warnings

import pytest

from obsbus._primus import from_primus
from obsbus.config import ConfigError
from obsbus.errors import ObsbusWarning

# Every observability key of the Primus Megatron pages, at Primus's documented default, but
# with the three trackers and the profiler turned on and a few values changed.
MEGATRON_OVERRIDES = {
    "sink_level": None, "file_sink_level": "DEBUG", "stderr_sink_level": "INFO",
    "log_interval": 20, "log_throughput": True, "log_avg_skip_iterations": 2,
    "log_avg_reset_interval": 10, "log_progress": True, "log_params_norm": True,
    "log_num_zeros_in_grad": False, "use_rocm_mem_info": False, "use_rocm_mem_info_iters": [1, 2],
    "disable_tensorboard": False, "tensorboard_dir": None, "tensorboard_log_interval": 1,
    "tensorboard_queue_size": 1000, "log_timers_to_tensorboard": False,
    "log_batch_size_to_tensorboard": False, "log_learning_rate_to_tensorboard": True,
    "log_validation_ppl_to_tensorboard": False, "log_memory_to_tensorboard": True,
    "log_world_size_to_tensorboard": False, "log_loss_scale_to_tensorboard": True,
    "disable_wandb": False, "wandb_project": None, "wandb_exp_name": None, "wandb_entity": "team-a",
    "wandb_save_dir": None, "disable_mlflow": False, "mlflow_run_name": None,
    "mlflow_experiment_name": "scaling", "mlflow_upload_traces": True, "mlflow_upload_logs": False,
    "mlflow_upload_performance_metrics": False, "profile": True, "use_pytorch_profiler": True,
    "profile_ranks": [0], "profile_step_start": 10, "profile_step_end": 12,
    "record_memory_history": False, "torch_profiler_record_shapes": True,
    "torch_profiler_with_stack": True, "torch_profiler_use_gzip": False,
}  # fmt: skip

PRIMUS_EXPERIMENT = {
    "work_group": "amd",
    "user_name": "ada",
    "exp_name": "llama2-7b",
    "workspace": "./output",
    "modules": {
        "pre_trainer": {
            "framework": "megatron",
            "config": "trainer_base.yaml",
            "model": "llama2_7B.yaml",
            "overrides": MEGATRON_OVERRIDES,
        }
    },
}

MEGATRON_EXPECTED = {
    "run_name": "llama2-7b",
    "run_folder": "./output/amd/ada/llama2-7b",
    "log_interval": "20ba",
    "callbacks": {
        "lr_monitor": {},
        "memory_monitor": {},
        "speed_monitor": {"window_size": 10},
        "runtime_estimator": {"skip_batches": 2, "reset_interval": 10},
        "optimizer_monitor": {"log_param_norm": True, "log_num_zeros": False},
        "rocm_smi_monitor": {"at_batches": [1, 2]},
    },
    "loggers": {
        "loguru": {},
        "tensorboard": {
            "log_interval": "1ba", "queue_size": 1000, "log_learning_rate": True,
            "log_loss_scale": True, "log_timers": False, "log_batch_size": False,
            "log_memory": True, "log_world_size": False, "log_validation_ppl": False,
        },
        "wandb": {"project": "amd_ada", "entity": "team-a"},
        "mlflow": {
            "rank_zero_only": True, "logging_rank": "last", "experiment_name": "scaling",
            "upload_traces": True, "upload_logs": False, "upload_performance_metrics": False,
        },
    },
    "profiler": {
        "schedule": {
            "step_window": {"profile_step_start": 10, "profile_step_end": 12, "profile_ranks": [0]}
        },
        "trace_handlers": {"json_trace_handler": {}},
        "torch_prof_folder": "torch_traces",
        "torch_prof_record_shapes": True,
        "torch_prof_with_stack": True,
        "torch_prof_use_gzip": False,
    },
    "logging": {
        "file_sink_level": "DEBUG", "stderr_sink_level": "INFO", "module": "pre_trainer",
        "team": "amd", "user": "ada", "exp": "llama2-7b",
    },
}  # fmt: skip


def translate(cfg):
    """from_primus, failing on any warning (tests that expect one catch it themselves)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ObsbusWarning)
        return from_primus(cfg)


def test_full_megatron_experiment_nested_as_primus_nests_it():
    assert translate(PRIMUS_EXPERIMENT) == MEGATRON_EXPECTED


def test_the_same_keys_flat_give_the_same_config_but_the_module_name():
    flat = {k: v for k, v in PRIMUS_EXPERIMENT.items() if k != "modules"} | MEGATRON_OVERRIDES
    expected = {**MEGATRON_EXPECTED, "logging": dict(MEGATRON_EXPECTED["logging"])}
    del expected["logging"]["module"]
    assert translate(flat) == expected


def test_module_keys_and_overrides_merge_overrides_winning():
    cfg = {"modules": {"trainer": {"log_interval": 5, "log_throughput": True,
                                   "overrides": {"log_interval": 7}}}}  # fmt: skip
    out = translate(cfg)
    assert out["log_interval"] == "7ba"
    assert out["callbacks"] == {
        "speed_monitor": {"window_size": 10},
        "rocm_smi_monitor": {"at_batches": [1, 2]},
    }
    assert out["logging"]["module"] == "trainer"


def test_nothing_given_is_primus_megatron_defaults():
    assert translate({}) == {
        "log_interval": "100ba",
        "callbacks": {},
        "loggers": {"loguru": {}},
        "logging": {"file_sink_level": "DEBUG", "stderr_sink_level": "INFO"},
    }


def test_pre_trainer_yaml_defaults_log_every_step_with_throughput():
    cfg = {"modules": {"pre_trainer": {"config": "pre_trainer.yaml", "overrides": {}}}}
    out = translate(cfg)
    assert out["log_interval"] == "1ba"
    assert out["callbacks"] == {
        "speed_monitor": {"window_size": 10},
        "rocm_smi_monitor": {"at_batches": [1, 2]},
    }


# ---------------------------------------------------------------- coupling rules
def test_profile_turns_tensorboard_on_whatever_disable_tensorboard_says():
    out = translate({"profile": True, "disable_tensorboard": True})
    assert "tensorboard" in out["loggers"]
    assert out["profiler"]["schedule"] == {
        "step_window": {"profile_step_start": 10, "profile_step_end": 12, "profile_ranks": [0]}
    }
    assert "torch_prof_folder" not in out["profiler"]  # use_pytorch_profiler is off
    assert "tensorboard" not in translate({"disable_tensorboard": True})["loggers"]


def test_mlflow_logs_on_the_last_rank():
    mlflow = translate({"disable_mlflow": False})["loggers"]["mlflow"]
    assert mlflow["logging_rank"] == "last" and mlflow["rank_zero_only"] is True


def test_mlflow_performance_metrics_turn_the_speed_monitor_on():
    out = translate({"disable_mlflow": False, "mlflow_upload_performance_metrics": True})
    assert out["loggers"]["mlflow"]["upload_performance_metrics"] is True
    assert out["callbacks"] == {"speed_monitor": {"window_size": 10}}


@pytest.mark.parametrize(
    ("keys", "rocm"),
    [
        ({"log_throughput": True}, {"at_batches": [1, 2]}),
        ({"log_throughput": True, "use_rocm_mem_info_iters": [3]}, {"at_batches": [3]}),
        ({"log_throughput": True, "use_rocm_mem_info": True, "log_interval": 5},
         {"log_interval": "5ba"}),
        ({"log_throughput": True, "use_rocm_mem_info_iters": []}, None),
    ],
    ids=["default-iters", "own-iters", "every-log-step", "no-iters"],
)  # fmt: skip
def test_use_rocm_mem_info_against_use_rocm_mem_info_iters(keys, rocm):
    assert translate(keys)["callbacks"].get("rocm_smi_monitor") == rocm


def test_rocm_keys_without_log_throughput_have_no_effect_and_say_so():
    with pytest.warns(ObsbusWarning) as caught:
        out = from_primus({"use_rocm_mem_info": True})
    assert "rocm_smi_monitor" not in out["callbacks"]
    assert len(caught) == 1
    assert "use_rocm_mem_info (no effect without log_throughput: true" in str(caught[0].message)


@pytest.mark.parametrize(
    ("keys", "levels"),
    [
        ({}, {"file_sink_level": "DEBUG", "stderr_sink_level": "INFO"}),
        ({"file_sink_level": "INFO", "stderr_sink_level": "warning"},
         {"file_sink_level": "INFO", "stderr_sink_level": "WARNING"}),
        ({"sink_level": "ERROR", "file_sink_level": "DEBUG", "stderr_sink_level": "INFO"},
         {"sink_level": "ERROR", "file_sink_level": "ERROR", "stderr_sink_level": "ERROR"}),
    ],
    ids=["defaults", "each-level", "sink-level-wins"],
)  # fmt: skip
def test_sink_level_overrides_file_and_stderr_levels(keys, levels):
    assert translate(keys)["logging"] == levels


def test_tensorboard_switches_turn_their_monitors_on():
    out = translate({"disable_tensorboard": False, "log_learning_rate_to_tensorboard": False,
                     "log_timers_to_tensorboard": True, "log_memory_to_tensorboard": True})  # fmt: skip
    assert out["callbacks"] == {"memory_monitor": {}, "speed_monitor": {"window_size": 10}}
    assert out["loggers"]["tensorboard"]["log_learning_rate"] is False


# ---------------------------------------------------------------- TorchTitan
TITAN = {
    "framework": "torchtitan",
    "metrics": {"log_freq": 10, "enable_tensorboard": True, "save_tb_folder": "tb",
                "enable_wandb": True, "save_for_all_ranks": False},
    "profiling": {"enable_profiling": True, "profile_freq": 10,
                  "save_traces_folder": "profile_traces", "enable_memory_snapshot": True,
                  "save_memory_snapshot_folder": "memory_snapshot"},
}  # fmt: skip
TITAN_EXPECTED = {
    "log_interval": "10ba",
    "callbacks": {
        "memory_snapshot": {"skip_batches": 0, "interval": "10ba", "folder": "memory_snapshot"},
        "oom_observer": {"folder": "memory_snapshot"},
        "speed_monitor": {},
        "memory_monitor": {},
    },
    "loggers": {
        "loguru": {},
        "tensorboard": {"log_dir": "tb", "rank_zero_only": True},
        "wandb": {"rank_zero_only": True},
    },
    "profiler": {
        "schedule": {"cyclic": {"skip_first": 0, "wait": 6, "warmup": 3, "active": 1,
                                "repeat": 0}},
        "trace_handlers": {"json_trace_handler": {}},
        "torch_prof_folder": "profile_traces",
    },
}  # fmt: skip


def test_torchtitan_metrics_and_profiling_sections():
    assert translate(TITAN) == TITAN_EXPECTED


def test_torchtitan_dotted_keys_and_its_defaults():
    out = translate({"metrics.enable_tensorboard": True, "metrics.save_for_all_ranks": True,
                     "profiling.enable_profiling": True, "profiling.profile_freq": 5})  # fmt: skip
    assert out["log_interval"] == "10ba"
    assert out["loggers"]["tensorboard"] == {"log_dir": "tb", "rank_zero_only": False}
    assert out["profiler"]["schedule"]["cyclic"]["wait"] == 1
    assert out["profiler"]["torch_prof_folder"] == "profile_traces"


def test_torchtitan_log_freq_and_a_different_log_interval_is_an_error():
    with pytest.raises(ConfigError, match=r"log_interval: 5 is not metrics.log_freq \(10\)"):
        from_primus({"metrics": {"log_freq": 10}, "log_interval": 5})


# ---------------------------------------------------------------- what is not translated
def test_one_warning_lists_every_untranslated_key():
    cfg = {"modules": {"pre_trainer": {"overrides": {
        "enable_one_logger": True, "one_logger_project": "megatron-lm", "log_straggler": True,
        "timing_log_level": 2, "timing_log_option": "all", "mlflow_upload_tracelens_report": True,
        "logging_level": 20, "lr": 3e-4, "torch_profiler_with_stack": False,
    }}, "post_trainer": {"overrides": {}}}}  # fmt: skip
    with pytest.warns(ObsbusWarning) as caught:
        from_primus(cfg)
    assert len(caught) == 1
    message = str(caught[0].message)
    base = "modules.pre_trainer.overrides."
    for key in (
        "enable_one_logger",
        "one_logger_project",
        "log_straggler",
        "timing_log_level",
        "timing_log_option",
        "mlflow_upload_tracelens_report",
        "logging_level",
    ):
        assert base + key in message, key
    assert f"{base}lr (unknown key)" in message
    assert f"{base}torch_profiler_with_stack (no effect with profile: false" in message
    assert "modules.post_trainer (only pre_trainer is translated)" in message
    assert "did not translate 10 Primus key(s)" in message


def test_default_valued_switches_that_do_nothing_are_not_reported():
    translate({"profile": False, "profile_step_start": 10, "use_rocm_mem_info": False})


# ---------------------------------------------------------------- bad values, credentials
@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("disable_tensorboard", "no", "true or false"),
        ("log_throughput", 1, "true or false"),
        ("log_interval", -10, "an integer >= 1"),
        ("tensorboard_log_interval", 0, "an integer >= 1"),
        ("profile_ranks", [0, -1], "a list of integers >= 0"),
        ("use_rocm_mem_info_iters", "1,2", "a list of integers >= 1"),
        ("stderr_sink_level", "LOUD", "a log level"),
        ("wandb_project", 7, "a non-empty string or null"),
    ],
)
def test_bad_value_is_one_error_naming_key_and_value(key, value, accepted):
    cfg = {"disable_tensorboard": False, "disable_wandb": False, "profile": True, key: value}
    with pytest.raises(ConfigError) as info:
        from_primus(cfg)
    [(path, message)] = info.value.problems
    assert path == key
    assert message.startswith(f"{value!r} is not {accepted}")
    assert str(info.value).startswith("1 problem in the Primus config:")


def test_every_bad_value_is_in_the_one_error_with_its_path():
    cfg = {"modules": {"pre_trainer": {"overrides": {"log_interval": -1, "profile": "yes"}}}}
    with pytest.raises(ConfigError) as info:
        from_primus(cfg)
    paths = [path for path, _ in info.value.problems]
    assert paths == ["modules.pre_trainer.overrides.log_interval",
                     "modules.pre_trainer.overrides.profile"]  # fmt: skip


def test_an_empty_profile_window_is_an_error():
    with pytest.raises(ConfigError, match=r"profile_step_end: 10 is not greater than "):
        from_primus({"profile": True, "profile_step_start": 10, "profile_step_end": 10})


SECRET = "Zq8xK2mP9vL4tR7nB3wY6cJ1hF5dG0sQaE"


@pytest.mark.parametrize(
    ("cfg", "path"),
    [
        ({"disable_wandb": False, "wandb_api_key": SECRET}, "wandb_api_key"),
        ({"modules": {"pre_trainer": {"overrides": {"databricks_token": SECRET}}}},
         "modules.pre_trainer.overrides.databricks_token"),
        ({"wandb_project": f"sk-proj-{SECRET}"}, "wandb_project"),
        ({"tensorboard_dir": f"s3://AKIA:{SECRET}@bucket/tb"}, "tensorboard_dir"),
    ],
    ids=["wandb-key", "nested-token", "token-value", "uri-password"],
)  # fmt: skip
def test_a_credential_is_refused_without_quoting_it(cfg, path):
    with pytest.raises(ConfigError, match="environment") as info:
        from_primus(cfg)
    assert [p for p, _ in info.value.problems] == [path]
    assert SECRET not in str(info.value)


def test_not_a_mapping():
    with pytest.raises(TypeError, match="from_primus takes a Primus config as a mapping"):
        from_primus(["log_interval", 10])  # type: ignore[arg-type]


def test_primus_env_placeholders_are_filled_and_typed(monkeypatch):
    monkeypatch.setenv("PRIMUS_TEAM", "mi300")
    monkeypatch.delenv("PRIMUS_USER", raising=False)
    monkeypatch.setenv("PROFILE", "true")
    cfg = {
        "work_group": "${PRIMUS_TEAM:amd}", "user_name": "${PRIMUS_USER:root}",
        "exp_name": "${PRIMUS_EXP_NAME:llama}-pretrain",
        "modules": {"sft_trainer": {"overrides": {"profile": "${PROFILE:false}",
                                                  "log_interval": "${LOG_EVERY:5}"}}},
    }  # fmt: skip
    out = translate(cfg)
    assert out["run_folder"] == "./output/mi300/root/llama-pretrain"
    assert out["log_interval"] == "5ba"
    assert "profiler" in out and "tensorboard" in out["loggers"]
    assert out["logging"]["module"] == "sft_trainer"


def test_a_placeholder_without_default_or_variable_is_an_error(monkeypatch):
    monkeypatch.delenv("NOPE_NOT_SET", raising=False)
    with pytest.raises(ConfigError, match=r"exp_name: \$\{NOPE_NOT_SET\} is not set"):
        from_primus({"exp_name": "${NOPE_NOT_SET}"})
