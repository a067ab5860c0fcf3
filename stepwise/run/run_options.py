"""What the caller gives the engine for one run: how to run it (Ansible's knobs, the
connection, where work files go, `--pause`'s question) and where it goes and under whom."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.run.batch_pause import Ask
from stepwise.run.events import Observer
from stepwise.run.inventory import Connector
from stepwise.run.lock import RunLock


@dataclass
class EngineOptions:
    """How to run: Ansible knobs and where to keep the working files."""

    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    #: variables given with --secret: secret whatever their name
    secrets: Mapping[str, Any] = field(default_factory=dict)
    #: masks known secret values in every message recorded or shown
    redact: Callable[[str], str] = str
    forks: int = 50
    max_fail_percentage: int = 0
    max_parallel_units: int = 8
    connector: Connector | None = None
    #: where an OS upgrade by reprovisioning keeps each node's data (private to the upgrade user)
    persist_dir: Path | None = None
    work_dir: Path | None = None
    keep_work_dir: bool = False
    continue_command: str = ""
    verbosity: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    before_batch: Ask | None = None  # `--pause`'s question (batch_pause.py)


@dataclass(frozen=True)
class RunContext:
    """Where a run goes and under whom: cloud, engine options, observer, the cloud's lock held."""

    cloud: str
    options: EngineOptions
    observer: Observer
    lock: RunLock | None = None
    #: Ctrl-C / SIGTERM that came after the run was recorded and before the engine's handlers
    #: were in place (`scheduler.interrupts_held`): the engine acts on them as they came
    held_signals: list[str] = field(default_factory=list)
