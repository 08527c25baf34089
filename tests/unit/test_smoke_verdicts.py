"""smoke_test's verdicts and one-line errors on inputs and servers that are not what it expects."""
from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # smoke_test.py is a script at the repo root
import smoke_test  # noqa: E402

HTML_404 = b"<!DOCTYPE HTML>\n<html lang=\"en\">\n    <head>\n        <title>Error response</title>\n    </head>\n" \
           b"    <body>\n        <h1>Error response</h1>\n        <p>Error code: 404</p>\n    </body>\n</html>\n"


class HtmlNotFound(BaseHTTPRequestHandler):
    """Another web server on the port (a wrong --base-url): a multi-line HTML 404 page for every path."""

    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(HTML_404)))
        self.end_headers()
        self.wfile.write(HTML_404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def html_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), HtmlNotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_an_html_error_page_is_one_line_on_stderr(html_server, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    code = smoke_test.main(["--base-url", html_server, "--model", "m"])
    err = capsys.readouterr().err
    assert code == 1 and "the server answered 404: <!DOCTYPE HTML> <html" in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_timeout_that_is_not_a_finite_number_is_a_usage_error(value, capsys):
    """Not a "cannot connect" against a server that is up: the socket refuses such a timeout."""
    with pytest.raises(SystemExit) as exc:
        smoke_test.parse(["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--timeout", value])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--timeout and --max-tokens must be positive (--timeout a finite" in err


def test_one_token_cannot_pass_the_stream_check_so_it_is_a_usage_error():
    """A correct server streams one token as one chunk: --max-tokens 1 would fail the stream check for no fault of
    the server's. It stays allowed where the stream check does not run."""
    for argv in (["--max-tokens", "1"], ["check", "--only", "stream", "--max-tokens", "1"]):
        with pytest.raises(SystemExit) as exc:
            smoke_test.parse(argv)
        assert exc.value.code == 2
    assert smoke_test.parse(["--only", "chat", "--max-tokens", "1"]).max_tokens == 1
