#!/usr/bin/env bash
# The CPU test suite (what CI runs): builds .venv with the pinned client + test dependencies (and torch's CPU build
# in a folder of its own), makes sure tmux is present (serve.sh integration tests drive real tmux), runs shellcheck on
# every shell script, then pytest.
#   ./tests/run_cpu.sh            # everything
#   ./tests/run_cpu.sh -k serve   # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
LOG_PREFIX=tests
# shellcheck source=lib.sh
source lib.sh

ensure_tmux() {
  command -v tmux >/dev/null 2>&1 && return 0
  log "installing tmux (serve.sh runs the server in tmux)"
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  if ! { "${sudo[@]}" apt-get update -qq >/dev/null &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null; }; then
    die "could not install tmux — install it (sudo apt-get install -y tmux) and re-run"
  fi
}

# The dashboard integration test opens the page in headless Chromium (no script errors, every chart drawn).
ensure_chromium() {
  local name
  for name in chromium chromium-browser google-chrome; do
    command -v "$name" >/dev/null 2>&1 && return 0
  done
  log "installing chromium + chromium-driver (the dashboard test renders its page headless)"
  local sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo -n)
  if ! { "${sudo[@]}" apt-get update -qq >/dev/null &&
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }; then
    die "could not install chromium — install it (sudo apt-get install -y chromium chromium-driver) and re-run"
  fi
}

# torch's CPU build (~200 MB) for the test that runs the shared-prefix patches in torch on the CPU
# (tests/unit/test_shared_prefix_patches.py), from PyTorch's CPU index, so that pip does not take PyPI's CUDA build
# (GBs). It goes into a folder of its own that only that test puts on its path: torch in the venv itself would be
# imported by every subprocess that looks for a GPU stack (seconds each; the suite took 1.5 min longer).
TORCH_CPU=(torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu --retries 1 --timeout 15)
TORCH_DIR=.venv/torch-cpu

ensure_venv() {
  local stamp
  stamp=.venv/.deps-$( (cat pyproject.toml; echo "${TORCH_CPU[*]} $TORCH_DIR") | sha1sum | cut -c1-12)
  [[ -f "$stamp" ]] && return 0
  log "creating .venv with the pinned dependencies"
  [[ -x .venv/bin/python ]] || "$(host_python)" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  rm -rf "$TORCH_DIR"
  .venv/bin/python -m pip install -q --target "$TORCH_DIR" "${TORCH_CPU[@]}" ||
    die "could not install torch's CPU build (${TORCH_CPU[0]}) into $TORCH_DIR"
  rm -f .venv/.deps-* && touch "$stamp"
}

main() {
  ensure_tmux
  ensure_chromium
  ensure_venv
  log "shellcheck"
  mapfile -t scripts < <(git ls-files '*.sh' 2>/dev/null || ls ./*.sh tests/*.sh)
  .venv/bin/shellcheck -x "${scripts[@]}"
  log "pytest (CPU suite)"
  # 6 workers on any core count: most tests wait on stand-in servers and subprocesses, not on the CPU (on 2 cores:
  # 6m00s against 8m20s with 4 workers; 8 workers were no faster and starved the timing-bound runs)
  .venv/bin/python -m pytest -n 6 "$@"
}

main "$@"
