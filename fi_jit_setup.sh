#!/usr/bin/env bash
# fi_jit_setup.sh — a clean environment for measuring FlashInfer's JIT (fi_bench.py jit): the serving stack's torch
# and flashinfer-python versions, NO prebuilt kernel packages (flashinfer-jit-cache, flashinfer-cubin), and a
# private, EMPTY JIT cache. Re-running empties the cache again.
#
#   ./fi_jit_setup.sh                        # pick the method below, build, verify, print the env to use
#   ./fi_jit_setup.sh --dry-run              # print the plan and the commands; change nothing
#   ./fi_jit_setup.sh --wheelhouse ~/whl     # offline: flashinfer-python==V from a local wheel directory
#   ./fi_jit_setup.sh --pypi                 # flashinfer-python==V from the package index
#
# Methods (chosen from what SGLANG_PYTHON has installed):
#   reuse  SGLANG_PYTHON has neither prebuilt package: use it as is, with the private cache.
#   view   otherwise: a venv whose site-packages is a filtered view (symlinks) of SGLANG_PYTHON's, leaving the
#          prebuilt packages out — same torch, same flashinfer, nothing downloaded. With --wheelhouse/--pypi the
#          view leaves flashinfer out too and flashinfer-python==V is pip-installed (--no-deps) into the venv.
# Writes $WORK_DIR/fi-jit-clean/{cache/, env.sh (FLASHINFER_WORKSPACE_BASE, PY, PYTHONPATH; run_phase4.sh sources it),
# view/ and venv/ (view method)}.
# Options: --dry-run | --wheelhouse DIR | --pypi | -h, --help. Exit: 0 ready, 1 a step failed, 2 bad arguments.
set -euo pipefail
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
LOG_PREFIX=fi-jit-setup
# shellcheck source=lib.sh
source "$(dirname "$SELF")/lib.sh"

PREBUILT=(flashinfer_jit_cache flashinfer_cubin)

usage() { print_usage "$SELF"; }

# What the serving Python has: versions, prebuilt packages, the directories holding torch and flashinfer.
query_serving_python() {
  "$SGLANG_PYTHON" - <<'PY'
import importlib.metadata as md, importlib.util as u, os
def version(dist, mod):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        spec = u.find_spec(mod)
        return getattr(__import__(mod), "__version__", "") if spec else ""
def parent(mod):
    spec = u.find_spec(mod)
    return os.path.dirname(os.path.dirname(spec.origin)) if spec and spec.origin else ""
print(f"TORCH_VERSION={version('torch', 'torch')}")
print(f"FI_VERSION={version('flashinfer-python', 'flashinfer')}")
print(f"HAS_JIT_CACHE={int(u.find_spec('flashinfer_jit_cache') is not None)}")
print(f"HAS_CUBIN={int(u.find_spec('flashinfer_cubin') is not None)}")
print(f"TORCH_DIR={parent('torch')}")
print(f"FI_DIR={parent('flashinfer')}")
PY
}

# Link every entry of SITE into VIEW except the prebuilt kernel packages (and flashinfer itself when pip installs it).
link_view() {
  local site=$1 view=$2 skip_flashinfer=$3 entry name pattern
  local -a skip=("${PREBUILT[@]}")
  [[ "$skip_flashinfer" == 1 ]] && skip+=(flashinfer flashinfer_python)
  for entry in "$site"/*; do
    name=$(basename "$entry")
    for pattern in "${skip[@]}"; do
      [[ "$name" == "$pattern" || "$name" == "$pattern"-* || "$name" == "$pattern".* ]] && continue 2
    done
    [[ -e "$view/$name" ]] || run ln -s "$entry" "$view/$name"
  done
}

build_view() {
  local clean=$1 install=$2 site_packages dir
  run rm -rf "$clean/view" "$clean/venv"
  run mkdir -p "$clean/view"
  local -a dirs=("$TORCH_DIR")
  [[ "$FI_DIR" != "$TORCH_DIR" ]] && dirs+=("$FI_DIR")
  for dir in "${dirs[@]}"; do
    if [[ "${DRY_RUN:-0}" == 1 ]]; then
      log "would link $dir/* into $clean/view, leaving out ${PREBUILT[*]}"
    else
      link_view "$dir" "$clean/view" "$install"
    fi
  done
  # --without-pip: no ensurepip download; the venv only needs an interpreter and the view.
  run "$SGLANG_PYTHON" -m venv --without-pip "$clean/venv"
  site_packages=$clean/venv/lib/python$("$SGLANG_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')/site-packages
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    log "would write $site_packages/llmhost_fi_view.pth (site.addsitedir $clean/view)"
  else
    # addsitedir (not a bare path) so .pth files inside the view are processed as in the original site-packages
    "$SGLANG_PYTHON" -c 'import sys; print("import site; site.addsitedir(%r)" % sys.argv[1])' "$clean/view" \
      >"$site_packages/llmhost_fi_view.pth"
  fi
  if [[ "$install" == 1 ]]; then
    run "$SGLANG_PYTHON" -m pip install -q --no-deps --target "$site_packages" "${PIP_SOURCE[@]}" \
      "flashinfer-python==$FI_VERSION"
  fi
}

# The environment must hide the prebuilt packages and keep the serving versions; one line per failure.
verify() {
  local py=$1 pythonpath=$2 got hidden torch_v fi_v
  got=$(PYTHONPATH="$pythonpath" FLASHINFER_WORKSPACE_BASE="$CACHE" "$py" -c '
import importlib.metadata as md, importlib.util as u
def version(dist, mod):
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return getattr(__import__(mod), "__version__", "?")
hidden = all(u.find_spec(m) is None for m in ("flashinfer_jit_cache", "flashinfer_cubin"))
print(int(hidden), version("torch", "torch"), version("flashinfer-python", "flashinfer"))') \
    || die "$py cannot import its packages — re-run ./fi_jit_setup.sh (or with --wheelhouse DIR)"
  read -r hidden torch_v fi_v <<<"$got"
  [[ "$hidden" == 1 ]] || die "$py still sees flashinfer-jit-cache or flashinfer-cubin — re-run ./fi_jit_setup.sh"
  [[ "$torch_v" == "$TORCH_VERSION" && "$fi_v" == "$FI_VERSION" ]] \
    || die "$py has torch $torch_v / flashinfer $fi_v, the server $TORCH_VERSION / $FI_VERSION — re-run ./fi_jit_setup.sh"
}

main() {
  local wheelhouse="" pypi=0
  while (($#)); do
    case "$1" in
      -h | --help) usage && return 0 ;;
      --dry-run) export DRY_RUN=1 ;;
      --wheelhouse) [[ $# -ge 2 ]] || die_usage "--wheelhouse needs a directory (see --help)"; wheelhouse=$2; shift ;;
      --pypi) pypi=1 ;;
      *) die_usage "unknown option $1 (see ./fi_jit_setup.sh --help)" ;;
    esac
    shift
  done
  load_config
  command -v "$SGLANG_PYTHON" >/dev/null 2>&1 \
    || die "SGLANG_PYTHON=$SGLANG_PYTHON not found — run ./setup_host.sh, or set SGLANG_PYTHON to the server's python"
  local facts
  facts=$(query_serving_python) || die "$SGLANG_PYTHON failed to list its packages — check it runs: $SGLANG_PYTHON -c 'import torch'"
  local TORCH_VERSION FI_VERSION HAS_JIT_CACHE HAS_CUBIN TORCH_DIR FI_DIR
  while IFS='=' read -r key value; do printf -v "$key" '%s' "$value"; done <<<"$facts"
  [[ -n "$TORCH_VERSION" && -n "$FI_VERSION" ]] \
    || die "$SGLANG_PYTHON lacks torch or flashinfer-python — run ./setup_host.sh first"
  log "serving Python $SGLANG_PYTHON: torch $TORCH_VERSION, flashinfer-python $FI_VERSION, flashinfer-jit-cache $( ((HAS_JIT_CACHE)) && echo present || echo absent), flashinfer-cubin $( ((HAS_CUBIN)) && echo present || echo absent)"

  # view: the venv is self-contained, so a PYTHONPATH pointing at the serving packages must not leak back in
  [[ "$WORK_DIR" == /?* ]] || die "WORK_DIR='$WORK_DIR' is not an absolute path — nothing is deleted outside it"
  local clean=$WORK_DIR/fi-jit-clean py install=0 pythonpath=${PYTHONPATH:-}
  CACHE=$clean/cache
  PIP_SOURCE=()
  if [[ -n "$wheelhouse" ]]; then
    [[ -d "$wheelhouse" ]] || die "--wheelhouse $wheelhouse is not a directory"
    PIP_SOURCE=(--no-index --find-links "$wheelhouse") install=1
  elif ((pypi)); then
    install=1
  fi
  # Re-running empties the cache: the measurement must see compiles, not hits.
  run rm -rf "$CACHE"
  run mkdir -p "$CACHE"
  if ((HAS_JIT_CACHE == 0 && HAS_CUBIN == 0 && install == 0)); then
    log "method reuse: $SGLANG_PYTHON has no prebuilt kernel packages, so it is used as is with the private cache"
    py=$SGLANG_PYTHON
  else
    log "method view: a venv seeing $SGLANG_PYTHON's packages minus ${PREBUILT[*]}$( ((install)) && echo ", flashinfer-python==$FI_VERSION pip-installed")"
    build_view "$clean" "$install"
    py=$clean/venv/bin/python pythonpath=
  fi
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    log "would verify $py and write $clean/env.sh"
    return 0
  fi
  verify "$py" "$pythonpath"
  printf '# written by fi_jit_setup.sh %s\nFLASHINFER_WORKSPACE_BASE=%q\nPY=%q\nPYTHONPATH=%q\n' "$(date -u +%FT%TZ)" \
    "$CACHE" "$py" "$pythonpath" >"$clean/env.sh.tmp" && mv -f "$clean/env.sh.tmp" "$clean/env.sh"
  log "ready (empty cache, prebuilt kernels hidden); env in $clean/env.sh:"
  echo "FLASHINFER_WORKSPACE_BASE=$CACHE PY=$py PYTHONPATH=$pythonpath"
  log "next: FLASHINFER_WORKSPACE_BASE=$CACHE PYTHONPATH=$pythonpath $py fi_bench.py jit"
}

main "$@"
