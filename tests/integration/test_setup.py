"""setup_host.sh as a subprocess on a fake host (tests/integration/setup_fakes.py): --help and the dry run's plan,
the OS, driver and apt-package phases, bad arguments, a full disk or an offline machine, a bring-your-own Python
checked phase by phase, and the sglang phase's install into WORK_DIR/venv. The flashinfer phase and the dry run's
rehearsals against the package indexes are in test_setup_flashinfer.py."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from setup_fakes import Host

DEBIAN = 'NAME="Debian GNU/Linux"\nID=debian\nVERSION_ID="12"\n'
PHASES = ["os", "packages", "driver", "cuda", "python", "sglang", "flashinfer", "jit-cache", "model", "kernel"]


def setup_lines(proc: subprocess.CompletedProcess) -> dict[str, str]:
    """phase -> its '[setup] phase: ...' line."""
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("[setup] ") and ": " in line:
            phase, text = line[len("[setup] "):].split(": ", 1)
            out.setdefault(phase, text)
    return out


def test_help_lists_every_phase_and_flag(host):
    proc = host.run("--help")
    assert proc.returncode == 0
    for word in PHASES + ["--dry-run", "--wheelhouse", "--python", "--only", "--skip-model", "REBOOT REQUIRED"]:
        assert word in proc.stdout


def test_dry_run_prints_the_whole_plan_and_flags_the_os_without_changing_anything(host):
    host.os_release.write_text(DEBIAN)
    host.nvidia_smi("580.95.05")
    host.shim("apt-get", "exit 0")  # recorded if called: a dry run must not
    host.shim("sudo", '[[ "$1" == -n ]] && shift; exec "$@"')
    host.shim("dpkg-query", "exit 1")  # packages missing: a real run would install them
    proc = host.run("--dry-run")
    lines = setup_lines(proc)
    assert set(PHASES) <= set(lines), proc.stdout
    assert "not Ubuntu 24.04" in proc.stderr and "--force-os" in proc.stderr
    assert lines["os"].startswith("a real run stops here")
    assert "would run: " in proc.stdout
    assert "1 phase(s) would stop a real run: os" in proc.stdout
    assert proc.returncode == 1
    assert not host.work.exists()
    assert "would install build-essential" in proc.stdout  # the apt step was planned...
    assert "apt-get" not in host.called() and "sudo" not in host.called()  # ...and not run


def test_dry_run_on_a_good_host_needs_no_sudo_and_exits_zero(host):
    host.nvidia_smi("580.95.05")
    host.shim("id", 'if [[ "$1" == -u ]]; then echo 1000; else exec /usr/bin/id "$@"; fi')
    host.shim("sudo", "exit 1")
    host.shim("dpkg-query", "exit 1")  # every base package missing
    host.shim("python3.12", "exit 0")
    host.shim("nvcc", 'echo "Cuda compilation tools, release 13.0, V13.0.88"')
    proc = host.run("--dry-run", "--skip-model")
    assert "would need root or passwordless sudo" in proc.stdout
    assert "would run: sudo apt-get -o DPkg::Lock::Timeout=600 update" in proc.stdout
    assert "model: skipped" in proc.stdout
    assert not host.work.exists()
    assert "packages: would install build-essential" in proc.stdout
    assert proc.returncode == 0 and "0 phase(s) would stop a real run" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(("version", "ok"), [("565.57.01", False), ("570.124.06", False), ("580.95.05", True),
                                             ("590.10", True)])
def test_driver_versions_below_r580_are_refused_with_the_upgrade_command(host, version, ok):
    host.nvidia_smi(version)
    proc = host.run("--only", "driver")
    if ok:
        assert proc.returncode == 0, proc.stderr
        assert f"driver: {version} on 1 x NVIDIA H200" in proc.stdout
    else:
        assert proc.returncode == 1
        assert f"driver {version} is older than R580" in proc.stderr
        assert "sudo apt-get install -y nvidia-driver-580-open" in proc.stderr
        assert proc.stderr.count("\n") == 1


def test_unparseable_nvidia_smi_is_one_line(host):
    host.shim("nvidia-smi", 'echo "NVIDIA-SMI has failed"')
    proc = host.run("--only", "driver")
    assert proc.returncode == 1 and "cannot read a driver version" in proc.stderr


def test_no_driver_and_no_nvidia_gpu_is_one_line(host):
    if Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has a real nvidia-smi")
    host.shim("lspci", 'echo "00:02.0 VGA compatible controller [0300]: Intel Corporation UHD [8086:46a6]"')
    proc = host.run("--only", "driver")
    assert proc.returncode == 1
    assert "no NVIDIA GPU found" in proc.stderr and proc.stderr.count("\n") == 1


def test_gpu_without_driver_installs_r580_through_sudo_and_asks_for_a_reboot(host):
    if Path("/usr/bin/nvidia-smi").exists():
        pytest.skip("this machine has a real nvidia-smi")
    host.shim("lspci", 'echo "17:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200] [10de:2335]"')
    host.shim("id", 'if [[ "$1" == -u ]]; then echo 1000; else exec /usr/bin/id "$@"; fi')
    host.shim("sudo", '[[ "$1" == -n ]] && shift; exec "$@"')
    host.shim("apt-get", "exit 0")
    proc = host.run("--only", "driver")
    assert proc.returncode == 3, proc.stderr  # not 0: `./setup_host.sh && ./serve.sh start` must stop here
    assert proc.stdout.splitlines()[-1].startswith("[setup] driver: REBOOT REQUIRED")
    assert "apt-get -o DPkg::Lock::Timeout=600 install -y -q nvidia-driver-580-open" in host.called()
    assert "sudo -n env DEBIAN_FRONTEND=noninteractive apt-get" in host.called()
    assert list((host.work / "logs").glob("setup-*.log"))


def test_missing_packages_without_root_or_sudo_stop_with_one_line(host):
    host.shim("id", 'if [[ "$1" == -u ]]; then echo 1000; else exec /usr/bin/id "$@"; fi')
    host.shim("sudo", "exit 1")
    host.shim("dpkg-query", 'if [[ "$*" == *tmux* ]]; then exit 1; fi; echo "install ok installed"')
    host.shim("apt-get", "exit 0")
    proc = host.run("--only", "packages")
    assert proc.returncode == 1
    assert "installing tmux needs root or passwordless sudo" in proc.stderr
    assert "apt-get" not in host.called()


def test_present_packages_need_no_sudo(host):
    host.shim("sudo", "exit 1")
    host.shim("dpkg-query", 'echo "install ok installed"')
    proc = host.run("--only", "packages")
    assert proc.returncode == 0 and "packages: all 8 present" in proc.stdout


def test_wrong_os_stops_a_real_run_unless_forced(host):
    host.os_release.write_text(DEBIAN)
    proc = host.run("--only", "os")
    assert proc.returncode == 1 and "debian 12, not Ubuntu 24.04" in proc.stderr
    forced = host.run("--only", "os", "--force-os")
    assert forced.returncode == 0 and "os: debian 12 (--force-os)" in forced.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["--wheelhouse", "/nonexistent/whl"], "is not a directory"),
    (["--wheelhouse", "EMPTY"], "holds no .whl files"),
    (["--wheelhouse", "WHL", "--python", sys.executable], "pick one"),
    (["--only", "everything"], "not a phase"),
    (["--python", "/nonexistent/python3"], "no such executable"),
    (["--frobnicate"], "unknown argument"),
])
def test_bad_arguments_exit_2_with_one_line(host, args, message):
    (host.tmp / "EMPTY").mkdir()
    (host.tmp / "WHL").mkdir()
    (host.tmp / "WHL" / "uv-0.9.0-py3-none-any.whl").write_bytes(b"")
    args = [str(host.tmp / a) if a in ("EMPTY", "WHL") else a for a in args]
    proc = host.run(*args)
    assert proc.returncode == 2
    assert message in proc.stderr and proc.stderr.count("\n") == 1


def test_offline_install_suggests_the_wheelhouse(host):
    host.shim("curl", "exit 6")
    proc = host.run("--only", "sglang")
    assert proc.returncode == 1
    assert f"cannot reach {host.pypi}/sglang/" in proc.stderr and "--wheelhouse" in proc.stderr


def test_full_disk_stops_before_creating_the_venv(host):
    host.shim("python3.12", 'echo "python3.12 must not run" >&2; exit 1')
    host.shim("df", 'printf "Filesystem 1024-blocks Used Available Capacity Mounted\\n/dev/x 100 90 1048576 90%% /\\n"')
    proc = host.run("--only", "python")
    assert proc.returncode == 1
    assert "disk full: 1 GB free" in proc.stderr and "needs ~26 GB" in proc.stderr
    assert not (host.work / "venv").exists()


def fake_python(host: Host, packages: dict[str, str], verify_rc: int = 0) -> Path:
    """A Python that answers setup's probes like an SGLang environment would (no torch needed)."""
    probe = {"packages": packages, "torch_cuda": "13.0",
             "sglang_requires": ["flashinfer_python[cu13]==0.6.15.post1", "torch==2.11.0"]}
    (host.tmp / "probe.json").write_text(json.dumps(probe))
    return host.shim("fakepython", f"""
case "$*" in
  *distributions*) cat "{host.tmp}/probe.json" ;;
  *sys.version*) echo 3.12.3 ;;
  *torch.version.cuda*) echo 13.0 ;;
  *llmhost.fi.verify*) echo "[verify] tensor-cores page=1 bs=7 heads 32/8 d128: max_abs_err 3.9e-03 PASS"; exit {verify_rc} ;;
  *) exit 3 ;;
esac""")


SGLANG_ENV = {"sglang": "0.5.17", "flashinfer-python": "0.6.15.post1", "torch": "2.11.0"}


def byo_host(host: Host, packages=None, verify_rc=0) -> Path:
    python = fake_python(host, SGLANG_ENV if packages is None else packages, verify_rc)
    host.nvidia_smi("580.95.05")
    host.shim("dpkg-query", 'echo "install ok installed"')
    model = host.tmp / "Qwen3-4B"
    model.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (model / name).write_text("{}")
    host.env.update(MODEL_DIR=str(model), LOAD_FORMAT="dummy")
    return python


def test_bring_your_own_python_verifies_every_phase_without_installing(host):
    python = byo_host(host)
    host.shim("apt-get", "exit 1")
    uv = host.work / "venv" / "bin" / "uv"  # where setup's uv would be: recorded if anything runs it
    uv.parent.mkdir(parents=True)
    uv.write_text(f'#!/usr/bin/env bash\necho "uv $*" >> "{host.calls}"\n')
    uv.chmod(0o755)
    proc = host.run("--python", str(python))
    assert proc.returncode == 0, proc.stderr
    lines = setup_lines(proc)
    assert set(PHASES) <= set(lines)
    assert lines["sglang"].startswith("0.5.17 (= SGLANG_VERSION)")
    assert "flashinfer-python 0.6.15.post1" in lines["flashinfer"]
    assert "flashinfer-cubin flashinfer-jit-cache not installed" in proc.stderr  # a warning, not a failure
    assert "config + tokenizer (LOAD_FORMAT=dummy) complete" in lines["model"]
    assert "[verify] tensor-cores" in proc.stdout and lines["kernel"].startswith("FlashInfer GQA paged decode")
    assert "apt-get" not in host.called() and "uv pip" not in host.called()


def test_bring_your_own_kernel_mismatch_fails_the_run(host):
    python = byo_host(host, verify_rc=1)
    proc = host.run("--python", str(python), "--only", "kernel")
    assert proc.returncode == 1 and "does not match the reference" in proc.stderr


def test_bring_your_own_other_sglang_names_the_override(host):
    python = byo_host(host, {**SGLANG_ENV, "sglang": "0.5.21"})
    proc = host.run("--python", str(python), "--only", "sglang")
    assert proc.returncode == 1
    assert "SGLANG_VERSION=0.5.21 ./setup_host.sh" in proc.stderr
    host.env["SGLANG_VERSION"] = "0.5.21"
    assert host.run("--python", str(python), "--only", "sglang").returncode == 0


def test_bring_your_own_mismatched_flashinfer_addon_fails(host):
    python = byo_host(host, {**SGLANG_ENV, "flashinfer-cubin": "0.6.15"})
    proc = host.run("--python", str(python), "--only", "flashinfer")
    assert proc.returncode == 1
    assert "flashinfer-cubin do not match flashinfer-python 0.6.15.post1" in proc.stderr
    assert "pip uninstall -y flashinfer-cubin" in proc.stderr


def test_sglang_python_from_the_environment_means_bring_your_own(host):
    python = byo_host(host)
    host.env["SGLANG_PYTHON"] = str(python)
    proc = host.run("--only", "python")
    assert proc.returncode == 0 and "python: bring-your-own" in proc.stdout


def test_incomplete_model_offline_is_one_line(host, tmp_path):
    (tmp_path / "whl").mkdir()
    (tmp_path / "whl" / "uv-0.9.0-py3-none-any.whl").write_bytes(b"")
    host.env.update(MODEL_DIR=str(tmp_path / "empty-model"), LOAD_FORMAT="dummy")
    proc = host.run("--wheelhouse", str(tmp_path / "whl"), "--only", "model")
    assert proc.returncode == 1
    assert "offline (--wheelhouse)" in proc.stderr and proc.stderr.count("\n") == 1


def venv_host(host: Host, before: dict[str, str], after: dict[str, str]) -> None:
    """WORK_DIR/venv with a fake python and a fake uv that 'installs' by swapping the package list (the sglang
    phase: its real install would ask PyTorch's real index)."""
    venv_bin = host.work / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    python = fake_python(host, before)
    os.symlink(python, venv_bin / "python")
    after_probe = json.loads((host.tmp / "probe.json").read_text()) | {"packages": after}
    (host.tmp / "after.json").write_text(json.dumps(after_probe))
    (venv_bin / "uv").write_text(f'#!/usr/bin/env bash\necho "uv $*" >> "{host.calls}"\n'
                                 f'cp "{host.tmp}/after.json" "{host.tmp}/probe.json"\n')
    (venv_bin / "uv").chmod(0o755)
    host.shim("curl", "exit 0")


def test_install_mode_pins_sglang_with_cuda13_torch_and_the_toolkit(host):
    venv_host(host, {"pip": "24.0"}, SGLANG_ENV)
    proc = host.run("--only", "sglang")
    assert proc.returncode == 0, proc.stderr
    uv_call = [line for line in host.called().splitlines() if line.startswith("uv pip install")][0]
    assert "sglang==0.5.17" in uv_call and "--torch-backend cu130" in uv_call
    assert "--compile-bytecode" in uv_call  # the first server start does not compile SGLang's modules
    assert f"-e {host.repo}" in uv_call and "--prerelease=allow" in uv_call
    assert "sglang: installed 0.5.17" in proc.stdout


def test_a_network_that_lets_only_pypi_through_takes_torch_from_pypi(host):
    venv_host(host, {"pip": "24.0"}, SGLANG_ENV)
    host.shim("curl", 'for a in "$@"; do [[ $a == *download.pytorch.org* ]] && exit 6; done; exit 0')
    proc = host.run("--only", "sglang")
    assert proc.returncode == 0, proc.stderr
    uv_call = [line for line in host.called().splitlines() if line.startswith("uv pip install")][0]
    assert "sglang==0.5.17" in uv_call and "--torch-backend" not in uv_call
    assert "download.pytorch.org/whl/cu130 cannot be reached — torch comes from PyPI" in proc.stderr


def test_full_disk_stops_before_installing_sglang(host):
    venv_host(host, {"pip": "24.0"}, SGLANG_ENV)
    host.shim("df", 'printf "Filesystem 1024-blocks Used Available Capacity Mounted\\n/dev/x 100 90 2097152 90%% /\\n"')
    proc = host.run("--only", "sglang")
    assert proc.returncode == 1 and "disk full: 2 GB free" in proc.stderr
    assert "uv pip install" not in host.called()


def test_a_python_that_cannot_list_its_packages_is_one_setup_line(host):
    broken = host.shim("brokenpython", 'case "$*" in *version_info*) exit 0 ;; esac  # a Python >= 3.10 ...\n'
                                       'echo "ImportError: no module named importlib" >&2; exit 1')  # ... but broken
    proc = host.run("--python", str(broken), "--only", "sglang")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith("[setup] error: sglang: cannot list the packages")


def test_a_full_disk_or_unwritable_work_dir_is_one_line_before_any_phase(host, tmp_path):
    host.shim("df", 'printf "Filesystem 1024-blocks Used Available Capacity Mounted\\n/dev/x 100 99 1024 99%% /\\n"')
    proc = host.run("--only", "os")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "disk full" in proc.stderr and "WORK_DIR" in proc.stderr and "Traceback" not in proc.stderr
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    host.work = blocker / "work"
    proc = host.run("--only", "os")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1 and "cannot create" in proc.stderr


def test_skip_model_skips_the_kernel_check_it_cannot_run_instead_of_failing(host, tmp_path):
    python = byo_host(host)
    host.env["MODEL_DIR"] = str(tmp_path / "no-model")
    proc = host.run("--python", str(python), "--skip-model", "--only", "kernel")
    assert proc.returncode == 0, proc.stderr
    assert "kernel: skipped" in proc.stderr and "--skip-model" in proc.stderr
    proc = host.run("--python", str(python), "--only", "kernel")
    assert proc.returncode == 1 and "--only model" in proc.stderr


def test_offline_advice_fits_what_is_missing(host, tmp_path):
    """--wheelhouse cannot bring a model: the model's network error says to copy it instead."""
    python = byo_host(host)
    host.shim("curl", "exit 6")
    host.env.update(MODEL_DIR=str(tmp_path / "empty-model"), LOAD_FORMAT="dummy")
    proc = host.run("--python", str(python), "--only", "model")
    assert proc.returncode == 1 and "copy the model into MODEL_DIR" in proc.stderr
    assert "--wheelhouse" not in proc.stderr
