"""A numpy reference for the two-level decode tests: attention of one query row with its log-sum-exp, and the
log-sum-exp merge that joins two partial attentions (what flashinfer.merge_state does)."""
from __future__ import annotations

import numpy as np


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One query row [heads, D] over tokens [T, kv_heads, D]: output [heads, D] and natural log-sum-exp [heads]."""
    ratio, dim = q.shape[0] // k.shape[1], q.shape[1]
    scores = np.einsum("hd,thd->ht", q, np.repeat(k, ratio, axis=1)) / np.sqrt(dim)
    top = scores.max(axis=1, keepdims=True)
    weights = np.exp(scores - top)
    out = np.einsum("ht,thd->hd", weights / weights.sum(axis=1, keepdims=True), np.repeat(v, ratio, axis=1))
    return out, (top[:, 0] + np.log(weights.sum(axis=1)))


def merge(o0: np.ndarray, s0: np.ndarray, o1: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """Two partial attentions over disjoint tokens ([heads, D] with log-sum-exp [heads]) as one."""
    top = np.maximum(s0, s1)
    w0, w1 = np.exp(s0 - top), np.exp(s1 - top)
    return (o0 * w0[:, None] + o1 * w1[:, None]) / (w0 + w1)[:, None]
