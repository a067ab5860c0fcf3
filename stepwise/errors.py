"""Errors an operator can act on: every one names where the problem is and what to do."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the input, located as precisely as we can."""

    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None
    hint: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "")
        parts = [p for p in (where, self.field) if p]
        head = ": ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.hint:
            text += f"\n  -> {self.hint}"
        return text


class StepwiseError(Exception):
    """Base of all errors stepwise reports to the operator (CLI exit code 2 unless said)."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = [Problem(problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class InputError(StepwiseError):
    """The deployment, catalog, facts or command-line input is invalid; nothing was changed."""


class InterruptedBeforeStart(StepwiseError):
    """Ctrl-C (or SIGTERM) while a run was still being prepared (its preflight): the run did
    not start, nothing was recorded or changed."""

    exit_code = 130


class UnsafePlanError(StepwiseError):
    """The plan breaks an invariant (availability, quorum, RPC pinning, ...) and is refused."""

    exit_code = 3
