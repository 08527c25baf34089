"""Phase 1: what to install (version plan) and the model files."""
