#!/usr/bin/env bash
# Run SGLang (Qwen3-4B, FlashInfer attention, prefix cache, chunked prefill, metrics) in tmux and manage it.
#
#   ./serve.sh start            launch in tmux session $TMUX_SESSION, wait until OUR process serves a generation,
#                               send one test chat, print the laptop tunnel command (idempotent)
#   ./serve.sh stop             stop only what start launched (recorded process group, our tagged tmux session)
#   ./serve.sh restart          stop, wait for the GPU memory of the old PIDs to be freed, start
#   ./serve.sh status           health, model, KV pool, requests, cache hits, uptime, GPU memory (exit 1 = down)
#   ./serve.sh running          exit 0 when a server start launched is alive (ready or still starting), else 1
#   ./serve.sh logs [-f] [-n N] the server log
#   ./serve.sh dashboard [stop] serve RESULTS_DIR on 127.0.0.1:$DASHBOARD_PORT
#   ./serve.sh tunnel           print the ssh command for a laptop
#   ./serve.sh print-command    the launch command start would run (no side effects)
#
# Settings come from config.env (environment variables win), e.g.
#   PORT=30001 TOKENIZER_WORKER_NUM=8 ./serve.sh start
# Exit codes: 0 ok, 1 failed (one line says why), 2 usage, 75 another start/stop/restart holds the lock.
# Writes $WORK_DIR/server/: launch_command.{txt,json} (exact command, no secret), server.log (+ .1 of the
# previous run), pid, pgid, started_at, sglang_config.yaml (0600, only with API_KEY_FILE), dashboard.{pid,log}.
set -euo pipefail
SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
LOG_PREFIX=serve
# shellcheck source=lib.sh
source "$(dirname "$SELF")/lib.sh"

usage() { print_usage "$SELF"; }

# The toolkit's own stdlib modules run under the host python3 ...
py() { PYTHONPATH="$LIB_DIR${PYTHONPATH:+:$PYTHONPATH}" "$(host_python)" "$@"; }
# ... and the client side (openai, prometheus-client, nvidia-ml-py), which the server's Python has.
client_py() {
  local exe=$SGLANG_PYTHON
  command -v "$exe" >/dev/null 2>&1 || exe=$(host_python)
  PYTHONPATH="$LIB_DIR${PYTHONPATH:+:$PYTHONPATH}" "$exe" "$@"
}

# Process group of the server start launched, when it is still alive and still ours; empty otherwise
# (llmhost.serve.server.recorded_group: the one rule, shared with ./serve.sh status).
our_pgid() {
  [[ -s "$STATE/pgid" ]] || return 0
  py -m llmhost.serve.server our-pgid --state-dir "$STATE"
}

clear_state() { rm -f "$STATE/pid" "$STATE/pgid" "$STATE/started_at"; }

# Is the tmux session $TMUX_SESSION the one start made for this STATE? start tags it; a session of the same
# name that the user made for something else is never killed.
tmux_session_ours() {
  tmux has-session -t "=$TMUX_SESSION" 2>/dev/null || return 1
  [[ "$(tmux display-message -p -t "=$TMUX_SESSION:" '#{@llmhost_state}' 2>/dev/null)" == "$STATE" ]]
}

# The server runs with THIS shell's environment, not that of a tmux server started days ago elsewhere: start
# writes it (0600, NUL-separated) and the pane replaces its own with it. Secret-looking names stay out.
# Secret-looking = ending in TOKEN, KEY, SECRET, PASSWORD... (HF_TOKEN, OPENAI_API_KEY); SGLANG_INIT_NEW_TOKEN_RATIO
# and TOKENIZERS_PARALLELISM are settings and pass.
SECRET_NAMES='^([A-Za-z0-9_]*_)?(TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIALS?)='
write_launch_env() {
  local dropped
  (umask 077 && env -0 | grep -zvE "$SECRET_NAMES|^(TMUX|TMUX_PANE)=" >"$STATE/launch.env")
  dropped=$(env -0 | { grep -zE "$SECRET_NAMES" || true; } | tr '\0' '\n' | cut -d= -f1 | paste -sd' ' -)
  [[ -z "$dropped" ]] || log "not passed to the server (secret-looking names): $dropped"
}

# Port of the server start recorded (from launch_command.txt), empty when none was recorded.
recorded_port() {
  grep -oE -- '--port [0-9]+' "$STATE/launch_command.txt" 2>/dev/null | awk '{print $2; exit}'
}

# One start/stop/restart at a time per WORK_DIR: two starts at once moved each other's log away. Exit 75
# (EX_TEMPFAIL) when busy, so a caller that must act (a restore after a benchmark) can retry.
LOCK_BUSY=75
take_lock() {
  mkdir -p "$STATE"
  exec 9>"$STATE/.lock"
  if ! flock -n 9; then
    printf '[%s] error: %s\n' "$LOG_PREFIX" "another ./serve.sh start/stop/restart is running for $STATE — wait for it" >&2
    exit "$LOCK_BUSY"
  fi
}

cmd_start() {
  require_cmd tmux "install it: sudo apt-get install -y tmux"
  mkdir -p "$STATE"
  local pgid
  pgid=$(our_pgid)
  if [[ -n "$pgid" ]]; then
    local running_port
    running_port=$(recorded_port)
    if [[ -n "$running_port" && "$running_port" != "$PORT" ]]; then
      die "our server already runs on port $running_port (process group $pgid) — ./serve.sh restart applies PORT=$PORT"
    fi
    if py -m llmhost.serve.server wait-ready --pgid "$pgid" --timeout-s 0.1 >/dev/null 2>&1; then
      log "already running: pid $(cat "$STATE/pid" 2>/dev/null || echo '?'), port $PORT, tmux session $TMUX_SESSION — ./serve.sh status (restart applies changed settings)"
      return 0
    fi
    log "already starting (process group $pgid) — waiting for it"
  else
    clear_state
    if tmux_session_ours; then
      warn "removing the leftover tmux session $TMUX_SESSION (no server of ours runs in it)"
      tmux kill-session -t "=$TMUX_SESSION"
    elif tmux has-session -t "=$TMUX_SESSION" 2>/dev/null; then
      die "a tmux session named $TMUX_SESSION exists and serve.sh did not start it — set TMUX_SESSION=<another name>"
    fi
    # Checks inputs and that nobody holds PORT (one line naming the holder), then records the command.
    py -m llmhost.serve.server prepare >/dev/null || exit 1
    log "launching: $(<"$STATE/launch_command.txt")"
    [[ -f "$STATE/server.log" ]] && mv -f "$STATE/server.log" "$STATE/server.log.1"
    write_launch_env
    # 9>&-: a tmux server started here must not inherit (and hold forever) the start/stop lock
    tmux new-session -d -s "$TMUX_SESSION" -x 200 -y 50 -- "$SELF" _run "$STATE" \; \
      set-option @llmhost_state "$STATE" 9>&-
    wait_until 15 0.2 test -s "$STATE/pgid" || die "the tmux session did not start the server — run tmux attach -t $TMUX_SESSION"
    pgid=$(<"$STATE/pgid")
    log "server in tmux session $TMUX_SESSION (process group $pgid); log: $STATE/server.log"
  fi
  # The lock guards launching, not the wait: ./serve.sh stop must be able to end a slow or hung start.
  exec 9>&-
  local rc=0
  py -m llmhost.serve.server wait-ready --pgid "$pgid" || rc=$?
  ((rc != 130)) || exit 130 # Ctrl-C: the server starts on in tmux; start again to resume waiting
  if ((rc != 0)); then
    # Never leave a crashed or timed-out server holding the GPU (unless a stop or restart is already at it);
    # the log stays for ./serve.sh logs.
    exec 9>"$STATE/.lock"
    if flock -n 9; then
      local now
      now=$(our_pgid)
      if [[ -z "$now" || "$now" == "$pgid" ]]; then # not a server someone started meanwhile
        [[ -z "$now" ]] || stop_group "$pgid" 30 || true
        clear_state
      fi
    fi
    exit 1
  fi
  client_py -m llmhost.serve.status chat || exit 1
  cmd_tunnel
}

# Internal: the body of the tmux pane. Runs the recorded command in its own process group, output through the
# key redactor (when a key is set) into the pane and server.log; records pid, pgid and started_at.
cmd__run() {
  local state=$1
  if [[ -z "${LLMHOST_LAUNCH_ENV:-}" && -f "$state/launch.env" ]]; then
    local -a vars
    mapfile -d '' -t vars <"$state/launch.env"
    exec env -i LLMHOST_LAUNCH_ENV=1 "${vars[@]}" "$SELF" _run "$state"
  fi
  # tmux makes each pane a session leader; setsid guarantees one process group for the server tree anyway.
  [[ "$(pgid_of $$)" == "$$" ]] || exec setsid "$SELF" _run "$state"
  local -a cmd
  mapfile -d '' -t cmd <"$state/launch.argv0"
  local log="$state/server.log" pid rc=0
  date -u +%Y-%m-%dT%H:%M:%SZ >"$state/started_at"
  if [[ -f "$state/sglang_config.yaml" ]]; then
    "${cmd[@]}" > >(py -m llmhost.serve.serverlog redact --config-file "$state/sglang_config.yaml" | tee -a "$log") 2>&1 &
  else
    "${cmd[@]}" > >(tee -a "$log") 2>&1 &
  fi
  pid=$!
  echo "$pid" >"$state/pid"
  echo "$$" >"$state/pgid.tmp" && mv -f "$state/pgid.tmp" "$state/pgid"
  wait "$pid" || rc=$?
  sleep 0.5 # let tee flush the last lines before the note
  echo "[serve] server exited with code $rc" | tee -a "$log"
}

cmd_stop() {
  local pgid
  pgid=$(our_pgid)
  if [[ -n "$pgid" ]]; then
    log "stopping the server (process group $pgid)"
    stop_group "$pgid" 60 || die "process group $pgid survived SIGKILL — check ps -g $pgid"
  else
    log "no server of ours is running"
    local holder
    holder=$(py -m llmhost.serve.procfs "$PORT" --host "$HOST" 2>/dev/null) \
      && warn "port $PORT is held by $holder, which this serve.sh did not start — left alone; stop it yourself"
  fi
  if tmux_session_ours; then
    tmux kill-session -t "=$TMUX_SESSION"
  fi
  clear_state
}

cmd_restart() {
  local pgid pids=""
  pgid=$(our_pgid)
  [[ -n "$pgid" ]] && pids=$(py -c 'import sys; from llmhost.serve.procfs import group_pids; print(",".join(map(str, group_pids(int(sys.argv[1])))))' "$pgid")
  cmd_stop
  if [[ -n "$pids" ]]; then
    log "waiting for the GPU memory of pids $pids to be released"
    client_py -m llmhost.serve.gpu wait-released --pids "$pids" --timeout-s 120 || exit 1
  fi
  cmd_start
}

cmd_status() { client_py -m llmhost.serve.status; }

cmd_running() { [[ -n "$(our_pgid)" ]]; }

cmd_logs() {
  local follow=() lines=100
  while (($#)); do
    case $1 in
      -f) follow=(-F) ;;
      -n) [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || die_usage "logs -n needs a number of lines"; lines=$2; shift ;;
      *) die_usage "unknown logs option '$1' — ./serve.sh logs [-f] [-n N]" ;;
    esac
    shift
  done
  [[ -f "$STATE/server.log" ]] || die "no server log at $STATE/server.log — run ./serve.sh start"
  tail -n "$lines" "${follow[@]}" "$STATE/server.log"
}

# PID of the dashboard server that dashboard started, when it still runs; empty otherwise. The recorded PID
# must still be our http.server: after it died (or a reboot) the number may belong to someone else's group.
our_dashboard() {
  local pid
  pid=$(cat "$STATE/dashboard.pid" 2>/dev/null || true)
  [[ -n "$pid" ]] && ! group_gone "$pid" || return 0
  if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-m http.server --bind 127.0.0.1"; then
    echo "$pid"
  fi
}

cmd_dashboard() {
  local pid_file="$STATE/dashboard.pid" dir pid holder
  pid=$(our_dashboard)
  if [[ "${1:-}" == stop ]]; then
    if [[ -n "$pid" ]]; then stop_group "$pid" 10; log "dashboard stopped"; else log "no dashboard of ours is running"; fi
    rm -f "$pid_file"
    return 0
  fi
  [[ -z "${1:-}" ]] || die_usage "unknown dashboard option '$1' — ./serve.sh dashboard [stop]"
  dir=$RESULTS_DIR
  [[ "$dir" == /* ]] || dir="$LIB_DIR/$dir"
  mkdir -p "$dir" "$STATE"
  if [[ -z "$pid" ]]; then
    if holder=$(py -m llmhost.serve.procfs "$DASHBOARD_PORT" 2>/dev/null); then
      die "port $DASHBOARD_PORT is held by $holder — set DASHBOARD_PORT=<free port>"
    fi
    # Loopback only: results can name hosts and paths. setsid: its own process group, stopped by pid file.
    setsid "$(host_python)" -m http.server --bind 127.0.0.1 --directory "$dir" "$DASHBOARD_PORT" \
      >"$STATE/dashboard.log" 2>&1 </dev/null 9>&- &
    pid=$!
    echo "$pid" >"$pid_file"
    wait_until 10 0.2 py -m llmhost.serve.procfs "$DASHBOARD_PORT" >/dev/null 2>&1 \
      || die "the dashboard server did not start — see $STATE/dashboard.log"
  fi
  log "dashboard: http://127.0.0.1:$DASHBOARD_PORT/ serving $dir (pid $pid; ./serve.sh dashboard stop)"
  cmd_tunnel
}

cmd_tunnel() {
  local addr="" ssh_port="" target=127.0.0.1 port_opt=""
  # The address and port the user reached this host on (server side of the SSH connection); no outside service.
  if [[ -n "${SSH_CONNECTION:-}" ]]; then
    read -r _ _ addr ssh_port <<<"$SSH_CONNECTION"
  fi
  [[ -n "$addr" ]] || addr=$(hostname -I 2>/dev/null | awk '{print $1}')
  [[ -n "$addr" ]] || addr=$(hostname)
  [[ -n "$ssh_port" && "$ssh_port" != 22 ]] && port_opt="-p $ssh_port "
  case $HOST in
    127.0.0.1 | localhost | 0.0.0.0) ;;
    ::1 | ::) target="[::1]" ;;
    *) target=$HOST ;;
  esac
  case $HOST in
    127.0.0.1 | localhost | ::1) ;;
    *) warn "HOST=$HOST: the API listens beyond loopback, so anyone who reaches port $PORT can use it — prefer HOST=127.0.0.1 and this tunnel" ;;
  esac
  if [[ "$addr" =~ ^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.|100\.(6[4-9]|[7-9][0-9]|1[01][0-9]|12[0-7])\.|169\.254\.) ]]; then
    warn "$addr is a private address: from outside its network, put the public address or name you ssh to instead"
  fi
  log "laptop tunnel: ssh ${port_opt}-N -L $PORT:$target:$PORT -L $DASHBOARD_PORT:127.0.0.1:$DASHBOARD_PORT ${USER:-$(id -un)}@$addr"
  log "then on the laptop: curl http://127.0.0.1:$PORT/v1/models   (dashboard: http://127.0.0.1:$DASHBOARD_PORT/)"
}

cmd_print_command() { py -m llmhost.serve.server print-command; }

main() {
  local sub=${1:-}
  case $sub in
    -h | --help | help) usage; return 0 ;;
    "") usage >&2; exit 2 ;;
  esac
  shift
  [[ "$sub" == _run ]] && { cmd__run "$@"; return; } # the pane reads everything from its state directory
  load_config
  STATE="$WORK_DIR/server"
  case $sub in
    start | stop | restart) [[ $# -eq 0 ]] || die_usage "$sub takes no arguments — ./serve.sh --help"; take_lock; "cmd_$sub" ;;
    status | tunnel | running) [[ $# -eq 0 ]] || die_usage "$sub takes no arguments — ./serve.sh --help"; "cmd_$sub" ;;
    logs) cmd_logs "$@" ;;
    dashboard) cmd_dashboard "$@" ;;
    print-command) cmd_print_command ;;
    *) die_usage "unknown command '$sub' — ./serve.sh --help" ;;
  esac
}

main "$@"
