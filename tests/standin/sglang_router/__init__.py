"""A stand-in for the `sglang_router` package (sglang-router 0.3.2), for CPU tests only (put tests/standin on
PYTHONPATH): `python -m sglang_router.launch_router` in front of stand-in SGLang servers. See launch_router.py."""
__version__ = "0.3.2"
