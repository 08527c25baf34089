#!/usr/bin/env bash
# Run SGLang (Qwen3-4B, FlashInfer attention, prefix cache, chunked prefill, metrics) in tmux and manage it:
#   ./serve.sh start|stop|restart|status|running|logs [-f] [-n N] [-m MEMBER]|dashboard [stop]|tunnel|print-command [--node-rank N]
# ./serve.sh --help explains each command and what is written. Settings come from config.env (environment
# variables win), e.g. PORT=30001 TOKENIZER_WORKER_NUM=8 ./serve.sh start
# Exit codes: 0 ok, 1 failed (one line says why), 2 usage, 75 another start/stop/restart holds the lock.
#
# The lifecycle is Python (llmhost/serve/; `python -m llmhost.serve` is the same CLI): this shim finds a
# python3 and hands over. The serve package needs only the stdlib, so the host's python3 runs it before any
# venv exists; the commands that talk to the server (start, restart, status) move on to the toolkit's .venv or
# SGLANG_PYTHON, which have the client packages.
set -euo pipefail
LOG_PREFIX=serve
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

py=$(host_python)
PYTHONPATH="$LIB_DIR${PYTHONPATH:+:$PYTHONPATH}" exec "$py" -m llmhost.serve "$@"
