#!/usr/bin/env bash
# Shared helpers for the toolkit's shell scripts. Source it; it defines functions and sets nothing else.
#   log/warn/die      one-line messages with the script's prefix ([setup], [serve], ...); die_usage exits 2
#   print_usage       a script's header comment, for --help
#   load_config       export config.env + overrides, exactly as llmhost/config.py reads them
#   run               execute argv, or print it under DRY_RUN=1
# (Process control, waiting and locking for the server live in Python: llmhost/serve/.)

LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG_PREFIX=${LOG_PREFIX:-llmhost}

log() { printf '[%s] %s\n' "$LOG_PREFIX" "$*"; }
warn() { printf '[%s] warning: %s\n' "$LOG_PREFIX" "$*" >&2; }
die() {
  printf '[%s] error: %s\n' "$LOG_PREFIX" "$*" >&2
  exit 1
}

# The Python that runs the toolkit's own helpers before and after the venv exists (stdlib-only modules).
host_python() {
  if command -v python3 >/dev/null 2>&1; then
    echo python3
  else
    die "python3 not found — install it (sudo apt-get install -y python3)"
  fi
}

# Export every config key into the environment (one implementation: llmhost/config.py, which also checks every
# value). A bad value ends the script with Python's one line ("[serve] error: config.local.env:7: PORT=70000 is
# not a port (1-65535)"), exit 1. No cd: a relative LLMHOST_CONFIG means the same file to bash and to the Python
# tools; NUL-separated records keep values with newlines whole.
load_config() {
  local py record
  local -a records
  py=$(host_python)
  mapfile -d '' -t records < <(PYTHONPATH="$LIB_DIR${PYTHONPATH:+:$PYTHONPATH}" "$py" -m llmhost.config --env0 \
    --log-prefix "$LOG_PREFIX")
  wait $! || exit 1 # the line is already printed
  for record in "${records[@]}"; do
    [[ -n "$record" ]] && export "${record?}"
  done
}

# print_usage FILE: the script's header comment (line 2 up to the first non-comment line), for --help.
print_usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"; }

# A usage mistake: one line naming the problem, exit 2.
die_usage() {
  printf '[%s] error: %s\n' "$LOG_PREFIX" "$*" >&2
  exit 2
}

# run CMD...: execute, or under DRY_RUN=1 print what would run.
run() {
  if [[ "${DRY_RUN:-0}" == 1 ]]; then
    printf '[%s] would run:' "$LOG_PREFIX"
    printf ' %q' "$@"
    printf '\n'
  else
    "$@"
  fi
}
