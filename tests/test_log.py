"""obsbus.log: rank-aware loguru files, stderr, the intercept handler, reset."""

from __future__ import annotations

import inspect
import io
import json
import logging
import re
import subprocess
import sys

import pytest
from loguru import logger

from obsbus import RunFolder
from obsbus.log import get_logger, reset_logging, setup_logging
from tests._dist_utils import run_two_ranks

LEVEL_FILES = ("debug.log", "info.log", "warning.log", "error.log")
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"


@pytest.fixture(autouse=True)
def _clean_logging(monkeypatch):
    for name in ("OBSBUS_LOG_LEVEL", "OBSBUS_LOG_TIMESTAMP", "OBSBUS_LOG_COLOR"):
        monkeypatch.delenv(name, raising=False)
    yield
    reset_logging()


def rank_dir(root, rank=0, module="train"):
    return RunFolder(root).logs_dir(module, rank)


def read(root, name, rank=0, module="train"):
    return (rank_dir(root, rank, module) / name).read_text()


def lines_with(text, needle):
    return [line for line in text.splitlines() if needle in line]


# ---------------------------------------------------------------------------
# Files: one folder per rank, one file per level, each holding its level and above
# ---------------------------------------------------------------------------


def _log_on_rank(rank, root):
    log = setup_logging(root, stderr=False)  # rank and world size from torch.distributed
    for level in ("debug", "info", "warning", "error"):
        getattr(log, level)(f"{level} line from rank {rank}")
    logger.info(f"plain loguru line from rank {rank}")  # unbound: still shows the rank
    reset_logging()
    return sorted(p.name for p in rank_dir(root, rank).iterdir())


@pytest.mark.dist
def test_two_ranks_write_separate_files_per_rank_and_level(tmp_path):
    root = tmp_path / "run"
    listed = run_two_ranks(_log_on_rank, tmp_path / "dist", str(root))
    assert listed == [sorted(LEVEL_FILES)] * 2
    expected = {
        "debug.log": ["debug", "info", "plain loguru", "warning", "error"],
        "info.log": ["info", "plain loguru", "warning", "error"],
        "warning.log": ["warning", "error"],
        "error.log": ["error"],
    }
    for rank in (0, 1):
        other = 1 - rank
        for name, kinds in expected.items():
            text = read(root, name, rank)
            lines = [line for line in text.splitlines() if "from rank" in line]
            assert sorted(
                re.sub(r".* - (.*) line from rank \d$", r"\1", line) for line in lines
            ) == sorted(kinds)
            assert all(f"from rank {rank}" in line for line in lines)
            assert f"from rank {other}" not in text
            for line in text.splitlines():
                assert re.match(
                    rf"^{TIME} \| \w+ +\| [\d.]+ \| train \| rank-{rank}/2 \| ", line
                ), line


@pytest.mark.parametrize(
    ("file_level", "files", "lowest"),
    [
        ("TRACE", LEVEL_FILES, {"debug.log": "TRACE"}),
        ("DEBUG", LEVEL_FILES, {"debug.log": "DEBUG"}),
        ("INFO", LEVEL_FILES[1:], {"info.log": "INFO"}),
        ("SUCCESS", LEVEL_FILES[1:], {"info.log": "SUCCESS"}),
        ("warn", LEVEL_FILES[2:], {"warning.log": "WARNING"}),
        ("ERROR", LEVEL_FILES[3:], {"error.log": "ERROR"}),
        ("CRITICAL", LEVEL_FILES[3:], {"error.log": "CRITICAL"}),
    ],
    ids=["trace", "debug", "info", "success", "warn", "error", "critical"],
)
def test_files_below_the_file_level_are_not_made(tmp_path, file_level, files, lowest):
    log = setup_logging(tmp_path, file_sink_level=file_level, stderr=False)
    for level in ("TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"):
        log.log(level, f"message at {level}")
    reset_logging()
    assert sorted(p.name for p in rank_dir(tmp_path).iterdir()) == sorted(files)
    order = ["TRACE", "DEBUG", "INFO", "SUCCESS", "WARNING", "ERROR", "CRITICAL"]
    ((first_file, first_level),) = lowest.items()
    text = read(tmp_path, first_file)
    seen = re.findall(r"message at (\w+)", text)
    assert seen == order[order.index(first_level) :]


def test_every_file_line_carries_context_and_origin(tmp_path):
    log = setup_logging(
        tmp_path, module="pretrain", rank=1, world_size=4, node_ip="10.1.2.3", stderr=False
    )
    line_no = inspect.currentframe().f_lineno + 1
    log.info("hello")
    reset_logging()
    (line,) = lines_with(read(tmp_path, "info.log", rank=1, module="pretrain"), "hello")
    assert re.fullmatch(
        rf"{TIME} \| INFO     \| 10\.1\.2\.3 \| pretrain \| rank-1/4 \| "
        rf"tests\.test_log:test_every_file_line_carries_context_and_origin:{line_no} - hello",
        line,
    )


def test_records_are_bound_with_the_primus_context(tmp_path):
    records = []
    sink = logger.add(lambda m: records.append(m.record["extra"]), level="INFO")
    try:
        log = setup_logging(
            tmp_path / "exp-7",
            rank=1,
            world_size=2,
            team="nlp",
            user="ada",
            stderr=False,
            node_ip="10.0.0.9",
        )
        log.info("bound")
        assert get_logger() is log
        logger.info("plain")  # the global logger carries nothing: user sinks see it bare
    finally:
        logger.remove(sink)
    assert records[0] == {
        "team": "nlp",
        "user": "ada",
        "exp": "exp-7",
        "module_name": "train",
        "node_ip": "10.0.0.9",
        "rank": 1,
        "world_size": 2,
    }
    # obsbus's own sinks fill in this process's context for records that lack it
    reset_logging()
    assert "rank-1/2" in lines_with(read(tmp_path / "exp-7", "info.log", rank=1), "plain")[0]


def test_node_ip_never_fails(tmp_path, monkeypatch):
    import obsbus.log

    def no_network(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(obsbus.log.socket, "socket", no_network)
    setup_logging(tmp_path, stderr=False).info("offline")
    reset_logging()
    assert "| 127.0.0.1 |" in lines_with(read(tmp_path, "info.log"), "offline")[0]


def test_head_writes_master_and_workers_never_do(tmp_path):
    setup_logging(tmp_path / "worker", stderr=False).info("from a worker")
    setup_logging(tmp_path / "head", is_head=True, stderr=False).info("from the launcher")
    reset_logging()
    assert not (tmp_path / "worker" / "logs" / "master").exists()
    assert "from a worker" in read(tmp_path / "worker", "info.log")
    head_logs = tmp_path / "head" / "logs"
    assert [p.name for p in head_logs.iterdir()] == ["master"]
    assert "from the launcher" in (head_logs / "master" / "info.log").read_text()


def test_files_rotate_by_size_and_keep_retention_files(tmp_path):
    log = setup_logging(
        tmp_path, rotation="2 KB", retention=2, file_sink_level="ERROR", stderr=False
    )
    for i in range(200):
        log.error("line {} {}", i, "x" * 40)
    reset_logging()
    names = sorted(p.name for p in rank_dir(tmp_path).iterdir())
    assert "error.log" in names and len(names) == 3, names  # the live file + 2 rotated
    assert "line 199 " in read(tmp_path, "error.log")


def test_tracebacks_hide_local_values(tmp_path):
    log = setup_logging(tmp_path, stderr=False)
    config = {"api_token": "s3cr3t-value"}
    try:
        config["missing"]
    except KeyError:
        log.exception("lookup failed")
    reset_logging()
    text = read(tmp_path, "error.log")
    assert "lookup failed" in text and "KeyError: 'missing'" in text
    assert "s3cr3t-value" not in text


def test_enqueue_loses_nothing_on_reset(tmp_path):
    log = setup_logging(tmp_path, enqueue=True, stderr=False)
    for i in range(2000):
        log.info("queued {}", i)
    reset_logging()
    found = re.findall(r"queued (\d+)", read(tmp_path, "info.log"))
    assert found == [str(i) for i in range(2000)]


# ---------------------------------------------------------------------------
# The intercept handler: the standard logging module into loguru
# ---------------------------------------------------------------------------


def test_stdlib_warning_lands_in_the_warning_file_with_its_origin(tmp_path):
    setup_logging(tmp_path, stderr=False)
    line_no = inspect.currentframe().f_lineno + 1
    logging.getLogger("megatron").warning("grad norm %.1f", 3.0)
    logging.getLogger("megatron.core").debug("bucket %d ready", 7)
    reset_logging()
    (line,) = lines_with(read(tmp_path, "warning.log"), "grad norm 3.0")
    assert re.search(
        rf"\| WARNING  \| .* \| rank-0/1 \| megatron:{inspect.currentframe().f_code.co_name}:{line_no} - grad norm 3\.0$",
        line,
    ), line
    assert "grad norm" not in read(tmp_path, "error.log")
    assert lines_with(read(tmp_path, "info.log"), "grad norm 3.0")
    assert "megatron.core:" in lines_with(read(tmp_path, "debug.log"), "bucket 7 ready")[0]
    assert "bucket 7" not in read(tmp_path, "info.log")


def test_stdlib_exception_and_unknown_levels(tmp_path):
    setup_logging(tmp_path, stderr=False)
    try:
        _ = 1 / 0
    except ZeroDivisionError:
        logging.getLogger("megatron.training").exception("collective failed")
    # Not "transformers": once imported (the HF bridge tests), its logger does not propagate.
    logging.getLogger("mylib.data").log(15, "a level only logging knows")
    reset_logging()
    error = read(tmp_path, "error.log")
    assert "megatron.training:" in error and "collective failed" in error
    assert "Traceback" in error and "ZeroDivisionError: division by zero" in error
    assert "a level only logging knows" in read(tmp_path, "debug.log")
    assert "a level only logging knows" not in read(tmp_path, "info.log")


def test_reset_restores_the_root_handlers_and_level(tmp_path):
    root = logging.getLogger()
    own = logging.StreamHandler(io.StringIO())
    root.addHandler(own)
    before_handlers, before_level = list(root.handlers), root.level
    try:
        setup_logging(tmp_path, stderr=False, stderr_sink_level="WARNING", file_sink_level="INFO")
        assert len(root.handlers) == 1 and root.handlers[0] not in before_handlers
        assert root.level == logging.INFO
        logging.getLogger("x").info("to loguru only")
        assert own.stream.getvalue() == ""
        setup_logging(tmp_path, stderr=False, intercept=False)  # a second call uninstalls
        assert root.handlers == before_handlers
        setup_logging(tmp_path, stderr=False)
        reset_logging()
        assert root.handlers == before_handlers and root.level == before_level
        reset_logging()  # twice is fine
        assert root.handlers == before_handlers
        logging.getLogger("x").warning("back to the old handler")
        assert "back to the old handler" in own.stream.getvalue()
    finally:
        root.removeHandler(own)


# ---------------------------------------------------------------------------
# stderr: levels, environment variables, tqdm
# ---------------------------------------------------------------------------


def test_stderr_levels_and_precedence(tmp_path, monkeypatch, capsys):
    setup_logging(tmp_path)
    get_logger().debug("d1")
    get_logger().info("i1")
    assert re.findall(r" - (\w\d)$", capsys.readouterr().err, flags=re.M) == ["i1"]

    monkeypatch.setenv("OBSBUS_LOG_LEVEL", "WARN")  # wins over stderr_sink_level
    log = setup_logging(tmp_path, stderr_sink_level="DEBUG")
    log.info("i2")
    log.warning("w2")
    assert re.findall(r" - (\w\d)$", capsys.readouterr().err, flags=re.M) == ["w2"]

    monkeypatch.setenv("OBSBUS_LOG_LEVEL", "debug")  # sink_level wins over the environment
    log = setup_logging(tmp_path, sink_level="ERROR")
    log.warning("w3")
    log.error("e3")
    assert re.findall(r" - (\w\d)$", capsys.readouterr().err, flags=re.M) == ["e3"]
    reset_logging()
    assert sorted(p.name for p in rank_dir(tmp_path).iterdir()) == sorted(LEVEL_FILES)
    assert "w3" not in read(tmp_path, "error.log")  # files follow sink_level too


@pytest.mark.parametrize(
    ("value", "starts_with_time"),
    [(None, True), ("1", True), ("0", False)],
    ids=["default", "on", "off"],
)
def test_timestamp_env(tmp_path, monkeypatch, capsys, value, starts_with_time):
    if value is not None:
        monkeypatch.setenv("OBSBUS_LOG_TIMESTAMP", value)
    setup_logging(tmp_path).info("stamped?")
    reset_logging()
    (line,) = lines_with(capsys.readouterr().err, "stamped?")
    assert bool(re.match(TIME, line)) is starts_with_time
    assert line.startswith(("INFO", "2")) and "| rank-0/1 |" in line
    assert re.match(TIME, lines_with(read(tmp_path, "info.log"), "stamped?")[0])  # files always


@pytest.mark.parametrize(
    ("value", "colored"),
    [(None, False), ("1", True), ("0", False)],
    ids=["default-not-a-tty", "on", "off"],
)
def test_color_env(tmp_path, monkeypatch, capsys, value, colored):
    if value is not None:
        monkeypatch.setenv("OBSBUS_LOG_COLOR", value)
    setup_logging(tmp_path).info("colored?")
    err = capsys.readouterr().err
    assert "colored?" in err
    assert ("\x1b[" in err) is colored
    reset_logging()
    assert "\x1b[" not in read(tmp_path, "info.log")


def test_stderr_is_found_when_writing(tmp_path, monkeypatch):
    log = setup_logging(tmp_path)
    later = io.StringIO()
    monkeypatch.setattr(sys, "stderr", later)
    log.info("to the current stderr")
    assert "to the current stderr" in later.getvalue()


def test_log_line_does_not_tear_a_tqdm_bar(tmp_path, monkeypatch):
    import tqdm
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("OBSBUS_LOG_TIMESTAMP", "0")
    log = setup_logging(tmp_path)
    bar = tqdm.tqdm(total=10, file=sys.stderr, mininterval=0, desc="train")
    bar.update(3)
    log.info("between updates")
    bar.update(1)
    bar.close()
    log.info("after the bar")
    # A terminal shows the text after the last '\r' of each line: the log line
    # must be a whole line of its own, not glued to the end of the bar.
    shown = [part.rsplit("\r", 1)[-1] for part in stream.getvalue().split("\n")]
    (line,) = [s for s in shown if "between updates" in s]
    assert line.startswith("INFO     | rank-0/1 | "), repr(line)
    assert "train:" not in line
    assert re.search(r"between updates\n\rtrain:  30%", stream.getvalue())  # bar drawn again
    (after,) = [s for s in shown if "after the bar" in s]
    assert after.startswith("INFO     | rank-0/1 | ")


# ---------------------------------------------------------------------------
# Calling it twice, next to the user's own loguru configuration
# ---------------------------------------------------------------------------


def test_second_call_replaces_only_obsbus_sinks(tmp_path, capsys):
    mine = []
    sink = logger.add(lambda m: mine.append(m.record["message"]), level="INFO")
    try:
        setup_logging(tmp_path / "a").info("first")
        setup_logging(tmp_path / "b").info("second")
        assert mine == ["first", "second"]
        reset_logging()
        logger.info("third")
        assert mine == ["first", "second", "third"]  # the user's sink stays throughout
    finally:
        logger.remove(sink)
    shown = re.findall(r" - (\w+)$", capsys.readouterr().err, flags=re.M)
    assert shown == ["first", "second", "third"]  # no duplicate stderr sink
    assert re.findall(r" - (\w+)$", read(tmp_path / "a", "info.log"), flags=re.M) == ["first"]
    assert re.findall(r" - (\w+)$", read(tmp_path / "b", "info.log"), flags=re.M) == ["second"]


def test_reset_then_setup_again_has_one_stderr_sink(tmp_path, capsys):
    setup_logging(tmp_path)
    reset_logging()
    logger.info("default sink back")
    assert capsys.readouterr().err.count("default sink back") == 1
    setup_logging(tmp_path, resume=True).info("once")  # the files are the reset setup's
    setup_logging(tmp_path).info("twice")
    assert re.findall(r" - (\w+)$", capsys.readouterr().err, flags=re.M) == ["once", "twice"]


def test_user_removing_all_sinks_is_tolerated(tmp_path):
    setup_logging(tmp_path, stderr=False)
    logger.remove()  # the user's own reconfiguration drops obsbus's sinks too
    reset_logging()  # nothing left to remove: no error
    setup_logging(tmp_path, stderr=False, resume=True).info("works again")
    reset_logging()
    assert "works again" in read(tmp_path, "info.log")


def test_failed_second_call_keeps_the_first(tmp_path):
    log = setup_logging(tmp_path / "a", stderr=False)
    with pytest.raises(ValueError, match=r"rotation='every blue moon'.*Accepted: rotation like"):
        setup_logging(tmp_path / "b", rotation="every blue moon", stderr=False)
    log.info("still here")
    reset_logging()
    assert "still here" in read(tmp_path / "a", "info.log")


# ---------------------------------------------------------------------------
# Bad input: a clear error when called, before anything changes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "env", "error", "match"),
    [
        (
            {"file_sink_level": "VERBOSE"},
            {},
            ValueError,
            r"Unknown file_sink_level 'VERBOSE'\. Accepted: TRACE, DEBUG, INFO, SUCCESS, WARNING \(or WARN\), ERROR, CRITICAL",
        ),
        ({"stderr_sink_level": "loud"}, {}, ValueError, r"Unknown stderr_sink_level 'loud'"),
        ({"sink_level": "VERBOSE"}, {}, ValueError, r"Unknown sink_level 'VERBOSE'"),
        ({"file_sink_level": 10}, {}, TypeError, r"file_sink_level must be a level name, got 10"),
        (
            {},
            {"OBSBUS_LOG_TIMESTAMP": "yes"},
            ValueError,
            r"OBSBUS_LOG_TIMESTAMP='yes' is not accepted: use 1 \(on\) or 0 \(off\)",
        ),
        ({}, {"OBSBUS_LOG_COLOR": "true"}, ValueError, r"OBSBUS_LOG_COLOR='true' is not accepted"),
        (
            {},
            {"OBSBUS_LOG_LEVEL": "VERBOSE"},
            ValueError,
            r"OBSBUS_LOG_LEVEL='VERBOSE' is not accepted: use DEBUG, INFO, WARN or ERROR",
        ),
        ({"module": "a/b"}, {}, ValueError, r"module 'a/b' can't be a folder name.*no '/'"),
        ({"module": ""}, {}, ValueError, r"module must be a non-empty str"),
        ({"rank": 2, "world_size": 2}, {}, ValueError, r"rank 2 is not below world_size 2"),
        ({"rank": -1}, {}, ValueError, r"rank must be a whole number >= 0, got -1"),
        ({"rank": "0"}, {}, TypeError, r"rank must be a whole number >= 0, got '0'\. To fix, pass the int 0"),
        ({"world_size": 0}, {}, ValueError, r"world_size must be a whole number >= 1, got 0"),
        ({"enqueue": "yes"}, {}, TypeError, r"enqueue must be True or False, got 'yes'"),
        ({"team": 3}, {}, TypeError, r"team must be a str or None, got 3"),
    ],
    ids=[
        "level-name",
        "stderr-level",
        "sink-level",
        "level-type",
        "env-timestamp",
        "env-color",
        "env-level",
        "module-slash",
        "module-empty",
        "rank-too-big",
        "rank-negative",
        "rank-type",
        "world-size",
        "enqueue-type",
        "team-type",
    ],
)
def test_bad_input_is_a_clear_error_before_anything_changes(
    tmp_path, monkeypatch, kwargs, env, error, match
):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    handlers = list(logging.getLogger().handlers)
    with pytest.raises(error, match=match):
        setup_logging(tmp_path / "run", **kwargs)
    assert not (tmp_path / "run" / "logs").exists()
    assert logging.getLogger().handlers == handlers


def test_bad_run_folder_type():
    with pytest.raises(TypeError, match=r"RunFolder root must be a non-empty path, got 3"):
        setup_logging(3)


def test_import_does_not_load_loguru_or_tqdm():
    code = (
        "import json, sys\nimport obsbus.log, obsbus.loggers.loguru_logger\n"
        "print(json.dumps(sorted(m for m in ('loguru', 'tqdm', 'torch') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
