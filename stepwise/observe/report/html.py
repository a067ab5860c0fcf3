"""Render the report's view model as one self-contained HTML file with inline SVG.

Why inline SVG built here rather than a charting library: the file must open anywhere with no
network (an operator's laptop in a maintenance window), stay small for a 1,000-node plan, and
carry no third-party script to review; a Gantt chart and step functions are a few rectangles
and paths (`timeline`, `availability`, shared pieces in `svg`). Hover text is SVG <title> (no
script needed). Every string from data goes through `esc` (html.escape): a node, service or
task message never becomes markup or script. The only script is the inline self-check below,
which tests read; a strict Content-Security-Policy forbids loading anything from anywhere.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Sequence

from stepwise.observe.report.availability import LINES, PROBE_LINES, availability_svg
from stepwise.observe.report.model import Report, Section
from stepwise.observe.report.svg import COLOURS, MEANING, WINDOW_FILL, esc
from stepwise.observe.report.timeline import timeline_svg
from stepwise.observe.report.zoom import CONTROLS, ZOOM

__all__ = ["CSP", "HEAD", "SELF_CHECK", "availability_svg", "esc", "render", "timeline_svg"]

STYLE = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;\
margin:0;color:#222;background:#fafafa}
header{background:#243447;color:#fff;padding:12px 24px}header h1{margin:0;font-size:20px}
header p{margin:2px 0 0;color:#cfd8e3;font-size:12px}
main{padding:8px 24px 40px;max-width:1400px}
section.sec{background:#fff;border:1px solid #ddd;border-radius:6px;\
padding:8px 16px 16px;margin:16px 0}
h2{font-size:18px;margin:8px 0}h3{font-size:15px;margin:14px 0 4px}
table{border-collapse:collapse;font-size:12px}\
td,th{border-bottom:1px solid #eee;padding:2px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}
.summary table td:first-child{font-weight:600;white-space:nowrap}
.chart{overflow-x:auto}.chart svg{display:block}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:14px;height:10px;margin-right:4px;\
vertical-align:middle;border-radius:2px}
.legend i.crit{background:#fff;border:2px solid #1d1d1d;width:10px;height:6px}
.legend i.line{height:0;border-top:2px solid;border-radius:0}
.legend i.thick{height:0;border-top:4px solid;border-radius:0}
.legend i.dashed{height:0;border-top:2px dashed;border-radius:0}
.muted{color:#666;font-size:12px}\
code{background:#f3f3f3;padding:1px 4px;border-radius:3px;word-break:break-all;font-size:12px}
td.nodes{max-width:260px}.why{max-width:420px}details summary{cursor:pointer;margin:8px 0}
svg text{font-family:system-ui,sans-serif;font-size:11px;fill:#333}
svg text.on{fill:#111}svg text.light{fill:#fff}svg text.mark{font-size:11px;fill:#4d6b26}
svg text.level{fill:#678}
#tip{position:fixed;display:none;max-width:520px;background:#243447;color:#fff;font-size:12px;\
padding:6px 8px;border-radius:4px;white-space:pre-line;pointer-events:none;z-index:9}
input.filter{font-size:13px;padding:3px 6px;margin:4px 0;width:300px}
.zoom{margin-left:16px;font-size:13px}.zoom input{width:70px;font-size:13px}
.zoom button{font-size:13px}.zoom.bad input{outline:2px solid #d33}
"""

#: after the page rendered: the size of each part and any error, as an attribute tests read
#: (headless Chromium --dump-dom); it also counts Content-Security-Policy violations, i.e.
#: anything that tried to load from outside the file
_CHECK = """
(function(){var errors=0,blocked=0;
window.addEventListener('error',function(){errors++});
document.addEventListener('securitypolicyviolation',function(){blocked++});
function size(sel){var e=document.querySelector(sel);if(!e)return [0,0];\
var r=e.getBoundingClientRect();
return [Math.round(r.width),Math.round(r.height)]}
function overlaps(){var out=[];document.querySelectorAll('svg').forEach(function(svg){
var bs=[];svg.querySelectorAll('text').forEach(function(t){var r=t.getBoundingClientRect();
if(r.width>0)bs.push([r,t.textContent])});
for(var i=0;i<bs.length;i++)for(var j=i+1;j<bs.length;j++){var a=bs[i][0],b=bs[j][0];
if(a.left<b.right-0.5&&b.left<a.right-0.5&&a.top<b.bottom-0.5&&b.top<a.bottom-0.5)\
out.push([bs[i][1],bs[j][1]])}});return out}
function smallest(){var m=1e9;document.querySelectorAll('svg').forEach(function(svg){
var k=svg.getBoundingClientRect().width/svg.viewBox.baseVal.width;
svg.querySelectorAll('text').forEach(function(t){
m=Math.min(m,parseFloat(getComputedStyle(t).fontSize)*k)})});
document.querySelectorAll('body *').forEach(function(e){if(e.closest('svg'))return;
for(var n=e.firstChild;n;n=n.nextSibling)if(n.nodeType===3&&n.textContent.trim()){
m=Math.min(m,parseFloat(getComputedStyle(e).fontSize));break}});return m}
function unlisted(){var seen={},out=[];
document.querySelectorAll('.legend i[data-colour]').forEach(function(i){\
seen[i.getAttribute('data-colour')]=1});
document.querySelectorAll('rect.bar').forEach(function(r){var c=r.getAttribute('fill');
if(!seen[c]&&out.indexOf(c)<0)out.push(c)});return out}
function interact(){var tip=document.createElement('div');tip.id='tip';
document.body.appendChild(tip);
document.querySelectorAll('svg title').forEach(function(t){var p=t.parentNode;
p.setAttribute('data-tip',t.textContent);p.removeChild(t)});
document.addEventListener('mousemove',function(e){
var el=e.target.closest?e.target.closest('[data-tip]'):null;
if(!el){tip.style.display='none';return}
tip.textContent=el.getAttribute('data-tip');tip.style.display='block';
tip.style.left=Math.max(4,Math.min(e.clientX+14,window.innerWidth-tip.offsetWidth-8))+'px';
tip.style.top=(e.clientY+16)+'px'});
document.querySelectorAll('input.filter').forEach(function(inp){
inp.addEventListener('input',function(){var q=inp.value.toLowerCase().trim();
inp.closest('section').querySelectorAll('[data-f]').forEach(function(el){
var hit=!q||el.getAttribute('data-f').toLowerCase().indexOf(q)>=0;
el.style.opacity=hit?'':'0.12'})})})}
function zprobe(){var out={};[['timeline','#timeline svg'],['availability',
'#availability svg']].forEach(function(p){var s=document.querySelector(p[1]);if(!s)return;
out[p[0]]={ticks:[].map.call(s.querySelectorAll('g.axis text'),function(t){return t.textContent}),
bars:[].map.call(s.querySelectorAll('rect[data-t0]'),function(r){
return r.style.display==='none'?-1:parseFloat(r.getAttribute('width'))}),
lines:[].map.call(s.querySelectorAll('path[data-steps]'),function(e){
return e.getAttribute('d')})}});
out.bad=!!document.querySelector('.zoom.bad');
out.smallest_px=smallest();out.overlaps=overlaps().slice(0,20);return out}
function zdrag(){var s=document.querySelector('#timeline svg'),r=s.getBoundingClientRect(),
lw=parseFloat(s.getAttribute('data-lw')),w=parseFloat(s.getAttribute('data-right'))-lw,
y=r.top+parseFloat(s.getAttribute('data-axis-y'))-4,z=document.querySelector('.zoom');
function ev(type,at,el){el.dispatchEvent(new MouseEvent(type,{bubbles:true,clientX:r.left+lw+w*at,
clientY:y}))}
ev('mousedown',0.25,s);ev('mousemove',0.5,s);ev('mouseup',0.5,document);
return {from:z.querySelector('.zfrom').value,to:z.querySelector('.zto').value,after:zprobe()}}
function ztest(){var m=/zoom=([0-9.]+)-([0-9.]+)/.exec(location.hash),
z=document.querySelector('.zoom');
if(/zoomdrag/.test(location.hash)&&z)return zdrag();if(!m||!z)return null;
var f=z.querySelector('.zfrom'),t=z.querySelector('.zto'),
out={before:zprobe()};
function set(){f.value=m[1];f.dispatchEvent(new Event('change'));t.value=m[2];
t.dispatchEvent(new Event('change'))}
set();out.zoomed=zprobe();z.querySelector('.zreset').click();out.reset=zprobe();set();return out}
window.addEventListener('load',function(){interact();var c={zoom:ztest(),
timeline:size('#timeline svg'),\
availability:size('#availability svg'),
summary:size('#summary'),bars:document.querySelectorAll('rect.bar').length,\
errors:errors,blocked:blocked,overlaps:overlaps().slice(0,20),smallest_px:smallest(),
unlisted:unlisted(),width:window.innerWidth,\
tips:document.querySelectorAll('svg [data-tip]').length,\
titles:document.querySelectorAll('svg title').length};
document.documentElement.setAttribute('data-selfcheck',JSON.stringify(c));});})();
"""


#: the page's one script: the zoom, then the self-check (which drives the zoom when the
#: address ends in #zoom=FROM-TO, minutes, and records the charts before, zoomed and reset;
#: #zoomdrag drags across the timeline's axis from a quarter to half of it)
SELF_CHECK = ZOOM + _CHECK

#: the script allowed by its hash, not any inline script: a string from data that somehow
#: became a <script> would not run; base-uri and form-action are not covered by default-src
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; "
    "script-src 'sha256-"
    f"{base64.b64encode(hashlib.sha256(SELF_CHECK.encode()).digest()).decode()}'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)
#: how every report begins: `write_output` replaces an existing file only if it starts so
HEAD = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
    '<meta name="generator" content="stepwise">'
)


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=why' if h == 'why' else ''}>{esc(c)}</td>"
            for h, c in zip(head, r, strict=True)
        )
        + "</tr>"
        for r in rows
    )
    header = "" if not any(head) else "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>"
    return f'<table class="{esc(cls)}">{header}{body}</table>'


def _swatch(colour: str, text: str, cls: str = "") -> str:
    style = f"border-color:{colour}" if cls else f"background:{colour}"
    klass = f' class="{cls}"' if cls else ""
    return f'<span><i{klass} data-colour="{esc(colour)}" style="{style}"></i>{esc(text)}</span>'


def _legend(sec: Section) -> str:
    """Every colour the section's bars use, what it means; the critical path; the windows."""
    used = {b.kind for b in sec.planned} | {k for b in sec.planned for *_, k in b.segments}
    states = {b.kind for b in sec.actual}
    items = [_swatch(COLOURS[k], MEANING[k]) for k in MEANING if k in used]
    if any(b.critical for b in sec.planned):
        items.append('<span><i class="crit"></i>critical path (outlined)</span>')
    if sec.windows:
        items.append(_swatch(WINDOW_FILL, "planned downtime window"))
    ran = [_swatch(COLOURS[k], f"ran: {k}") for k in COLOURS if k in states]
    note = ""
    if sec.is_run:
        note = (
            '<p class="muted">Each lane: the plan above (its estimate, on this run\'s clock, '
            "not rescaled), as it ran below, with how late or early each batch ended.</p>"
        )
    return f'<div class="legend">{"".join(items + ran)}</div>{note}'


def _summary_html(sec: Section, sid: Callable[[str], str]) -> str:
    out = [
        f'<div class="summary"{sid("summary")}>' + _table(("", ""), sec.summary, "kv"),
    ]
    if sec.continue_command:
        out.append(f"<p>To continue: <code>{esc(sec.continue_command)}</code></p>")
    out.append("</div>")
    return "".join(out)


def _failures_html(sec: Section) -> str:
    return "<h3>Failures</h3>" + _table(
        ("host", "unit", "task", "status", "message"),
        ([f[k] for k in ("host", "unit", "task", "status", "message")] for f in sec.failures),
    )


#: dims what does not match (lanes by node or role, availability rows and windows by service)
_FILTER = (
    '<input class="filter" type="search" aria-label="filter" '
    'placeholder="filter: node, role or service">'
)


def _timeline_html(sec: Section, sid: Callable[[str], str]) -> str:
    lanes = "node" if any(g and lane != g for lane, g in sec.lanes) else "role (batches aggregated)"
    clock = " Times in UTC." if sec.t0 is not None else ""
    return (
        f'<h3>Timeline</h3><p class="muted">One lane per {lanes}; hover a bar for its nodes '
        f"and why; dashed lines: stages, dotted lines: dependency levels.{clock}</p>"
        + _legend(sec)
        + _FILTER
        + CONTROLS
        + f'<div class="chart timeline"{sid("timeline")}>{timeline_svg(sec)}</div>'
    )


def _availability_html(sec: Section, sid: Callable[[str], str]) -> str:
    lines = LINES + (PROBE_LINES if any(s.probe for s in sec.series) else ())
    legend = "".join(
        _swatch(c, what, "" if how == "block" else {"solid": "line"}.get(how, how))
        for c, how, what in lines
    )
    return (
        '<h3>Availability</h3><p class="muted">Per service: instances serving (y-axis: '
        "instances) against the least its rule allows.</p>"
        f'<div class="legend">{legend}</div>'
        f'<div class="chart availability"{sid("availability")}>{availability_svg(sec)}</div>'
    )


def _probe_html(sec: Section) -> str:
    return "<h3>Probe</h3>" + _table(
        ("target", "requests", "failed", "max latency ms"),
        (
            [p["target"], str(p["requests"]), str(p["failed"]), str(p["max_ms"])]
            for p in sec.probe_targets
        ),
    )


def _batches_html(sec: Section) -> str:
    cols = ["batch", "roles", "nodes", "steps", "start", "end"]
    if sec.is_run:
        cols += ["ended", "delta"]
    cols += ["command", "why"]
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td><code>{esc(b.get(c, ''))}</code></td>"
            if c == "command"
            else f'<td class="{c}">{esc(b.get(c, ""))}</td>'
            for c in cols
        )
        + "</tr>"
        for b in sec.batches
    )
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
    return (
        f"<details{' open' if not sec.is_run else ''}><summary>Batches: nodes, the command "
        f"that runs one alone, and why ({len(sec.batches)})</summary>"
        f'<table class="batches"><tr>{head}</tr>{rows}</table></details>'
    )


def section_html(sec: Section, first: bool) -> str:
    """One section (a plan or a run): summary, failures, timeline, availability, probe, batches.
    Only the first section carries the ids the page's self-check looks for."""
    sid = lambda name: f' id="{name}"' if first else ""
    out = [f'<section class="sec"><h2>{esc(sec.title)}</h2>', _summary_html(sec, sid)]
    if sec.failures:
        out.append(_failures_html(sec))
    out.append(_timeline_html(sec, sid))
    out.append(_availability_html(sec, sid))
    if sec.probe_targets:
        out.append(_probe_html(sec))
    if sec.batches:
        out.append(_batches_html(sec))
    out.append("</section>")
    return "".join(out)


def render(report: Report) -> str:
    """The whole report as one HTML document (no external resource of any kind)."""
    body = "".join(section_html(s, i == 0) for i, s in enumerate(report.sections))
    return (
        HEAD + f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{esc(report.title)}</title><script>{SELF_CHECK}</script>"
        f"<style>{STYLE}</style></head><body>"
        f"<header><h1>{esc(report.title)}</h1>"
        f"<p>stepwise report, generated {esc(report.generated_at)}</p></header>"
        f"<main>{body}</main></body></html>\n"
    )
