"""llmhost: set up, serve, validate, benchmark and explain an SGLang + FlashInfer LLM service.

Modules follow the data: config -> server -> workloads -> points -> store -> stats -> report; FlashInfer kernel
benchmarks live in llmhost.fi. Nothing here has side effects at import.
"""
