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
    exist and must not be created. Nothing about an existing file is changed here: whether
    it is stepwise's is not known yet (`make_private` runs once it is)."""
    from stepwise.paths import checked_path, kind_of
    from stepwise.run.ansible_files import private_dir

    path = checked_path(path, "--store")
    try:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            if not create:
                return False
            private_dir(path.parent)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                # another stepwise created it between our stat and our open: judged below
                # like any existing file (it may also be a link planted in that moment)
                st = os.lstat(path)
            else:
                os.close(fd)
                return True
        if not stat.S_ISREG(st.st_mode):
            raise InputError(
                Problem(
                    f"the state store is {kind_of(st.st_mode)}, not a file",
                    file=str(path),
                    field="--store",
                )
            )
    except OSError as exc:
        raise InputError(
            Problem(
                f"cannot use the state store file: {exc.strerror or exc}",
                file=str(path),
                field="--store",
                hint="give a path in a directory you can write",
            )
        ) from None
    return True


def make_private(path: Path) -> None:
    """Make a store file of ours (and its -wal/-shm) readable by its owner only (stores
    before 0.x were 0644). Called only once the store is known to be stepwise's and a command
    is about to write it; never through a link (the mode of whatever a link points to is not
    stepwise's to change), never a file of another user."""
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # not there, or a link: left as it is
        try:
            st = os.fstat(fd)
            if (
                stat.S_ISREG(st.st_mode)
                and st.st_uid == os.getuid()
                and stat.S_IMODE(st.st_mode) & 0o077
            ):
                os.fchmod(fd, 0o600)
        except OSError:
            pass
        finally:
            os.close(fd)


def stored_revision(engine: Engine, where: str) -> str | None:
    """The schema revision of the database, None for an empty one; refuses (changing nothing)
    a database that holds other tables and no stepwise schema, or a revision from a newer
    stepwise."""
    with engine.connect() as conn:
        tables = set(inspect(conn).get_table_names())
        if VERSION_TABLE not in tables:
            if tables:
                raise StepwiseError(
                    Problem(
                        f"{where} is not a stepwise state store (it holds other tables: "
                        f"{', '.join(sorted(tables)[:5])}{', ...' if len(tables) > 5 else ''}); "
                        "nothing was changed",
                        field="--store",
                        hint="give stepwise a database (or SQLite file) of its own",
                    )
                )
            return None
        revs = [r[0] for r in conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))]
    unknown = [r for r in revs if r not in known_revisions()]
    if unknown:
        raise StepwiseError(
            Problem(
                f"{where} was written by a newer stepwise (schema revision {', '.join(unknown)}); "
                "this one cannot read it and changed nothing",
                field="--store",
                hint="use the stepwise version that wrote it (or a newer one)",
            )
        )
    return revs[0] if revs else None


def migrate(engine: Engine, attempts: int = 5) -> None:
    """Bring the store's schema to the latest revision; safe when several processes do it at
    once."""
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
