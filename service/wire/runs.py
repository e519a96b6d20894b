"""Runs: the reports a job sends of its runs on a table (`/v1/tables/{table}/runs`).

    RunBody   request: one run's report (an outcome, and any fields of the job's)
    RunId     the answer of a report: its id
    Runs      the reports kept of a table, newest first

A report is a few levels deep at most (MAX_REPORT_DEPTH), so that it can be read back.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, model_validator

from service.wire.common import Answer, Body

__all__ = ["MAX_REPORT_DEPTH", "RunBody", "RunId", "Runs"]

MAX_REPORT_DEPTH = 16


def _depth(value: Any, level: int = 0) -> int:
    """How deep `value` nests, giving up (with a depth over the limit) past the limit."""
    if level > MAX_REPORT_DEPTH or not isinstance(value, dict | list):
        return level
    children = value.values() if isinstance(value, dict) else value
    return max((_depth(child, level + 1) for child in children), default=level + 1)


class RunBody(Body):
    model_config = ConfigDict(extra="allow")

    outcome: str = Field(min_length=1, max_length=32)
    holder: str | None = Field(default=None, max_length=255)

    @model_validator(mode="before")
    @classmethod
    def _shallow(cls, value: Any) -> Any:
        # a report is a few levels deep; a deeply nested one could not be read back
        if _depth(value) > MAX_REPORT_DEPTH:
            raise ValueError(
                f"the report is nested more than {MAX_REPORT_DEPTH} levels deep; flatten it"
            )
        return value


class Runs(Answer):
    runs: tuple[dict[str, Any], ...] = Field(
        description="run reports, newest first: run_id, reported_at and the report's fields"
    )
    kept: int = Field(
        default=0,
        description="how many runs the service keeps per table (LAKELOCK_RUNS_KEPT): no older "
        "run is there to answer",
    )


class RunId(Answer):
    run_id: int
