"""The one HTML renderer: fragments (cards, tables, charts, notes) and a single offline page (plotly inlined once).

document(title, sections, header) is the page of any report: a header, a nav line, then (anchor, title, body)
sections; write the text with llmhost.files.write_text_atomic.

plotly.js is inlined exactly once in <head>; each chart is a div plus its Plotly.newPlot call. A tiny inline script
records uncaught script errors into <body data-js-errors> and a visible <pre id="js-errors">, so a chart that fails
to draw says so on the page instead of leaving a silent gap (the headless-browser test reads the same marker).
"""
from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:  # types only: a report other than the dashboard uses this page without the dashboard's modules
    from llmhost.report.figures import Chart
    from llmhost.report.kpis import Card

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:16px 24px 64px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:36px 0 6px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 4px}.read{color:#555;margin:0 0 8px;font-size:13px}
nav a{margin-right:12px;font-size:13px}.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(290px,1fr));gap:12px}
.card{background:#fff;border:1px solid #e3e3e6;border-radius:8px;padding:10px 12px}
.card h3{margin:0 0 2px}.card .q{color:#666;font-size:12px;margin-bottom:6px}
.entry{display:flex;gap:6px;align-items:baseline;margin:3px 0}.dot{width:9px;height:9px;border-radius:50%;flex:none}
.val{font-weight:600}.detail{color:#666;font-size:12px}.flag{color:#b45309;font-weight:700}
table{border-collapse:collapse;background:#fff;font-size:12.5px;margin:6px 0}
th,td{border:1px solid #e3e3e6;padding:3px 7px;text-align:right;vertical-align:top}
th{background:#f0f1f4;position:sticky;top:0}td.l,th.l{text-align:left}
.better{background:#e7f6ec}.worse{background:#fdecea}.noise{color:#777}.bad{color:#b91c1c;font-weight:600}
.missing{background:#fff8e6;border:1px solid #f1d08a;border-radius:6px;padding:8px 12px;margin:8px 0}
pre{background:#fff;border:1px solid #e3e3e6;padding:8px;overflow-x:auto;font-size:12px;white-space:pre-wrap}
.chart{background:#fff;border:1px solid #e3e3e6;border-radius:8px;padding:4px;margin:6px 0}
#js-errors{color:#b91c1c}
summary{cursor:pointer;color:#1f4f99;margin:8px 0}
.todo{background:#fff7e0;padding:.6em}.how{color:#555;font-style:italic;margin-top:-.3em}details{margin:.5em 0 1.5em}
svg.diagram{display:block;margin:1em 0;background:#fcfcfc;border:1px solid #eee}
"""
ERROR_HOOK = """<script>
window.__jsErrors=[];
function __noteError(m){window.__jsErrors.push(String(m));}
window.addEventListener('error',function(e){__noteError(e.message||e);});
window.addEventListener('unhandledrejection',function(e){__noteError(e.reason||'unhandled rejection');});
window.addEventListener('load',function(){
  var n=window.__jsErrors.length;document.body.setAttribute('data-js-errors',String(n));
  document.body.setAttribute('data-charts',String(document.querySelectorAll('.js-plotly-plot').length));
  if(n){var p=document.getElementById('js-errors');p.hidden=false;
    p.textContent='Some charts failed to draw: '+window.__jsErrors.join(' | ');}
});
</script>"""

Cell = Callable[[dict[str, Any]], str]


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else esc(value)


def with_ci(value: Any, lo: Any, hi: Any, digits: int = 1) -> str:
    """'123.4 [118.0, 130.2]', or the bare value when there is no CI."""
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)):
        return num(value, digits)
    return f"{num(value, digits)} <span class=noise>[{num(lo, digits)}, {num(hi, digits)}]</span>"


def table(columns: Sequence[tuple[str, Cell]], rows: Sequence[dict[str, Any]], left: int = 1) -> str:
    """An HTML table; cells are already-escaped HTML from the column functions; the first `left` columns align left."""
    head = "".join(f"<th class={'l' if i < left else 'r'}>{esc(h)}</th>" for i, (h, _) in enumerate(columns))
    body = "".join("<tr>" + "".join(_td(i < left, fn(r)) for i, (_, fn) in enumerate(columns)) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(is_left: bool, content: str) -> str:
    # A cell function may prefix 'class=X|' to style its cell (verdict colours).
    cls, _, text = content.partition("|") if content.startswith("class=") else ("", "", content)
    classes = " ".join(c for c in ("l" if is_left else "", cls.removeprefix("class=")) if c)
    return f"<td class='{classes}'>{text}</td>" if classes else f"<td>{text}</td>"


def cards(cards_: Sequence[Card], colors: dict[str, tuple[str, str]]) -> str:
    """KPI cards; colors maps arm -> (label, colour)."""
    out = []
    for card in cards_:
        entries = "".join(
            f"<div class=entry><span class=dot style='background:{esc(colors.get(e.arm, (e.arm, '#888'))[1])}'>"
            f"</span><span>{esc(colors.get(e.arm, (e.arm, ''))[0])}:</span> <span class=val>{esc(e.value)}</span>"
            f"{' <span class=flag title=check>⚠</span>' if e.is_flagged else ''}</div>"
            f"<div class=detail>{esc(e.detail)}</div>" for e in card.entries)
        out.append(f"<div class=card><h3>{esc(card.title)}</h3><div class=q>{esc(card.question)}</div>"
                   f"{entries}</div>")
    return f"<div class=grid>{''.join(out)}</div>"


def missing(text: str) -> str:
    return f"<div class=missing>{esc(text)}</div>"


def chart(c: Chart) -> str:
    """A chart's question, how to read it, and its div (or what is missing and how to produce it)."""
    head = f"<h3>{esc(c.title)}</h3><p class=read>{esc(c.how_to_read)}</p>"
    if c.figure is None:
        return head + missing(f"Not available: {c.missing}")
    import plotly.io as pio
    div = pio.to_html(c.figure, include_plotlyjs=False, full_html=False, div_id=f"chart-{c.key}",
                      config={"displaylogo": False, "responsive": True})
    return f"{head}<div class=chart>{div}</div>"


def section(anchor: str, title: str, body: str) -> str:
    return f"<section id={esc(anchor)}><h2>{esc(title)}</h2>{body}</section>"


def document(title: str, sections: Sequence[tuple[str, str, str]], header: str, *, with_plotly: bool = True) -> str:
    """The whole page: plotly.js once (unless with_plotly is False: a page of tables built where plotly is not
    installed), the error hook, a nav line, then (anchor, title, body) sections."""
    plotly_js = ""
    if with_plotly:
        from plotly.offline import get_plotlyjs
        plotly_js = f"<script>{get_plotlyjs()}</script>"
    nav = " ".join(f"<a href='#{esc(a)}'>{esc(t)}</a>" for a, t, _ in sections)
    body = "".join(section(a, t, b) for a, t, b in sections)
    return (f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{esc(title)}</title>"
            f"<meta name=viewport content='width=device-width,initial-scale=1'><style>{CSS}</style>{ERROR_HOOK}"
            f"{plotly_js}</head><body data-js-errors=pending><main>{header}"
            f"<pre id=js-errors hidden></pre><nav>{nav}</nav>{body}</main></body></html>")
