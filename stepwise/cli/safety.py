"""The CLI's last line of defence: what an operator sees when something goes wrong.

Bad input is a `StepwiseError` (exit 2, or its own code) printed by `common.reported`. Any
other exception is a bug in stepwise: it is never shown as a raw traceback. The traceback goes
to a private log file and the operator gets one line saying it is a bug and where the log is
(exit 70, EX_SOFTWARE of sysexits.h), so the README's exit codes keep their meaning (1 is "the
run failed", never "stepwise crashed").
"""

from __future__ import annotations

import datetime
import errno
import os
import select
import stat
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape

#: exit code of an internal error (a bug), as sysexits.h's EX_SOFTWARE
EXIT_BUG = 70
#: exit code when the output cannot be written (a full disk or device), as sysexits.h's EX_IOERR
EXIT_OUTPUT = 74
#: errors of a write that are the machine's, never a bug of stepwise's (a full disk, quota)
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


class OutputError(OSError):
    """Standard output cannot be written (closed, or on a full device): the operator's
    environment, not a bug."""


#: the arguments of the command being run (in-process callers such as tests pass their own)
current_argv: list[str] | None = None


def esc(value: Any) -> str:
    """`value` as text that rich prints as it is: data never becomes markup, brackets stay."""
    return escape(str(value))


def crash_dir() -> Path:
    """Where crash logs go: $STEPWISE_LOG_DIR, else $XDG_STATE_HOME/stepwise, else
    ~/.local/state/stepwise (created private: tracebacks may quote data)."""
    explicit = os.environ.get("STEPWISE_LOG_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "stepwise"


def write_crash_log(exc: BaseException, argv: Sequence[str]) -> Path | None:
    """Write the traceback of an unexpected exception to a new 0600 file; None if even that
    fails."""
    from stepwise.secrets import Redactor, argv_secrets, known_secrets, mask_argv

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = (
        "stepwise crashed (this is a bug in stepwise)\n"
        f"command: stepwise {' '.join(mask_argv(list(argv)))}\n\n"
        + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    )
    # the log is what the operator is asked to send: a secret the traceback quotes (an
    # exception's message, a value in a repr) is masked there as on the command line
    text = Redactor(argv_secrets(list(argv)) + known_secrets())(text)
    for d in (crash_dir(), Path(tempfile.gettempdir())):
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, name = tempfile.mkstemp(prefix=f"stepwise-crash-{stamp}-", suffix=".log", dir=d)
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
                fh.write(text)
            return Path(name)
        except OSError:
            continue
    return None


#: commands that change nothing: a reader who stops reading their output loses nothing
SHOW_ONLY = frozenset({"plan", "status", "history", "validate", "catalog"})


def _stdout_identity() -> tuple[int, int, int] | None:
    try:
        st = os.fstat(sys.__stdout__.fileno())  # type: ignore[union-attr]
    except (OSError, ValueError, AttributeError):
        return None
    return st.st_mode, st.st_dev, st.st_ino


def _pipe_closed(before: tuple[int, int, int] | None) -> bool:
    """Whether stdout was a pipe whose reader has gone (`stepwise plan ... | head` after head
    exited): poll reports an error on the pipe's write end, or rich, on EPIPE, has already put
    /dev/null in the pipe's place."""
    if before is None or not stat.S_ISFIFO(before[0]):
        return False
    now = _stdout_identity()
    if now != before:
        return now is not None and stat.S_ISCHR(now[0])
    try:
        poller = select.poll()
        poller.register(sys.__stdout__.fileno(), select.POLLOUT)  # type: ignore[union-attr]
        return any(ev & select.POLLERR for _fd, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def guarded(
    invoke: Callable[[], Any],
    argv: Sequence[str],
    interrupted: Callable[[], None] = lambda: None,
) -> int:
    """Call the click app (standalone: it exits) and return the exit code it meant; an
    exception that escapes it is reported as a bug (exit 70) with a pointer to its log.
    `interrupted`: what says a Ctrl-C to a script before "interrupted" goes to stderr (the
    command layer's JSON error: given from above, this module imports no command code)."""
    global current_argv
    current_argv = list(argv)
    stdout_before = _stdout_identity()
    try:
        invoke()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if code == 130 and _ctrl_c_unreported(exc):
            return _interrupted(interrupted)
        if code == 1 and _pipe_closed(stdout_before):
            # the reader of stdout went away (`stepwise plan ... | head`). A command that only
            # shows something did its job for that reader: 0. Anything else was cut short, which
            # the shell's code for a process ended by SIGPIPE says, not 1 ("the run failed").
            words = [a for a in argv if not a.startswith("-")]
            shown_only = not words or words[0] in SHOW_ONLY or "--help" in argv
            return 0 if shown_only else 128 + 13
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted(interrupted)
    except OSError as exc:
        if not isinstance(exc, OutputError) and exc.errno not in OUTPUT_ERRNOS:
            return _bug(exc, argv)
        return _output_failed(exc)
    except Exception as exc:  # noqa: BLE001 - the one place where any exception is a reported bug
        return _bug(exc, argv)
    return 0


def _ctrl_c_unreported(exc: SystemExit) -> bool:
    """Whether this exit 130 is typer's own answer to a Ctrl-C that came outside
    `common.reported` (a command importing its modules, before its `with reported()`): typer
    exits 130 silently, which would leave a `--json` reader nothing to parse. `reported`
    raises its exit `from None`, so a KeyboardInterrupt as a cause is typer's."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen.__cause__, KeyboardInterrupt):
            return True
        seen = seen.__context__
    return False


def _interrupted(say: Callable[[], None]) -> int:
    """Say that a Ctrl-C ended the command before it had anything to report (`say`: as JSON
    on stdout when `--json` was asked), and on stderr; exit 130 as the shell's code for
    SIGINT."""
    try:
        say()
        print("interrupted", file=sys.stderr)
    except (OSError, ValueError):
        pass  # its streams are gone: the exit code says it
    return 130


def _output_failed(exc: OSError) -> int:
    """A write that failed for want of room (or stdout closed): one line, no log, exit 74."""
    what = "standard output" if isinstance(exc, OutputError) else "its output"
    _drop_stdout()
    try:
        print(
            f"error: stepwise cannot write {what}: {exc.strerror or exc}; nothing more was done",
            file=sys.stderr,
        )
    except (OSError, ValueError, AttributeError):
        pass  # stderr is gone as well: the exit code says it
    return EXIT_OUTPUT


def _drop_stdout() -> None:
    """Point the process' stdout at /dev/null: the interpreter flushes what is still buffered
    on exit, and a second failure there would print a traceback (and exit 120). Only the
    process' own stdout: an in-process caller's capture is left alone."""
    if sys.stdout is None or sys.stdout is not sys.__stdout__:
        return
    try:
        fd = sys.stdout.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError):
        pass


def _bug(exc: BaseException, argv: Sequence[str]) -> int:
    """Report `exc` as a bug: its traceback in a log, one line to the operator, exit 70."""
    log = write_crash_log(exc, argv)
    where = f"details in {log}" if log else "no log could be written"
    print(
        f"internal error: stepwise hit a bug ({type(exc).__name__}); nothing more was done. "
        f"{where}; please report it with that file",
        file=sys.stderr,
    )
    return EXIT_BUG
