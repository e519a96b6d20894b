"""Spark SQL text: identifiers quoted so that any name survives.

quote_identifier("local.db.events")     # `local`.`db`.`events`
"""

from __future__ import annotations

__all__ = ["quote_identifier"]


def quote_identifier(name: str) -> str:
    """`a.b.c` -> `` `a`.`b`.`c` ``, each part back-quoted (back-quotes inside are doubled)."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in name.split("."))
