#!/usr/bin/env bash
# setup_host.sh — take a plain Ubuntu 24.04 NVIDIA GPU host to a verified SGLang + FlashInfer install.
#
# Phases (each idempotent, each prints one "[setup] <phase>: <what happened>" line; details go to
# $WORK_DIR/logs/setup-<UTC timestamp>.log):
#   os          Ubuntu 24.04 from /etc/os-release (--force-os to proceed on another release)
#   packages    apt base packages, only the missing ones (needs root or passwordless sudo)
#   driver      NVIDIA driver R580+; absent -> installs nvidia-driver-580-open, prints REBOOT REQUIRED, exits 3
#   cuda        CUDA 13 toolkit (nvcc 13.x) from NVIDIA's apt repo via the cuda-keyring .deb
#   python      Python 3.12 venv at $WORK_DIR/venv with uv (from PYPI_INDEX_URL, installed into the venv)
#   sglang      sglang==$SGLANG_VERSION from PYPI_INDEX_URL with torch for CUDA 13, plus this toolkit's client deps
#   flashinfer  flashinfer-cubin / flashinfer-jit-cache == the flashinfer-python sglang pulled in, each from the first
#               of its indexes that has it (FLASHINFER_INDEX_URL, then PyPI / FLASHINFER_JIT_CACHE_INDEX_URL);
#               others removed. An index that does not answer: one warning, no add-on, kernels JIT-compile instead
#   jit-cache   FLASHINFER_WORKSPACE_BASE (persistent FlashInfer JIT cache; serve.sh passes it to the server)
#   model       MODEL_ID -> MODEL_DIR (LOAD_FORMAT=dummy: config + tokenizer only) + completeness check
#   kernel      FlashInfer GQA paged decode vs a float32 reference at the model's head shape
#
#   ./setup_host.sh                       # everything
#   ./setup_host.sh --dry-run             # the plan, phase by phase, with uv's own resolution of every install
#                                         # against its index (resolves / missing version X / unreachable)
#   ./setup_host.sh --only model          # re-run one phase
#   ./setup_host.sh --python python3      # bring your own SGLang Python (e.g. the SGLang container): verify only
#   ./setup_host.sh --wheelhouse ~/whl    # offline: install from local wheels; apt/driver/CUDA are only verified
#
# Options: --dry-run (print each phase's plan and rehearse its installs; change nothing, no sudo) | --only PHASE |
# --python PATH (existing Python with sglang, sets SGLANG_PYTHON: skip installs, verify everything) | --wheelhouse DIR
# (pip/uv --no-index --find-links DIR; FlashInfer's add-ons optional) | --skip-model | --force-os | -h, --help
# Indexes (config.env): PYPI_INDEX_URL, FLASHINFER_INDEX_URL, FLASHINFER_JIT_CACHE_INDEX_URL (mirrors welcome).
# Exit codes: 0 done, 1 a check or step failed (one line says what and the next command), 2 bad arguments,
# 3 REBOOT REQUIRED (the driver was just installed: reboot, then run it again; `&& ./serve.sh start` stops there).
# Disk: the venv needs ~25 GB free (torch + CUDA 13 libraries ~7 GB, the rest of sglang's stack ~4 GB,
# flashinfer-cubin ~1.5 GB and flashinfer-jit-cache ~3 GB unpacked, plus the wheels in uv's cache ~9 GB); the model
# needs its hub size + 5% (Qwen3-4B bf16: 4.02e9 params x 2 bytes = 8.05 GB).
# Test hook: OS_RELEASE_FILE replaces /etc/os-release.
set -euo pipefail
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_PREFIX=setup
# shellcheck source=lib.sh
source "$REPO_DIR/lib.sh"

PHASES=(os packages driver cuda python sglang flashinfer jit-cache model kernel)
BASE_PACKAGES=(build-essential git tmux curl ca-certificates python3-venv python3-dev pciutils)
MIN_DRIVER=580
DRIVER_PACKAGE=nvidia-driver-580-open
CUDA_MAJOR=13
CUDA_PACKAGE=cuda-toolkit-13-0
VENV_NEED_GB=25
TORCH_BACKEND=cu130 # uv --torch-backend: torch and friends from PyTorch's CUDA 13.0 index...
TORCH_INDEX_URL=https://download.pytorch.org/whl/$TORCH_BACKEND # ...which is this URL (the rehearsal checks it)
TORCH_CUDA=13.0                                                 # ...so torch.version.cuda will say this
APT_GET=(apt-get -o DPkg::Lock::Timeout=600) # a fresh cloud VM runs unattended-upgrades at boot: wait, do not fail
HF_URL=https://huggingface.co/api/models/Qwen/Qwen3-4B
NVIDIA_REPO=https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404

MODE=install # install | wheelhouse | byo
WHEELHOUSE=""
ONLY=""
FORCE_OS=0
SKIP_MODEL=0
PYTHON_ARG=""
LOG_FILE=/dev/null
PHASE=setup
SUDO=()
SRC=() # where pip/uv take packages from: --index-url PYPI_INDEX_URL, or --no-index --find-links WHEELHOUSE
REHEARSAL_DIR="" # --dry-run: a throwaway uv, the caches and uv's resolution of sglang; removed on exit
REHEARSAL_UV=""   # the uv that rehearses (rehearsal_uv) ...
REHEARSAL_NOTE="" # ... where it came from, or why there is none

usage() { print_usage "${BASH_SOURCE[0]}"; }

parse_args() {
  while (($#)); do
    case $1 in
      --dry-run) export DRY_RUN=1 ;;
      --only) (($# > 1)) || die_usage "--only needs a phase name (see ./setup_host.sh --help)"; ONLY=$2; shift ;;
      --python) (($# > 1)) || die_usage "--python needs a path (see ./setup_host.sh --help)"; PYTHON_ARG=$2; shift ;;
      --wheelhouse) (($# > 1)) || die_usage "--wheelhouse needs a directory (see ./setup_host.sh --help)"; WHEELHOUSE=$2; shift ;;
      --skip-model) SKIP_MODEL=1 ;;
      --force-os) FORCE_OS=1 ;;
      -h | --help) usage; exit 0 ;;
      *) die_usage "unknown argument '$1' (see ./setup_host.sh --help)" ;;
    esac
    shift
  done
  [[ -z "$ONLY" || " ${PHASES[*]} " == *" $ONLY "* ]] || die_usage "--only $ONLY: not a phase (${PHASES[*]}) (see ./setup_host.sh --help)"
  [[ -z "$WHEELHOUSE" || -z "$PYTHON_ARG" ]] || die_usage "--wheelhouse installs, --python verifies: pick one (see ./setup_host.sh --help)"
  if [[ -n "$WHEELHOUSE" ]]; then
    [[ -d "$WHEELHOUSE" ]] || die_usage "--wheelhouse $WHEELHOUSE is not a directory (see ./setup_host.sh --help)"
    compgen -G "$WHEELHOUSE/*.whl" >/dev/null || die_usage "--wheelhouse $WHEELHOUSE holds no .whl files (see ./setup_host.sh --help)"
    WHEELHOUSE=$(cd "$WHEELHOUSE" && pwd)
  fi
  [[ -z "$PYTHON_ARG" ]] || command -v "$PYTHON_ARG" >/dev/null 2>&1 \
    || die_usage "--python $PYTHON_ARG: no such executable (see ./setup_host.sh --help)"
  # before any phase, so a dry run cannot pass over a Python that every later step would need
  [[ -z "$PYTHON_ARG" ]] || "$PYTHON_ARG" -c 'import sys; assert sys.version_info >= (3, 10)' >/dev/null 2>&1 \
    || die_usage "--python $PYTHON_ARG: does not run Python >= 3.10 (see ./setup_host.sh --help)"
}

is_dry() { [[ "${DRY_RUN:-0}" == 1 ]]; }
note() { printf '%s [%s] %s\n' "$(date -u +%H:%M:%S)" "$PHASE" "$*" >>"$LOG_FILE" 2>/dev/null || true; }
fail() { die "$PHASE: $*"; }

# step CMD...: run with output in the log (dry run: print it); a failure ends setup naming the log.
step() {
  is_dry && { run "$@"; return 0; }
  note "+ $*"
  "$@" >>"$LOG_FILE" 2>&1 || fail "'$*' failed (exit $?) — details in $LOG_FILE"
}

as_root() { step "${SUDO[@]}" "$@"; }

# Installing system packages needs root: root itself, or sudo that does not ask for a password.
need_root() {
  if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
  elif sudo -n true >/dev/null 2>&1; then
    SUDO=(sudo -n)
  elif is_dry; then
    SUDO=(sudo)
    log "$PHASE: would need root or passwordless sudo (a real run stops here without it)"
  else
    # not "sudo ./setup_host.sh": sudo sets HOME=/root, which would move WORK_DIR (venv, model) to /root
    fail "$1 needs root or passwordless sudo — run sudo -v (then sudo -n works for a while) and re-run ./setup_host.sh as yourself, or do it yourself: $2"
  fi
}

# need_network URL [ADVICE]: URL answers, or one line with what to do offline (default: a wheelhouse).
need_network() {
  is_dry && return 0
  curl -fsS --max-time 8 -o /dev/null "$1" 2>>"$LOG_FILE" \
    || fail "cannot reach ${1%%/simple*} (offline?) — ${2:-re-run with --wheelhouse DIR (wheels copied from an online host)}"
}

# need_disk BYTES DIR WHAT: the filesystem holding DIR (or its nearest existing parent) has room.
need_disk() {
  local need=$1 dir=$2 what=$3 free_kb
  while [[ ! -d "$dir" ]]; do dir=$(dirname "$dir"); done
  free_kb=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
  [[ "$free_kb" =~ ^[0-9]+$ ]] || fail "cannot read free space of $dir from df"
  ((free_kb * 1024 >= need)) \
    || fail "disk full: $((free_kb / 1048576)) GB free under $dir but $what needs ~$((need / 1073741824 + 1)) GB — free space or set WORK_DIR to a bigger disk"
  note "disk: $((free_kb / 1048576)) GB free under $dir, $what needs $((need / 1048576)) MB"
}

# --- rehearsals (--dry-run): uv's own resolution against the indexes a real run will use ---

# rehearsal_uv: set REHEARSAL_UV to the venv's uv, else one on PATH, else one that pip installs from PYPI_INDEX_URL
# (or the wheelhouse) into a throwaway venv, which rehearses the python phase's own 'pip install uv'.
# Returns 1 when that install fails (a real run fails the same way), 2 when there is no venv to try it in; a
# failure is remembered, so later phases do not try again.
rehearsal_uv() {
  local venv="$REHEARSAL_DIR/uv-venv" failed="$REHEARSAL_DIR/no-uv" out rc
  if [[ -x "$WORK_DIR/venv/bin/uv" ]]; then
    REHEARSAL_UV="$WORK_DIR/venv/bin/uv" REHEARSAL_NOTE="the venv's"
  elif command -v uv >/dev/null 2>&1; then
    REHEARSAL_UV=$(command -v uv) REHEARSAL_NOTE="uv on PATH"
  else
    if [[ ! -x "$venv/bin/uv" && ! -s "$failed" ]]; then
      if ! "$(host_python)" -m venv "$venv" >/dev/null 2>&1; then
        echo "2 no uv on PATH and $(host_python) cannot create a venv to install one (python3-venv, which the packages phase installs)" >"$failed"
      elif ! out=$("$venv/bin/python" -m pip install -q --disable-pip-version-check --retries 1 --timeout 15 "${SRC[@]}" uv 2>&1); then
        echo "1 pip cannot install uv from ${WHEELHOUSE:-$PYPI_INDEX_URL}: $(grep -v '^WARNING' <<<"$out" | tail -n 1)" >"$failed"
      fi
    fi
    if [[ -s "$failed" ]]; then
      read -r rc REHEARSAL_NOTE <"$failed"
      return "$rc"
    fi
    REHEARSAL_UV="$venv/bin/uv" REHEARSAL_NOTE="pip installed it from ${WHEELHOUSE:-$PYPI_INDEX_URL} into a throwaway venv"
  fi
}

# sglang_resolution: 'WHERE: STATE ...' then 'pin NAME VERSION' lines of uv's resolution of sglang==$SGLANG_VERSION from
# PYPI_INDEX_URL (or the wheelhouse); resolved once per dry run, as the flashinfer phase needs its pins too.
sglang_resolution() {
  local file="$REHEARSAL_DIR/sglang-resolution" from=(--index "$PYPI_INDEX_URL")
  [[ -z "$WHEELHOUSE" ]] || from=(--wheelhouse "$WHEELHOUSE")
  [[ -s "$file" ]] || toolkit llmhost.setup.indexes check --uv "$REHEARSAL_UV" "${from[@]}" --prerelease \
    --show torch,flashinfer-python,sglang-kernel "sglang==$SGLANG_VERSION" >"$file" || true
  [[ -s "$file" ]] || fail "could not rehearse sglang==$SGLANG_VERSION (message above)"
  cat "$file"
}

# rehearse_sglang: sglang==$SGLANG_VERSION resolves where the install takes it from, and torch resolves where
# torch_source would take it from (PyTorch's index, else PyPI); either one missing fails like the real install would.
rehearse_sglang() {
  local resolution verdict torch
  rehearsal_uv || { log "sglang: not rehearsed — $REHEARSAL_NOTE"; return 0; }
  resolution=$(sglang_resolution)
  verdict=${resolution%%$'\n'*}
  [[ $verdict == *": resolves "* ]] \
    || fail "sglang==$SGLANG_VERSION from $verdict — a real install stops here: check SGLANG_VERSION and PYPI_INDEX_URL"
  log "sglang: sglang==$SGLANG_VERSION from $verdict"
  torch=$(awk '$1 == "pin" && $2 == "torch" {print $3}' <<<"$resolution")
  [[ $MODE == install && -n "$torch" ]] || return 0
  verdict=$(toolkit llmhost.setup.indexes check --uv "$REHEARSAL_UV" --index "$TORCH_INDEX_URL" --no-deps "torch==$torch" | head -n 1) || true
  if [[ $verdict == *": unreachable "* ]]; then
    log "sglang: torch==$torch from $verdict — a real install takes torch from PyPI instead ($(torch_pypi_note))"
    return 0
  fi
  [[ $verdict == *": resolves "* ]] \
    || fail "torch==$torch (uv --torch-backend $TORCH_BACKEND) from $verdict — a real install stops here: use --wheelhouse DIR"
  log "sglang: torch==$torch (uv --torch-backend $TORCH_BACKEND) from $verdict"
}

# torch_source: the uv flags that pick where torch comes from. PyTorch's CUDA index when it answers; else PyPI, whose
# torch wheels are CUDA 13 builds for torch 2.11 (checked: they pull cuda-toolkit 13.0 and nvidia-*-cu13) — a proxy
# that lets only PyPI through still installs. The flashinfer phase checks torch's CUDA major either way.
torch_source() {
  if curl -fsS --max-time 8 -o /dev/null "$TORCH_INDEX_URL/torch/" 2>>"$LOG_FILE"; then
    echo --torch-backend "$TORCH_BACKEND"
  else
    warn "sglang: $TORCH_INDEX_URL cannot be reached — torch comes from PyPI ($(torch_pypi_note))"
  fi
}

torch_pypi_note() { echo "PyPI's torch for SGLang $SGLANG_VERSION is a CUDA $CUDA_MAJOR build; the flashinfer phase checks it"; }

toolkit() { "$(host_python)" -m "$@"; }
uv_pip() { step "$WORK_DIR/venv/bin/uv" pip "$1" --python "$SGLANG_PYTHON" "${@:2}"; }
installed_version() { toolkit llmhost.setup.versions version-of --python "$SGLANG_PYTHON" "$1" | awk '{print $2}'; }

phase_os() {
  local file=${OS_RELEASE_FILE:-/etc/os-release} id version
  [[ -r "$file" ]] || fail "cannot read $file"
  id=$(sed -n 's/^ID=//p' "$file" | tr -d '"')
  version=$(sed -n 's/^VERSION_ID=//p' "$file" | tr -d '"')
  if [[ "$id" == ubuntu && "$version" == 24.04 ]]; then
    log "os: Ubuntu 24.04"
  elif [[ $MODE == byo ]]; then
    log "os: $id $version (bring-your-own Python: nothing is installed from the OS, so any release is fine)"
  elif ((FORCE_OS)); then
    warn "os: $id $version is not Ubuntu 24.04 — continuing because of --force-os (apt names may differ)"
    log "os: $id $version (--force-os)"
  else
    fail "this is $id $version, not Ubuntu 24.04 — use an Ubuntu 24.04 host, or re-run with --force-os"
  fi
}

phase_packages() {
  local pkg missing=()
  if ! command -v dpkg-query >/dev/null 2>&1; then
    [[ $MODE == install ]] || { warn "packages: no dpkg-query, cannot verify ${BASE_PACKAGES[*]}"; return 0; }
    fail "dpkg-query not found — this installer needs Ubuntu (apt); or bring your own Python with --python"
  fi
  for pkg in "${BASE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  if ((${#missing[@]} == 0)); then
    log "packages: all ${#BASE_PACKAGES[@]} present (${BASE_PACKAGES[*]})"
  elif [[ $MODE != install ]]; then
    warn "packages: missing ${missing[*]} (not installed in $MODE mode; serve.sh needs tmux and curl)"
    log "packages: verified; missing ${missing[*]}"
  else
    need_root "installing ${missing[*]}" "sudo apt-get install -y ${missing[*]}"
    as_root "${APT_GET[@]}" update -q
    as_root env DEBIAN_FRONTEND=noninteractive "${APT_GET[@]}" install -y -q --no-install-recommends "${missing[@]}"
    log "packages: $(is_dry && echo would install || echo installed) ${missing[*]}"
  fi
}

# NVIDIA's PCI vendor id is 10de; without lspci (minimal images) read sysfs directly.
has_nvidia_pci() {
  if command -v lspci >/dev/null 2>&1; then lspci -nn | grep -qi '\[10de:'; else grep -qsi 0x10de /sys/bus/pci/devices/*/vendor; fi
}

phase_driver() {
  local out first version major
  if command -v nvidia-smi >/dev/null 2>&1; then
    out=$(nvidia-smi --query-gpu=driver_version,name --format=csv,noheader 2>>"$LOG_FILE") \
      || fail "nvidia-smi failed (driver not loaded? just installed? reboot) — run nvidia-smi to see why"
    [[ -n "$out" ]] || fail "nvidia-smi lists no GPU — check the GPU is attached (nvidia-smi -L)"
    first=${out%%$'\n'*}
    version=${first%%,*}
    major=${version%%.*}
    [[ "$major" =~ ^[0-9]+$ ]] || fail "cannot read a driver version from nvidia-smi output '$first'"
    ((major >= MIN_DRIVER)) \
      || fail "driver $version is older than R$MIN_DRIVER (CUDA $CUDA_MAJOR needs it) — upgrade: sudo apt-get install -y $DRIVER_PACKAGE && sudo reboot, then re-run ./setup_host.sh"
    log "driver: $version on $(wc -l <<<"$out") x${first#*,} (R$major >= R$MIN_DRIVER)"
    return 0
  fi
  has_nvidia_pci || fail "no NVIDIA GPU found (no nvidia-smi, no NVIDIA PCI device) — run this on an NVIDIA GPU host"
  [[ $MODE == install ]] \
    || fail "an NVIDIA GPU is present but no driver (nvidia-smi) — install it: sudo apt-get install -y $DRIVER_PACKAGE && sudo reboot"
  need_root "installing the NVIDIA driver" "sudo apt-get install -y $DRIVER_PACKAGE"
  as_root "${APT_GET[@]}" update -q
  as_root env DEBIAN_FRONTEND=noninteractive "${APT_GET[@]}" install -y -q "$DRIVER_PACKAGE"
  is_dry && { log "driver: would install $DRIVER_PACKAGE, then stop with REBOOT REQUIRED"; return 0; }
  log "driver: REBOOT REQUIRED — installed $DRIVER_PACKAGE; reboot and re-run ./setup_host.sh"
  exit 3
}

# Prints "VERSION PATH" of the newest nvcc found (PATH first, then the toolkit's fixed locations).
# "RELEASE PATH" of an nvcc of CUDA $CUDA_MAJOR if any is installed (PATH first, then /usr/local), else of the
# first nvcc found, else nothing: a CUDA 12 nvcc first on PATH must not hide an installed CUDA 13.
find_nvcc() {
  local candidate release first=""
  for candidate in "$(command -v nvcc 2>/dev/null || true)" /usr/local/cuda/bin/nvcc /usr/local/cuda-"$CUDA_MAJOR".*/bin/nvcc; do
    [[ -x "$candidate" ]] || continue
    release=$("$candidate" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p' | head -n 1)
    [[ -n "$release" ]] || continue
    [[ ${release%%.*} == "$CUDA_MAJOR" ]] && { echo "$release $candidate"; return 0; }
    [[ -n "$first" ]] || first="$release $candidate"
  done
  [[ -z "$first" ]] || echo "$first"
}

phase_cuda() {
  local found release arch deb torch_cuda
  found=$(find_nvcc)
  release=${found%% *}
  if [[ -n "$found" && ${release%%.*} == "$CUDA_MAJOR" ]]; then
    [[ "$(command -v nvcc 2>/dev/null)" == "${found#* }" ]] \
      || warn "cuda: ${found#* } is not the nvcc on PATH — FlashInfer JIT uses PATH/CUDA_HOME: export CUDA_HOME=$(dirname "$(dirname "${found#* }")")"
    log "cuda: nvcc $release at ${found#* }"
    return 0
  fi
  if [[ $MODE == byo ]]; then
    torch_cuda=$("$SGLANG_PYTHON" -c 'import torch; print(torch.version.cuda)' 2>>"$LOG_FILE" || echo unknown)
    warn "cuda: no nvcc $CUDA_MAJOR.x (found: ${found:-none}) — cached FlashInfer kernels work, new ones cannot JIT-compile"
    log "cuda: torch in $SGLANG_PYTHON is built for CUDA $torch_cuda; nvcc ${release:-absent} (warning above)"
    return 0
  fi
  [[ $MODE == install ]] \
    || fail "nvcc $CUDA_MAJOR.x not found (found: ${found:-none}) — install $CUDA_PACKAGE (offline: from a local apt mirror) and re-run"
  need_root "installing $CUDA_PACKAGE" "sudo apt-get install -y $CUDA_PACKAGE"
  need_network "$NVIDIA_REPO/" "install $CUDA_PACKAGE from a local apt mirror (or copy CUDA $CUDA_MAJOR here), then re-run"
  arch=$(uname -m)
  [[ $arch == aarch64 ]] && arch=sbsa
  deb="$WORK_DIR/downloads/cuda-keyring_1.1-1_all.deb"
  step mkdir -p "$WORK_DIR/downloads"
  step curl -fsSLo "$deb" "$NVIDIA_REPO/$arch/cuda-keyring_1.1-1_all.deb"
  if ! is_dry && [[ $(dpkg-deb -f "$deb" Package 2>>"$LOG_FILE") != cuda-keyring ]]; then
    fail "$deb is not the cuda-keyring package (proxy error page?) — delete it and re-run"
  fi
  as_root env DEBIAN_FRONTEND=noninteractive "${APT_GET[@]}" install -y -q "$deb" # apt, unlike dpkg, waits for the lock
  is_dry || dpkg-query -W -f='${Status}' cuda-keyring 2>/dev/null | grep -q 'install ok installed' \
    || fail "cuda-keyring did not install — see $LOG_FILE"
  as_root "${APT_GET[@]}" update -q
  log "cuda: $(is_dry && echo would install || echo installing) $CUDA_PACKAGE (~4 GB, typically 3-6 min)"
  as_root env DEBIAN_FRONTEND=noninteractive "${APT_GET[@]}" install -y -q "$CUDA_PACKAGE"
  is_dry && return 0
  found=$(find_nvcc)
  [[ ${found%%.*} == "$CUDA_MAJOR" ]] || fail "$CUDA_PACKAGE installed but no nvcc $CUDA_MAJOR.x found — see $LOG_FILE"
  log "cuda: installed $CUDA_PACKAGE (nvcc ${found%% *} at ${found#* })"
}

phase_python() {
  local venv="$WORK_DIR/venv" py_version
  if [[ $MODE == byo ]]; then
    py_version=$("$SGLANG_PYTHON" -c 'import sys; print(sys.version.split()[0]); assert sys.version_info >= (3, 10)' \
      2>>"$LOG_FILE") || fail "$SGLANG_PYTHON does not run or is older than Python 3.10"
    log "python: bring-your-own $SGLANG_PYTHON (Python $py_version); no venv created"
    return 0
  fi
  if [[ -x "$venv/bin/python" ]] && "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
    note "reusing $venv"
  else
    command -v python3.12 >/dev/null 2>&1 \
      || fail "python3.12 not found — install python3.12-venv (Ubuntu 24.04 ships it) or use --python PATH"
    is_dry || need_disk $((VENV_NEED_GB * 1073741824)) "$WORK_DIR" "the venv (sglang + torch + flashinfer)"
    step python3.12 -m venv "$venv"
  fi
  if [[ ! -x "$venv/bin/uv" ]]; then
    [[ $MODE == install ]] && need_network "$PYPI_INDEX_URL/uv/"
    # uv goes into the venv itself: Ubuntu 24.04's PEP 668 guard refuses `pip install --user` on the system Python.
    step "$venv/bin/python" -m pip install -q "${SRC[@]}" uv
  fi
  if is_dry; then
    log "python: would use $venv (Python 3.12) with uv; the install needs ~$VENV_NEED_GB GB free there"
    local rc=0
    rehearsal_uv || rc=$?
    ((rc != 1)) || fail "$REHEARSAL_NOTE"
    if ((rc == 0)); then log "python: rehearsing the installs with $("$REHEARSAL_UV" --version 2>&1) ($REHEARSAL_NOTE)"; else warn "python: installs not rehearsed — $REHEARSAL_NOTE"; fi
    return 0
  fi
  log "python: $venv (Python $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0])')), $("$venv/bin/uv" --version)"
}

phase_sglang() {
  local have=-
  if [[ -x "$SGLANG_PYTHON" ]]; then
    have=$(installed_version sglang) || fail "cannot list the packages of $SGLANG_PYTHON (message above)"
  fi
  if [[ "$have" != - ]] && toolkit llmhost.setup.versions same "$have" "$SGLANG_VERSION"; then
    [[ $MODE == byo ]] || uv_pip install "${SRC[@]}" -e "$REPO_DIR"
    log "sglang: $have (= SGLANG_VERSION) in $SGLANG_PYTHON"
    return 0
  fi
  if [[ $MODE == byo ]]; then
    [[ "$have" == - ]] && fail "sglang is not installed in $SGLANG_PYTHON — install sglang==$SGLANG_VERSION there, or drop --python to let setup build a venv"
    fail "$SGLANG_PYTHON has sglang $have, SGLANG_VERSION is $SGLANG_VERSION — accept it with SGLANG_VERSION=$have ./setup_host.sh --python $SGLANG_PYTHON"
  fi
  local extra=(--prerelease=allow) torch_from=() # sglang needs pre-release deps (flash-attn-4 4.0.0b*)
  if [[ $MODE == install ]]; then
    need_network "$PYPI_INDEX_URL/sglang/"
    torch_from=(--torch-backend "$TORCH_BACKEND") # torch, torchvision, torchaudio; the rest from PyPI
    is_dry || read -r -a torch_from <<<"$(torch_source)" # the dry run's rehearsal says where torch would come from
    extra+=("${torch_from[@]}")
  fi
  is_dry || need_disk $((VENV_NEED_GB * 1073741824)) "$WORK_DIR" "sglang + torch + flashinfer"
  log "sglang: $(is_dry && echo would install || echo installing) sglang==$SGLANG_VERSION and its CUDA $CUDA_MAJOR stack (~11 GB of wheels, typically 3-8 min)"
  # --compile-bytecode: uv leaves .pyc to the first import, and every server start imports SGLang's stack twice
  # (launcher, then the spawned scheduler); compiled here, the first start does not pay for it
  uv_pip install --compile-bytecode "${SRC[@]}" "${extra[@]}" "sglang==$SGLANG_VERSION" -e "$REPO_DIR"
  is_dry && { rehearse_sglang; return 0; }
  have=$(installed_version sglang) || fail "cannot list the packages of $SGLANG_PYTHON (message above)"
  toolkit llmhost.setup.versions same "$have" "$SGLANG_VERSION" || fail "asked for sglang==$SGLANG_VERSION, got $have — see $LOG_FILE"
  log "sglang: installed $have (+ toolkit client deps) in $SGLANG_PYTHON"
}

# flashinfer_plan: llmhost.setup.versions' plan for the FlashInfer packages; outside bring-your-own mode each add-on to
# install also gets a 'sources' line (what each of its indexes said) and where it comes from: 'install NAME VERSION
# WHERE', 'skip NAME VERSION WHY' (no index answered, or the wheelhouse lacks it) or 'missing NAME VERSION WHY'.
# A dry run before the venv exists plans for the flashinfer-python that uv resolved for sglang.
flashinfer_plan() {
  [[ $MODE != byo ]] || { toolkit llmhost.setup.versions flashinfer-plan --python "$SGLANG_PYTHON"; return; }
  local uv="$WORK_DIR/venv/bin/uv" from=(--python "$SGLANG_PYTHON") base
  if is_dry; then
    rehearsal_uv || { echo "norehearsal $REHEARSAL_NOTE"; return 0; }
    uv=$REHEARSAL_UV
    if ! "$SGLANG_PYTHON" -c 'import sglang' >/dev/null 2>&1; then
      base=$(sglang_resolution | awk '$1 == "pin" && $2 == "flashinfer-python" {print $3}')
      [[ -n "$base" ]] || { echo "norehearsal sglang==$SGLANG_VERSION does not resolve (sglang phase)"; return 0; }
      from=(--planned-base "$base" --cuda "$TORCH_CUDA")
    fi
  fi
  [[ -z "$WHEELHOUSE" ]] || from+=(--wheelhouse "$WHEELHOUSE")
  toolkit llmhost.setup.indexes flashinfer-plan --uv "$uv" "${from[@]}"
}

phase_flashinfer() {
  local plan kind name version detail base="" tag="" removes=() installs=() oks=() skips=() reasons=() bad=()
  plan=$(flashinfer_plan) || fail "could not read the FlashInfer packages (message above)"
  if [[ $plan == norehearsal* ]]; then
    log "flashinfer: would read the flashinfer-python version sglang installs (V), remove flashinfer-* of other versions, install flashinfer-cubin==V and flashinfer-jit-cache==V from the first of their indexes that has them (not rehearsed: ${plan#norehearsal })"
    return 0
  fi
  note "plan: ${plan//$'\n'/; }"
  while read -r kind name version detail; do
    case $kind in
      cuda) tag=$name
        [[ ${version%%.*} == "$CUDA_MAJOR" ]] || fail "torch in $SGLANG_PYTHON is built for CUDA $version, not $CUDA_MAJOR — reinstall torch for $TORCH_BACKEND" ;;
      ok) oks+=("$name $version"); [[ $name == flashinfer-python ]] && base=$version ;;
      error) fail "$name $version: $detail — reinstall sglang==$SGLANG_VERSION, which brings the flashinfer-python it pins" ;;
      remove) removes+=("$name") ;;
      sources) if is_dry; then log "flashinfer: $name==$version $detail"; else note "$name==$version $detail"; fi ;;
      install) installs+=("$name==$version@$detail") ;;
      skip) skips+=("$name"); reasons+=("$detail") ;;
      missing) fail "$name==$version is on none of its indexes: $detail — SGLANG_VERSION=$SGLANG_VERSION pins flashinfer-python $version; point FLASHINFER_INDEX_URL at a mirror that has it, or pick another SGLANG_VERSION" ;;
    esac
  done <<<"$plan"
  if [[ $MODE == byo ]]; then
    ((${#removes[@]} == 0)) || fail "${removes[*]} do not match flashinfer-python $base (FlashInfer refuses to import) — $SGLANG_PYTHON -m pip uninstall -y ${removes[*]}"
    ((${#installs[@]} == 0)) || warn "flashinfer: ${installs[*]%%==*} not installed — kernels come from the JIT cache (FLASHINFER_WORKSPACE_BASE=$FLASHINFER_WORKSPACE_BASE) or compile on first use"
    log "flashinfer: ${oks[*]} — consistent with sglang ${installs[*]:+(add-ons absent: JIT cache instead)}"
    return 0
  fi
  ((${#removes[@]} == 0)) || uv_pip uninstall "${removes[@]}"
  local spec src
  for spec in "${installs[@]}"; do
    src=(--index-url "${spec#*@}")
    [[ -z "$WHEELHOUSE" ]] || src=("${SRC[@]}")
    is_dry && log "flashinfer: would install ${spec%%@*} from ${spec#*@}"
    uv_pip install --no-deps "${src[@]}" "${spec%%@*}"
  done
  # FlashInfer works without its add-ons: it JIT-compiles what they would have brought, and the kernel check below
  # proves that it does
  ((${#skips[@]} == 0)) || warn "flashinfer: going on without ${skips[*]} — $(printf '%s; ' "${reasons[@]}")FlashInfer JIT-compiles their kernels on first use instead: a first server start without them took ~7 min on an H200 (~1 min once FLASHINFER_WORKSPACE_BASE holds the kernels)"
  is_dry && return 0
  plan=$(toolkit llmhost.setup.versions flashinfer-plan --python "$SGLANG_PYTHON") || fail "could not re-read the FlashInfer packages"
  while read -r kind name _; do
    case $kind in
      ok | cuda) ;;
      install) [[ " ${skips[*]} " == *" $name "* ]] || bad+=("$name") ;; # a skipped add-on stays absent
      *) bad+=("$name") ;;
    esac
  done <<<"$plan"
  ((${#bad[@]} == 0)) || fail "FlashInfer packages still inconsistent after install: ${plan//$'\n'/; }"
  log "flashinfer: $(grep '^ok ' <<<"$plan" | awk '{printf "%s %s, ", $2, $3}')all equal ($tag)${skips[*]:+; without ${skips[*]} (JIT-compiled instead)}"
}

phase_jit_cache() {
  local dir=$FLASHINFER_WORKSPACE_BASE kernels=0
  step mkdir -p "$dir"
  if ! is_dry; then
    if [[ ! -w "$dir" ]]; then
      [[ $MODE == byo ]] || fail "$dir is not writable — fix its owner or set FLASHINFER_WORKSPACE_BASE"
      warn "jit-cache: $dir is read-only — cached kernels load, new ones cannot be compiled into it"
    fi
  fi
  [[ -d "$dir" ]] && kernels=$(find "$dir" -name '*.so' 2>/dev/null | wc -l)
  log "jit-cache: FLASHINFER_WORKSPACE_BASE=$dir ($kernels compiled kernels cached; serve.sh passes it to the server)"
}

phase_model() {
  local scope=() what="weights + config + tokenizer" result bytes
  ((SKIP_MODEL)) && { log "model: skipped (--skip-model)"; return 0; }
  [[ $LOAD_FORMAT == dummy ]] && { scope=(--config-only); what="config + tokenizer (LOAD_FORMAT=dummy)"; }
  if result=$(toolkit llmhost.setup.model_files check --model-dir "$MODEL_DIR" "${scope[@]}" 2>&1); then
    log "model: $what $result"
    return 0
  fi
  note "$result"
  is_dry && { log "model: would download $MODEL_ID $what into $MODEL_DIR (now: ${result#*incomplete: })"; return 0; }
  [[ $MODE != wheelhouse ]] || fail "${result#model_files: } — offline (--wheelhouse): copy the model there and re-run"
  need_network "$HF_URL" "copy the model into MODEL_DIR=$MODEL_DIR from a host that has it (or set HF_ENDPOINT to a mirror), then re-run"
  bytes=$("$SGLANG_PYTHON" -m llmhost.setup.model_files size --model-id "$MODEL_ID" "${scope[@]}" 2>>"$LOG_FILE") \
    || fail "cannot list $MODEL_ID on the hub — check MODEL_ID (and HF_TOKEN for gated models)"
  need_disk $((bytes + bytes / 20)) "$MODEL_DIR" "$MODEL_ID ($what)"
  log "model: downloading $MODEL_ID $what, $((bytes / 1048576)) MB (~$((bytes / 52428800 + 1)) s at 50 MB/s)"
  step "$SGLANG_PYTHON" -m llmhost.setup.model_files download --model-id "$MODEL_ID" --model-dir "$MODEL_DIR" "${scope[@]}"
  result=$(toolkit llmhost.setup.model_files check --model-dir "$MODEL_DIR" "${scope[@]}" 2>&1) || fail "${result#model_files: }"
  log "model: downloaded; $what $result"
}

phase_kernel() {
  is_dry && { log "kernel: would run $SGLANG_PYTHON -m llmhost.fi.verify --model-dir $MODEL_DIR (CUDA-core + tensor-core GQA decode)"; return 0; }
  if [[ ! -f "$MODEL_DIR/config.json" ]]; then
    ((SKIP_MODEL)) && { warn "kernel: skipped — $MODEL_DIR/config.json is absent (--skip-model); the check needs the model's head shape"; return 0; }
    fail "$MODEL_DIR/config.json is missing — run ./setup_host.sh --only model"
  fi
  note "+ $SGLANG_PYTHON -m llmhost.fi.verify --model-dir $MODEL_DIR"
  "$SGLANG_PYTHON" -m llmhost.fi.verify --model-dir "$MODEL_DIR" 2>&1 | tee -a "$LOG_FILE" | grep --line-buffered '^\[verify\]\|^verify:' \
    || fail "FlashInfer decode does not match the reference (lines above) — full output in $LOG_FILE"
  log "kernel: FlashInfer GQA paged decode matches the float32 reference on both paths"
}

# WORK_DIR can be created and written, with room for the log: a full or read-only disk is one line, not a
# bash error from deep inside a phase.
check_work_dir() {
  mkdir -p "$WORK_DIR/logs" 2>/dev/null || die "cannot create $WORK_DIR/logs (permissions? read-only disk?) — set WORK_DIR to a writable directory"
  local probe="$WORK_DIR/logs/.write-test.$$"
  if ! (printf '%01024d' 0 >"$probe") 2>/dev/null; then
    rm -f "$probe"
    die "cannot write under $WORK_DIR (disk full or read-only) — free space or set WORK_DIR to a bigger disk"
  fi
  rm -f "$probe"
  PHASE=setup need_disk 104857600 "$WORK_DIR" "the setup log and state"
}

main() {
  parse_args "$@"
  [[ -z "$PYTHON_ARG" ]] || export SGLANG_PYTHON="$PYTHON_ARG"
  load_config
  export PYTHONPATH="$REPO_DIR${PYTHONPATH:+:$PYTHONPATH}" # llmhost.* for every python we run, the server's too
  if [[ -n "$WHEELHOUSE" ]]; then
    MODE=wheelhouse
    SRC=(--no-index --find-links "$WHEELHOUSE")
  elif [[ "$SGLANG_PYTHON" != "$WORK_DIR/venv/bin/python" ]]; then
    MODE=byo
    SGLANG_PYTHON=$(command -v "$SGLANG_PYTHON") || die "SGLANG_PYTHON=$SGLANG_PYTHON is not an executable — fix it or unset it"
  else
    SRC=(--index-url "$PYPI_INDEX_URL")
  fi
  if ! is_dry; then
    check_work_dir
    LOG_FILE="$WORK_DIR/logs/setup-$(date -u +%Y%m%dT%H%M%SZ).log"
    note "mode=$MODE args=$* sglang_python=$SGLANG_PYTHON"
  fi
  if is_dry; then # rehearsals download index pages and metadata: into a temp dir, never into WORK_DIR
    REHEARSAL_DIR=$(mktemp -d "${TMPDIR:-/tmp}/llmhost-setup-dry.XXXXXX")
    trap 'rm -rf "$REHEARSAL_DIR"' EXIT
    export UV_CACHE_DIR=${UV_CACHE_DIR:-$REHEARSAL_DIR/cache/uv} PIP_CACHE_DIR=${PIP_CACHE_DIR:-$REHEARSAL_DIR/cache/pip}
  fi
  # uv's and pip's caches (~9 GB of wheels) go next to the venv: with WORK_DIR on a big disk, a small root disk
  # would still fill up through ~/.cache otherwise (and uv hard-links from a cache on the same filesystem)
  export UV_CACHE_DIR=${UV_CACHE_DIR:-$WORK_DIR/cache/uv} PIP_CACHE_DIR=${PIP_CACHE_DIR:-$WORK_DIR/cache/pip}
  log "mode: $MODE${WHEELHOUSE:+ ($WHEELHOUSE)}; WORK_DIR=$WORK_DIR; SGLANG_PYTHON=$SGLANG_PYTHON; log: $(is_dry && echo 'none (dry run)' || echo "$LOG_FILE")"
  local phase blocked=()
  for phase in "${PHASES[@]}"; do
    [[ -z "$ONLY" || "$ONLY" == "$phase" ]] || continue
    PHASE=$phase
    if ! is_dry; then
      "phase_${phase//-/_}"
    elif ! ("phase_${phase//-/_}"); then # a subshell, so the plan goes on past a check that would stop a real run
      log "$phase: a real run stops here (error above)"
      blocked+=("$phase")
    fi
  done
  PHASE=setup
  if is_dry; then
    log "dry run: nothing was changed; ${#blocked[@]} phase(s) would stop a real run${blocked[*]:+: ${blocked[*]}}"
    ((${#blocked[@]} == 0)) || exit 1
  else
    log "done${ONLY:+ (phase $ONLY)}; next: ./serve.sh start"
  fi
}

main "$@"
