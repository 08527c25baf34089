"""What a real run would stop at, checked before any work (and by --dry-run too): the results directory, the API
key, the load generator and the flags the plan needs from it."""
from __future__ import annotations

from pathlib import Path

from llmhost import config, files
from llmhost.bench import points, runner
from llmhost.bench.workloads import REGISTRY as WORKLOADS


def check(cfg: config.Config, plan: list[points.Point], seed: int,
          new_run: bool) -> tuple[str, str, dict[str, str]] | str:
    """(load generator module, its --help, its environment) when a real run can start, else the one line saying
    why not."""
    problem = files.writable_dir_problem(cfg.results_path / "bench") if new_run else None
    if problem:
        return f"{cfg.source('RESULTS_DIR')}: RESULTS_DIR={cfg.results_dir}: {problem}"
    try:
        env = runner.loadgen_env(cfg)  # holds the key: a missing or loose key file stops the run here
    except OSError as exc:
        return str(exc)
    try:
        module, help_text = points.find_loadgen(cfg.sglang_python, env)
    except points.LoadgenError as exc:
        return f"{exc} (SGLANG_PYTHON from {cfg.source('SGLANG_PYTHON')})"
    probe = points.bench_argv(plan[0], WORKLOADS[plan[0].workload], base_url=cfg.base_url, model_dir=cfg.model_dir,
                              served_model_name=cfg.served_model_name, seed=seed, output_file=Path("x"))
    flags = sorted({f for p in plan for f in points.unknown_flags(
        [*probe, *WORKLOADS[p.workload].dataset_args(p.num_prompts)], help_text)})
    if flags:
        return f"the installed {module} lacks {', '.join(flags)} — install SGLang {cfg.sglang_version} (./setup_host.sh)"
    return module, help_text, env
