"""A MariaDB user with a password, for tests that check the password never reaches a log.

    with password_user(admin_url) as url:    # admin_url names the test database
        ...                                    # url logs in as that user, to that database

The user may use only the test database and is dropped afterwards.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

__all__ = ["password_user"]


@contextmanager
def password_user(admin_url: str) -> Iterator[str]:
    base = make_url(admin_url)
    name = f"lakelock_t{secrets.token_hex(4)}"
    password = "pw-" + secrets.token_hex(12)
    admin = create_engine(base)
    with admin.begin() as conn:
        conn.execute(text(f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'"))
        conn.execute(text(f"GRANT ALL PRIVILEGES ON `{base.database}`.* TO '{name}'@'%'"))
    try:
        yield base.set(username=name, password=password).render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP USER IF EXISTS '{name}'@'%'"))
        admin.dispose()
