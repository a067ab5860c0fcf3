"""A run's working files: the private directory ansible-runner works in (kept with
--keep-artifacts, scrubbed of secrets then), the inventory, the extra variables, and the
secrets in a directory of their own outside it, removed when the run ends whatever happens."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stepwise.model import Deployment
from stepwise.plan.units import Plan
from stepwise.run.ansible_files import private_dir, to_yaml, unsafe, write_private
from stepwise.run.inventory import inventory, plan_vars
from stepwise.secrets import split_secret

if TYPE_CHECKING:
    from stepwise.run.run_options import EngineOptions


@dataclass
class RunFiles:
    """Where one run's files are; `write` fills them in."""

    #: the work directory: the operator's, or a temporary one removed after the run
    work: Path
    #: this run's directory in it: one ansible-runner directory per chain
    pdd: Path
    #: secrets and the gate's socket (whose path must stay short): a private directory (0700)
    #: outside the work directory, which --keep-artifacts keeps
    secret_dir: Path
    inventory_path: Path | None = None
    extravars_path: Path | None = None
    secret_files: tuple[Path, ...] = ()
    #: hosts that failed earlier in the run (with --max-fail-percentage): they take no part
    failed_hosts_file: Path | None = None

    @staticmethod
    def make(run_id: int, options: EngineOptions) -> RunFiles:
        """Create the run's directories (private)."""
        work = (
            Path(options.work_dir)
            if options.work_dir
            else Path(tempfile.mkdtemp(prefix="stepwise-run-"))
        )
        private_dir(work)
        pdd = Path(tempfile.mkdtemp(prefix=f"run{run_id}-", dir=work))
        return RunFiles(work, pdd, Path(tempfile.mkdtemp(prefix="stepwise-secret-")))

    def write(
        self, deployment: Deployment, plan: Plan, run_id: int, options: EngineOptions
    ) -> None:
        """The inventory and the variables files every chain's process reads."""
        inv = inventory(deployment, options.connector)
        self.inventory_path = write_private(self.pdd / "inventory" / "hosts.yml", to_yaml(inv))
        public, secret = split_secret(dict(options.extra_vars))
        extravars = {
            **plan_vars(plan, deployment),
            "stepwise_run_id": run_id,
            **unsafe(public),
        }
        if options.persist_dir is not None:
            private_dir(options.persist_dir)
            os.chmod(options.persist_dir, 0o700)
            extravars["stepwise_persist_dir"] = str(options.persist_dir)
        if options.max_fail_percentage > 0:
            self.failed_hosts_file = self.pdd / "failed_hosts"
            write_private(self.failed_hosts_file, "")
            extravars["stepwise_failed_hosts_file"] = str(self.failed_hosts_file)
        # extra vars reach Ansible through private files, never its command line; the secret
        # ones through a file outside the artifacts, in a directory removed after the run
        self.extravars_path = write_private(self.pdd / "vars" / "extra.yml", to_yaml(extravars))
        secret = {**secret, **dict(options.secrets)}
        if secret:
            path = write_private(self.secret_dir / "secret.yml", to_yaml(unsafe(secret)))
            self.secret_files = (path,)

    def remove_secrets(self) -> None:
        """Remove the secrets' directory (and the gate's socket with it)."""
        shutil.rmtree(self.secret_dir, ignore_errors=True)

    def discard(self, options: EngineOptions) -> None:
        """The run could not start: remove what was made (unless the operator keeps it)."""
        self.remove_secrets()
        if not options.keep_work_dir:
            shutil.rmtree(self.pdd if options.work_dir else self.work, ignore_errors=True)

    def finish(self, options: EngineOptions) -> None:
        """After the run: kept artifacts scrubbed of secrets (they quote task output), else
        removed."""
        if options.keep_work_dir:
            scrub = getattr(options.redact, "scrub_tree", None)
            if scrub is not None:
                scrub(self.pdd)
        else:
            shutil.rmtree(self.pdd, ignore_errors=True)
            if not options.work_dir:
                shutil.rmtree(self.work, ignore_errors=True)
