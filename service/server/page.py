"""The status page: `GET /` serves one static HTML file (service/server/static/status.html).

The page itself holds no data and needs no token: the browser asks for the token once, keeps it
in session storage (never in a URL), and reads everything through the reader-role API
(`GET /v1/tables`, `/v1/tables/{t}?wait=..&since=version`, `/runs`, `/v1/events`). No build step
and nothing fetched from outside the service.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

__all__ = ["router"]

router = APIRouter()

PAGE = Path(__file__).with_name("static") / "status.html"


@cache
def _page() -> str:
    return PAGE.read_text(encoding="utf-8")


@router.get("/", include_in_schema=False)
def status_page() -> HTMLResponse:
    return HTMLResponse(
        _page(),
        headers={
            # only this page's own script and styles, and calls back to this service
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline'; "
            "style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
            "Cache-Control": "no-cache",
            "Referrer-Policy": "no-referrer",
        },
    )
