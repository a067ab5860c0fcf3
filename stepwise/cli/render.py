"""Readable plan output: stages, segments, batches, units, times and downtime windows."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from stepwise.model.vocab import Step
from stepwise.plan.units import Plan, Unit, parts, prestage_seconds, unit_count


def hms(seconds: float) -> str:
    if seconds != seconds or seconds == float("inf"):  # inputs are finite; never print "nan"
        return "end"
    s = int(round(seconds))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _nodes(nodes: tuple[str, ...] | list[str], most: int = 3) -> str:
    if not nodes:
        return "-"
    shown = ", ".join(nodes[:most])
    return shown + (f" (+{len(nodes) - most} more)" if len(nodes) > most else "")


#: A level with this many batches or more is folded into one line per role (unless --expand):
#: the examples' levels have at most a dozen, a 10,000-node cloud's data-plane level ~480.
FOLD_AT = 40
#: A level with fewer batches than this shows them all: cutting a short level hides more
#: than it saves (an 8-node cloud's tree is read whole)
SHORT_LEVEL = 10


def render_plan(
    plan: Plan,
    console: Console,
    *,
    most_batches: int = 4,
    verbose: bool = False,
    expand: bool = False,
    unmanaged: dict[str, tuple[str, ...]] | None = None,
) -> None:
    """Print the plan as a tree (stages > segments > batches > steps) and its windows;
    `unmanaged` (role -> services no catalog entry knows) is said under the title.

    A segment shows all its batches when it has fewer than SHORT_LEVEL, else its first
    `most_batches`; one of FOLD_AT batches or more shows one line per role instead. `expand`
    shows every batch, `verbose` every batch and unit."""
    # data (names, reasons) is escaped wherever it meets markup: brackets print as they are
    title = _title(plan)
    left = _unmanaged_line(unmanaged or {})
    if not plan.units:
        console.print(title)
        if left:
            console.print(left, soft_wrap=True)
        console.print("Nothing to do: no package of any service changes on the selected nodes.")
        return
    _say_assumed(plan, console)
    _say_fetch_after_os(plan, console)
    root = Tree(title)
    if left:
        root.add(left)
    stage_nodes: OrderedDict[str, Tree] = OrderedDict()
    for part in parts(plan):
        if part.name not in stage_nodes:
            stage_nodes[part.name] = root.add(f"[bold cyan]{escape(part.name)}[/]")
        _add_part(
            stage_nodes[part.name], list(part.units), part.heading, most_batches, verbose, expand
        )
    console.print(root)
    _say_windows(plan, console)


def _unmanaged_line(unmanaged: dict[str, tuple[str, ...]]) -> str:
    """The services left running untouched (no catalog entry), by role; '' when none."""
    shown = [
        f"{escape(role)}: {escape(', '.join(names))}" for role, names in unmanaged.items() if names
    ]
    if not shown:
        return ""
    return "[yellow]unmanaged[/] (left running, not stopped or changed): " + "; ".join(shown)


def _title(plan: Plan) -> str:
    """What, of which cloud, how many units on how many nodes, how long, and how far above the
    lower bound."""
    from stepwise.plan import workflow_label

    n_nodes = len({n for u in plan.units for n in u.nodes})
    return (
        f"[bold]{escape(workflow_label(plan.workflow))}[/] of "
        f"[bold]{escape(plan.deployment)}[/]: {unit_count(plan)} on {n_nodes} node(s), "
        f"{_estimate(plan)}"
    )


def _estimate(plan: Plan) -> str:
    """The estimate against its bound; with a prestage stage, the disruptive part's estimate
    and bound without it, and the prestage apart as the work before it (nothing stops then:
    hours of fetching must not read as hours of rolling, nor hide a poor rollout)."""
    fetch = prestage_seconds(plan)
    rest, rest_bound = plan.duration_s - fetch, plan.lower_bound_s - plan.prestage_bound_s
    shown = f"estimated [bold]{hms(rest)}[/]" + (" for the disruptive part" if fetch else "")
    # the bound is of the procedure from its start: no measure of a preview of one later step
    if rest_bound > 0 and not plan.params.get("assumed"):
        shown += f", {rest / rest_bound:.2f}x the lower bound {hms(rest_bound)}"
    if fetch:
        pb = plan.prestage_bound_s
        shown += f", after a prestage of ~{hms(fetch)} (nothing stops" + (
            f"; {fetch / pb:.2f}x its bound {hms(pb)})" if pb > 0 else ")"
        )
    return shown


def _say_assumed(plan: Plan, console: Console) -> None:
    """A preview of one step of a multi-command procedure: what earlier commands would do."""
    by_command: OrderedDict[str, list[str]] = OrderedDict()
    for a in plan.params.get("assumed") or ():
        by_command.setdefault(a["command"], []).append(a["needs"])
    for command, needs in by_command.items():
        shown = ", ".join(needs[:6]) + (f" and {len(needs) - 6} more" if len(needs) > 6 else "")
        console.print(
            f"[yellow]preview[/]: assumes {escape(shown)} done by earlier commands "
            f"(the earliest still to run: [bold]{escape(command)}[/])",
            soft_wrap=True,
        )


def _say_fetch_after_os(plan: Plan, console: Console) -> None:
    """The nodes left out of the prestage because they go to a new OS, and why."""
    later = plan.params.get("fetch_after_os") or {}
    if not later:
        return
    moves = sorted({f"{a} -> {b}" for a, b in later.values()})
    names = sorted(later)
    shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
    console.print(
        f"[yellow]not prestaged[/]: {escape(shown)} go to a new OS ({escape(', '.join(moves))}); "
        "fetched now, the new release would be the one built for the old OS: each fetches "
        "it after its OS upgrade, in its own packages step",
        soft_wrap=True,
    )


def _add_part(
    stage: Tree, units: list[Unit], heading: str, most_batches: int, verbose: bool, expand: bool
) -> None:
    """One part of a stage: its batches, all of them, the first few, or one line per role."""
    start = min(u.start_s for u in units)
    end = max(u.end_s for u in units)
    seg = stage.add(f"{escape(heading)}  [dim]{hms(start)} → {hms(end)}[/]")
    batches: OrderedDict[str, list[Unit]] = OrderedDict()
    for u in units:
        batches.setdefault(u.batch or u.id, []).append(u)
    if len(batches) >= FOLD_AT and not (expand or verbose):
        _add_folded(seg, batches)
        return
    shown = 0
    cut = not (verbose or expand) and len(batches) >= SHORT_LEVEL
    for key, bunits in batches.items():
        if cut and shown >= most_batches:
            rest = list(batches.values())[shown:]
            nodes = {n for us in rest for u in us for n in u.nodes}
            seg.add(
                f"[dim]… {len(rest)} more batch(es) on {len(nodes)} node(s), until "
                f"{hms(max(u.end_s for us in rest for u in us))} (--expand shows all)[/]"
            )
            break
        shown += 1
        _add_batch(seg, key, bunits, verbose)


def _say_windows(plan: Plan, console: Console) -> None:
    """The downtime windows: every instance of a service down, when and why."""
    if not plan.windows:
        console.print("[green]No downtime window[/]: every service keeps serving throughout.")
        return
    console.print("[bold]Downtime windows[/] (every instance of the service down):")
    for w in plan.windows:
        console.print(
            f"  [yellow]{escape(w.service)}[/] {hms(w.start_s)} → {hms(w.end_s)} "
            f"({hms(w.end_s - w.start_s) if w.end_s != float('inf') else 'until the plan ends'}"
            "): "
            f"{escape(w.why)}"
        )


def _role_of_batch(key: str, units: list[Unit]) -> str | None:
    """The role of a rolling batch ("Compute#3" -> "Compute") or of a prestage unit (its
    `ROLE_VAR`); None for anything else."""
    from stepwise.plan.prestage import ROLE_VAR

    if units[0].step is Step.PRESTAGE:
        role = units[0].vars.get(ROLE_VAR)
        return str(role) if role else None
    if not units[0].batch or units[0].batch.startswith("group:"):
        return None
    role, sep, _ = key.rpartition("#")
    return role if sep else None


def _span(lo: float, hi: float, fmt: Callable[[float], str] = str) -> str:
    return fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}"


def _add_folded(seg: Tree, batches: OrderedDict[str, list[Unit]]) -> None:
    """One line per role for its rolling batches (at the place of its first batch), the other
    units as usual: a level of hundreds of batches stays one screen."""
    per_role: OrderedDict[str, list[list[Unit]]] = OrderedDict()
    entries: list[
        tuple[str, str, list[Unit]]
    ] = []  # (kind, key, units) in order of first appearance
    for key, bunits in batches.items():
        role = _role_of_batch(key, bunits)
        if role is None:
            entries.append(("unit", key, bunits))
            continue
        if role not in per_role:
            per_role[role] = []
            entries.append(("role", role, []))
        per_role[role].append(bunits)
    for kind, key, bunits in entries:
        if kind == "unit":
            _add_batch(seg, key, bunits, False)
            continue
        groups = per_role[key]
        sizes = [len({n for u in us for n in u.nodes}) for us in groups]
        lengths = [us[-1].end_s - us[0].start_s for us in groups]
        down = sorted({s for us in groups for s in us[0].stops})
        steps = {" → ".join(str(u.step) for u in us) for us in groups}
        span = (
            f"[dim]{hms(min(us[0].start_s for us in groups))} → "
            f"{hms(max(us[-1].end_s for us in groups))}[/]"
        )
        if groups[0][0].step is Step.PRESTAGE:
            # one short line a role (it fits 80 columns): the stage's gate says what and why
            seg.add(f"[bold]{escape(key)}[/]: {sum(sizes)} node(s), {len(groups)} unit(s), {span}")
            continue
        node = seg.add(
            f"[bold]{escape(key)}[/]: {len(groups)} batches of "
            f"{_span(min(sizes), max(sizes))} node(s) "
            f"({sum(sizes)} in all), {_span(min(lengths), max(lengths), hms)} each, {span}"
            + (f"  down: {', '.join(down[:6])}{' …' if len(down) > 6 else ''}" if down else "")
            + "  [dim](--expand shows all)[/]"
        )
        if len(steps) == 1:
            node.add(f"[dim]{steps.pop()}[/]")
        node.add(f"[dim]why: {escape(groups[0][0].why)}[/]")


def _add_batch(seg: Tree, key: str, units: list[Unit], verbose: bool) -> None:
    first = units[0]
    start, end = first.start_s, units[-1].end_s
    if len(units) == 1 and not first.batch:
        services = ""
        if first.services:
            more = ", …" if len(first.services) > 5 else ""
            services = escape("[" + ", ".join(first.services[:5]) + more + "]")
        node = seg.add(
            f"[magenta]{escape(str(first.step))}[/] {escape(_nodes(first.nodes))} "
            f"{services} "
            f"[dim]{hms(start)} → {hms(end)} {escape(first.id)}[/]"
            + ("" if first.idempotent else " [red](runs once)[/]")
        )
        node.add(f"[dim]why: {escape(first.why)}[/]")
        return
    nodes = list(dict.fromkeys(n for u in units for n in u.nodes))
    down = sorted(first.stops)
    label = key if first.batch else first.id
    node = seg.add(
        f"[bold]{escape(label)}[/] {escape(_nodes(nodes))} [dim]{hms(start)} → {hms(end)}[/]"
        + (escape(f"  down: {', '.join(down[:6])}{' …' if len(down) > 6 else ''}") if down else "")
    )
    node.add(
        "[dim]"
        + escape(" → ".join(f"{u.step}" for u in units) + f"  ({units[0].id}..{units[-1].id})")
        + "[/]"
    )
    node.add(f"[dim]why: {escape(first.why)}[/]")
    if verbose:
        for u in units:
            node.add(
                escape(
                    f"{u.id} {u.step} {_nodes(u.nodes)} [{', '.join(u.services)}] "
                    f"{hms(u.start_s)} → {hms(u.end_s)}"
                )
            )
