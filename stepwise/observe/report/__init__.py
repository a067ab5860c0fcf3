"""The report: one self-contained HTML file of a plan and/or its runs (timeline, availability,
summary) that people hand around before a maintenance window and look at afterwards.

`model` turns a Plan and the stored runs into a small view model (aggregated when the cloud is
big); `html` renders it with inline SVG (no script or style from elsewhere, no network)."""

import os
from collections.abc import Iterable
from datetime import UTC

from stepwise.observe.report.html import render
from stepwise.observe.report.model import Report, Section, plan_section
from stepwise.observe.report.run_view import run_section, run_section_from_store

__all__ = [
    "Report",
    "Section",
    "plan_section",
    "render",
    "run_section",
    "report_html",
    "run_section_from_store",
    "write_report",
]


def report_html(title: str, sections: "Iterable[Section]") -> bytes:
    """The report of `sections` as one HTML document (UTF-8)."""
    from datetime import datetime

    doc = render(Report(title, list(sections), datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")))
    return doc.encode("utf-8")


def write_report(
    path: "os.PathLike[str] | str",
    title: str,
    sections: "Iterable[Section]",
    *,
    field: str = "--output",
    force: bool = False,
) -> int:
    """Write the report of `sections` to `path` (private to the user: it tells the cloud's
    layout and history); returns its size in bytes. Through `stepwise.paths.write_output`:
    atomic, never through a link, replacing only a report stepwise wrote (or with `force`)."""
    from stepwise.observe.report.html import HEAD
    from stepwise.paths import write_output

    data = report_html(title, sections)
    write_output(path, data, field=field, force=force, ours=HEAD.encode("utf-8"), mode=0o600)
    return len(data)
