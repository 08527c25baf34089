"""A stand-in for the `sglang` package, for CPU tests only (put tests/standin on PYTHONPATH).

It provides `python -m sglang.launch_server`, an HTTP server that answers like SGLang 0.5.17 serving Qwen3-4B with
random weights, as recorded in tests/captures/. See sglang/launch_server.py for the knobs.
"""
__version__ = "0.5.17"
