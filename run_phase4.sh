#!/usr/bin/env bash
# run_phase4.sh — open FlashInfer up: kernel benchmarks, JIT cost, a live trace of the server, one HTML report.
#
#   ./run_phase4.sh all                  # kernels, jit, trace, report (in that order; est. ~9-10 min on an H200)
#   ./run_phase4.sh kernels report       # any subset of the stages, run in the order given
#   ./run_phase4.sh all --quick          # sparse --quick, 5 JIT variants, 20 s of trace traffic (est. ~5 min)
#
# Stages (H200 estimates at full size):
#   kernels  fi_bench.py sparse + balance     ~4 min  (server stopped meanwhile: the GPU must be ours alone)
#   jit      fi_jit_setup.sh, then fi_bench.py jit in the clean environment it prints: 10 variants, compiled 4 at a
#            time on 16 cores                 ~2 min  (server stopped too)
#   trace    fi_trace.py capture: server start with the tracer, warm-up, 40 s of traffic (tracer off/on/on/off),
#            restore                          ~3-4 min (most of it the server start)
#   report   fi_bench.py report -> fi_report.html + fi_summary.json (charts need plotly: the toolkit venv; without
#            it the page has every table and says how to add the charts)
# A server that was running before kernels/jit is started again at the end, also after Ctrl-C, SIGTERM or a
# dropped SSH session (SIGHUP). A failed stage does not stop the others; the run ends with a table (stage,
# status, seconds) and exits 1 when any stage failed, or when the server could not be stopped or started again.
# Options: --quick | --jit-variants LIST (fi_bench.py jit --variants) | --jit-jobs N (variants compiled at a
# time; default CPU cores / 4, at most 4) | --trace-duration-s N (default 40) | --dry-run | -h, --help. Writes $RESULTS_DIR/fi/{sparse,balance,jit,trace}.json, fi_report.html, fi_summary.json and the log
# $RESULTS_DIR/fi/phase4-<UTC timestamp>.log.
set -euo pipefail
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
REPO_DIR=$(dirname "$SELF")
LOG_PREFIX=phase4
# shellcheck source=lib.sh
source "$REPO_DIR/lib.sh"

QUICK_JIT_VARIANTS=decode_base,decode_softcap,decode_fp8_kv,prefill_paged,decode_tensor_cores
usage() { print_usage "$SELF"; }

# The Python for a stage: the one rule (llmhost.deps) — the first of the checkout's .venv, SGLANG_PYTHON, python3
# that has every module named; else SGLANG_PYTHON, whose own one-line error then says what is missing.
python_with() { (cd "$REPO_DIR" && "$(host_python)" -m llmhost.deps "$@"); }

# --- server handling: kernel timings need the GPU to themselves --------------------------------------------------
SERVER_WAS_RUNNING=0 SERVER_STOPPED=0 SERVER_STOP_FAILED=0
# "running" = a server serve.sh started is alive, ready or still starting (status would call a starting one down)
pause_server() {
  ((SERVER_STOP_FAILED)) && return 1 # every later GPU stage too: its timings would share the GPU
  ((SERVER_STOPPED)) && return 0
  SERVER_STOPPED=1
  if "$REPO_DIR/serve.sh" running >/dev/null 2>&1; then
    SERVER_WAS_RUNNING=1
    log "stopping the server for the kernel benchmarks (it is started again afterwards)"
    if ! run "$REPO_DIR/serve.sh" stop; then
      SERVER_STOP_FAILED=1
      warn "could not stop the server — kernel timings would share the GPU"
      return 1
    fi
  fi
}

resume_server() {
  ((SERVER_STOPPED)) || return 0
  SERVER_STOPPED=0
  if ((SERVER_WAS_RUNNING)); then
    log "starting the server again"
    if ! run "$REPO_DIR/serve.sh" start; then
      warn "./serve.sh start failed — run it by hand"
      NAMES+=(server) STATUSES+=(FAILED) SECONDS_TAKEN+=(0)
    fi
  fi
}

# Ctrl-C, SIGTERM, SIGHUP: exit through on_exit, which starts a paused server again (a second Ctrl-C skips it)
on_exit() {
  local rc=$?
  # a hangup comes twice (the login shell forwards one, the kernel sends another): ignore TERM/HUP now, also in
  # the serve.sh start below (it inherits that); a second Ctrl-C still skips the restore
  trap - INT
  trap '' TERM HUP
  resume_server
  exit "$rc"
}

# --- stages ------------------------------------------------------------------------------------------------------
stage_kernels() {
  pause_server || return 1
  local -a quick=()
  ((QUICK)) && quick=(--quick)
  run "$SGLANG_PYTHON" "$REPO_DIR/fi_bench.py" sparse --out-dir "$OUT_DIR" "${quick[@]}" || return 1
  run "$SGLANG_PYTHON" "$REPO_DIR/fi_bench.py" balance --out-dir "$OUT_DIR"
}

stage_jit() {
  pause_server || return 1
  run "$REPO_DIR/fi_jit_setup.sh" || return 1
  local -a variants=()
  [[ -n "$JIT_VARIANTS" ]] && variants=(--variants "$JIT_VARIANTS")
  [[ -n "$JIT_JOBS" ]] && variants+=(--jobs "$JIT_JOBS")
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    log "would run, with $WORK_DIR/fi-jit-clean/env.sh sourced: \$PY fi_bench.py jit --out-dir $OUT_DIR ${variants[*]}"
    return 0
  fi
  # a subshell: the clean environment (its own PYTHONPATH, private cache) must not leak into later stages
  (
    # shellcheck source=/dev/null
    source "$WORK_DIR/fi-jit-clean/env.sh"
    export FLASHINFER_WORKSPACE_BASE PYTHONPATH
    "$PY" "$REPO_DIR/fi_bench.py" jit --out-dir "$OUT_DIR" "${variants[@]}"
  )
}

stage_trace() {
  # capture starts the server with the tracer and puts it back as it found it; a server paused for the kernels
  # stays down until the end, so it is started once (resume_server), not restarted twice
  run "$SGLANG_PYTHON" "$REPO_DIR/fi_trace.py" capture --out-dir "$OUT_DIR" --duration-s "$TRACE_DURATION_S"
}

stage_report() {
  run "$(python_with plotly pandas)" "$REPO_DIR/fi_bench.py" report --out-dir "$OUT_DIR"
}

# --- runner ------------------------------------------------------------------------------------------------------
NAMES=() STATUSES=() SECONDS_TAKEN=()
run_stage() {
  local name=$1 start=$SECONDS status=ok
  log "== stage $name =="
  "stage_$name" || status=FAILED
  NAMES+=("$name") STATUSES+=("$status") SECONDS_TAKEN+=("$((SECONDS - start))")
  log "== stage $name: $status in $((SECONDS - start))s =="
}

summary() {
  local i failed=0
  printf '\n%-8s %-7s %8s\n' stage status seconds
  for i in "${!NAMES[@]}"; do
    printf '%-8s %-7s %8s\n' "${NAMES[$i]}" "${STATUSES[$i]}" "${SECONDS_TAKEN[$i]}"
    [[ "${STATUSES[$i]}" == ok ]] || failed=1
  done
  printf '%-8s %-7s %8s\n' all "" "$SECONDS"
  printf 'log: %s\n' "$LOG_FILE"
  return "$failed"
}

main() {
  local -a stages=()
  QUICK=0 JIT_VARIANTS="" JIT_JOBS="" TRACE_DURATION_S=""
  while (($#)); do
    case "$1" in
      -h | --help) usage && return 0 ;;
      all) stages+=(kernels jit trace report) ;;
      kernels | jit | trace | report) stages+=("$1") ;;
      --quick) QUICK=1 ;;
      --dry-run) export DRY_RUN=1 ;;
      --jit-variants | --jit-jobs | --trace-duration-s)
        [[ $# -ge 2 ]] || die_usage "$1 needs a value (see ./run_phase4.sh --help)"
        if [[ "$1" == --jit-variants ]]; then
          [[ $2 =~ ^[a-z0-9_]+(,[a-z0-9_]+)*$ ]] || die_usage "--jit-variants $2: expected names like decode_base,prefill_paged"
          JIT_VARIANTS=$2
        elif [[ "$1" == --jit-jobs ]]; then
          [[ $2 =~ ^[1-9][0-9]*$ ]] || die_usage "--jit-jobs $2: expected a whole number >= 1"
          JIT_JOBS=$2
        else
          [[ $2 =~ ^[0-9]+([.][0-9]+)?$ && ! $2 =~ ^0+([.]0+)?$ ]] || die_usage "--trace-duration-s $2: expected seconds > 0"
          TRACE_DURATION_S=$2
        fi
        shift ;;
      *) die_usage "unknown stage or option '$1' (see ./run_phase4.sh --help)" ;;
    esac
    shift
  done
  ((${#stages[@]})) || die_usage "name a stage: kernels | jit | trace | report | all (see --help)"
  ((QUICK)) && [[ -z "$JIT_VARIANTS" ]] && JIT_VARIANTS=$QUICK_JIT_VARIANTS
  [[ -n "$TRACE_DURATION_S" ]] || { ((QUICK)) && TRACE_DURATION_S=20 || TRACE_DURATION_S=40; }
  load_config
  [[ "$RESULTS_DIR" == /* ]] && OUT_DIR=$RESULTS_DIR/fi || OUT_DIR=$REPO_DIR/$RESULTS_DIR/fi
  mkdir -p "$OUT_DIR"
  LOG_FILE=$OUT_DIR/phase4-$(date -u +%Y%m%dT%H%M%SZ).log
  # tee ignores the signals: Ctrl-C must not kill the log before on_exit has said what it restores
  exec > >(trap '' INT TERM HUP; exec tee -i -a "$LOG_FILE") 2>&1
  local tee_pid=$!
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  log "stages: ${stages[*]}; results in $OUT_DIR"
  local stage
  for stage in "${stages[@]}"; do
    run_stage "$stage"
  done
  resume_server
  trap - EXIT INT TERM HUP
  local rc=0
  summary || rc=$?
  # close our end of the pipe and let tee write the last lines before the exit status is seen
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null || true
  return "$rc"
}

main "$@"
