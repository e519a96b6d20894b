"""Alembic environment: the lock schema of `service.lock.db`, the URL from lakelock's settings.

`python -m service migrate` calls this through `service.lock.migrate.upgrade()`, which passes
the URL it was given; `alembic upgrade head` run by hand reads LAKELOCK_DATABASE_URL.
"""

from alembic import context

from service.lock.db import make_engine, metadata
from service.server.settings import get_settings

config = context.config
url = config.attributes.get("database_url") or get_settings().database_url


def run_migrations_offline() -> None:
    context.configure(url=url, target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = make_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
