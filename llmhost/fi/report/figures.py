"""The report's shared pieces: number formatting, headline labels, HTML tables, and a plotly figure as a div.

Every figure's title asks its question and a sentence under it says how to read it. plotly is imported inside
plot_html only (the page inlines plotly.js once; figures are emitted without it).
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from html import escape
from typing import Any

NO_CHARTS = ("<p class='todo'>Charts left out: plotly is not installed in the Python that built this page (the GPU "
             "host's server Python has none). Every number is in the tables; for the charts rebuild the page "
             "anywhere with plotly: <code>.venv/bin/python fi_bench.py report --out-dir DIR</code>.</p>")


def fmt(value: Any) -> str:
    """Numbers to 3 significant digits (thousands kept whole), None to '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


LABEL_WORDS = (("gb_s", "GB/s"), ("pct_peak", "% of peak"), ("pct_copy", "% of copy"), ("_us", " (us)"),
               ("fp8", "FP8"), ("bf16", "BF16"), ("kv", "KV"), ("_", " "))


def label(key: str) -> str:
    """'decode_gb_s_best' -> 'decode GB/s best': units spelled out for the headline table."""
    for old, new in LABEL_WORDS:
        key = key.replace(old, new)
    return key


def flatten(data: dict, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Headline rows: nested dicts become 'a / b' labels; a dict of plain values stays one 'k v · k v' cell."""
    for key, value in data.items():
        label_ = f"{prefix}{label(str(key))}"
        if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
            yield from flatten(value, f"{label_} / ")
        elif isinstance(value, dict):
            yield label_, " · ".join(f"{label(str(k))}: {fmt(v)}" for k, v in value.items())
        else:
            yield label_, value


def table(header: list[str], rows: list[list[Any]]) -> str:
    """Values formatted with fmt; the first column (the case's name) aligns left, as the page's style has it."""
    head = "".join(_cell("th", i, str(h)) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(_cell("td", i, v if isinstance(v, str) else fmt(v)) for i, v in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(tag: str, column: int, text: str) -> str:
    return f"<{tag}{' class=l' if column == 0 else ''}>{escape(text)}</{tag}>"


def has_plotly() -> bool:
    return importlib.util.find_spec("plotly") is not None


def charts(build: Callable[[dict], str], doc: dict) -> str:
    """build(doc)'s plotly figures, or the note saying why they are left out (tables never need plotly)."""
    return build(doc) if has_plotly() else NO_CHARTS


def plot_html(fig: Any, how: str) -> str:
    """A plotly figure as a div (plotly.js is included once by the page) and the sentence saying how to read it."""
    import plotly.io as pio

    fig.update_layout(template="plotly_white", margin={"t": 70, "l": 60, "r": 20, "b": 50})
    return pio.to_html(fig, include_plotlyjs=False, full_html=False) + f'<p class="how">{escape(how)}</p>'
