"""Tensor, data and multi-node parallelism: the launch flags and GPUs each layout gets, and the layouts refused in one
line before launch (too few GPUs, heads TP cannot split, busy GPUs, a bad multi-node setup)."""
from __future__ import annotations

import dataclasses
import json

import pytest

from llmhost import config
from llmhost.serve import parallel
from llmhost.serve.console import ServeError
from llmhost.serve.gpu import GpuMemory, GpuProcess
from llmhost.serve.spec import SpecError, build_spec

H200_MIB = 143771.0


@pytest.fixture
def cfg(tmp_path) -> config.Config:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 32, "num_key_value_heads": 8}))
    return dataclasses.replace(config.load({}), work_dir=str(tmp_path / "work"), model_dir=str(model),
                               sglang_python="/opt/venv/bin/python")


def layout(cfg: config.Config, **changes: object) -> config.Config:
    return dataclasses.replace(cfg, **changes)


def h200s(*used_mib: float) -> list[GpuMemory]:
    return [GpuMemory(i, "NVIDIA H200", used, H200_MIB) for i, used in enumerate(used_mib)]


def after(argv, flag):
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_one_gpu_on_one_host_keeps_the_command_it_always_had(cfg):
    spec = build_spec(cfg)
    assert not {"--tp-size", "--dp-size", "--nnodes", "--node-rank"} & set(spec.argv)
    assert "CUDA_VISIBLE_DEVICES" not in dict(spec.env)


def test_tp_and_dp_reach_the_command_and_gpus_become_cuda_visible_devices_in_nvidia_smi_order(cfg):
    spec = build_spec(layout(cfg, tp_size=2, dp_size=2, gpus="2,3,4,5"))
    assert after(spec.argv, "--tp-size") == "2" and after(spec.argv, "--dp-size") == "2"
    assert dict(spec.env)["CUDA_VISIBLE_DEVICES"] == "2,3,4,5"
    assert dict(spec.env)["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_each_node_gets_the_same_command_but_its_rank(cfg):
    cfg = layout(cfg, tp_size=4, nnodes=2, dist_init_addr="10.0.0.1:25000")
    node0, node1 = (build_spec(cfg, node_rank=r).argv for r in (0, 1))
    assert after(node0, "--node-rank") == "0" and after(node1, "--node-rank") == "1"
    assert after(node1, "--nnodes") == "2" and after(node1, "--dist-init-addr") == "10.0.0.1:25000"
    assert [a for a in node0 if a not in ("0", "1")] == [a for a in node1 if a not in ("0", "1")]


def test_only_node_0_gets_the_api_key_file_it_serves_http_with(cfg, tmp_path):
    cfg = layout(cfg, tp_size=2, nnodes=2, dist_init_addr="10.0.0.1:25000", api_key_file=str(tmp_path / "key"))
    assert "--config" in build_spec(cfg).argv
    assert "--config" not in build_spec(cfg, node_rank=1).argv


@pytest.mark.parametrize("changes, expected", [
    ({"tp_size": 3}, "do not split evenly over NNODES=2"),
    ({"dist_init_addr": ""}, "NNODES=2 needs DIST_INIT_ADDR="),
])
def test_a_multi_node_layout_that_cannot_start_is_refused_when_the_command_is_built(cfg, changes, expected):
    cfg = layout(cfg, **{"tp_size": 2, "nnodes": 2, "dist_init_addr": "10.0.0.1:25000", **changes})
    with pytest.raises(SpecError, match=expected):
        build_spec(cfg)


def test_a_node_rank_outside_the_nodes_is_refused(cfg):
    cfg = layout(cfg, tp_size=2, nnodes=2, dist_init_addr="10.0.0.1:25000")
    assert parallel.layout_problem(cfg, 2) == "--node-rank 2 is not a node of NNODES=2 (0 to 1)"


@pytest.mark.parametrize("tp, problem", [
    (1, None), (2, None), (4, None), (8, None), (16, None),  # 16 > 8 KV heads: SGLang replicates them
    (3, "TP_SIZE=3 does not divide the model's 32 attention heads"),
    (64, "TP_SIZE=64 does not divide the model's 32 attention heads"),
])
def test_tp_must_split_the_heads_as_sglangs_qwen3_asserts(tp, problem):
    found = parallel.heads_problem(tp, 32, 8)
    assert found == problem if problem is None else found.startswith(problem)


def test_kv_heads_tp_neither_divides_nor_multiplies_are_refused():
    assert parallel.heads_problem(4, 24, 6).startswith("TP_SIZE=4 does not divide the model's 6 KV heads")


def test_heads_come_from_the_models_config_json(cfg, tmp_path):
    assert parallel.model_heads(cfg.model_dir) == (32, 8)
    (tmp_path / "mha").mkdir()
    (tmp_path / "mha" / "config.json").write_text('{"num_attention_heads": 12}')
    assert parallel.model_heads(str(tmp_path / "mha")) == (12, 12)  # no KV heads given: one per attention head
    assert parallel.model_heads(str(tmp_path / "none")) is None


def test_check_refuses_tp_the_model_cannot_take_before_looking_at_gpus(cfg):
    with pytest.raises(ServeError, match="^TP_SIZE=3 does not divide the model's 32 attention heads"):
        parallel.check(layout(cfg, tp_size=3))


@pytest.mark.parametrize("changes, environ, devices, expected", [
    ({"tp_size": 2}, {}, h200s(0), "needs 2 GPUs per node but this host has 1"),
    ({"tp_size": 2, "dp_size": 2}, {}, h200s(0, 0, 0), "TP_SIZE=2 x DP_SIZE=2 needs 4 GPUs per node"),
    ({"dp_size": 2, "gpus": "1"}, {}, h200s(0, 0), "needs 2 GPUs per node but GPUS=1 gives 1"),
    ({"tp_size": 2}, {"CUDA_VISIBLE_DEVICES": "1"}, h200s(0, 0), "but CUDA_VISIBLE_DEVICES=1 gives 1"),
    ({"tp_size": 2}, {}, [], "but this host shows none (no NVIDIA driver)"),
    ({"tp_size": 2, "gpus": "0,7"}, {}, h200s(0, 0), "GPUS=0,7 names GPU 7, which this host lacks (it has: gpu0, gpu1)"),
    ({"tp_size": 2}, {}, h200s(0, 30000), "gpu1 is busy: 29.3 of 140.4 GiB used (by pid 4121)"),
])
def test_gpu_layouts_that_cannot_start_are_refused_in_one_line(cfg, changes, environ, devices, expected):
    problem = parallel.gpu_problem(layout(cfg, **changes), environ, devices, [GpuProcess(4121, 1, 30000.0)])
    assert problem is not None and expected in problem and "\n" not in problem


@pytest.mark.parametrize("changes, environ, devices", [
    ({"tp_size": 2}, {}, h200s(500, 500)),  # a driver context, not a server: far below 10% of the GPU
    ({"tp_size": 2, "gpus": "2,3"}, {}, h200s(90000, 90000, 0, 0)),  # the busy ones are not ours to use
    ({"tp_size": 2, "nnodes": 2}, {}, h200s(0)),  # 2 GPUs over 2 hosts: one here
    ({}, {}, h200s(100000)),  # one GPU: the auto memory fraction adapts instead (spec.mem_fraction)
    ({}, {}, []),  # one GPU and no driver: the CPU stand-in runs
])
def test_layouts_that_fit_pass(cfg, changes, environ, devices):
    assert parallel.gpu_problem(layout(cfg, **changes), environ, devices, []) is None


def test_the_kv_pool_is_sized_on_the_first_gpu_given(cfg):
    assert parallel.first_device(layout(cfg, gpus="3,1")) == 3 and parallel.first_device(cfg) is None


def test_gpus_and_a_cuda_visible_devices_in_server_env_are_refused_together(cfg):
    with pytest.raises(SpecError, match="SERVER_ENV sets CUDA_VISIBLE_DEVICES and GPUS=0 sets it too"):
        build_spec(layout(cfg, gpus="0", server_env="CUDA_VISIBLE_DEVICES=1"))


@pytest.mark.parametrize("flag, setting", [("--tp-size", "TP_SIZE"), ("--dp-size", "DP_SIZE"),
                                           ("--nnodes", "NNODES"), ("--dist-init-addr", "DIST_INIT_ADDR")])
def test_parallel_flags_in_server_extra_args_point_at_their_setting(cfg, flag, setting):
    with pytest.raises(SpecError, match=f"SERVER_EXTRA_ARGS sets {flag}: set {setting}"):
        build_spec(layout(cfg, server_extra_args=f"{flag} 2"))
