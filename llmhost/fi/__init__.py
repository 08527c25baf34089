"""FlashInfer opened up: kernel benchmarks (paged/scattered KV, split-KV balance, JIT) and a live server trace.

Heavy imports (torch, flashinfer) stay inside the functions that need them, so the CPU suite and --help stay fast.
"""
