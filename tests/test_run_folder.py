from __future__ import annotations

from pathlib import Path

import pytest

from obsbus import RunFolder, State


def test_default_is_workspace_group_user_run(tmp_path, monkeypatch):
    monkeypatch.setenv("USER", "ada")
    state = State(run_name="exp-7")
    root = state.run_folder.root
    assert root == Path.cwd() / "runs" / "default" / root.parts[-2] / "exp-7"
    assert not root.exists()  # made on first use, not at construction


def test_parts_and_layout(tmp_path):
    folder = RunFolder.from_parts(workspace=tmp_path, work_group="nlp", user_name="ada",
                                  exp_name="lm")
    assert folder.root == tmp_path / "nlp" / "ada" / "lm"
    assert folder.logs_dir("train", 2) == folder.root / "logs" / "train" / "rank-2"
    assert folder.master_logs_dir == folder.root / "logs" / "master"
    assert folder.tensorboard_dir.name == "tensorboard"
    assert folder.traces_dir.name == "traces"
    assert folder.checkpoints_dir.name == "checkpoints"
    assert folder.config_dir.name == "config"
    assert folder.resolve("a/b.txt") == folder.root / "a" / "b.txt"
    assert folder.resolve("/abs/x.txt") == Path("/abs/x.txt")


def test_environment_overrides(tmp_path, monkeypatch):
    monkeypatch.setenv("OBSBUS_WORKSPACE", str(tmp_path / "ws"))
    assert State(run_name="r").run_folder.root.parent.parent.parent == tmp_path / "ws"
    monkeypatch.setenv("OBSBUS_RUN_FOLDER", str(tmp_path / "here"))
    assert State(run_name="r").run_folder.root == tmp_path / "here"


def test_one_path_overrides_and_relative_paths_are_absolute(tmp_path):
    assert State(run_name="r", run_folder="out").run_folder.root == tmp_path / "out"
    folder = RunFolder(tmp_path / "x")
    assert State(run_name="r", run_folder=folder).run_folder is folder


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"exp_name": "a/b"}, r"exp_name 'a/b' can't be a folder name"),
        ({"exp_name": ".."}, r"exp_name '\.\.' can't be a folder name"),
        ({"exp_name": "x", "work_group": ""}, r"work_group must be a non-empty str, got ''"),
        ({"exp_name": "x", "user_name": "a b"}, r"user_name 'a b' can't be a folder name"),
    ],
    ids=["slash", "dotdot", "empty-group", "space"],
)
def test_bad_parts_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RunFolder.from_parts(**kwargs)


def test_a_file_where_the_folder_should_be(tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        RunFolder(tmp_path / "taken")


def test_bad_types():
    with pytest.raises(TypeError, match="run_folder must be a path or a RunFolder, got 3"):
        State(run_name="r", run_folder=3)
    with pytest.raises(TypeError, match="non-empty path"):
        RunFolder("")


@pytest.mark.parametrize(("kwargs", "error"), [({"work_group": ""}, ValueError),
                                               ({"user_name": 3}, TypeError)],
                         ids=["empty", "int"])
def test_work_group_and_user_name_must_be_names(tmp_path, kwargs, error):
    name = next(iter(kwargs))
    with pytest.raises(error, match=f"RunFolder {name} must be a non-empty str"):
        RunFolder(tmp_path, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"work_group": "a/b"}, r"RunFolder work_group 'a/b' can't be a folder name"),
        ({"work_group": ".."}, r"RunFolder work_group '\.\.' can't be a folder name"),
        ({"user_name": "a b"}, r"RunFolder user_name 'a b' can't be a folder name"),
    ],
    ids=["slash", "dotdot", "space"],
)
def test_the_constructor_refuses_what_from_parts_refuses(tmp_path, kwargs, match):
    """RunFolder(work_group='a/b') was accepted though from_parts rejects it."""
    with pytest.raises(ValueError, match=match):
        RunFolder(tmp_path, **kwargs)
    with pytest.raises(ValueError, match=match):
        RunFolder.from_parts(workspace=tmp_path, exp_name="x", **kwargs)


def test_a_file_for_the_root_is_a_value_error_too(tmp_path):
    (tmp_path / "taken").write_text("x")
    with pytest.raises(ValueError, match=f"RunFolder root {str(tmp_path / 'taken')!r} exists"):
        RunFolder(tmp_path / "taken")
