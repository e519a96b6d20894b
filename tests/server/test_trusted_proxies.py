"""LAKELOCK_TRUSTED_PROXIES: the request log records the address X-Forwarded-For names only
when the connecting peer is a trusted proxy; anyone else's header is ignored."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from service.server.settings import SettingsError
from tests.conftest import ServerProcess, auth, make_settings, start_server

pytestmark = pytest.mark.slow


def _client_of(server: ServerProcess, request_id: str) -> str:
    assert server.stop() == 0
    for raw in server.log().splitlines():
        line = json.loads(raw)
        if line["logger"] == "lakelock.request" and line["request_id"] == request_id:
            return line["client"]
    raise AssertionError(f"no request line {request_id} in\n{server.log()}")


def _send(server: ServerProcess, forwarded: str, request_id: str) -> None:
    answer = httpx.get(
        server.url + "/v1/tables",
        headers={**auth("reader"), "X-Forwarded-For": forwarded, "X-Request-ID": request_id},
    )
    assert answer.status_code == 200, answer.text


def test_an_untrusted_peer_cannot_choose_the_address_the_log_records(tmp_path: Path) -> None:
    server = start_server(f"sqlite:///{tmp_path / 'l.db'}", tmp_path, LAKELOCK_LOG_LEVEL="info")
    try:
        _send(server, "203.0.113.9", "forged")
    finally:
        server.stop()
    assert _client_of(server, "forged") == "127.0.0.1"


def test_a_trusted_proxy_names_the_client_and_only_the_hop_it_added_counts(
    tmp_path: Path,
) -> None:
    server = start_server(
        f"sqlite:///{tmp_path / 'l.db'}",
        tmp_path,
        LAKELOCK_LOG_LEVEL="info",
        LAKELOCK_TRUSTED_PROXIES="10.0.0.0/24, 127.0.0.0/8",
    )
    try:
        _send(server, "203.0.113.9", "proxied")
        # a client sent its own X-Forwarded-For; the proxy appended the address it saw
        _send(server, "198.51.100.66, 203.0.113.10", "chained")
    finally:
        server.stop()
    assert _client_of(server, "proxied") == "203.0.113.9"
    assert _client_of(server, "chained") == "203.0.113.10"


def test_the_proxies_are_parsed_as_given() -> None:
    settings = make_settings("sqlite://", trusted_proxies=" 10.0.0.0/24,10.0.1.7 ,, fd00::/8")
    assert settings.proxies == ["10.0.0.0/24", "10.0.1.7", "fd00::/8"]
    assert make_settings("sqlite://").proxies == []


@pytest.mark.parametrize("value", ["*", "alb.internal", "10.0.0.1/24", "10.0.0.0/33"])
def test_a_bad_proxy_stops_start_up_with_a_message(value: str) -> None:
    with pytest.raises(SettingsError) as caught:
        make_settings("sqlite://", trusted_proxies=f"10.0.0.0/24,{value}")
    message = str(caught.value)
    assert f"LAKELOCK_TRUSTED_PROXIES: {value!r} is not an IP address or network" in message
    assert "10.0.0.0/24,10.0.1.0/24" in message, "says what to send"
