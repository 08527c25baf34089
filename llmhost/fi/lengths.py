"""Per-request KV lengths for a decode batch: the same total tokens, spread five different ways.

Split-KV exists because one long request in a batch of short ones leaves most of the GPU idle while a few CTAs walk
the long KV. Holding the total fixed isolates the effect of the *shape* of the distribution from the amount of work:

- uniform:   every request total/B tokens;
- one-long:  one request holds half the tokens, the rest share the other half;
- tiered:    thirds of the batch at 1x, 4x and 16x a base length (short chat, RAG, long multi-turn context);
- lognormal: sigma 1.0, the heavy-ish tail real traffic shows;
- zipf:      weight 1/rank (s = 1), shuffled: a few very long, many short.

Seeded and pure (stdlib only). Every length is >= 1 and the lengths sum exactly to the total.
"""
from __future__ import annotations

import random
from collections.abc import Callable


def _scale(weights: list[float], total: int) -> list[int]:
    """Integer lengths proportional to weights, each >= 1, summing exactly to total (largest remainder)."""
    n = len(weights)
    if total < n:
        raise ValueError(f"{total} tokens cannot give {n} requests at least one token each")
    spare = total - n  # every request gets 1 token first, the rest is shared by weight
    norm = sum(weights)
    raw = [spare * w / norm for w in weights]
    out = [int(r) for r in raw]
    by_remainder = sorted(range(n), key=lambda i: raw[i] - out[i], reverse=True)
    for i in by_remainder[:spare - sum(out)]:
        out[i] += 1
    return [1 + x for x in out]


def uniform(batch: int, rng: random.Random) -> list[float]:
    return [1.0] * batch


def one_long(batch: int, rng: random.Random) -> list[float]:
    if batch == 1:
        return [1.0]
    weights = [0.5 / (batch - 1)] * (batch - 1) + [0.5]
    position = rng.randrange(batch)  # where the long one sits should not matter; randomise so it cannot
    weights.insert(position, weights.pop())
    return weights


def tiered(batch: int, rng: random.Random) -> list[float]:
    weights = [(1.0, 4.0, 16.0)[min(2, 3 * i // batch)] for i in range(batch)]
    rng.shuffle(weights)
    return weights


def lognormal(batch: int, rng: random.Random) -> list[float]:
    return [rng.lognormvariate(0.0, 1.0) for _ in range(batch)]


def zipf(batch: int, rng: random.Random) -> list[float]:
    weights = [1.0 / rank for rank in range(1, batch + 1)]
    rng.shuffle(weights)
    return weights


DISTRIBUTIONS: dict[str, Callable[[int, random.Random], list[float]]] = {
    "uniform": uniform,
    "one-long": one_long,
    "tiered": tiered,
    "lognormal": lognormal,
    "zipf": zipf,
}


def make_lengths(distribution: str, batch: int, total_tokens: int, seed: int = 0) -> list[int]:
    """`batch` KV lengths summing to `total_tokens`, shaped by DISTRIBUTIONS[distribution]."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {distribution!r} (choose from {', '.join(DISTRIBUTIONS)})")
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    return _scale(DISTRIBUTIONS[distribution](batch, random.Random(seed)), total_tokens)


def imbalance(lengths: list[int]) -> float:
    """max / mean length: 1.0 = perfectly balanced; the critical path without split-KV grows with it."""
    return max(lengths) * len(lengths) / sum(lengths)
