"""Explanatory inline SVG diagrams for the FlashInfer report (pure string builders, no dependencies).

Each figure explains a mechanism before the measured charts show what it costs: paged KV (a page table mapping a
request's logical pages to scattered physical pages, and its CSR arrays), split-KV (one long request split across
CTAs plus a merge, vs unsplit), JIT (spec -> generated source -> nvcc/ninja -> cached .so) and a traced decode batch
(indptr/indices into the pool).
"""
from __future__ import annotations

from html import escape

COLORS = ("#4C78A8", "#F58518", "#54A24B", "#B279A2", "#9D755D")
GREY, INK = "#d9d9d9", "#333"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (f'<svg class="diagram" viewBox="0 0 {width} {height}" width="100%" style="max-width:{width}px" '
            f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" '
            f'font-size="12"><title>{escape(title)}</title>'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{INK}"/></marker></defs>'
            + "".join(body) + "</svg>")


def _box(x: float, y: float, w: float, h: float, fill: str, text: str = "", color: str = "#fff",
         size: int = 12) -> str:
    label = (f'<text x="{x + w / 2}" y="{y + h / 2 + size / 3}" text-anchor="middle" fill="{color}" '
             f'font-size="{size}">{escape(text)}</text>') if text else ""
    return f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="{fill}" stroke="{INK}" ' \
           f'stroke-width="0.5"/>{label}'


def _text(x: float, y: float, text: str, size: int = 12, anchor: str = "start", weight: str = "normal") -> str:
    return (f'<text x="{x}" y="{y}" font-size="{size}" text-anchor="{anchor}" font-weight="{weight}" '
            f'fill="{INK}">{escape(text)}</text>')


def _arrow(x1: float, y1: float, x2: float, y2: float, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    return (f'<path d="M{x1},{y1} C{(x1 + x2) / 2},{y1} {(x1 + x2) / 2},{y2} {x2},{y2}" fill="none" '
            f'stroke="{INK}" stroke-width="1"{dash} marker-end="url(#arrow)"/>')


def paged_kv() -> str:
    """Two requests' logical pages -> scattered physical pages in the pool, with the CSR arrays FlashInfer gets."""
    body = [_text(10, 18, "Logical view: each request's KV as pages of 4 tokens", 13, weight="bold"),
            _text(92, 208, "Physical KV pool (page ids): pages wherever the allocator found room", 12)]
    requests = {"A": (COLORS[0], [7, 2, 9], 2), "B": (COLORS[1], [4, 0], 3)}
    pool_y = 160
    for row, (name, (color, pages, last)) in enumerate(requests.items()):
        y = 35 + row * 45
        body.append(_text(10, y + 20, f"request {name}"))
        for i, page in enumerate(pages):
            tokens = 4 if i < len(pages) - 1 else last
            x = 90 + row * 260 + i * 72
            body.append(_box(x, y, 64, 30, color, f"p{i}: {tokens} tok"))
            body.append(f'<path d="M{x + 32},{y + 30} C{x + 32},{pool_y - 20} {92 + page * 64 + 28},{y + 60} '
                        f'{92 + page * 64 + 28},{pool_y}" fill="none" stroke="{color}" stroke-width="1.2" '
                        'stroke-dasharray="4 3" marker-end="url(#arrow)"/>')
    owner = {p: color for color, pages, _ in requests.values() for p in pages}
    for page in range(10):
        body.append(_box(92 + page * 64, pool_y, 56, 30, owner.get(page, GREY), str(page),
                         "#fff" if page in owner else INK))
    code = [("indptr        = [0, 3, 5]", "request b owns indices[indptr[b] : indptr[b+1]]"),
            ("indices       = [7, 2, 9, 4, 0]", "the physical page of each logical page"),
            ("last_page_len = [2, 3]", "tokens used in each request's last page")]
    body.append(_text(10, 240, "What the kernel receives (CSR arrays):", 13, weight="bold"))
    for i, (array, meaning) in enumerate(code):
        body.append(f'<text x="10" y="{262 + i * 19}" font-family="monospace" style="white-space:pre" '
                    f'fill="{INK}">{escape(array)}</text>')
        body.append(_text(300, 262 + i * 19, meaning))
    body.append(_text(10, 335, "Every page is a separate read: small or scattered pages mean more, shorter memory "
                      "transactions; contiguous pages let reads stream.", 12))
    return _svg(760, 345, body, "Paged KV cache: page table mapping logical pages to scattered physical pages")


def split_kv() -> str:
    """Unsplit decode (one CTA walks the long request, others idle) vs split-KV (chunks + merge)."""
    body = [_text(10, 18, "Without split-KV: one CTA per request (x KV head)", 13, weight="bold"),
            _text(10, 168, "With split-KV: the long request is cut into chunks on idle CTAs, then merged", 13,
                  weight="bold")]
    lens = [("A", 520), ("B", 80), ("C", 110), ("D", 60)]
    for i, (name, length) in enumerate(lens):
        y = 30 + i * 28
        body.append(_text(10, y + 16, f"CTA {i}"))
        body.append(_box(60, y, length, 22, COLORS[i], f"req {name}" if length > 50 else name))
        if length < 520:
            body.append(f'<rect x="{60 + length}" y="{y}" width="{520 - length}" height="22" fill="#f3f3f3" '
                        f'stroke="#bbb" stroke-dasharray="3 3"/>')
    body.append(_text(600, 90, "idle while A finishes", 12))
    body.append(_text(600, 106, "step time = longest request", 12))
    chunks = [(0, "A[0:¼]"), (1, "A[¼:½]"), (2, "A[½:¾]"), (3, "A[¾:1]")]
    for cta, label in chunks:
        y = 180 + cta * 28
        body.append(_text(10, y + 16, f"CTA {cta}"))
        other = lens[cta][1] if cta else 0
        if cta:
            body.append(_box(60, y, other, 22, COLORS[cta], lens[cta][0]))
        body.append(_box(60 + other, y, 130, 22, COLORS[0], label))
    body.append(_box(330, 215, 80, 40, "#666", "merge"))
    for cta in range(4):
        body.append(_arrow(60 + (lens[cta][1] if cta else 0) + 130, 191 + cta * 28, 330, 235))
    body += [_text(430, 232, "merge partial softmax states", 12),
             _text(430, 248, "(max, sum, weighted V) -> exact output", 12),
             _text(10, 310, "plan() decides the split on the CPU from the lengths; it pays off when lengths are "
                   "uneven or the batch is too small to fill the GPU.", 12)]
    return _svg(760, 320, body, "Split-KV: one long request split across CTAs plus a merge, versus unsplit")


def jit() -> str:
    """Spec -> generated CUDA source -> nvcc/ninja -> cached .so, and the cached path of a second start."""
    steps = [("kernel spec", "dtypes, head_dim, variant"), ("generated .cu", "templates instantiated"),
             ("nvcc + ninja", "minutes, all CPU cores"), ("cached .so", "~/.cache/flashinfer"),
             ("load + run", "milliseconds")]
    body = [_text(10, 18, "First use of an attention variant (cold JIT cache)", 13, weight="bold")]
    for i, (title, sub) in enumerate(steps):
        x = 10 + i * 150
        body.append(_box(x, 35, 130, 44, COLORS[i % len(COLORS)], title))
        body.append(_text(x + 65, 97, sub, 11, "middle"))
        if i:
            body.append(_arrow(x - 20, 57, x, 57))
    body += [_arrow(75, 110, 455 + 10, 110, dashed=True),
             _text(200, 132, "next start / same spec: the cached .so is found, compile skipped", 12),
             _text(10, 160, "Each distinct spec is its own module: a new dtype, head size or option means a new "
                   "compile on first use.", 12)]
    return _svg(760, 170, body, "FlashInfer JIT: spec to generated source to nvcc/ninja to cached shared object")


def trace() -> str:
    """A live decode batch as the server hands it to FlashInfer: per-request lengths -> indptr/indices into pool."""
    body = [_text(10, 18, "One decode step of the live server, as FlashInfer sees it", 13, weight="bold")]
    lens = [("r0", 5), ("r1", 3), ("r2", 7)]
    start = 0
    for i, (name, n) in enumerate(lens):
        y = 35 + i * 30
        body.append(_text(10, y + 16, f"{name}: {n} tokens"))
        for t in range(n):
            body.append(_box(110 + t * 24, y, 20, 22, COLORS[i]))
        start += n
    body += [_text(310, 50, "indptr  = [0, 5, 8, 15]   (cumulative lengths, page size 1)"),
             _text(310, 72, "indices = token slots in the KV pool, from the"),
             _text(310, 88, "          request-to-token table (scattered by churn)"),
             _text(310, 112, "plan() once per step, run() once per layer"),
             _text(10, 150, "The trace records these arrays per step: batch size, lengths, and how scattered "
                   "the real pool is.", 12)]
    return _svg(760, 160, body, "Traced decode batch: lengths to indptr and indices into the KV pool")
