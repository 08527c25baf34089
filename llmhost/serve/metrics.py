"""SGLang's Prometheus /metrics text as plain samples, labels kept.

SGLang (0.5.17, `--enable-metrics`) labels every scheduler series with engine_type, model_name and the
tp/pp/moe-ep ranks, and histograms come as `<name>_bucket{le=...}`, `<name>_sum`, `<name>_count`. `parse` keeps
the sample names exactly as exposed (so `sglang:prompt_tokens_total`, not the family name) and every label,
so callers select what they need:

    samples = metrics.parse(body)
    metrics.value(samples, "sglang:max_total_num_tokens")            # KV pool size in tokens
    metrics.total(samples, "sglang:http_requests_active", method="GET")
    metrics.buckets(samples, "sglang:time_to_first_token_seconds")   # [(le, cumulative count), ...]

Pure functions over text: no network, nothing written.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class Sample:
    """One exposed series value: sample name as written, its labels, the number."""

    name: str
    labels: dict[str, str]
    value: float


class MetricsError(ValueError):
    """Text that is not Prometheus exposition format; the message is one line."""


def parse(text: str) -> list[Sample]:
    """Every sample in a Prometheus text exposition, in order, with all labels."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            Sample(name=s.name, labels=dict(s.labels), value=float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except ValueError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MetricsError(f"not Prometheus text format: {first[:200]}") from None


def select(samples: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples named `name` whose labels include every given label=value."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def value(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """The one sample matching name + labels; None when absent.

    Several matches mean the caller must say which series (e.g. tp_rank="0" with tensor parallelism, or
    endpoint=... for per-endpoint series) — adding them up silently would double a gauge like the KV pool size.
    """
    found = select(samples, name, **labels)
    if not found:
        return None
    if len(found) > 1:
        varying = sorted({k for s in found for k in s.labels if s.labels[k] != found[0].labels.get(k)})
        raise ValueError(f"{len(found)} series match {name}; narrow with one of the labels {varying}")
    return found[0].value


def total(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """Sum over all series matching name + labels (counters split by endpoint, rank, ...); None when absent."""
    found = select(samples, name, **labels)
    return math.fsum(s.value for s in found) if found else None


def buckets(samples: Iterable[Sample], name: str, **labels: str) -> list[tuple[float, float]]:
    """Cumulative histogram buckets of `name` as sorted (upper bound, count) pairs; +Inf last.

    Series that differ in labels other than `le` are added bucket by bucket (same bounds in SGLang).
    """
    counts: dict[float, float] = {}
    for s in select(samples, f"{name}_bucket", **labels):
        bound = float(s.labels["le"])
        counts[bound] = counts.get(bound, 0.0) + s.value
    return sorted(counts.items())


def delta(before: Iterable[Sample], after: Iterable[Sample], name: str, **labels: str) -> float | None:
    """Increase of a counter (summed over matching series) between two scrapes; None if absent in either, or when
    it fell (the server restarted in between: what it counted before the restart is lost)."""
    start, end = total(before, name, **labels), total(after, name, **labels)
    if start is None or end is None or end < start:
        return None
    return end - start
