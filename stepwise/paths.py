"""The one safe way to read an input path and to write an output file.

Every file stepwise reads (deployment, catalog entries, facts, `-e @file`, `--secret @file`,
inventories, THT roles and environment files) goes through `read_input`, and every file it
writes for the operator (`import -o`, `--html`, `report -o`, `discover -o`) through
`write_output`. Paths named on the command line or in a file are input like any other:

- a path is checked before the first system call: no NUL, no component over 255 bytes, at
  most 4,095 bytes in all (pathlib raised ENAMETOOLONG outside any handler);
- only a regular file is read: a FIFO, a device or a socket is refused without blocking (the
  open is non-blocking, the type is checked on the open descriptor, so no race between a
  check and the open); the read stops one byte past the size limit;
- where links are not followed (the files of a catalog directory: a link there could make
  stepwise, run as root, quote a root-only file in its error), a link is refused, never
  resolved;
- an output file is written to a private temporary file beside it and renamed into place: a
  link planted at the path is replaced, never written through; an existing file is replaced
  only if stepwise wrote it (it starts with the caller's marker) or with `--force`, and never
  if it is not a regular file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from stepwise.errors import InputError, Problem

#: longest path component (NAME_MAX of Linux and most file systems), in bytes
MAX_NAME = 255
#: longest path (PATH_MAX less its NUL), in bytes
MAX_PATH = 4095
#: largest input file (a 10,000-node deployment written as a list is about 1 MiB)
MAX_INPUT_BYTES = 16 * 1024 * 1024

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def state_dir(deployment_path: os.PathLike[str] | str) -> Path:
    """Where stepwise keeps a cloud's local state (its SQLite store, its run lock, the runs'
    work files): `.stepwise` beside the deployment file; the working directory for a
    deployment that has no file (`<memory>`, tests)."""
    if str(deployment_path) == "<memory>":
        return Path.cwd() / ".stepwise"
    return Path(deployment_path).resolve().parent / ".stepwise"


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, as an operator says it."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def checked_path(path: os.PathLike[str] | str, field: str | None = None) -> Path:
    """`path` as a Path once its name is known to be usable: no NUL byte, no component longer
    than MAX_NAME bytes, at most MAX_PATH bytes. Raises InputError (the name is shortened in
    the message: a 70,000-character name is not worth printing whole)."""
    text = os.fspath(path)
    shown = text if len(text) <= 120 else text[:60] + "..." + text[-40:]
    if not text:
        raise InputError(Problem("an empty path", field=field, hint="give a file name"))
    if "\x00" in text:
        raise InputError(Problem("a path with a NUL byte", file=repr(shown), field=field))
    try:
        raw = os.fsencode(text)
    except UnicodeEncodeError:  # a lone surrogate: no file system name is spelled so
        raise InputError(
            Problem("not a valid file name (it cannot be encoded)", file=repr(shown), field=field)
        ) from None
    longest = max(len(part) for part in raw.split(b"/"))
    if longest > MAX_NAME or len(raw) > MAX_PATH:
        raise InputError(
            Problem(
                f"the path is too long (a name of {longest:,} bytes, {len(raw):,} in all; at most "
                f"{MAX_NAME} per name and {MAX_PATH:,} in all)",
                file=shown,
                field=field,
                hint="check the path; use a shorter name",
            )
        )
    return Path(text)


def _os_problem(exc: OSError, fname: str, field: str | None, what: str) -> InputError:
    if exc.errno == errno.ENOENT:
        return InputError(
            Problem(
                "file not found",
                file=fname,
                field=field,
                hint="check the path; relative paths are relative to the current directory",
            )
        )
    if exc.errno == errno.ELOOP:
        return InputError(
            Problem(
                f"the {what} is a symbolic link, which stepwise does not follow here",
                file=fname,
                field=field,
                hint="put the file itself there, not a link",
            )
        )
    if exc.errno == errno.ENAMETOOLONG:
        return InputError(Problem("the path is too long", file=fname, field=field))
    return InputError(
        Problem(f"cannot read the {what}: {exc.strerror or exc}", file=fname, field=field)
    )


def read_input(
    path: os.PathLike[str] | str,
    *,
    field: str | None = None,
    limit: int = MAX_INPUT_BYTES,
    follow: bool = True,
    what: str = "file",
) -> bytes:
    """The bytes of the regular file at `path`, at most `limit` of them; InputError (exit 2)
    for a path that is not usable, not there, not a regular file (a FIFO is refused without
    blocking), a link when `follow` is False, or a file over the limit."""
    p = checked_path(path, field)
    fname = str(p)
    flags = (
        os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    )
    try:
        fd = os.open(p, flags)
    except OSError as exc:
        raise _os_problem(exc, fname, field, what) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(
                Problem(
                    f"is {kind_of(mode)}, not a {what} stepwise can read",
                    file=fname,
                    field=field,
                    hint="give a regular file",
                )
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _os_problem(exc, fname, field, what) from None
    finally:
        os.close(fd)
    if size > limit:
        raise InputError(
            Problem(
                f"the {what} is too large (more than {limit:,} bytes)",
                file=fname,
                field=field,
                hint="split it, or check that this is the file you meant",
            )
        )
    return b"".join(chunks)


def is_directory(path: os.PathLike[str] | str, field: str | None = None) -> bool:
    """Whether `path` names a directory (following links); a name that cannot be a path is an
    InputError, any other failure to look is False."""
    p = checked_path(path, field)
    try:
        return stat.S_ISDIR(os.stat(p).st_mode)
    except (OSError, ValueError):
        return False


def write_output(
    path: os.PathLike[str] | str,
    data: bytes,
    *,
    field: str | None = None,
    force: bool = False,
    ours: bytes | None = None,
    mode: int = 0o600,
) -> None:
    """Write `data` to `path` atomically: into a private temporary file in the same directory,
    then renamed over `path`. A link at `path` is refused (never followed, never replaced), as
    is anything that is not a regular file; an existing file is replaced only when it starts
    with `ours` (stepwise wrote it) or with `force`. Nothing is changed when it is refused."""
    p = checked_path(path, field)
    _check_replaceable(p, field, force, ours)
    _write_atomically(p, data, field, mode)


def check_output(
    path: os.PathLike[str] | str,
    *,
    field: str | None = None,
    force: bool = False,
    ours: bytes | None = None,
) -> None:
    """What `write_output` would refuse, checked before the work whose result it writes (a
    command that contacts every node first): the path as `write_output` takes it, and a
    directory that exists and takes a new file (a probe file is created there and removed)."""
    p = checked_path(path, field)
    _check_replaceable(p, field, force, ours)
    if not p.parent.is_dir():
        raise InputError(
            Problem(
                f"cannot write: directory {p.parent} does not exist",
                file=str(p),
                field=field,
                hint="create the directory first, or give a path in one that exists",
            )
        )
    fd, probe = _temp_beside(p, field)
    os.close(fd)
    _unlink(probe)


def _check_replaceable(p: Path, field: str | None, force: bool, ours: bytes | None) -> None:
    """Refuse a path that is a link or not a regular file, and an existing file stepwise did
    not write (unless `force`)."""
    fname = str(p)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(
            Problem(f"cannot write: {exc.strerror or exc}", file=fname, field=field)
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(
            Problem(
                f"is {kind_of(st.st_mode)}; stepwise writes only a new file or one it wrote",
                file=fname,
                field=field,
                hint="give a new file name",
            )
        )
    if not force and not (ours and _starts_with(p, ours)):
        raise InputError(
            Problem(
                "the file exists and stepwise did not write it; not replaced",
                file=fname,
                field=field,
                hint="give a new file name, or --force to replace it",
            )
        )


def _temp_beside(p: Path, field: str | None) -> tuple[int, str]:
    """A private temporary file in `p`'s directory (fd, path); one that cannot be made is bad
    input naming `p`."""
    try:
        return tempfile.mkstemp(prefix=f".{p.name[:200]}.", suffix=".tmp", dir=p.parent)
    except OSError as exc:
        raise InputError(
            Problem(
                f"cannot write: {exc.strerror or exc}",
                file=str(p),
                field=field,
                hint="give a path in a directory you can write",
            )
        ) from None


def _write_atomically(p: Path, data: bytes, field: str | None, mode: int) -> None:
    """Write into a private temporary file beside `p`, then rename it over `p`; the temporary
    file is removed on any failure."""
    fname = str(p)
    fd, tmp = _temp_beside(p, field)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)
            os.fsync(fh.fileno())
        os.replace(tmp, p)  # replaces the name: a link planted meanwhile is replaced, not followed
    except OSError as exc:
        _unlink(tmp)
        raise InputError(
            Problem(
                f"cannot write: {exc.strerror or exc}",
                file=fname,
                field=field,
                hint="check the disk space and that the directory is writable",
            )
        ) from None
    except BaseException:
        _unlink(tmp)
        raise


def _starts_with(p: Path, prefix: bytes) -> bool:
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, len(prefix)) == prefix
    except OSError:
        return False
    finally:
        os.close(fd)


def _unlink(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass
