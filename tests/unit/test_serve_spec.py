"""The launch command: the article's features on, adaptive defaults, SERVER_EXTRA_ARGS rule, key never in argv."""
from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from llmhost import config
from llmhost.settings import REPO_ROOT
from llmhost.serve import serverlog, spec as launch_spec
from llmhost.serve.spec import SpecError, build_spec


@pytest.fixture
def cfg(tmp_path) -> config.Config:
    return dataclasses.replace(
        config.load({}), work_dir=str(tmp_path / "work"), model_dir=str(tmp_path / "model"),
        sglang_python="/opt/venv/bin/python", flashinfer_workspace_base=str(tmp_path / "fi"),
        bytecode_cache=str(tmp_path / "pyc"),
    )


def flag(argv, name):
    """Values after `name` in argv (None when absent)."""
    argv = list(argv)
    if name not in argv:
        return None
    i = argv.index(name) + 1
    out = []
    while i < len(argv) and not argv[i].startswith("--"):
        out.append(argv[i])
        i += 1
    return out


def test_the_articles_features_are_all_on(cfg):
    argv = build_spec(cfg).argv
    # the default start: launch_server with its scheduler, detokenizer and four tokenizer processes waiting in
    # standbys (SCHEDULER_PRELOAD)
    assert argv[:5] == ("/opt/venv/bin/python", str(launch_spec.PRELOADED_LAUNCH), "--standby", "6",
                        "sglang.launch_server")
    assert flag(argv, "--attention-backend") == ["flashinfer"]
    assert flag(argv, "--enable-metrics") == [] and flag(argv, "--enable-cache-report") == []
    assert flag(argv, "--tool-call-parser") == ["qwen"] and flag(argv, "--reasoning-parser") == ["qwen3"]
    assert flag(argv, "--model-path") == [cfg.model_dir] and flag(argv, "--served-model-name") == ["qwen3-4b"]
    assert flag(argv, "--host") == ["127.0.0.1"] and flag(argv, "--port") == ["30000"]
    assert "--disable-radix-cache" not in argv  # prefix cache stays on


def test_scheduler_preload_runs_launch_server_through_the_fork_server_and_off_is_pythons_own_m(cfg):
    assert launch_spec.PRELOADED_LAUNCH.is_file()
    on = build_spec(dataclasses.replace(cfg, scheduler_preload="on"))
    off = build_spec(dataclasses.replace(cfg, scheduler_preload="off"))
    assert on.argv[1:3] == (str(launch_spec.PRELOADED_LAUNCH), "sglang.launch_server")
    assert off.argv[1:3] == ("-m", "sglang.launch_server") and off.argv[3:] == on.argv[3:]
    assert not any("SCHEDULER_PRELOAD" in note for note in off.notes + on.notes)


def test_standby_runs_launch_server_with_a_standby_per_process_sglang_starts(cfg):
    one = dataclasses.replace(cfg, scheduler_preload="standby", tokenizer_worker_num="1")
    argv = build_spec(one).argv
    assert argv[1:5] == (str(launch_spec.PRELOADED_LAUNCH), "--standby", "2", "sglang.launch_server")  # + detokenizer
    tp4 = build_spec(dataclasses.replace(one, tp_size=4)).argv
    dp2 = build_spec(dataclasses.replace(one, tp_size=2, dp_size=2)).argv
    assert tp4[2:4] == ("--standby", "5") and dp2[2:4] == ("--standby", "2")  # DP: its controller spawns the ranks
    # several tokenizer processes: uvicorn starts one worker each, after SGLang's own processes
    assert build_spec(dataclasses.replace(one, tokenizer_worker_num="auto")).argv[2:4] == ("--standby", "6")
    assert build_spec(dataclasses.replace(one, tokenizer_worker_num="8")).argv[2:4] == ("--standby", "10")
    assert build_spec(dataclasses.replace(one, tokenizer_worker_num="2")).argv[2:4] == ("--standby", "4")
    assert launch_spec.standby_count(one) == 2  # one tokenizer process: SGLang's own, no uvicorn worker


@pytest.mark.parametrize("change, named", [
    ({"server_extra_args": "--enable-memory-saver"}, "--enable-memory-saver"),
    ({"server_env": "SGLANG_NUMA_BIND_V2=1"}, "SGLANG_NUMA_BIND_V2"),
    ({"server_env": "SGLANG_NUMA_BIND_V2=true"}, "SGLANG_NUMA_BIND_V2"),
])
def test_what_needs_sglangs_own_spawn_is_launched_with_m_and_told(cfg, change, named):
    for preload in ("on", "standby"):
        spec = build_spec(dataclasses.replace(cfg, scheduler_preload=preload, **change))
        assert spec.argv[1:3] == ("-m", "sglang.launch_server")
        assert [note for note in spec.notes if f"SCHEDULER_PRELOAD={preload} but" in note and named in note]


def test_numa_binding_switched_off_keeps_the_preload(cfg):
    spec = build_spec(dataclasses.replace(cfg, scheduler_preload="on", server_env="SGLANG_NUMA_BIND_V2=0"))
    assert spec.argv[1] == str(launch_spec.PRELOADED_LAUNCH)


def test_every_host_of_several_runs_the_same_m_command(cfg):
    several = dataclasses.replace(cfg, scheduler_preload="on", tp_size=4, nnodes=2, dist_init_addr="10.0.0.1:25000")
    assert {build_spec(several, node_rank=rank).argv[1] for rank in (0, 1)} == {"-m"}


def test_auto_tokenizer_is_four_processes_batching_prompts_and_a_count_is_that_many_plain_processes(cfg):
    argv = build_spec(cfg).argv
    assert flag(argv, "--tokenizer-worker-num") == ["4"] and flag(argv, "--enable-dynamic-batch-tokenizer") == []
    eight = build_spec(dataclasses.replace(cfg, tokenizer_worker_num="8")).argv
    assert flag(eight, "--tokenizer-worker-num") == ["8"] and "--enable-dynamic-batch-tokenizer" not in eight
    both = build_spec(dataclasses.replace(cfg, tokenizer_worker_num="4",
                                          server_extra_args="--enable-dynamic-batch-tokenizer")).argv
    assert flag(both, "--tokenizer-worker-num") == ["4"] and both.count("--enable-dynamic-batch-tokenizer") == 1


def test_explicit_settings_reach_the_command(cfg):
    cfg = dataclasses.replace(cfg, tokenizer_worker_num="3", mem_fraction_static="0.8", chunked_prefill_size="4096",
                              load_format="dummy", port=30123)
    argv = build_spec(cfg).argv
    assert flag(argv, "--tokenizer-worker-num") == ["3"] and flag(argv, "--mem-fraction-static") == ["0.8"]
    assert flag(argv, "--chunked-prefill-size") == ["4096"] and flag(argv, "--load-format") == ["dummy"]
    assert flag(argv, "--port") == ["30123"]


def test_auto_leaves_sizing_to_sglang_on_an_empty_gpu_and_shrinks_it_on_a_busy_one(cfg):
    total = 143771.0  # H200 MiB
    assert flag(build_spec(cfg, (total - 500, total)).argv, "--mem-fraction-static") is None
    assert flag(build_spec(cfg, None).argv, "--mem-fraction-static") is None
    free = total - 40 * 1024  # 40 GiB held by someone else
    spec = build_spec(cfg, (free, total))
    fraction = float(flag(spec.argv, "--mem-fraction-static")[0])
    # SGLang keeps free x (1 - fraction) outside its pool: the same 9.7% of the GPU it keeps on an empty one
    assert abs(free * (1 - fraction) - 0.097 * total) < 0.001 * free
    assert "40.0 GiB" in spec.notes[0]
    nearly_full = build_spec(cfg, (2048.0, total))  # print-command still works (our own server may hold it)
    assert flag(nearly_full.argv, "--mem-fraction-static") is None and "start refuses" in nearly_full.notes[0]
    assert "MEM_FRACTION_STATIC" in launch_spec.gpu_room_problem((2048.0, total))
    assert launch_spec.gpu_room_problem((free, total)) is None and launch_spec.gpu_room_problem(None) is None


def test_a_bad_server_env_is_one_line_not_a_traceback(cfg):
    with pytest.raises(SpecError, match="SERVER_ENV cannot be split"):
        build_spec(dataclasses.replace(cfg, server_env="A='b"))


@pytest.mark.parametrize("key, value", [("TOKENIZER_WORKER_NUM", "0"), ("TOKENIZER_WORKER_NUM", "many"),
                                        ("MEM_FRACTION_STATIC", "1.5"), ("CHUNKED_PREFILL_SIZE", "big"),
                                        ("SERVER_ENV", "NOEQUALS"), ("SERVER_EXTRA_ARGS", "stray --x")])
def test_bad_settings_are_one_line_errors_naming_the_key(cfg, key, value):
    with pytest.raises(SpecError) as err:
        build_spec(dataclasses.replace(cfg, **{key.lower(): value}))
    assert key in str(err.value) and "\n" not in str(err.value)


def test_an_extra_flag_replaces_ours_and_new_flags_are_appended(cfg):
    cfg = dataclasses.replace(cfg, server_extra_args="--attention-backend triton --kv-cache-dtype fp8_e5m2 --disable-radix-cache")
    spec = build_spec(cfg)
    assert flag(spec.argv, "--attention-backend") == ["triton"]
    assert spec.argv.count("--attention-backend") == 1
    assert spec.argv[-3:] == ("--kv-cache-dtype", "fp8_e5m2", "--disable-radix-cache")
    assert any("replaces --attention-backend flashinfer" in n for n in spec.notes)


@pytest.mark.parametrize("extra, key", [("--port 1", "PORT"), ("--api-key k", "API_KEY_FILE"),
                                        ("--model=/m", "MODEL_DIR"), ("--config x.yaml", "API_KEY_FILE")])
def test_extra_flags_that_have_a_setting_are_refused(cfg, extra, key):
    with pytest.raises(SpecError, match=f"set {key} instead"):
        build_spec(dataclasses.replace(cfg, server_extra_args=extra))


def test_an_arms_flags_go_after_the_configured_extra_args_and_win(cfg):
    cfg = dataclasses.replace(cfg, server_extra_args="--kv-cache-dtype fp8_e5m2 --page-size 16")
    argv = build_spec(cfg, extra_args=["--attention-backend", "triton", "--page-size", "32"]).argv
    assert flag(argv, "--attention-backend") == ["triton"] and flag(argv, "--kv-cache-dtype") == ["fp8_e5m2"]
    assert argv[-2:] == ("--page-size", "32")  # the last one given wins in launch_server's parser


def test_settings_override_by_their_config_names_with_their_types(cfg):
    changed = launch_spec.with_settings(cfg, {"CHUNKED_PREFILL_SIZE": "4096", "PORT": "31000"})
    assert (changed.chunked_prefill_size, changed.port) == ("4096", 31000)
    with pytest.raises(SpecError, match="unknown setting NOPE"):
        launch_spec.with_settings(cfg, {"NOPE": "1"})
    with pytest.raises(SpecError, match="^PORT=x is not a port"):
        launch_spec.with_settings(cfg, {"PORT": "x"})


def test_server_env_adds_the_flashinfer_cache_and_server_env_pairs(cfg, monkeypatch):
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    spec = build_spec(dataclasses.replace(cfg, server_env="PYTHONPATH=/x 'A=b c'", shared_prefix_decode="off"))
    assert dict(spec.env) == {"FLASHINFER_WORKSPACE_BASE": cfg.flashinfer_workspace_base, "PYTHONPATH": "/x", "A": "b c"}
    assert spec.command[:4] == ["env", f"FLASHINFER_WORKSPACE_BASE={cfg.flashinfer_workspace_base}",
                                "PYTHONPATH=/x", "A=b c"]


@pytest.mark.parametrize("server_env, shell, expected", [
    ("PYTHONPATH=/x", "/shell", "{plugins}:{repo}:/x"),  # SERVER_ENV's own path kept after the plugin's
    ("", "/shell", "{plugins}:{repo}:/shell"),  # else the shell's (a container's site, say)
    ("", None, "{plugins}:{repo}"),
])
def test_shared_prefix_decode_puts_its_plugin_folder_and_this_checkout_first_on_the_path(cfg, server_env, shell,
                                                                                         expected):
    environ = {} if shell is None else {"PYTHONPATH": shell}
    env = dict(launch_spec.server_env(dataclasses.replace(cfg, server_env=server_env, shared_prefix_decode="on"),
                                      environ))
    assert env["PYTHONPATH"] == expected.format(plugins=cfg.state_dir / "sglang-plugins", repo=REPO_ROOT)
    off = dict(launch_spec.server_env(dataclasses.replace(cfg, server_env=server_env, shared_prefix_decode="off"),
                                      environ))
    assert off.get("PYTHONPATH") == ("/x" if server_env else None)


@pytest.mark.parametrize("forbid, cache, expected", [
    ("1", "set", True),  # a container's PYTHONDONTWRITEBYTECODE=1: the server writes into the cache instead
    ("", "set", False),  # empty is Python's "unset": bytecode goes beside the packages as usual
    (None, "set", False),
    ("1", "", False),  # BYTECODE_CACHE empty: the environment decides
])
def test_the_bytecode_cache_is_given_only_when_the_environment_forbids_writing_bytecode(cfg, forbid, cache, expected):
    cfg = dataclasses.replace(cfg, bytecode_cache=cfg.bytecode_cache if cache else "")
    environ = {} if forbid is None else {"PYTHONDONTWRITEBYTECODE": forbid}
    env = dict(launch_spec.server_env(cfg, environ))
    if expected:
        assert env["PYTHONDONTWRITEBYTECODE"] == "" and env["PYTHONPYCACHEPREFIX"] == cfg.bytecode_cache
    else:
        assert "PYTHONDONTWRITEBYTECODE" not in env and "PYTHONPYCACHEPREFIX" not in env


def test_server_env_wins_over_the_bytecode_cache(cfg):
    cfg = dataclasses.replace(cfg, server_env="PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/elsewhere")
    env = dict(launch_spec.server_env(cfg, {"PYTHONDONTWRITEBYTECODE": "1"}))
    assert env["PYTHONDONTWRITEBYTECODE"] == "1" and env["PYTHONPYCACHEPREFIX"] == "/elsewhere"


def test_python_run_with_the_bytecode_env_writes_its_bytecode_into_the_cache(cfg, tmp_path):
    """What the pairs do to a real interpreter: env(1) sets PYTHONDONTWRITEBYTECODE to "", which Python reads as
    unset, and the imported module's bytecode lands under BYTECODE_CACHE, not beside the source."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "probe_mod.py").write_text("VALUE = 1\n")
    pairs = launch_spec.server_env(cfg, {"PYTHONDONTWRITEBYTECODE": "1"})
    argv = ["env", "PYTHONDONTWRITEBYTECODE=1", *(f"{k}={v}" for k, v in pairs), sys.executable, "-c",
            "import sys, probe_mod; print(sys.flags.dont_write_bytecode, sys.pycache_prefix)"]
    out = subprocess.run(argv, cwd=tmp_path / "src", capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.split() == ["0", cfg.bytecode_cache]
    assert list(Path(cfg.bytecode_cache).rglob("probe_mod.*.pyc"))
    assert not (tmp_path / "src" / "__pycache__").exists()


def test_api_key_travels_only_in_the_0600_yaml(cfg, tmp_path):
    key = 'sk-"quoted\'-Ünïcode-123'
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)  # a key file others may read is refused (llmhost.config.read_secret)
    cfg = dataclasses.replace(cfg, api_key_file=str(key_file))
    spec = build_spec(cfg)
    state = cfg.state_dir
    launch_spec.write_launch_files(spec, state, cfg.api_key())
    yaml_file = state / launch_spec.CONFIG_FILE_NAME
    assert flag(spec.argv, "--config") == [str(yaml_file)]
    assert stat.S_IMODE(os.stat(yaml_file).st_mode) == 0o600
    assert json.loads(yaml_file.read_text().split(":", 1)[1]) == key  # what SGLang's yaml.safe_load will read
    for path in state.iterdir():
        if path != yaml_file:
            assert key not in path.read_text(), path.name
    assert key not in " ".join(spec.command)


def test_launch_files_record_the_exact_command(cfg):
    spec = build_spec(dataclasses.replace(cfg, server_env="A='x y'"))
    launch_spec.write_launch_files(spec, cfg.state_dir, None)
    record = json.loads((cfg.state_dir / "launch_command.json").read_text())
    assert record["argv"] == list(spec.argv) and record["env"] == dict(spec.env)
    assert (cfg.state_dir / "launch_command.txt").read_text().strip() == spec.command_line
    assert (cfg.state_dir / "launch.argv0").read_text().split("\0")[:-1] == spec.command
    assert not (cfg.state_dir / launch_spec.CONFIG_FILE_NAME).exists()


def test_a_key_removed_from_the_config_does_not_linger_on_disk(cfg, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("sk-1\n")
    with_key = dataclasses.replace(cfg, api_key_file=str(key_file))
    launch_spec.write_launch_files(build_spec(with_key), cfg.state_dir, "sk-1")
    launch_spec.write_launch_files(build_spec(cfg), cfg.state_dir, None)
    assert not (cfg.state_dir / launch_spec.CONFIG_FILE_NAME).exists()


def test_redactor_replaces_the_key_in_the_server_output(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text('api-key: "sk-abc"\n')
    assert redacted(yaml_file, b"server_args=ServerArgs(api_key='sk-abc', port=1)\nok\n") == \
        b"server_args=ServerArgs(api_key='***', port=1)\nok\n"


def test_an_api_key_is_refused_only_with_several_tokenizer_processes_as_sglang_refuses_it(cfg, tmp_path):
    keyed = dataclasses.replace(cfg, api_key_file=str(tmp_path / "key"))
    spec = build_spec(keyed)  # auto: one batching process, and a note why not four
    assert flag(spec.argv, "--tokenizer-worker-num") == ["1"] and "--enable-dynamic-batch-tokenizer" in spec.argv
    assert spec.notes == ("TOKENIZER_WORKER_NUM=auto: one tokenizer process, not 4: an API key holds SGLang to one "
                          "tokenizer process",)
    assert spec.argv[2:4] == ("--standby", "2")  # no tokenizer process of uvicorn's to wait in a standby
    one = build_spec(dataclasses.replace(keyed, tokenizer_worker_num="1")).argv
    assert flag(one, "--tokenizer-worker-num") == ["1"] and "--enable-dynamic-batch-tokenizer" not in one
    with pytest.raises(SpecError) as refused:
        build_spec(dataclasses.replace(keyed, tokenizer_worker_num="4"))
    assert str(refused.value) == ("TOKENIZER_WORKER_NUM=4 with API_KEY_FILE: SGLang refuses an API key with several "
                                  "tokenizer processes — set TOKENIZER_WORKER_NUM=auto or 1, or drop the key (the "
                                  "server is loopback-only behind the SSH tunnel)")


def test_redactor_also_catches_the_key_as_repr_escapes_it_in_server_args(tmp_path):

    key = "sk\\a'b"
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f"api-key: {json.dumps(key)}\n")
    logged = f"server_args=ServerArgs(api_key={key!r}, port=1)\nraw {key}\n".encode()
    assert redacted(yaml_file, logged) == b'server_args=ServerArgs(api_key="***", port=1)\nraw ***\n'


def redacted(yaml_file, data: bytes, read_size: int | None = None) -> bytes:
    """What the pane copies into server.log for `data`, read `read_size` bytes at a time (default: as asked)."""
    import io

    source, sink = io.BytesIO(data), io.BytesIO()
    read = source.read if read_size is None else (lambda n: source.read(min(n, read_size)))
    serverlog.copy_output(read, [sink.write], serverlog.key_secrets(yaml_file))
    return sink.getvalue()


def test_a_key_split_across_reads_is_still_redacted_and_progress_lines_pass_at_once(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text('api-key: "sk-abcdef"\n')
    assert redacted(yaml_file, b"key sk-abcdef here\n", read_size=5) == b"key *** here\n"
    copied = []
    lines = iter([b"Capturing 3/36\r", b"Capturing 4/36\r", b""])
    serverlog.copy_output(lambda n: next(lines), [copied.append], [])
    assert copied == [b"Capturing 3/36\r", b"Capturing 4/36\r"]  # a bar redraw shows without waiting for \n


def test_the_values_the_defaults_launch_with_are_what_build_gives_the_server(cfg):
    extra = "--schedule-policy lpm --enable-mixed-chunk --page-size=16"
    values = launch_spec.launched_values(dataclasses.replace(cfg, server_extra_args=extra))
    assert values == {"--schedule-policy": "lpm", "--enable-mixed-chunk": "", "--page-size": "16",
                      "--tokenizer-worker-num": "4", "--enable-dynamic-batch-tokenizer": ""}  # auto, as build has it
    argv = build_spec(dataclasses.replace(cfg, server_extra_args=extra)).command
    assert flag(argv, "--tokenizer-worker-num") == ["4"] and flag(argv, "--schedule-policy") == ["lpm"]
    chunked = launch_spec.launched_values(dataclasses.replace(cfg, chunked_prefill_size="2048",
                                                              tokenizer_worker_num="8"))
    assert chunked == {"--tokenizer-worker-num": "8", "--chunked-prefill-size": "2048"}
    with pytest.raises(SpecError, match="with API_KEY_FILE"):
        launch_spec.launched_values(dataclasses.replace(cfg, api_key_file="/k", tokenizer_worker_num="2"))
    with pytest.raises(SpecError, match="cannot be split"):
        launch_spec.launched_values(dataclasses.replace(cfg, server_extra_args="--x 'open"))
