"""The server hook: inert without LLMHOST_FI_TRACE_DIR; with it, SGLang's two indices updaters are patched on import
and every planned step is counted (graph replays included) and sampled into shards. A miniature
sglang...flashinfer_backend stands in for SGLang at the process boundary (same class and argument names)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmhost.fi.trace import analysis

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "llmhost" / "fi" / "trace" / "sitehook"

FAKE_BACKEND = '''
import functools
import numpy as np

def fast_decode_plan(self, *args, **kwargs):
    return None

class Wrapper:
    def __init__(self, graph):
        self.is_cuda_graph_enabled = graph
        self._paged_kv_indices_buf = np.zeros(4096, np.int32)
    def begin_forward(self, *args, **kwargs):
        return None

class FlashInferIndicesUpdaterDecode:
    def __init__(self, req_to_token):
        self.req_to_token = req_to_token
        self.kv_last_page_len = np.ones(64, np.int32)
    def call_begin_forward(self, wrapper, req_pool_indices, paged_kernel_lens, paged_kernel_lens_sum, kv_indptr,
                           kv_start_idx, spec_info, seq_lens_cpu, use_sliding_window_kv_pool=False,
                           fixed_split_size=None, disable_split_kv=None):
        bs = len(req_pool_indices)
        kv_indptr[1:bs + 1] = np.cumsum(paged_kernel_lens)
        out = (wrapper._paged_kv_indices_buf if wrapper.is_cuda_graph_enabled
               else np.empty(paged_kernel_lens_sum, np.int32))
        for i, (row, n) in enumerate(zip(req_pool_indices, paged_kernel_lens)):
            out[kv_indptr[i]:kv_indptr[i] + n] = self.req_to_token[row, :n]
        if not wrapper.is_cuda_graph_enabled:
            wrapper._paged_kv_indices_buf = out
        wrapper.begin_forward(kv_indptr, out, self.kv_last_page_len[:bs], 32, 8, 128, 1)

class FlashInferIndicesUpdaterPrefill:
    def call_begin_forward(self, wrapper_ragged, wrapper_paged, req_pool_indices, paged_kernel_lens,
                           paged_kernel_lens_sum, seq_lens, prefix_lens, kv_start_idx, kv_indptr, qo_indptr,
                           use_ragged, spec_info, **kwargs):
        return None
'''

DRIVER = '''
import functools, sys
import numpy as np
assert "sglang" not in sys.modules, "the hook imported sglang eagerly"
from sglang.srt.layers.attention import flashinfer_backend as fb
assert getattr(fb.FlashInferIndicesUpdaterDecode.call_begin_forward, "__llmhost_traced__", False)
assert getattr(fb.FlashInferIndicesUpdaterPrefill.call_begin_forward, "__llmhost_traced__", False)
req_to_token = np.zeros((8, 64), np.int32)
req_to_token[1, :6] = [10, 11, 12, 13, 20, 21]
req_to_token[2, :6] = [10, 11, 12, 13, 30, 31]
updater = fb.FlashInferIndicesUpdaterDecode(req_to_token)
graph = fb.Wrapper(graph=True)
updater.call_begin_forward(graph, np.array([0, 0]), np.array([1, 1]), 2, np.zeros(65, np.int32), None, None, None)
graph.begin_forward = functools.partial(fb.fast_decode_plan, graph)  # what SGLang installs after capture
for _ in range(5):
    updater.call_begin_forward(graph, np.array([1, 2]), np.array([6, 6]), 12, np.zeros(65, np.int32), None, None,
                               None)
eager = fb.Wrapper(graph=False)
for _ in range(2):
    updater.call_begin_forward(eager, np.array([1, 2]), np.array([6, 6]), 12, np.zeros(65, np.int32), None, None,
                               None)
'''


def _run(tmp_path: Path, code: str, env_extra: dict[str, str], fake_root: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMHOST_FI_TRACE")}
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), str(fake_root)])
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=60)


def _fake_tree(root: Path, backend_source: str | None) -> Path:
    pkg = root / "sglang"
    (pkg / "srt" / "layers" / "attention").mkdir(parents=True)
    if backend_source is None:
        (pkg / "__init__.py").write_text("raise RuntimeError('sglang must not be imported by an inert hook')\n")
        return root
    for sub in ("", "srt", "srt/layers", "srt/layers/attention"):
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "srt" / "layers" / "attention" / "flashinfer_backend.py").write_text(backend_source)
    return root


def test_hook_without_trace_dir_patches_nothing_and_imports_no_sglang(tmp_path):
    fake = _fake_tree(tmp_path / "fake", None)
    code = textwrap.dedent('''
        import os, sys
        assert os.path.dirname(sys.modules["sitecustomize"].__file__) == os.environ["HOOK_DIR"]
        bad = [m for m in sys.modules if m.startswith(("sglang", "llmhost"))]
        finders = [type(f).__name__ for f in sys.meta_path if "PatchOnImport" in type(f).__name__]
        print(bad, finders)
        assert not bad and not finders
        try:
            import sglang
        except RuntimeError as exc:
            print("fake raised:", exc)
    ''')
    proc = _run(tmp_path, code, {"HOOK_DIR": str(HOOK_DIR)}, fake)
    assert proc.returncode == 0, proc.stderr
    assert "[] []" in proc.stdout and "fake raised" in proc.stdout
    assert not list(tmp_path.glob("**/stats-*.json"))


def test_hook_counts_graph_replays_and_eager_steps_and_writes_shards(tmp_path):
    fake = _fake_tree(tmp_path / "fake", FAKE_BACKEND)
    out = tmp_path / "trace"
    proc = _run(tmp_path, DRIVER, {"LLMHOST_FI_TRACE_DIR": str(out), "LLMHOST_FI_TRACE_EVERY": "1"}, fake)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(next(out.glob("stats-*.json")).read_text())
    assert stats["patched"] == ["FlashInferIndicesUpdaterDecode", "FlashInferIndicesUpdaterPrefill"]
    assert stats["counters"]["decode_capture"] == 1
    assert stats["counters"]["decode_graph"] == 5 and stats["counters"]["decode_eager"] == 2
    samples, all_stats = analysis.load_trace(out)
    result = analysis.analyze(samples, all_stats)
    assert result["graph_proof"]["sampled_graph"] == 5 and result["graph_proof"]["sampled_eager"] == 2
    assert result["summary"]["decode"]["sharing_ratio"] == pytest.approx(8 / 12)
    assert result["summary"]["decode"]["mean_run_len"] == pytest.approx(3.0)
