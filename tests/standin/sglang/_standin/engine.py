"""The stand-in's "model": deterministic tokens, a token-level prefix (radix) cache, request slots with a queue, and
the live counters /metrics reports. Thread-safe; one Engine per server process.

Tokens: text is split into word/space/punctuation pieces (roughly one Qwen token per English word) and each piece
maps to a stable id (crc32), so identical prompts give identical token lists across processes. Output is drawn from
a fixed list of odd pieces seen in the captured random-weight replies, seeded per request.
Timing: a request waits for a slot (max running), then "prefills" for ttft_ms + prefill_us_per_token per UNCACHED
prompt token, then emits one token per tick of the engine's step clock, one step = itl_ms (+ itl_ms_per_running per
other running request).
"""
from __future__ import annotations

import random
import re
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from sglang._standin.decode_log import DecodeLog
from sglang._standin.profiler import Profiler

_PIECE = re.compile(r"<\|[a-z_]+\|>|\s?\w+|\s?[^\w\s]|\s+")
VOCAB = 151936
# Pieces copied from the captured random-weight replies (tests/captures/chat_*.txt, generate_stream.txt).
GARBAGE = [" carc", "表达", "_typeof", " QC", " VII", "สาธารณ", "larında", ".dispatchEvent", "邮政", "ASTE", "+self",
           "tx", "רט", " strips", " Sau", "_resize", " Hayward", "IMS", " corr", "几何", " Nigerian", "irebase",
           " Regel", "应用于", "/news", "ᴱ", "-opacity", "コミュニ", " CX", "口腔", "Weights", " persona", "_top",
           "怅", " subsets", "omaly", " hele", "ospels", "핌", " Jed", " sunlight", "rowave", "新媒体", "ft", "嬖",
           "ensus", "pagesize", "ampie", " Everyone", " wasm", " sibling", "ła", " WideString", "眯", "IEW", "颁发"]


def tokenize(text: str) -> list[int]:
    """Deterministic ids for the pieces of `text` (special tokens like <|im_start|> are one piece)."""
    return [zlib.crc32(piece.encode()) % VOCAB for piece in _PIECE.findall(text)]


def piece_id(piece: str) -> int:
    return zlib.crc32(piece.encode()) % VOCAB


class PrefixCache:
    """Token trie: match the longest cached prefix, insert finished sequences; cleared when full (no LRU)."""

    def __init__(self, capacity_tokens: int, enabled: bool = True):
        self.root: dict = {}
        self.size = 0
        self.capacity = capacity_tokens
        self.enabled = enabled

    def match(self, tokens: list[int]) -> int:
        if not self.enabled:
            return 0
        node, depth = self.root, 0
        for tok in tokens:
            node = node.get(tok)
            if node is None:
                break
            depth += 1
        return depth

    def insert(self, tokens: list[int]) -> None:
        if not self.enabled:
            return
        if self.size + len(tokens) > self.capacity:
            self.flush()  # why: a simple bound on memory; the real cache evicts LRU leaves instead
        node = self.root
        for tok in tokens:
            child = node.get(tok)
            if child is None:
                child = node[tok] = {}
                self.size += 1
            node = child

    def flush(self) -> None:
        self.root, self.size = {}, 0


@dataclass(frozen=True, slots=True)
class Timing:
    ttft_ms: float = 5.0
    prefill_us_per_token: float = 20.0
    itl_cycle_ms: tuple[float, ...] = (2.0,)  # the ITL, one step further at each cache flush
    max_running: int = 4096
    itl_ms_per_running: float = 0.0  # a bigger decode batch makes every step slower


@dataclass
class Request:
    """One generation in flight; the HTTP layer reads `cached_tokens`, `output` and times from it."""
    rid: str
    prompt: list[int]
    max_new_tokens: int
    seed: int
    is_streaming: bool
    cached_tokens: int = 0
    output: list[str] = field(default_factory=list)
    received_ts: float = field(default_factory=time.time)
    started_ts: float = 0.0
    first_token_ts: float = 0.0
    finished_ts: float = 0.0


class Stats:
    """Counters and histogram samples for /metrics (guarded by the engine lock)."""

    def __init__(self) -> None:
        self.prompt_tokens = {False: 0, True: 0}
        self.generation_tokens = {False: 0, True: 0}
        self.requests = {False: 0, True: 0}
        self.cached_tokens = 0
        self.ttft_s: dict[bool, list[float]] = {False: [], True: []}
        self.e2e_s: dict[bool, list[float]] = {False: [], True: []}
        self.itl_s: dict[bool, list[tuple[float, int]]] = {False: [], True: []}  # (mean ITL, tokens)
        self.queue_s: list[float] = []  # waiting for a slot (SGLang's queue_time)
        # SGLang's per-stage histograms: request_process = taking the request in (here, the engine's lock to enter
        # its queue), prefill_forward = the prefill to its first token; observed as each ends
        self.stage_s: dict[str, list[float]] = {"request_process": [], "prefill_forward": []}
        self.last_hit_rate = 0.0  # the last prefill batch's, 0.0 once a decode step ran (as SGLang)
        self.prefill_batches = 0  # each request is its own prefill batch here (one Prefill batch line each)
        self.gen_throughput = 0.0


class StepClock:
    """SGLang steps every running request in one batch: here one clock ticks for all of them, each step as long as
    `step_s()` says when it starts, and a request's n-th decode token waits for the n-th tick after it joined. A late
    tick (a busy host) delays every request alike, so answers that started together end together; a thread that
    wakes late catches up at once instead of falling behind its batch. The clock runs only while a request decodes."""

    def __init__(self, step_s: Callable[[], float]):
        self._step_s = step_s
        self._cond = threading.Condition()
        self._tick = 0
        self._decoding = 0
        self._thread: threading.Thread | None = None

    def join(self) -> int:
        """A request starts decoding: the tick its tokens count from."""
        with self._cond:
            self._decoding += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="standin-step-clock", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return self._tick

    def leave(self) -> None:
        with self._cond:
            self._decoding -= 1

    def wait(self, tick: int) -> None:
        """Block until the clock has reached `tick`."""
        with self._cond:
            while self._tick < tick:
                self._cond.wait()

    def _run(self) -> None:
        due = time.monotonic()
        while True:
            with self._cond:
                if not self._decoding:
                    while not self._decoding:
                        self._cond.wait()
                    due = time.monotonic()  # after an idle spell the next step starts now
            step = self._step_s()
            due += step
            now = time.monotonic()
            if due < now - step:
                due = now  # over a step late: the batch is slower now, it does not replay the missed steps
            time.sleep(max(0.0, due - now))
            with self._cond:
                self._tick += 1
                self._cond.notify_all()


SCHEDULER_GONE = threading.Event()  # set when the launcher died under an HTTP child: steps never come


class Engine:
    """Slots + prefix cache + stats; `run` is a generator of output pieces that really sleeps for the timing."""

    def __init__(self, timing: Timing, max_total_tokens: int, radix_enabled: bool):
        self.timing = timing
        self.max_total_tokens = max_total_tokens
        self.cache = PrefixCache(min(max_total_tokens, 2_000_000), radix_enabled)
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(timing.max_running)
        self.running: dict[str, Request] = {}
        self.queued = 0
        self.stats = Stats()
        self.flushes = 0
        self.log = lambda msg: None  # the server sets this to its log function
        self.decode_log: DecodeLog | None = None  # the server sets this: the Decode batch lines
        self.profiler: Profiler | None = None  # the server sets this: /start_profile's traces
        self.clock = StepClock(self._step_s)

    @property
    def itl_ms(self) -> float:
        return self.timing.itl_cycle_ms[self.flushes % len(self.timing.itl_cycle_ms)]

    def _step_s(self) -> float:
        """One decode step of the batch running now."""
        others = max(len(self.running) - 1, 0)  # a dict's len is atomic: no lock per step
        return (self.itl_ms + self.timing.itl_ms_per_running * others) / 1000

    def busy(self) -> bool:
        with self.lock:
            return bool(self.running) or self.queued > 0

    def flush(self) -> bool:
        """Clear the prefix cache unless requests are running or waiting (SGLang refuses then)."""
        with self.lock:
            if self.running or self.queued:
                return False
            self.cache.flush()
            self.flushes += 1
            return True

    def used_tokens(self) -> int:
        with self.lock:
            return sum(len(r.prompt) + len(r.output) for r in self.running.values())

    def run(self, req: Request, cancelled: threading.Event | None = None):
        """Yield output pieces one by one; admission, prefill and decode delays happen inside."""
        entered = time.time()
        with self.lock:
            self.queued += 1
            queued_ts = time.time()
            self.stats.stage_s["request_process"].append(queued_ts - entered)
        self.slots.acquire()
        tick: int | None = None  # set while this request decodes on the step clock
        try:
            with self.lock:
                self.queued -= 1
                req.started_ts = time.time()
                self.stats.queue_s.append(req.started_ts - queued_ts)
                # why: at least one prompt token is always computed, so a full hit reports len-1 (4521 -> 4520)
                req.cached_tokens = min(self.cache.match(req.prompt), max(len(req.prompt) - 1, 0))
                self.running[req.rid] = req
                self.stats.last_hit_rate = req.cached_tokens / max(len(req.prompt), 1)
                self.stats.prefill_batches += 1
                running, queued = len(self.running), self.queued
            self.log(f"Prefill batch, #new-seq: 1, #new-token: {len(req.prompt) - req.cached_tokens}, "
                     f"#cached-token: {req.cached_tokens}, token usage: 0.00, #running-req: {running - 1}, "
                     f"#queue-req: {queued}, #pending-token: 0, cuda graph: True")
            uncached = len(req.prompt) - req.cached_tokens
            time.sleep((self.timing.ttft_ms + uncached * self.timing.prefill_us_per_token / 1000) / 1000)
            with self.lock:
                self.cache.insert(req.prompt)
            rng = random.Random(req.seed)
            tick = self.clock.join()
            for i in range(req.max_new_tokens):
                if cancelled is not None and cancelled.is_set():
                    break
                while SCHEDULER_GONE.is_set():
                    time.sleep(1)  # a request the dead scheduler will never finish
                if i:
                    tick += 1
                    self.clock.wait(tick)
                    # SGLang 0.5.17's decode stats set the gauge to 0.0: it is the last prefill batch's hit rate
                    # only until the next decode step (captured /metrics after load reads 0.0)
                    with self.lock:
                        self.stats.last_hit_rate = 0.0
                    if self.decode_log is not None:
                        self.decode_log.step(len(self.running), self._pool)
                if self.profiler is not None:
                    self.profiler.step(extend=i == 0)  # one forward pass: the prefill (i = 0) or a decode step
                piece = rng.choice(GARBAGE)
                req.output.append(piece)
                if i == 0:
                    req.first_token_ts = time.time()
                    with self.lock:
                        self.stats.stage_s["prefill_forward"].append(req.first_token_ts - req.started_ts)
                yield piece
        finally:
            if tick is not None:
                self.clock.leave()
            self._finish(req)
            self.slots.release()

    def _pool(self) -> tuple[int, int]:
        """(KV tokens in use, requests queued), for the Decode batch line."""
        with self.lock:
            return sum(len(r.prompt) + len(r.output) for r in self.running.values()), self.queued

    def _finish(self, req: Request) -> None:
        req.finished_ts = time.time()
        with self.lock:
            if self.running.pop(req.rid, None) is None:
                return
            self.cache.insert(req.prompt + [piece_id(p) for p in req.output])
            s, key = self.stats, req.is_streaming
            s.requests[key] += 1
            s.prompt_tokens[key] += len(req.prompt)
            s.generation_tokens[key] += len(req.output)
            s.cached_tokens += req.cached_tokens
            if req.first_token_ts:
                s.ttft_s[key].append(req.first_token_ts - req.received_ts)
            s.e2e_s[key].append(req.finished_ts - req.received_ts)
            if len(req.output) > 1:
                decode_s = req.finished_ts - req.first_token_ts
                s.itl_s[key].append((decode_s / (len(req.output) - 1), len(req.output) - 1))
                s.gen_throughput = (len(req.output) - 1) / max(decode_s, 1e-9)
