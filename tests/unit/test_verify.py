"""fi.verify's pure parts: head shapes from config.json, page tables, the float32 reference, and a tolerance that
can fail. The kernel itself runs only on a GPU host (pytest -m gpu)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from llmhost.fi import verify

np = pytest.importorskip("numpy")

# The attention fields of Qwen3-4B's config.json: head_dim 128 is explicit (hidden_size / heads would give 80).
QWEN3_4B = {"hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "num_hidden_layers": 36}


def model_dir(tmp_path, config):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_head_shape_of_qwen3_4b_uses_explicit_head_dim(tmp_path):
    shape = verify.read_head_shape(model_dir(tmp_path, QWEN3_4B))
    assert (shape.num_qo_heads, shape.num_kv_heads, shape.head_dim, shape.group_size) == (32, 8, 128, 4)


def test_bad_configs_are_one_line_verify_errors(tmp_path):
    with pytest.raises(verify.VerifyError, match="not found"):
        verify.read_head_shape(tmp_path)
    with pytest.raises(verify.VerifyError, match="multiple"):
        verify.read_head_shape(model_dir(tmp_path, {**QWEN3_4B, "num_key_value_heads": 5}))


@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_page_table_covers_each_length_with_scattered_pages(page_size):
    kv_lens = [1, 5, 16, 17, 100]
    table = verify.build_page_table(kv_lens, page_size, seed=3)
    assert table.kv_lens == tuple(kv_lens)
    assert sorted(table.indices) == list(range(len(table.indices)))
    assert all(1 <= n <= page_size for n in table.last_page_len)
    assert len(table.indptr) == len(kv_lens) + 1
    if page_size == 1:
        assert table.indices != tuple(sorted(table.indices))  # shuffled, so paging is really exercised
    with pytest.raises(ValueError):
        verify.build_page_table([0], page_size, seed=0)


def random_case(shape, kv_lens, page_size, seed=0):
    rng = np.random.default_rng(seed)
    table = verify.build_page_table(kv_lens, page_size, seed)
    cache = (len(table.indices), page_size, shape.num_kv_heads, shape.head_dim)
    q = rng.standard_normal((len(kv_lens), shape.num_qo_heads, shape.head_dim)).astype(np.float32)
    return q, rng.standard_normal(cache).astype(np.float32), rng.standard_normal(cache).astype(np.float32), table


def naive_decode(q, k_cache, v_cache, table, sm_scale, group):
    """One query head at a time, token by token: the definition the vectorised reference must equal."""
    out = np.zeros_like(q)
    for b, n in enumerate(table.kv_lens):
        pages = table.indices[table.indptr[b]:table.indptr[b + 1]]
        tokens = [(p, t) for p in pages for t in range(k_cache.shape[1])][:n]
        for h in range(q.shape[1]):
            kv = h // group
            logits = [float(q[b, h] @ k_cache[p, t, kv]) * sm_scale for p, t in tokens]
            top = max(logits)
            weights = [math.exp(x - top) for x in logits]
            total = sum(weights)
            out[b, h] = sum(w / total * v_cache[p, t, kv] for w, (p, t) in zip(weights, tokens))
    return out


@pytest.mark.parametrize("heads", [(8, 2), (4, 4), (4, 1)])
def test_reference_equals_the_naive_definition(heads):
    shape = verify.shapes.AttentionShape(heads[0], heads[1], 8, 1, "tiny")
    q, k, v, table = random_case(shape, [3, 9, 1], page_size=4)
    ref = verify.reference_decode(q, k, v, table, 0.3)
    assert np.allclose(ref, naive_decode(q, k, v, table, 0.3, shape.group_size), atol=1e-5)


@pytest.mark.parametrize("page_size", [1, 4, 16])
@pytest.mark.parametrize("heads", [(32, 8), (8, 8), (8, 1)])
def test_negative_control_fails_the_tolerance_for_every_request(heads, page_size):
    """Every request, every page size (1 is SGLang's): an MQA control that only reordered tokens matched at page 1."""
    shape = verify.shapes.AttentionShape(heads[0], heads[1], 16, 1, "tiny")
    q, k, v, table = random_case(shape, [7, 40, 3, 64], page_size=page_size)
    ref = verify.reference_decode(q, k, v, table, 0.25)
    control = verify.control_reference(q, k, v, table, 0.25, shape)
    for b in range(len(table.last_page_len)):
        _, excess = verify.tolerance_excess(control[b], ref[b])
        assert excess > 0, f"request {b}: the control passes the check"


def test_tolerance_accepts_bf16_rounding_and_rejects_real_errors():
    ref = np.linspace(-2, 2, 101, dtype=np.float32)
    bf16_like = ref * (1 + 2.0 ** -8)  # one bf16 ulp of relative error
    max_err, excess = verify.tolerance_excess(bf16_like, ref)
    assert excess <= 0 and max_err == pytest.approx(2 * 2.0 ** -8, rel=1e-3)
    wrong = ref.copy()
    wrong[50] += 0.05  # one element off by 0.05 where |ref| = 0
    assert verify.tolerance_excess(wrong, ref)[1] > 0


def test_cli_rejects_bad_numbers_and_reports_missing_stack_in_one_line(repo, tmp_path):
    cli = [sys.executable, "-m", "llmhost.fi.verify", "--model-dir", str(model_dir(tmp_path, QWEN3_4B))]
    bad = subprocess.run(cli + ["--batch-size", "0"], cwd=repo, capture_output=True, text=True)
    assert bad.returncode == 2
    # the test Python has no flashinfer (and torch only as its CPU build, or not at all)
    # asked of a fresh interpreter: another test of this worker may have imported torch's CPU build from its folder
    has_torch = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0
    missing = "flashinfer" if has_torch else "torch"
    proc = subprocess.run(cli, cwd=repo, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"verify: {missing} is not importable") and proc.stderr.count("\n") == 1


@pytest.mark.gpu
def test_flashinfer_decode_matches_reference_on_gpu(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    pytest.importorskip("flashinfer")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    assert verify.main(["--model-dir", str(model_dir(tmp_path, QWEN3_4B))]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["passed"] and {c["path"] for c in summary["cases"]} == {"cuda-cores", "tensor-cores"}
    assert all(c["control_excess"] > 0 for c in summary["cases"])
