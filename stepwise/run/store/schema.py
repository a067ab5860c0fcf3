"""Opening a store safely: private files, a database that is stepwise's (or empty), a schema
stepwise knows, and migrations that several processes may start at the same moment.

- A SQLite store file is created 0600 in a 0700 directory (it holds the cloud's history).
- A database with tables but no stepwise schema is someone else's: refused, untouched.
- A schema revision this stepwise does not know was written by a newer stepwise: refused,
  untouched (an older program must not guess at a newer layout).
- Two commands opening a new store at once both run the migration: PostgreSQL serialises them
  with an advisory lock, SQLite with an flock on the store's directory (store.open_store); a
  loser that still meets "already exists" migrates again (a no-op).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from stepwise.errors import InputError, Problem, StepwiseError

ALEMBIC_DIR = Path(__file__).resolve().parent / "alembic"
VERSION_TABLE = "stepwise_alembic_version"
#: any number that is the same in every stepwise: the advisory lock key of migrations
_PG_LOCK_KEY = 0x5737_6570


def _config():
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    return cfg


def known_revisions() -> set[str]:
    """Every schema revision this stepwise can read."""
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(_config()).walk_revisions()}


def prepare_sqlite_file(path: Path, create: bool) -> bool:
    """Make sure the store file exists (created private) when `create`; False when it does not
    exist and must not be created. An existing store of ours that others can read is made
    private (stores before this check were 0644)."""
    from stepwise.run.ansible_files import private_dir

    try:
        if not path.exists():
            if not create:
                return False
            private_dir(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            os.close(fd)
            return True
        if not path.is_file():
            raise InputError(Problem("the state store is not a file", file=str(path), field="--store"))
        for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            st = p.stat() if p.exists() else None
            if st is not None and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
                os.chmod(p, 0o600)
    except OSError as exc:
        raise InputError(Problem(f"cannot use the state store file: {exc.strerror or exc}", file=str(path),
                                 field="--store", hint="give a path in a directory you can write")) from None
    return True


def stored_revision(engine: Engine, where: str) -> str | None:
    """The schema revision of the database, None for an empty one; refuses (changing nothing)
    a database that holds other tables and no stepwise schema, or a revision from a newer
    stepwise."""
    with engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        if VERSION_TABLE not in tables:
            if tables:
                raise StepwiseError(Problem(
                    f"{where} is not a stepwise state store (it holds other tables: "
                    f"{', '.join(sorted(tables)[:5])}{', ...' if len(tables) > 5 else ''}); nothing was changed",
                    field="--store", hint="give stepwise a database (or SQLite file) of its own"))
            return None
        revs = [r[0] for r in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]
    unknown = [r for r in revs if r not in known_revisions()]
    if unknown:
        raise StepwiseError(Problem(
            f"{where} was written by a newer stepwise (schema revision {', '.join(unknown)}); "
            "this one cannot read it and changed nothing", field="--store",
            hint="use the stepwise version that wrote it (or a newer one)"))
    return revs[0] if revs else None


def migrate(engine: Engine, attempts: int = 5) -> None:
    """Bring the store's schema to the latest revision; safe when several processes do it at once."""
    from alembic import command

    for attempt in range(attempts):
        try:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    # held until this transaction ends: one migration at a time per database
                    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_KEY})
                cfg = _config()
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
            return
        except SQLAlchemyError as exc:
            # SQLite: another process created the same tables between our check and our
            # CREATE; its transaction is committed by now, and the next pass finds them
            if attempt == attempts - 1 or "already exists" not in str(exc):
                raise
            time.sleep(0.05 * (attempt + 1))
