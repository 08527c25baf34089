"""Phase 2: the SGLang server, following the data of a start.

spec (the launch command from the config) → checks (settings, host) → lock → tmux + pane (the process group,
its log with the key redacted) → readiness (our group serves a generation) → status; lifecycle ties them into
start/stop/restart (the API run_bench uses), cli is `./serve.sh` (`python -m llmhost.serve`). Shared by them:
process (state files, the one ownership rule), procfs (ports, groups), endpoints (the one HTTP client), gpu,
metrics, serverlog, console (lines and exit codes), dashboard, tunnel. Stdlib only; requests, prometheus-client,
openai and NVML are used where present.
"""
