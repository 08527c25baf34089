"""The server log: the API key redacted on the way in, the last line / tail read on the way out.

serve.sh pipes the server's output through `redact` (only when API_KEY_FILE is set) into the tmux pane and
$WORK_DIR/server/server.log:

    <server> 2>&1 | python3 -m llmhost.serve.serverlog redact --config-file $WORK_DIR/server/sglang_config.yaml | tee -a server.log
Reads stdin, writes stdout; nothing else.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import BinaryIO


def redact_stream(config_file: Path, source: BinaryIO | None = None, sink: BinaryIO | None = None) -> None:
    """Copy the server's output, replacing the API key with ***.

    SGLang 0.5.17 logs `server_args=ServerArgs(... api_key='<key>' ...)` at startup, even when the key came
    from --config, so the tmux pane and server.log only ever see this filtered stream.
    """
    source, sink = source or sys.stdin.buffer, sink or sys.stdout.buffer
    key = json.loads(config_file.read_text().split(":", 1)[1].strip())
    # The key as written, and as repr() escapes it inside ServerArgs(...) (backslashes, and quotes, come escaped).
    secrets = sorted({s.encode() for s in (key, repr(key)[1:-1]) if s}, key=len, reverse=True)
    for chunk in iter(source.readline, b""):
        for secret in secrets:
            chunk = chunk.replace(secret, b"***")
        sink.write(chunk)
        sink.flush()


def last_line(log: Path) -> str:
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, log.stat().st_size - 4096))
            lines = [ln for ln in handle.read().decode(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:160] if lines else ""


def tail(log: Path, lines: int = 30) -> str:
    """The last `lines` lines of the server log (already redacted on the way in)."""
    try:
        text = log.read_bytes()[-256 * 1024:].decode(errors="replace").replace("\r", "\n")
    except OSError:
        return f"(no log at {log})"
    return "\n".join(text.splitlines()[-lines:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    redact = sub.add_parser("redact", help="copy stdin to stdout with the API key replaced by ***")
    redact.add_argument("--config-file", required=True, help="the 0600 YAML holding api-key")
    args = parser.parse_args(argv)
    redact_stream(Path(args.config_file))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
