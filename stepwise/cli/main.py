"""The `stepwise` command: a thin layer over model -> plan -> verify -> run -> observe."""

from __future__ import annotations

import importlib
import signal
import sys

from stepwise.cli.app import app

__all__ = ["app", "main", "run"]

#: the command modules, in the order their commands appear in `stepwise --help`; importing
#: one registers its commands on `app`
COMMAND_MODULES = (
    "stepwise.cli.plan_cmd",
    "stepwise.cli.catalog_cmd",
    "stepwise.cli.import_cmd",
    "stepwise.cli.lab_cmd",
    "stepwise.cli.run_cmd",
    "stepwise.cli.preflight_cmd",
    "stepwise.cli.abort_cmd",
    "stepwise.cli.demo_cmd",
    "stepwise.cli.observe_cmd",
    "stepwise.cli.export_cmd",
    "stepwise.cli.report_cmd",
    "stepwise.cli.facts_cmd",
)
#: command modules that need an optional part (the demo needs the lab); without it the rest
#: of the commands still work
OPTIONAL = frozenset({"stepwise.cli.demo_cmd"})


def _register() -> None:
    for mod in COMMAND_MODULES:
        try:
            importlib.import_module(mod)
        except ImportError as exc:
            missing = isinstance(exc, ModuleNotFoundError) and exc.name == mod
            if not (missing or mod in OPTIONAL):
                raise


def run(argv: list[str] | None = None) -> int:
    """Run the `stepwise` command with `argv` (default: sys.argv[1:]) and return its exit code;
    never raises. Any exception other than bad input is a bug: exit 70, traceback in a log."""
    from stepwise.cli.common import say_interrupted
    from stepwise.cli.safety import guarded

    args = list(sys.argv[1:] if argv is None else argv)
    return guarded(
        lambda: (_register(), app(args=args, prog_name="stepwise")), args, say_interrupted
    )


def main() -> None:
    """The installed `stepwise` entry point: run the command and exit with its code."""
    code = run()
    # The command has ended, its outcome is recorded and printed: a Ctrl-C now has nothing left
    # to stop. Without this, the second of two quick presses could end the process by the
    # signal (exit -2 to its parent, not the code above): while the interpreter shuts down
    # (0.1-0.7 s here: thousands of modules, the run's objects) CPython puts SIGINT back to
    # SIG_DFL, as it does every handler written in Python; an ignored signal stays ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    main()
