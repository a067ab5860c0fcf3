"""Readable plan output: stages, segments, batches, units, times and downtime windows."""

from __future__ import annotations

from collections import OrderedDict

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from stepwise.plan.units import Plan, Unit


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


def _segments(plan: Plan) -> list[tuple[str, list[Unit]]]:
    """Units between gates, titled by the gate that closes them."""
    out: list[tuple[str, list[Unit]]] = []
    cur: list[Unit] = []
    for u in plan.units:
        if u.step == "gate":
            out.append((u.why, cur))
            cur = []
        else:
            cur.append(u)
    if cur:
        out.append(("", cur))
    return [(t, us) for t, us in out if us]


def render_plan(plan: Plan, console: Console, *, most_batches: int = 4, verbose: bool = False) -> None:
    """Print the plan as a tree (stages > segments > batches > steps) and its windows."""
    n_nodes = len({n for u in plan.units for n in u.nodes})
    # data (names, reasons) is escaped wherever it meets markup: brackets print as they are
    ratio = f", {plan.duration_s / plan.lower_bound_s:.2f}x the lower bound {hms(plan.lower_bound_s)}" if plan.lower_bound_s else ""
    title = (f"[bold]{escape(str(plan.workflow))}[/] of [bold]{escape(plan.deployment)}[/]: {len(plan.units)} units on {n_nodes} node(s), "
             f"estimated [bold]{hms(plan.duration_s)}[/]{ratio}")
    if not plan.units:
        console.print(title)
        console.print("Nothing to do: no package of any service changes on the selected nodes.")
        return
    root = Tree(title)
    stage_nodes: "OrderedDict[str, Tree]" = OrderedDict()
    for heading, units in _segments(plan):
        stage = units[0].stage
        if stage not in stage_nodes:
            stage_nodes[stage] = root.add(f"[bold cyan]{escape(str(stage))}[/]")
        start = min(u.start_s for u in units)
        end = max(u.end_s for u in units)
        seg = stage_nodes[stage].add(f"{escape(heading or units[0].why)}  [dim]{hms(start)} → {hms(end)}[/]")
        batches: "OrderedDict[str, list[Unit]]" = OrderedDict()
        for u in units:
            batches.setdefault(u.batch or u.id, []).append(u)
        shown = 0
        for key, bunits in batches.items():
            if not verbose and shown >= most_batches:
                rest = list(batches.values())[shown:]
                nodes = {n for us in rest for u in us for n in u.nodes}
                seg.add(f"[dim]… {len(rest)} more batch(es) on {len(nodes)} node(s), until "
                        f"{hms(max(u.end_s for us in rest for u in us))} (--verbose shows all)[/]")
                break
            shown += 1
            _add_batch(seg, key, bunits, verbose)
    console.print(root)
    if plan.windows:
        console.print("[bold]Downtime windows[/] (every instance of the service down):")
        for w in plan.windows:
            console.print(f"  [yellow]{escape(w.service)}[/] {hms(w.start_s)} → {hms(w.end_s)} "
                          f"({hms(w.end_s - w.start_s) if w.end_s != float('inf') else 'until the plan ends'}): "
                          f"{escape(w.why)}")
    else:
        console.print("[green]No downtime window[/]: every service keeps serving throughout.")


def _add_batch(seg: Tree, key: str, units: list[Unit], verbose: bool) -> None:
    first = units[0]
    start, end = first.start_s, units[-1].end_s
    if len(units) == 1 and not first.batch:
        node = seg.add(f"[magenta]{escape(str(first.step))}[/] {escape(_nodes(first.nodes))} "
                       f"{escape('[' + ', '.join(first.services[:5]) + (', …' if len(first.services) > 5 else '') + ']') if first.services else ''} "
                       f"[dim]{hms(start)} → {hms(end)} {escape(first.id)}[/]"
                       + ("" if first.idempotent else " [red](runs once)[/]"))
        node.add(f"[dim]why: {escape(first.why)}[/]")
        return
    nodes = list(dict.fromkeys(n for u in units for n in u.nodes))
    down = sorted(first.stops)
    label = key if first.batch else first.id
    node = seg.add(f"[bold]{escape(label)}[/] {escape(_nodes(nodes))} [dim]{hms(start)} → {hms(end)}[/]"
                   + (escape(f"  down: {', '.join(down[:6])}{' …' if len(down) > 6 else ''}") if down else ""))
    node.add("[dim]" + escape(" → ".join(f"{u.step}" for u in units) + f"  ({units[0].id}..{units[-1].id})") + "[/]")
    node.add(f"[dim]why: {escape(first.why)}[/]")
    if verbose:
        for u in units:
            node.add(escape(f"{u.id} {u.step} {_nodes(u.nodes)} [{', '.join(u.services)}] {hms(u.start_s)} → {hms(u.end_s)}"))
