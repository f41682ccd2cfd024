// Small multiples of line and bar panels in the browser (toolkit.widgets.chart_view.ChartView).
//
// Python sends `spec` (panels of prepared numbers: the lab's layer grid, a cell's ESD with its
// fit, its singular values, its entries); the browser draws SVG, so a change of selection costs
// one message and a redraw, not a matplotlib figure per panel. Hovering a panel shows the value
// of every line at the nearest x (or a bar's range and count).

function scaleOf(axis, lo, hi, p0, p1) {
  if (axis.log) {
    const a = Math.log10(lo), b = Math.log10(hi);
    return (v) => p0 + ((Math.log10(v) - a) / (b - a || 1)) * (p1 - p0);
  }
  return (v) => p0 + ((v - lo) / (hi - lo || 1)) * (p1 - p0);
}

function extent(p, which) {
  const axis = p[which] || {};
  if (axis.lim) return axis.lim;
  let lo = Infinity, hi = -Infinity;
  const take = (v) => { if (Number.isFinite(v) && (!axis.log || v > 0)) { lo = Math.min(lo, v); hi = Math.max(hi, v); } };
  for (const s of p.series) {
    if (which === "x") {
      if (s.kind === "line" || s.kind === "points") s.x.forEach(take);
      if (s.kind === "bars") s.edges.forEach(take);
      if (s.kind === "vline") take(s.x);
    } else {
      if (s.kind === "line" || s.kind === "points") s.y.forEach(take);
      if (s.kind === "bars") s.heights.forEach((h) => { if (h > 0) take(h); });
      if (s.kind === "hline") take(s.y);
    }
  }
  if (!Number.isFinite(lo)) return axis.log ? [1, 10] : [0, 1];
  if (which === "y" && !axis.log && p.series.some((s) => s.kind === "bars")) lo = Math.min(lo, 0);
  if (axis.log) return [Math.pow(10, Math.floor(Math.log10(lo))), Math.pow(10, Math.ceil(Math.log10(hi) + 1e-9))];
  if (hi === lo) return [lo - 0.5, hi + 0.5];
  const pad = which === "y" ? 0.04 * (hi - lo) : 0;
  return [lo - (lo === 0 ? 0 : pad), hi + pad];
}

// Pixels per character of an 11 px label (a wide estimate, so a wrapped line fits), and between two lines.
const YLABEL_CHAR_PX = 6.6, YLABEL_LINE_PX = 13;

// A y label as the lines that fit along a plot `height` pixels tall ("largest attention norm per
// head" on a 107 px panel ran past its top and bottom on one line).
function ylabelLines(label, height) {
  return label ? wrapText(label, Math.max(40, height - 4), YLABEL_CHAR_PX) : [];
}

function dashOf(dash) {
  return dash === "dash" ? ' stroke-dasharray="6,4"' : dash === "dot" ? ' stroke-dasharray="2,3"' : "";
}

function render({ model, el }) {
  const root = document.createElement("div");
  root.className = "toolkit-chart";
  const tip = document.createElement("div");
  tip.className = "toolkit-chart-tooltip";
  tip.style.display = "none";
  el.append(root);
  // ids are the document's: two charts on one page (the lab explorer and the train-your-own panel) must not
  // share a clip path, or one clips its lines to the other's plot area
  const uid = "toolkit-chart-" + Math.random().toString(36).slice(2, 10);
  let geoms = [];

  function plotHeight(p, height) { return Math.max(40, height - (p.title ? 20 : 8) - (p.xlabel ? 38 : 24)); }

  function panelSvg(p, k, width, height, ylines) {
    // every panel of a grid leaves room for the most lines any y label takes, so the plots line up
    const ml = 58 + YLABEL_LINE_PX * (ylines - 1), mr = 10, mt = p.title ? 20 : 8, mb = p.xlabel ? 38 : 24;
    const W = Math.max(60, width - ml - mr), H = plotHeight(p, height);
    const xs = extent(p, "x"), ys = extent(p, "y");
    const X = scaleOf(p.x || {}, xs[0], xs[1], ml, ml + W), Y = scaleOf(p.y || {}, ys[0], ys[1], mt + H, mt);
    geoms[k] = { ml, mt, W, H, xs, ys, X, Y, p };
    let s = `<svg class="toolkit-chart-panel" data-panel="${k}" width="${width}" height="${height}">`;
    s += `<defs><clipPath id="${uid}-clip-${k}-${model.get("renders")}"><rect x="${ml}" y="${mt}" width="${W}" height="${H}"/></clipPath></defs>`;
    if (p.title) s += svgText(ml + W / 2, 14, p.title, { "text-anchor": "middle", "font-size": "12", class: "toolkit-chart-panel-title" });
    const xt = p.x && p.x.log ? logTicks(xs[0], xs[1]) : linearTicks(xs[0], xs[1], Math.max(2, Math.floor(W / 70)));
    const yt = p.y && p.y.log ? logTicks(ys[0], ys[1]) : linearTicks(ys[0], ys[1], Math.max(2, Math.floor(H / 40)));
    for (const t of yt) {
      const y = Y(t);
      if (y < mt - 0.5 || y > mt + H + 0.5) continue;
      s += `<line x1="${ml}" x2="${ml + W}" y1="${y}" y2="${y}" stroke="#e4e4e4"/>`;
      s += tickLabel(ml - 5, y + 4, p.y && p.y.log ? logLabel(t) : formatNumber(t), { "text-anchor": "end", "font-size": "10.5" });
    }
    for (const t of xt) {
      const x = X(t);
      if (x < ml - 0.5 || x > ml + W + 0.5) continue;
      s += `<line x1="${x}" x2="${x}" y1="${mt + H}" y2="${mt + H + 3}" stroke="#333"/>`;
      s += tickLabel(x, mt + H + 14, p.x && p.x.log ? logLabel(t) : formatNumber(t), { "text-anchor": "middle", "font-size": "10.5" });
    }
    s += `<g clip-path="url(#${uid}-clip-${k}-${model.get("renders")})">`;
    for (const [j, ser] of p.series.entries()) {
      const cls = `series series-${j}` + (ser.role ? ` role-${ser.role}` : "");
      if (ser.kind === "bars") {
        const base = p.y && p.y.log ? mt + H : Y(Math.max(ys[0], 0));
        s += `<g class="${cls}" data-label="${esc(ser.label || "")}">`;
        for (let i = 0; i < ser.heights.length; i++) {
          const h = ser.heights[i];
          if (!(h > 0)) continue;
          const x0 = X(ser.edges[i]), x1 = X(ser.edges[i + 1]);
          const y = Y(h);
          const count = ser.counts ? ` data-count="${ser.counts[i]}"` : "";
          s += `<rect class="bar" data-i="${i}" data-lo="${ser.edges[i]}" data-hi="${ser.edges[i + 1]}"${count} x="${Math.min(x0, x1).toFixed(2)}" y="${Math.min(y, base).toFixed(2)}" width="${Math.max(0.6, Math.abs(x1 - x0)).toFixed(2)}" height="${Math.abs(base - y).toFixed(2)}" fill="${ser.color}" stroke="${ser.edge || "none"}" stroke-width="0.4"/>`;
        }
        s += "</g>";
      } else if (ser.kind === "line" || ser.kind === "points") {
        let d = "", open = false;
        for (let i = 0; i < ser.x.length; i++) {
          const xv = ser.x[i], yv = ser.y[i];
          const ok = Number.isFinite(xv) && Number.isFinite(yv) && (!(p.x && p.x.log) || xv > 0) && (!(p.y && p.y.log) || yv > 0);
          if (!ok) { open = false; continue; }
          d += `${open ? "L" : "M"}${X(xv).toFixed(1)} ${Y(yv).toFixed(1)}`;
          open = true;
        }
        if (ser.kind === "points")
          s += `<path class="${cls}" data-label="${esc(ser.label || "")}" d="${d}" fill="none" stroke="${ser.color}" stroke-width="${ser.width || 1}" stroke-linecap="round" stroke-dasharray="0.1,3"/>`;
        else
          s += `<path class="${cls}" data-label="${esc(ser.label || "")}" d="${d}" fill="none" stroke="${ser.color}" stroke-width="${ser.width || 1.5}"${dashOf(ser.dash)}/>`;
      } else if (ser.kind === "vline") {
        const x = X(ser.x);
        s += `<line class="${cls}" data-x="${ser.x}" data-label="${esc(ser.label || "")}" x1="${x}" x2="${x}" y1="${mt}" y2="${mt + H}" stroke="${ser.color}" stroke-width="${ser.width || 1.2}"${dashOf(ser.dash)}/>`;
      } else if (ser.kind === "hline") {
        const y = Y(ser.y);
        s += `<line class="${cls}" data-y="${ser.y}" data-label="${esc(ser.label || "")}" x1="${ml}" x2="${ml + W}" y1="${y}" y2="${y}" stroke="${ser.color}" stroke-width="${ser.width || 1}"${dashOf(ser.dash)}/>`;
      }
    }
    s += `</g><rect x="${ml}" y="${mt}" width="${W}" height="${H}" fill="none" stroke="#777" stroke-width="0.7"/>`;
    if (p.xlabel) s += svgText(ml + W / 2, mt + H + 31, p.xlabel, { "text-anchor": "middle", "font-size": "11" });
    const lines = ylabelLines(p.ylabel, H);
    if (lines.length) {
      s += `<text class="toolkit-chart-ylabel" transform="translate(12,${(mt + H / 2).toFixed(1)}) rotate(-90)" text-anchor="middle" font-size="11">`;
      lines.forEach((line, i) => { s += `<tspan x="0" dy="${i ? YLABEL_LINE_PX : 0}">${esc(line)}</tspan>`; });
      s += "</text>";
    }
    if (p.legend) {
      // "upper right" (an ESD: its bars fall to the right) or upper left; on a white ground
      const right = p.legend === "upper right";
      const labelled = p.series.filter((ser) => ser.label);
      const wide = Math.max(...labelled.map((ser) => ser.label.length)) * 6 + 28;
      const x0 = right ? ml + W - wide - 4 : ml + 4;
      s += `<rect x="${x0}" y="${mt + 3}" width="${wide}" height="${13 * labelled.length + 4}" fill="rgba(255,255,255,0.85)"/>`;
      let y = mt + 14;
      for (const ser of labelled) {
        s += `<line x1="${x0 + 4}" x2="${x0 + 20}" y1="${y - 4}" y2="${y - 4}" stroke="${ser.color}" stroke-width="2"${dashOf(ser.dash)}/>`;
        s += svgText(x0 + 24, y, ser.label, { "font-size": "10.5", class: "toolkit-chart-legend-text" });
        y += 13;
      }
    }
    return s + "</svg>";
  }

  function draw() {
    const t0 = performance.now();
    const spec = model.get("spec") || {};
    const panels = spec.panels || [];
    const width = Math.max(240, root.clientWidth || 600);
    const ncols = Math.max(1, Math.min(spec.ncols || 1, panels.length || 1));
    const pw = Math.floor((width - 10 * (ncols - 1)) / ncols);
    const ph = spec.panel_height || 170;
    geoms = [];
    let html = "";
    if (spec.title) html += `<div class="toolkit-chart-title">${esc(spec.title)}</div>`;
    if (spec.legend && spec.legend.length) {
      html += `<div class="toolkit-chart-legend">` + spec.legend.map((l) =>
        `<span class="toolkit-chart-legend-item" data-label="${esc(l.label)}"><span class="swatch" style="border-top-color:${l.color};${l.dash ? "border-top-style:dashed;" : ""}"></span>${esc(l.label)}</span>`).join("") + "</div>";
    }
    if (spec.status) html += `<div class="toolkit-chart-status">${esc(spec.status)}</div>`;
    html += `<div class="toolkit-chart-grid" style="grid-template-columns: repeat(${ncols}, ${pw}px)">`;
    const ylines = Math.max(1, ...panels.map((p) => ylabelLines(p.ylabel, plotHeight(p, p.height || ph)).length));
    panels.forEach((p, k) => { html += panelSvg(p, k, pw, p.height || ph, ylines); });
    html += "</div>";
    if (spec.note) html += `<div class="toolkit-chart-note">${esc(spec.note)}</div>`;
    root.innerHTML = html;
    root.append(tip);
    root.dataset.renders = String(model.get("renders"));
    root.dataset.drawMs = (performance.now() - t0).toFixed(1);
  }

  function nearest(xs, v, log) {
    let best = -1, dist = Infinity;
    for (let i = 0; i < xs.length; i++) {
      if (!Number.isFinite(xs[i])) continue;
      const d = log ? Math.abs(Math.log10(xs[i]) - Math.log10(v)) : Math.abs(xs[i] - v);
      if (d < dist) { dist = d; best = i; }
    }
    return best;
  }

  root.addEventListener("mousemove", (ev) => {
    const svg = ev.target.closest ? ev.target.closest("svg.toolkit-chart-panel") : null;
    if (!svg) { tip.style.display = "none"; return; }
    const g = geoms[Number(svg.dataset.panel)];
    const r = svg.getBoundingClientRect();
    const px = ev.clientX - r.left, py = ev.clientY - r.top;
    if (!g || px < g.ml || px > g.ml + g.W || py < g.mt || py > g.mt + g.H) { tip.style.display = "none"; return; }
    const xlog = g.p.x && g.p.x.log;
    const frac = (px - g.ml) / g.W;
    const xv = xlog ? Math.pow(10, Math.log10(g.xs[0]) + frac * (Math.log10(g.xs[1]) - Math.log10(g.xs[0])))
      : g.xs[0] + frac * (g.xs[1] - g.xs[0]);
    const lines = [];
    for (const ser of g.p.series) {
      if (ser.kind === "bars") {
        const i = ser.edges.findIndex((e, j) => j < ser.edges.length - 1 && xv >= e && xv <= ser.edges[j + 1]);
        if (i >= 0) lines.push(`${formatNumber(ser.edges[i])} – ${formatNumber(ser.edges[i + 1])}: ` +
          (ser.counts ? `${ser.counts[i]} (${formatNumber(ser.heights[i])})` : formatNumber(ser.heights[i])));
      } else if (ser.kind === "line" && ser.label && ser.x.length > 1) {
        const i = nearest(ser.x, xv, xlog);
        if (i >= 0) {
          if (!lines.length) lines.push(`${g.p.xname || "x"} ${formatNumber(ser.x[i])}`);
          lines.push(`${ser.label}: ${Number.isFinite(ser.y[i]) ? formatNumber(ser.y[i]) : "—"}`);
        }
      }
    }
    if (!lines.length) { tip.style.display = "none"; return; }
    tip.textContent = lines.join("\n");
    tip.style.display = "block";
    const box = root.getBoundingClientRect();
    const x = ev.clientX - box.left, y = ev.clientY - box.top;
    const at = tipPosition(x, y, tip.offsetWidth, tip.offsetHeight, box.width, box.height);
    tip.style.left = at.left + "px";
    tip.style.top = at.top + "px";
  });
  root.addEventListener("mouseleave", () => { tip.style.display = "none"; });

  model.on("change:renders", draw);
  const resize = redrawOnResize(root, draw);
  draw();
  return () => { resize.disconnect(); model.off("change:renders", draw); };
}

export default { render };
