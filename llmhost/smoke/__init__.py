"""Phase 2: smoke checks and the interactive chat over the OpenAI-compatible API."""
