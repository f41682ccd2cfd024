// The heatmap's tooltip: the hover text of the cell under the pointer, kept up to date when a new spec
// (another metric, a live pass's new cells) arrives while the pointer rests on a cell.

// The cell of a panel under the pointer event `ev` (of panel k, or of the panel it is over), with the
// point in the panel's svg: {panel, row, col, inside, px, py, svg, g}, or null off every panel.
function locate(hm, ev, k) {
  let svg;
  if (k === undefined) {
    svg = ev.target.closest ? ev.target.closest("svg.toolkit-heatmap-panel") : null;
    if (!svg) return null;
    k = Number(svg.dataset.panel);
  } else svg = hm.stage.querySelector(`svg[data-panel="${k}"]`);
  const g = hm.geoms[k];
  if (!svg || !g) return null;
  const r = svg.getBoundingClientRect();
  const px = ev.clientX - r.left, py = ev.clientY - r.top;
  return { panel: k, ...cellAt(g, px, py), px, py, svg, g };
}

// The hover text of cell (row, col) of panel k of `ps`, or null where the spec has none.
function hoverText(ps, k, row, col) {
  const p = ps[k];
  return p && p.hover && p.hover[row] && typeof p.hover[row][col] === "string" ? p.hover[row][col] : null;
}

function hideTip(hm) { hm.tip.style.display = "none"; }

function showTip(hm, hit, ev) {
  const { tip, root } = hm;
  tip.textContent = hoverText(hm.panels(), hit.panel, hit.row, hit.col) || "";
  tip.dataset.panel = String(hit.panel);
  tip.dataset.row = String(hit.row);
  tip.dataset.col = String(hit.col);
  tip.style.display = "block";
  const box = root.getBoundingClientRect();
  const x = ev.clientX - box.left, y = ev.clientY - box.top;
  const left = x + 16 + tip.offsetWidth > box.width ? x - 12 - tip.offsetWidth : x + 16;
  tip.style.left = Math.max(0, left) + "px";
  tip.style.top = Math.max(0, y + 16) + "px";
}

// A new spec: the tooltip shown is the old spec's text. It shows the new text of the cell under the
// pointer, or goes away when there is none.
function refreshTip(hm) {
  if (hm.tip.style.display === "none") return;
  const k = Number(hm.tip.dataset.panel);
  const hit = hm.pointer && hm.panels()[k] ? locate(hm, hm.pointer, k) : null;
  if (!hit || !hit.inside || hoverText(hm.panels(), k, hit.row, hit.col) === null) { hideTip(hm); return; }
  showTip(hm, hit, hm.pointer);
}

function attachHover(hm) {
  hm.stage.addEventListener("mousemove", (ev) => {
    if (hm.drag) return;
    const hit = locate(hm, ev);
    hm.pointer = { clientX: ev.clientX, clientY: ev.clientY };
    if (!hit || !hit.inside) { hideTip(hm); return; }
    showTip(hm, hit, ev);
  });
  hm.stage.addEventListener("mouseleave", () => { hm.pointer = null; if (!hm.drag) hideTip(hm); });
}
