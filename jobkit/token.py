"""The bearer token of the jobs (ingest and compactor), and what to say when the service refuses it.

    TOKEN_ENV                                  # "LAKELOCK_TOKEN", where both jobs read it
    refused_token(TOKEN_ENV, token=None)       # one line for a 401: which variable to set

Both jobs send `Authorization: Bearer <token>` from that variable; the service answers 401 when
it is missing or unknown (auth is on unless the service runs with LAKELOCK_AUTH=off).
"""

from __future__ import annotations

__all__ = ["TOKEN_ENV", "refused_token"]

TOKEN_ENV = "LAKELOCK_TOKEN"


def refused_token(variable: str, *, token: str | None) -> str:
    """What to do after the service answered 401 to a job that sent `token` from `variable`."""
    state = "is not set" if not token else "holds a token the service does not know"
    return (
        f"the lakelock service refused the job: {variable} {state}; set {variable} to a "
        "job-role secret from the service's LAKELOCK_TOKENS (name:job:secret), or run the "
        "service with LAKELOCK_AUTH=off for a local try"
    )
