"""A module the catalog front must never import: importing it leaves the file named by
LAKELOCK_TEST_TRUST_MARKER, so tests/catalog/test_trust.py sees whether a class a client named
was loaded in the service."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

if marker := os.environ.get("LAKELOCK_TEST_TRUST_MARKER"):
    Path(marker).touch()


class Named:
    """What pyiceberg would build from a `*.impl` property naming this module."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if marker:
            Path(marker).touch()
