"""Phase 2: the SGLang server: launch spec, process and tmux control, readiness, status, log redaction."""
