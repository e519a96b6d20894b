"""A maintenance lease's turn of the table's head (docs/catalog-front.md §4) as lock
transitions: opened for the holder's commit that lost the head, once; ended with the lease
(released, revoked, expired); never holding a commit lease; the trail replays clean through
the invariant checker. Its end by the lease's commit, and what it holds at the front, are
tests/catalog/test_head_turn.py's."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from service.lock import intents
from service.lock.db import run_transaction
from tests.support.helpers import (
    backdate,
    commit,
    events,
    maintenance,
    release,
    state,
)
from tests.support.invariants import check, load_history

pytestmark = pytest.mark.dialect  # on SQLite and MariaDB (tests/conftest.py)

TABLE = "lake.db.events"
HOLDER = "operator-client"  # the token the in-process API's requests send


def lose_the_head(engine: Engine, lease: dict[str, Any], *, token: int | None = None) -> bool:
    """What the front does when the lease holder's commit is answered 409 (intents.open_turn)."""
    return run_transaction(
        engine,
        partial(
            intents.open_turn,
            table=TABLE,
            lease_id=lease["lease_id"],
            token=lease["token"] if token is None else token,
            principal=HOLDER,
            turn=timedelta(seconds=600),
        ),
    )


def turns(api: Any) -> list[dict[str, Any]]:
    return [x for x in state(api)["intents"] if x["cause"] == "turn"]


def test_a_turn_is_opened_once_for_the_holder_and_holds_no_commit_lease(api, db_url, engine):
    lease = maintenance(api, partitions=["dt=1"]).json()
    assert not lose_the_head(engine, lease, token=lease["token"] + 1)  # a stale token
    assert lose_the_head(engine, lease)
    assert not lose_the_head(engine, lease)  # one turn at a time, not extended
    (turn,) = turns(api)
    assert (turn["request_id"], turn["partitions"]) == (f"turn-{lease['lease_id']}", None)
    assert turn["principal"] == HOLDER
    # the gate's writers keep their rules: a commit lease outside the lease's scope
    assert commit(api, partitions=["dt=2"]).status_code == 201
    opened = [e for e in events(api) if e["event"] == "intent.opened"]
    assert [(e["lease_id"], e["detail"]["cause"]) for e in opened] == [(lease["lease_id"], "turn")]
    assert check(load_history(db_url, [])) == []


@pytest.mark.parametrize("ends", ["released", "revoked", "expired"])
def test_a_turn_ends_with_its_lease(api, db_url, engine, ends):
    lease = maintenance(api, partitions=["dt=1"]).json()
    assert lose_the_head(engine, lease)
    if ends == "released":
        release(api, lease).raise_for_status()
    elif ends == "revoked":
        api.post(f"/v1/leases/{lease['lease_id']}/revoke", json={"reason": "test"})
    else:
        # a turn never outlives its lease's expiry: both lapse
        backdate(db_url, lease, intents_of=TABLE, request_id=f"turn-{lease['lease_id']}")
    assert commit(api, partitions=["dt=1"]).status_code == 201
    assert turns(api) == []
    ended = [
        (e["event"], e["actor"])
        for e in events(api)
        if e["event"].startswith("intent.") and e["detail"].get("cause") == "turn"
    ]
    expected = {
        "released": ("intent.withdrawn", HOLDER),
        "revoked": ("intent.withdrawn", HOLDER),  # the operator's token, here the holder's
        "expired": ("intent.expired", "lakelock"),
    }[ends]
    assert ended[0] == expected
    assert check(load_history(db_url, [])) == []
