"""Zoom on a time range: the page's script that redraws the charts of a section on the range
the operator types (from/to in minutes) or drags across a chart's axis (which fills in the same
inputs); reset restores the page as rendered.

Why redraw x from data attributes rather than scale the SVG: the charts are drawn at a fixed
pixel width so that text keeps its 11 px; scaling a group would stretch the text with it. Every
element drawn from a time carries its seconds (`data-t0`/`data-t1`, a marker `data-t`, a line
`data-steps`/`data-segs`), each chart its frame (`data-zoom` seconds, `data-lw`/`data-right`
px); the axis is relabelled on the range in the same unit rules as `svg.axis_svg`. Text that
would leave its bar or overlap another is hidden (its hover text stays on the bar).
"""

from __future__ import annotations

#: the controls above a section's timeline; they act on every chart of the section
CONTROLS = (
    '<span class="zoom">zoom on minutes '
    '<input class="zfrom" type="number" min="0" step="any" aria-label="zoom from (minutes)">'
    ' to <input class="zto" type="number" min="0" step="any" aria-label="zoom to (minutes)">'
    ' <button type="button" class="zreset">reset</button> (or drag across an axis)</span>'
)

ZOOM = """
(function(){var NS='http://www.w3.org/2000/svg';
function num(e,k){return parseFloat(e.getAttribute(k))}
function mk(p,tag,a,txt){var e=document.createElementNS(NS,tag);
for(var k in a)e.setAttribute(k,a[k]);
if(txt!=null)e.textContent=txt;p.appendChild(e);return e}
function unit(span){var U=[[1,'s',[1,2,5,10,15,30]],[60,'min',[1,2,5,10,15,20,30,60]],
[3600,'h',[.25,.5,1,2,3,6,12,24]]];var u=span<=180?U[0]:span<=10800?U[1]:U[2],n=span/u[0];
var st=u[2].filter(function(s){return n/s<=10})[0];
if(st===undefined){var l=u[2][u[2].length-1];st=l*Math.ceil(n/10/l)}return [u[0],u[1],st]}
function keep(e,names){if(e._o)return;e._o={};names.forEach(function(k){e._o[k]=e.getAttribute(k)})}
function axis(svg,a,b,X){var g=svg.querySelector('g.axis');
if(svg._axis===undefined)svg._axis=g.innerHTML;
g.textContent='';var y=num(svg,'data-axis-y'),h=num(svg,'data-h'),r=num(svg,'data-right'),
c=svg.getAttribute('data-clock'),u=unit(b-a);
function lbl(t){return c!==null?new Date((parseFloat(c)+t)*1000).toISOString().substr(11,5):
String(+(t/u[0]).toFixed(2))+' '+u[1]}
var end=lbl(b)+(c!==null?' UTC':''),endLeft=r-(end.length*7+4),last=-1e9,st=u[2]*u[0],ts=[a];
mk(g,'line',{x1:r,y1:y-12,x2:r,y2:h,stroke:'#999'});
mk(g,'text',{'class':'tick',x:r,y:y,'text-anchor':'end'},end);
for(var k=Math.floor(a/st+1e-9)+1;k*st<b-1e-9;k++)ts.push(k*st);
ts.forEach(function(t,i){var x=X(t),l=lbl(t),w=l.length*7+4,left=i?x-w/2:x;
mk(g,'line',{x1:x.toFixed(1),y1:y+2,x2:x.toFixed(1),y2:h,stroke:'#eee'});
if(left>last+4&&left+w<endLeft-4){
mk(g,'text',{'class':'tick',x:x.toFixed(1),y:y,'text-anchor':i?'middle':'start'},l);last=left+w}})}
function apart(texts){var rows={};texts.forEach(function(e){if(e.style.display==='none')return;
var b=e.getBBox(),y=e.getAttribute('y'),row=rows[y]=rows[y]||[];
if(row.some(function(o){return b.x<o[1]+2&&o[0]<b.x+b.width+2})){e.style.display='none';return}
row.push([b.x,b.x+b.width])})}
function apply(svg,a,b){var lw=num(svg,'data-lw'),r=num(svg,'data-right'),texts=[];
function X(t){return lw+(r-lw)*(Math.max(a,Math.min(b,t))-a)/(b-a)}
svg.querySelectorAll('[data-t0]').forEach(function(e){var t0=num(e,'data-t0'),t1=num(e,'data-t1'),
out=t1<a||t0>b;keep(e,['x','width']);e.style.display='';
if(e.tagName==='rect'){e.setAttribute('x',X(t0).toFixed(1));
e.setAttribute('width',Math.max(X(t1)-X(t0),1.5).toFixed(1))}
else{e.setAttribute('x',(X(t0)+3).toFixed(1));texts.push(e);
out=out||t0<a||X(t0)+4+e.getComputedTextLength()>X(t1)}
e.style.display=out?'none':''});
svg.querySelectorAll('[data-t]').forEach(function(e){var t=num(e,'data-t'),x=X(t),out=t<a||t>b;
keep(e,['x','x1','x2']);e.style.display='';
if(e.tagName==='line'){e.setAttribute('x1',x.toFixed(1));e.setAttribute('x2',x.toFixed(1))}
else{var end=e.getAttribute('text-anchor')==='end',w=e.getComputedTextLength();texts.push(e);
e.setAttribute('x',(x+(end?-2:2)).toFixed(1));out=out||(end?x-2-w<lw:x+2+w>r)}
e.style.display=out?'none':''});
svg.querySelectorAll('path[data-steps],path[data-segs]').forEach(function(e){keep(e,['d']);
var d='',steps=e.hasAttribute('data-steps');
(e.getAttribute('data-steps')||e.getAttribute('data-segs')).split(';').forEach(function(s){
var p=s.split(',').map(parseFloat);if(p[1]<a||p[0]>b)return;var x=X(p[0]).toFixed(1);
d+=steps?(d?'H'+x+'V'+p[2]:'M'+x+','+p[2]):'M'+x+','+p[2]+'H'+Math.max(X(p[1]),
X(p[0])+1).toFixed(1)});
e.setAttribute('d',steps&&d?d+'H'+r:d)});
axis(svg,a,b,X);apart(texts);svg._range=[a,b]}
function reset(svg){svg.querySelectorAll('*').forEach(function(e){if(!e._o)return;
for(var k in e._o){if(e._o[k]===null)e.removeAttribute(k);else e.setAttribute(k,e._o[k])}
e.style.display='';delete e._o});delete svg._range;
if(svg._axis!==undefined){svg.querySelector('g.axis').innerHTML=svg._axis;delete svg._axis}}
function drag(s,done){var x0=null,sel=null;
function at(e){var r=s.getBoundingClientRect(),v=s.viewBox.baseVal;
return [(e.clientX-r.left)*v.width/r.width,(e.clientY-r.top)*v.height/r.height]}
function sec(x){var lw=num(s,'data-lw'),r=num(s,'data-right'),g=s._range||[0,num(s,'data-zoom')];
return g[0]+(g[1]-g[0])*Math.max(0,Math.min(1,(x-lw)/(r-lw)))}
s.addEventListener('mousedown',function(e){var p=at(e),ay=num(s,'data-axis-y');
if(p[1]<ay-20||p[1]>ay+8||p[0]<num(s,'data-lw'))return;x0=p[0];e.preventDefault();
sel=mk(s,'rect',{'class':'zsel',x:x0,y:ay-20,width:0,height:28,fill:'#4aa3df',opacity:'0.3'})});
s.addEventListener('mousemove',function(e){if(x0===null)return;var x=at(e)[0];
sel.setAttribute('x',Math.min(x,x0));sel.setAttribute('width',Math.abs(x-x0))});
document.addEventListener('mouseup',function(e){if(x0===null)return;var x=at(e)[0],
a=sec(Math.min(x,x0)),b=sec(Math.max(x,x0));s.removeChild(sel);x0=null;if(b-a>=1)done(a,b)})}
document.addEventListener('DOMContentLoaded',function(){
document.querySelectorAll('.zoom').forEach(function(z){var sec=z.closest('section'),
f=z.querySelector('.zfrom'),t=z.querySelector('.zto');
function charts(){return sec.querySelectorAll('svg[data-zoom]')}
function go(){if(f.value===''||t.value==='')return;var a=parseFloat(f.value)*60,
b=parseFloat(t.value)*60,
ok=a>=0&&b>a&&[].some.call(charts(),function(s){return a<num(s,'data-zoom')});
z.classList.toggle('bad',!ok);if(!ok)return;
charts().forEach(function(s){var n=num(s,'data-zoom');reset(s);if(a<n)apply(s,a,Math.min(b,n))})}
f.addEventListener('change',go);t.addEventListener('change',go);
charts().forEach(function(s){drag(s,function(a,b){f.value=+(a/60).toFixed(2);
t.value=+(b/60).toFixed(2);go()})});
z.querySelector('.zreset').addEventListener('click',function(){f.value='';t.value='';
z.classList.remove('bad');charts().forEach(reset)})})})})();
"""
