"""How a benchmark run ends: the line for each early end, and the flags the server is left serving."""
from pathlib import Path

from llmhost.bench import arms, run_end
from llmhost.bench.runner import UserStopped


def test_a_run_says_which_flags_it_leaves_the_server_on_and_how_to_get_the_settings_back():
    page16 = arms.REGISTRY["page-16"]
    assert run_end.left_serving(page16) == ("the server is left running with arm page-16's flags (--page-size 16): "
                                            "./serve.sh restart serves your settings again")
    assert run_end.left_serving(arms.REGISTRY["baseline"]) == "the server is left running with your settings " \
                                                              "(arm baseline)"
    assert run_end.left_serving(None) is None  # a sitting that started no server (a resume with nothing left)


def test_each_early_end_has_its_line_and_exit_code_and_a_bug_keeps_its_traceback(tmp_path):
    again = "./run_bench.py --resume R"
    line, code = run_end.ended_by(KeyboardInterrupt(), tmp_path, again)
    assert code == 130 and line == "[bench] interrupted — continue with ./run_bench.py --resume R"
    line, code = run_end.ended_by(UserStopped("2026-12-02T12:00:00Z"), tmp_path, again)
    assert code == 1 and "stopped with ./serve.sh stop at 2026-12-02T12:00:00Z" in line and again in line
    assert run_end.ended_by(ValueError("a bug"), tmp_path, again) is None
    full = OSError(28, "No space left on device")
    full.filename = str(Path(tmp_path) / "points.jsonl")
    line, code = run_end.ended_by(full, tmp_path, again)
    assert code == 1 and line.startswith("[bench] error: ") and line.endswith(f"then {again}")
