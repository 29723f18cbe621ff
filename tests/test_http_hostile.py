"""Hostile HTTP clients against a real ``convmem serve --http``: connections
that dribble the start of a request, one byte at a time, must neither hold
their sockets past the read timeout nor take the capacity a client with the
token needs.  (The hostile requests themselves are in test_http.py.)"""

from __future__ import annotations

from tools.hostile import dribble
from tools.mcp_client import http_server

READ_TIMEOUT = 3.0          # the server's --read-timeout here: short, so the test takes ~15 s


def test_dribbling_connections_are_closed_by_the_deadline_and_a_client_with_the_token_is_served(store_path):
    sockets = 1000
    with http_server(store_path, extra=("--read-timeout", str(READ_TIMEOUT)), log_level="WARNING") as server:
        # each dribbler sends a byte a second: an idle timeout alone would never close it
        report = dribble(server.url, server.token, sockets=sockets, interval=1.0, seconds=READ_TIMEOUT + 4)
    assert report["dribblers_opened"] == sockets and report["connect_failures"] == 0, report
    assert report["statuses"] == {"200": report["calls"]}, report        # never a 503
    assert report["calls"] >= 100, report
    assert report["p99_ms"] < 100, report                                # the bound the issue sets
    assert report["dribblers_open_at_end"] == 0, report
    assert report["longest_open_s"] <= READ_TIMEOUT + 1, report
    log = "".join(server.lines)
    assert "Traceback" not in log and server.token not in log
