"""Stand-in for SGLang 0.5.17's deprecated `python -m sglang.bench_serving` path (re-exports the stand-in)."""
import warnings

from sglang.benchmark.serving import *  # noqa: F401,F403
from sglang.benchmark.serving import cli_main

warnings.warn("`sglang.bench_serving` is deprecated and will be removed in a future release; use "
              "`sglang.benchmark.serving` instead (e.g. `python -m sglang.benchmark.serving`).", FutureWarning)

if __name__ == "__main__":
    cli_main()
