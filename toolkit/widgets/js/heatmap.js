// The explorer's heatmap in the browser (toolkit.widgets.heatmap_view.HeatmapView).
//
// Python sends `spec`: for each panel its cells' colours (the same RGBA matplotlib paints,
// computed by toolkit.plot), hover texts, labels and colour bar. Everything a user does with
// the grid happens here, without a round trip: hover tooltips, box zoom (drag), pan
// (shift-drag, or the pan tool), wheel zoom (once the heatmap has focus, or with Ctrl),
// double-click to reset, arrow keys to move the selected cell, Enter or a click to open it.
// The selected cell (`selected`) and the zoom (`windows`) are synced back to Python; opening a
// cell sends {event: "open", panel, row, col}.

const MIN_PLOT_W = 120, MAX_CELL_W = 64, MIN_CELL_W = 12, ROW_PX = 16;

function fullWindow(p) { return [0, p.rows.length, 0, p.cols.length]; }

function validWindow(w, p) {
  return Array.isArray(w) && w.length === 4 && w[0] >= 0 && w[1] <= p.rows.length && w[0] < w[1] &&
    w[2] >= 0 && w[3] <= p.cols.length && w[2] < w[3];
}

function rowStep(rowPx) {
  for (const s of [1, 2, 4, 8, 16, 32, 64]) if (s * rowPx >= 13) return s;
  return 128;
}

// The colour bar's label as the lines it is drawn in: it runs along the bar (rotated), so each of its
// lines is wrapped to the bar's height `barH` (about 6.3 px a character): at 1050 px a long label
// ("relative change", "white = 0.772 (median of 3 panels pooled)") was cut to "relative w".
function cbarLabelLines(label, barH) {
  return String(label || "") ? wrapText(String(label), barH, 6.3) : [];
}

// The height of a panel's own colour bar (its plot's height less 20 px), and the least height of the
// shared one beside panels that tall (drawn 110 px shorter than the tallest panel's svg, which is at least
// 44 px taller than its plot).
function panelBarHeight(p) { return clamp(p.rows.length * ROW_PX, 200, 600) - 20; }
function sharedBarHeight(ps) { return Math.max(60, Math.max(...ps.map(panelBarHeight)) - 50); }

// Pixels a colour bar of height `barH` takes right of its panel's plot (or in its own svg): the 12 px gap,
// the bar, its ticks and their labels (about 6.3 px a character) and one 13 px line per line of its
// label (cbarLabelLines).
function colorbarWidth(cbar, barH = 180) {
  if (!cbar) return 0;
  const widest = Math.max(1, ...(cbar.ticks || []).map(([, label]) => String(label).replace(/[${}^]/g, "").length));
  const lines = Math.max(1, cbarLabelLines(cbar.label, barH).length);
  return Math.ceil(12 + 26 + widest * 6.3 + 13 * lines + 4);
}

// The widths of a row of panels in `avail` pixels: per panel the plot width W and the chrome around it
// (the layer axis, its own colour bar), the shared colour bar's width, the natural total and the least
// total that keeps every plot at its minimum (MIN_PLOT_W, or fewer pixels for a few columns, never under
// MIN_CELL_W a column). Plots shrink together when the natural total does not fit; they never go below
// their minimum (a row too narrow for that wraps its panels, the shared bar staying on their right).
function panelWidths(ps, shared, avail) {
  const chrome = ps.map((p) => 52 + (p.cbar ? colorbarWidth(p.cbar, panelBarHeight(p)) : 14));
  const natural = ps.map((p) => clamp(p.cols.length * 46, MIN_PLOT_W, p.cols.length * MAX_CELL_W));
  const least = natural.map((n, k) => Math.max(MIN_CELL_W * ps[k].cols.length,
                                               Math.min(MIN_PLOT_W, n, Math.max(14 * ps[k].cols.length, 60))));
  const sharedW = shared && ps.length ? colorbarWidth(shared, sharedBarHeight(ps)) : 0;
  const extra = sharedW + 10 * ps.length;
  const sum = (a) => a.reduce((x, y) => x + y, 0);
  const total = sum(natural) + sum(chrome) + extra;
  const minTotal = sum(least) + sum(chrome) + extra;
  const factor = total > avail ? Math.max(0, (avail - extra - sum(chrome)) / sum(natural)) : 1;
  const W = natural.map((n, k) => Math.max(least[k], Math.floor(n * factor)));
  return { W, chrome, sharedW, total, minTotal };
}

// ------------------------------------------------------------------ window arithmetic (pure)
// A window is [r0, r1, c0, c1]: the rows r0..r1-1 and columns c0..c1-1 of a panel of nRows x nCols cells.
// Every function below returns a valid window (validWindow) for any valid window it is given.

// The window moved (not resized) as little as needed to show the cell (row, col).
function windowShowing(w, row, col, nRows, nCols) {
  row = clamp(row, 0, nRows - 1);
  col = clamp(col, 0, nCols - 1);
  const out = w.slice(), nr = w[1] - w[0], nc = w[3] - w[2];
  if (row < out[0]) { out[0] = row; out[1] = row + nr; }
  if (row >= out[1]) { out[1] = row + 1; out[0] = row + 1 - nr; }
  if (col < out[2]) { out[2] = col; out[3] = col + nc; }
  if (col >= out[3]) { out[3] = col + 1; out[2] = col + 1 - nc; }
  return out;
}

// One axis [a, b) of n cells zoomed by `factor` (< 1 in, > 1 out) about the cell `at`, which stays
// where it was on screen as far as the edges allow; at least one cell more or less each step.
function zoomAxis(a, b, at, factor, n) {
  const size = b - a;
  let next = clamp(Math.round(size * factor), 1, n);
  if (factor < 1 && next === size && size > 1) next = size - 1;
  if (factor > 1 && next === size && size < n) next = size + 1;
  const lo = clamp(Math.round(at + 0.5 - ((at + 0.5 - a) * next) / size), 0, n - next);
  return [lo, lo + next];
}

function zoomWindow(w, row, col, factor, nRows, nCols) {
  return [...zoomAxis(w[0], w[1], row, factor, nRows), ...zoomAxis(w[2], w[3], col, factor, nCols)];
}

// The window `win` dragged by dRows rows (down: the rows above come in) and dCols columns, its size kept.
function panWindow(win, dRows, dCols, nRows, nCols) {
  const nr = win[1] - win[0], nc = win[3] - win[2];
  const r0 = clamp(win[0] + dRows, 0, nRows - nr), c0 = clamp(win[2] - dCols, 0, nCols - nc);
  return [r0, r0 + nr, c0, c0 + nc];
}

// The cell under the point (px, py) of a panel's svg drawn with geometry g (plot at ml, mt, size W x H,
// cells cw x rh, showing rows r0..r1-1 bottom up and columns c0..c1-1), clamped into the window;
// `inside`: the point is on the plot.
function cellAt(g, px, py) {
  const inside = px >= g.ml && px < g.ml + g.W && py >= g.mt && py < g.mt + g.H;
  const col = clamp(g.c0 + Math.floor((px - g.ml) / g.cw), g.c0, g.c1 - 1);
  const row = clamp(g.r0 + Math.floor((g.mt + g.H - py) / g.rh), g.r0, g.r1 - 1);
  return { row, col, inside };
}

// The window of the cells a dragged box [x1, y1, x2, y2] (svg pixels, x1 <= x2, y1 <= y2) covers.
function boxWindow(g, box) {
  const [x1, y1, x2, y2] = box;
  const c0 = g.c0 + Math.floor((x1 - g.ml) / g.cw), c1 = g.c0 + Math.ceil((x2 - g.ml) / g.cw);
  const r0 = g.r0 + Math.floor((g.mt + g.H - y2) / g.rh), r1 = g.r0 + Math.ceil((g.mt + g.H - y1) / g.rh);
  return [clamp(r0, g.r0, g.r1 - 1), clamp(Math.max(r1, r0 + 1), g.r0 + 1, g.r1),
          clamp(c0, g.c0, g.c1 - 1), clamp(Math.max(c1, c0 + 1), g.c0 + 1, g.c1)];
}

function render({ model, el }) {
  const uid = "tk" + Math.random().toString(36).slice(2, 9);
  const root = document.createElement("div");
  root.className = "toolkit-heatmap";
  root.tabIndex = 0;
  root.dataset.lmSuppressShortcuts = "true"; // JupyterLab: these keys are ours while the heatmap has focus
  const tools = document.createElement("div");
  tools.className = "toolkit-heatmap-tools";
  const stage = document.createElement("div");
  stage.className = "toolkit-heatmap-panels";
  const info = document.createElement("div");
  info.className = "toolkit-heatmap-info";
  const tip = document.createElement("div");
  tip.className = "toolkit-heatmap-tooltip";
  tip.style.display = "none";
  root.append(tools, stage, info, tip);
  el.append(root);

  let mode = "zoom";
  const toolButtons = {};
  for (const [name, label, title] of [
    ["zoom", "⬚ zoom", "drag over cells to zoom in (wheel: zoom once the heatmap has focus)"],
    ["pan", "✥ pan", "drag to move the zoomed view (or shift-drag in zoom mode)"],
    ["reset", "⟲ reset", "show every cell again (or double-click the grid, or press 0)"]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "toolkit-heatmap-tool";
    b.dataset.tool = name;
    b.textContent = label;
    b.title = title;
    b.addEventListener("click", () => {
      if (name === "reset") { resetAll(); return; }
      mode = name;
      for (const [n, x] of Object.entries(toolButtons)) x.classList.toggle("active", n === mode);
    });
    toolButtons[name] = b;
    tools.append(b);
  }
  toolButtons.zoom.classList.add("active");
  const hint = document.createElement("span");
  hint.className = "toolkit-heatmap-hint";
  hint.textContent = "drag: zoom · shift-drag: pan · double-click: reset · arrows + Enter: cells";
  tools.append(hint);

  let windows = [];
  let geoms = [];
  let drawnSelection = "";
  let lastClick = null;
  let drag = null;
  let pointer = null; // the last pointer position over the grid (clientX, clientY), for the tooltip

  const spec = () => model.get("spec") || { panels: [] };
  const panels = () => spec().panels || [];

  function syncWindows() {
    model.set("windows", windows.map((w) => w.slice()));
    model.save_changes();
  }

  function loadWindows() {
    const got = model.get("windows") || [];
    windows = panels().map((p, k) => (validWindow(got[k], p) ? got[k].slice() : fullWindow(p)));
  }

  function resetAll() {
    windows = panels().map(fullWindow);
    syncWindows();
    draw();
  }

  // ------------------------------------------------------------------ layout and drawing
  function layout() {
    const ps = panels();
    const shared = spec().shared_cbar;
    const avail = Math.max(260, (root.clientWidth || 700) - 4);
    const { W: widths, chrome, total, minTotal } = panelWidths(ps, shared, avail);
    const wanted = Math.ceil(total + 8) + "px"; // as wide as the panels want; a narrow row shrinks it
    if (el.style.width !== wanted) el.style.width = wanted;
    // In a flex row (the explorer): from one row of panels at their least width up to what they want,
    // never less than that least width (or the whole row), so the explorer's side panel goes below the
    // heatmap instead of a panel wrapping under the others. Given as CSS variables (widgets.css), so the
    // stacked layout of a narrow output (a column, where a flex basis is a height) can drop them.
    el.classList.add("toolkit-heatmap-host");
    el.style.setProperty("--toolkit-heatmap-wanted", wanted);
    el.style.setProperty("--toolkit-heatmap-least", Math.ceil(minTotal + 8) + "px");
    return ps.map((p, k) => {
      const W = widths[k];
      const H = clamp(p.rows.length * ROW_PX, 200, 600);
      const maxLabel = Math.max(1, ...p.cols.map((c) => String(c).length));
      const xlabel = p.xlabel ? wrapText(p.xlabel, W + 40, 6.2) : [];
      const title = wrapText(p.title || "", W + 2 * 52 - 8, 6.8); // centred on the plot: inside the svg
      const mt = 10 + 16 * title.length;
      const mb = 12 + maxLabel * 5.2 + 14 * xlabel.length + 6;
      return { W, H, ml: 52, mt, mb, title, xlabel, width: W + chrome[k], height: mt + H + mb };
    });
  }

  // `key` names the bar (its panel, or "shared"): gradient ids are document-wide, and panels of one width
  // gave their bars one id, so a constant panel's bar showed another panel's gradient.
  function colorbarSvg(cbar, x0, y0, h, key) {
    let s = `<g class="toolkit-cbar">`;
    if (cbar.constant) { // one value: one swatch of its colour at its one tick, no range
      const sh = Math.min(h, 28);
      s += `<rect class="toolkit-cbar-swatch" x="${x0}" y="${(y0 + (h - sh) / 2).toFixed(1)}" width="14" height="${sh}" fill="${cbar.colors[0]}" stroke="#555" stroke-width="0.6"/>`;
    } else {
      const gid = `${uid}-grad-${key}`;
      const stops = cbar.colors.map((c, i) => `<stop offset="${(i / (cbar.colors.length - 1)).toFixed(4)}" stop-color="${c}"/>`).join("");
      s += `<defs><linearGradient id="${gid}" x1="0" y1="1" x2="0" y2="0">${stops}</linearGradient></defs>`;
      s += `<rect class="toolkit-cbar-bar" x="${x0}" y="${y0}" width="14" height="${h}" fill="url(#${gid})" stroke="#555" stroke-width="0.6"/>`;
    }
    const lo = cbar.colors[0], hi = cbar.colors[cbar.colors.length - 1];
    if (cbar.extend === "max" || cbar.extend === "both")
      s += `<path class="toolkit-cbar-extend" d="M${x0} ${y0} L${x0 + 7} ${y0 - 9} L${x0 + 14} ${y0} Z" fill="${hi}" stroke="#555" stroke-width="0.6"/>`;
    if (cbar.extend === "min" || cbar.extend === "both")
      s += `<path class="toolkit-cbar-extend" d="M${x0} ${y0 + h} L${x0 + 7} ${y0 + h + 9} L${x0 + 14} ${y0 + h} Z" fill="${lo}" stroke="#555" stroke-width="0.6"/>`;
    let widest = 0;
    for (const [pos, label] of cbar.ticks) {
      const y = y0 + h * (1 - pos);
      s += `<line x1="${x0 + 14}" x2="${x0 + 18}" y1="${y}" y2="${y}" stroke="#333"/>`;
      s += tickLabel(x0 + 21, y + 4, label, { class: "toolkit-cbar-tick", "font-size": "11" });
      widest = Math.max(widest, String(label).replace(/[${}^]/g, "").length);
    }
    const lines = cbarLabelLines(cbar.label, h);
    const lx = x0 + 26 + widest * 6.3;
    lines.forEach((line, i) => {
      const x = lx + 13 * i;
      s += `<text class="toolkit-cbar-label" transform="translate(${x.toFixed(1)},${(y0 + h / 2).toFixed(1)}) rotate(90)" text-anchor="middle" font-size="11">${esc(line)}</text>`;
    });
    return s + "</g>";
  }

  // the mark of an uncertain alpha (toolkit/plot/fit_marks.py): a black, white-edged corner at the
  // top right of the cell, CORNER of its side, as the saved matplotlib figure draws it
  const CORNER = 0.32;
  function marksSvg(marks, g) {
    let s = "";
    for (let r = g.r0; r < g.r1; r++) {
      for (let c = g.c0; c < g.c1; c++) {
        if (!marks[r] || !marks[r][c]) continue;
        const x1 = g.ml + (c - g.c0 + 1) * g.cw, y0 = g.mt + g.H - (r - g.r0 + 1) * g.rh;
        const dx = CORNER * g.cw, dy = CORNER * g.rh;
        s += `<polygon class="toolkit-mark" data-r="${r}" data-c="${c}" points="${(x1 - dx).toFixed(2)},${y0.toFixed(2)} ${x1.toFixed(2)},${y0.toFixed(2)} ${x1.toFixed(2)},${(y0 + dy).toFixed(2)}" fill="#000" stroke="#fff" stroke-width="0.8" pointer-events="none"/>`;
      }
    }
    return s;
  }

  function panelSvg(p, k, g) {
    const [r0, r1, c0, c1] = windows[k];
    const rh = g.H / (r1 - r0), cw = g.W / (c1 - c0);
    Object.assign(g, { r0, r1, c0, c1, rh, cw });
    const svgW = g.width, svgH = g.height;
    let s = `<svg class="toolkit-heatmap-panel" data-panel="${k}" width="${svgW}" height="${svgH}" viewBox="0 0 ${svgW} ${svgH}">`;
    s += `<defs><pattern id="${uid}-hatch${k}" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
      `<rect width="6" height="6" fill="#ececec"/><line x1="0" y1="0" x2="0" y2="6" stroke="#9a9a9a" stroke-width="1"/></pattern>` +
      `<clipPath id="${uid}-clip${k}"><rect x="${g.ml}" y="${g.mt}" width="${g.W}" height="${g.H}"/></clipPath></defs>`;
    g.title.forEach((line, i) => { s += svgText(g.ml + g.W / 2, 14 + 16 * i, line, { "text-anchor": "middle", class: "toolkit-heatmap-title", "font-size": "12.5" }); });
    s += `<g class="toolkit-cells" clip-path="url(#${uid}-clip${k})">`;
    for (let r = r0; r < r1; r++) {
      const y = g.mt + g.H - (r - r0 + 1) * rh;
      const row = p.colors[r];
      for (let c = c0; c < c1; c++) {
        const fill = row[c] || `url(#${uid}-hatch${k})`;
        s += `<rect class="cell${row[c] ? "" : " nan"}" data-r="${r}" data-c="${c}" x="${(g.ml + (c - c0) * cw).toFixed(2)}" y="${y.toFixed(2)}" width="${(cw + 0.3).toFixed(2)}" height="${(rh + 0.3).toFixed(2)}" fill="${fill}"/>`;
      }
    }
    if (p.marks) s += marksSvg(p.marks, g);
    s += `</g><rect x="${g.ml}" y="${g.mt}" width="${g.W}" height="${g.H}" fill="none" stroke="#444" stroke-width="0.8"/>`;
    const sel = model.get("selected") || [];
    if (sel.length === 3 && sel[0] === k && sel[1] >= r0 && sel[1] < r1 && sel[2] >= c0 && sel[2] < c1) {
      const x = g.ml + (sel[2] - c0) * cw, y = g.mt + g.H - (sel[1] - r0 + 1) * rh;
      s += `<rect class="toolkit-selected" data-r="${sel[1]}" data-c="${sel[2]}" x="${x + 1}" y="${y + 1}" width="${Math.max(1, cw - 2)}" height="${Math.max(1, rh - 2)}" fill="none" stroke="#000" stroke-width="2.5"/>`;
      s += `<rect x="${x + 2.6}" y="${y + 2.6}" width="${Math.max(1, cw - 5.2)}" height="${Math.max(1, rh - 5.2)}" fill="none" stroke="#fff" stroke-width="1"/>`;
    }
    // y axis: every step-th layer, the first and the last shown; a label next to an end is dropped
    const step = rowStep(rh);
    const shown = [];
    for (let r = r0; r < r1; r++) {
      const layer = Number(p.rows[r]);
      const end = r === r0 || r === r1 - 1;
      if (step === 1 || end || ((Number.isFinite(layer) ? layer : r) % step === 0 && r > r0 + 1 && r < r1 - 2)) shown.push(r);
    }
    for (const r of shown) {
      const y = g.mt + g.H - (r - r0 + 0.5) * rh;
      s += `<line x1="${g.ml - 3}" x2="${g.ml}" y1="${y}" y2="${y}" stroke="#333"/>`;
      s += svgText(g.ml - 6, y + 4, p.rows[r], { "text-anchor": "end", class: "toolkit-ytick", "font-size": "11" });
    }
    s += `<text transform="translate(13,${(g.mt + g.H / 2).toFixed(1)}) rotate(-90)" text-anchor="middle" font-size="11.5">layer</text>`;
    const cstep = cw >= 13 ? 1 : Math.ceil(13 / cw);
    for (let c = c0; c < c1; c += cstep) {
      const x = g.ml + (c - c0 + 0.5) * cw, y = g.mt + g.H + 6;
      s += `<text class="toolkit-xtick" transform="translate(${(x + 3).toFixed(1)},${(y + 4).toFixed(1)}) rotate(-45)" text-anchor="end" font-size="11">${esc(p.cols[c])}</text>`;
    }
    const maxLabel = Math.max(1, ...p.cols.map((c) => String(c).length));
    g.xlabel.forEach((line, i) => {
      s += svgText(g.ml + g.W / 2, g.mt + g.H + 16 + maxLabel * 5.2 + 13 * i, line, { "text-anchor": "middle", "font-size": "10.5", class: "toolkit-xlabel" });
    });
    if (p.cbar) s += colorbarSvg(p.cbar, g.ml + g.W + 12, g.mt + 10, g.H - 20, k);
    s += `<rect class="toolkit-box" x="0" y="0" width="0" height="0" display="none" fill="rgba(31,94,168,0.12)" stroke="#1f5fa8" stroke-dasharray="3,2"/>`;
    return s + "</svg>";
  }

  function sharedColorbar(cbar, height) {
    const w = colorbarWidth(cbar, sharedBarHeight(panels())) - 4, h = height;
    return `<div class="toolkit-heatmap-cbar-column"><svg class="toolkit-heatmap-shared-cbar" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}">` +
      `${colorbarSvg(cbar, 8, 34, Math.max(60, h - 110), "shared")}</svg></div>`;
  }

  function draw() {
    const t0 = performance.now();
    const ps = panels();
    if (windows.length !== ps.length) loadWindows();
    geoms = layout();
    let html = `<div class="toolkit-heatmap-grid">${ps.map((p, k) => panelSvg(p, k, geoms[k])).join("")}</div>`;
    const shared = spec().shared_cbar;
    if (shared && ps.length) html += sharedColorbar(shared, Math.max(...geoms.map((g) => g.height)));
    stage.innerHTML = html;
    fitText();
    drawnSelection = JSON.stringify(model.get("selected") || []);
    showInfo();
    root.dataset.renders = String(model.get("renders"));
    root.dataset.drawMs = (performance.now() - t0).toFixed(1);
    root.dataset.windows = JSON.stringify(windows);
  }

  // Each svg widened (and heightened) to its colour bar's text, as the browser measured it: the widths
  // above are estimates (6.3 px a character), and a font wider than that cut the bar's label at its edge.
  function fitText() {
    let extra = 0;
    for (const svg of stage.querySelectorAll("svg")) {
      const box = svg.getBoundingClientRect();
      if (!box.width) continue; // not on screen (a hidden tab): nothing measured
      let right = box.width, bottom = box.height;
      for (const t of svg.querySelectorAll("g.toolkit-cbar text")) {
        const r = t.getBoundingClientRect();
        right = Math.max(right, Math.ceil(r.right - box.left + 2));
        bottom = Math.max(bottom, Math.ceil(r.bottom - box.top + 2));
      }
      if (right <= box.width && bottom <= box.height) continue;
      extra += right - box.width;
      svg.setAttribute("width", right);
      svg.setAttribute("height", bottom);
      svg.setAttribute("viewBox", `0 0 ${right} ${bottom}`);
    }
    if (extra > 0) el.style.width = `${parseFloat(el.style.width) + extra}px`;
  }

  function showInfo() {
    const sel = model.get("selected") || [];
    const ps = panels();
    if (sel.length === 3 && ps[sel[0]] && ps[sel[0]].hover[sel[1]]) {
      info.textContent = ps[sel[0]].hover[sel[1]][sel[2]].split("\n").join("  ·  ");
      info.dataset.selected = sel.join(",");
    } else {
      info.textContent = spec().hint || "";
      info.dataset.selected = "";
    }
  }

  // ------------------------------------------------------------------ locating cells
  function locate(ev, k) {
    let svg;
    if (k === undefined) {
      svg = ev.target.closest ? ev.target.closest("svg.toolkit-heatmap-panel") : null;
      if (!svg) return null;
      k = Number(svg.dataset.panel);
    } else svg = stage.querySelector(`svg[data-panel="${k}"]`);
    const g = geoms[k];
    if (!svg || !g) return null;
    const r = svg.getBoundingClientRect();
    const px = ev.clientX - r.left, py = ev.clientY - r.top;
    return { panel: k, ...cellAt(g, px, py), px, py, svg, g };
  }

  function showTip(hit, ev) {
    const p = panels()[hit.panel];
    tip.textContent = p.hover[hit.row][hit.col];
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

  // ------------------------------------------------------------------ selection, zoom, pan
  function select(k, row, col, open) {
    const p = panels()[k];
    if (!p) return;
    row = clamp(row, 0, p.rows.length - 1);
    col = clamp(col, 0, p.cols.length - 1);
    windows[k] = windowShowing(windows[k], row, col, p.rows.length, p.cols.length);
    model.set("selected", [k, row, col]);
    model.set("windows", windows.map((x) => x.slice()));
    model.save_changes();
    draw();
    if (open) model.send({ event: "open", panel: k, row, col });
  }

  function zoomAt(k, row, col, factor) {
    const p = panels()[k];
    windows[k] = zoomWindow(windows[k], row, col, factor, p.rows.length, p.cols.length);
    syncWindows();
    draw();
  }

  stage.addEventListener("mousemove", (ev) => {
    if (drag) return;
    const hit = locate(ev);
    pointer = { clientX: ev.clientX, clientY: ev.clientY };
    if (!hit || !hit.inside) { tip.style.display = "none"; return; }
    showTip(hit, ev);
  });
  stage.addEventListener("mouseleave", () => { pointer = null; if (!drag) tip.style.display = "none"; });

  // A new spec (another metric, a live pass's new cells): the tooltip shown is the old spec's text.
  // It shows the new text of the cell under the pointer, or goes away when there is none.
  function refreshTip() {
    if (tip.style.display === "none") return;
    const k = Number(tip.dataset.panel);
    const hit = pointer && panels()[k] ? locate(pointer, k) : null;
    if (!hit || !hit.inside || !panels()[k].hover[hit.row]) { tip.style.display = "none"; return; }
    showTip(hit, pointer);
  }

  stage.addEventListener("mousedown", (ev) => {
    if (ev.button !== 0) return;
    const hit = locate(ev);
    if (!hit || !hit.inside) return;
    ev.preventDefault();
    root.focus({ preventScroll: true });
    drag = { hit, x0: ev.clientX, y0: ev.clientY, pan: mode === "pan" || ev.shiftKey, win: windows[hit.panel].slice(), moved: false };
  });

  const onMove = (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x0, dy = ev.clientY - drag.y0;
    if (Math.abs(dx) + Math.abs(dy) > 4) drag.moved = true;
    if (!drag.moved) return;
    tip.style.display = "none";
    const k = drag.hit.panel, g = geoms[k], p = panels()[k];
    if (drag.pan) {
      const next = panWindow(drag.win, Math.round(dy / g.rh), Math.round(dx / g.cw), p.rows.length, p.cols.length);
      if (next[0] !== windows[k][0] || next[2] !== windows[k][2]) { windows[k] = next; draw(); }
      return;
    }
    const svg = stage.querySelector(`svg[data-panel="${k}"]`);
    const r = svg.getBoundingClientRect();
    const x1 = clamp(drag.x0 - r.left, g.ml, g.ml + g.W), y1 = clamp(drag.y0 - r.top, g.mt, g.mt + g.H);
    const x2 = clamp(ev.clientX - r.left, g.ml, g.ml + g.W), y2 = clamp(ev.clientY - r.top, g.mt, g.mt + g.H);
    const box = svg.querySelector(".toolkit-box");
    box.setAttribute("x", Math.min(x1, x2)); box.setAttribute("y", Math.min(y1, y2));
    box.setAttribute("width", Math.abs(x2 - x1)); box.setAttribute("height", Math.abs(y2 - y1));
    box.setAttribute("display", "");
    drag.box = [Math.min(x1, x2), Math.min(y1, y2), Math.max(x1, x2), Math.max(y1, y2)];
  };
  const onUp = (ev) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    const k = d.hit.panel, g = geoms[k];
    if (!d.moved) {
      // a second click within 400 ms: a double-click, which shows every cell again (the first click
      // redrew the panel, so the browser's own dblclick may not fire on the new element)
      const now = performance.now();
      if (lastClick && lastClick.k === k && now - lastClick.t < 400) {
        lastClick = null;
        windows[k] = fullWindow(panels()[k]);
        syncWindows();
        draw();
        return;
      }
      lastClick = { k, t: now };
      select(k, d.hit.row, d.hit.col, true);
      return;
    }
    if (d.pan) { syncWindows(); return; }
    if (!d.box) return;
    windows[k] = boxWindow(g, d.box);
    syncWindows();
    draw();
  };
  window.addEventListener("mousemove", onMove);
  window.addEventListener("mouseup", onUp);

  stage.addEventListener("wheel", (ev) => {
    if (!(document.activeElement === root || ev.ctrlKey)) return; // the page scrolls until the heatmap has focus
    const hit = locate(ev);
    if (!hit || !hit.inside) return;
    ev.preventDefault();
    zoomAt(hit.panel, hit.row, hit.col, ev.deltaY > 0 ? 1.25 : 0.8);
  }, { passive: false });

  root.addEventListener("keydown", (ev) => {
    const ps = panels();
    if (!ps.length) return;
    let sel = model.get("selected") || [];
    const key = ev.key;
    const handled = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "PageUp", "PageDown", "Home", "End",
                     "Enter", " ", "Escape", "+", "=", "-", "0"];
    if (!handled.includes(key)) return;
    ev.preventDefault();
    ev.stopPropagation();
    if (key === "0") { resetAll(); return; }
    if (key === "Escape") {
      model.set("selected", []); model.save_changes(); tip.style.display = "none"; draw(); return;
    }
    if (sel.length !== 3) {
      const w = windows[0];
      if (["+", "=", "-"].includes(key)) { zoomAt(0, Math.floor((w[0] + w[1]) / 2), Math.floor((w[2] + w[3]) / 2), key === "-" ? 1.25 : 0.8); return; }
      select(0, w[0], w[2], false);
      return;
    }
    let [k, r, c] = sel;
    if (key === "+" || key === "=" || key === "-") { zoomAt(k, r, c, key === "-" ? 1.25 : 0.8); return; }
    if (key === "Enter" || key === " ") { select(k, r, c, true); return; }
    if (key === "ArrowUp") r += 1;
    if (key === "ArrowDown") r -= 1;
    if (key === "PageUp") r += 4;
    if (key === "PageDown") r -= 4;
    if (key === "Home") c = 0;
    if (key === "End") c = ps[k].cols.length - 1;
    if (key === "ArrowLeft") {
      if (c > 0) c -= 1;
      else if (k > 0) { k -= 1; c = ps[k].cols.length - 1; }
    }
    if (key === "ArrowRight") {
      if (c < ps[k].cols.length - 1) c += 1;
      else if (k < ps.length - 1) { k += 1; c = 0; }
    }
    select(k, clamp(r, 0, ps[k].rows.length - 1), c, false);
  });

  const onSpec = () => { loadWindows(); draw(); refreshTip(); };
  const onSelected = () => { if (JSON.stringify(model.get("selected") || []) !== drawnSelection) draw(); };
  model.on("change:renders", onSpec);
  model.on("change:selected", onSelected);
  const onWindows = () => {
    const got = JSON.stringify(model.get("windows") || []);
    if (got !== JSON.stringify(windows)) { loadWindows(); draw(); }
  };
  model.on("change:windows", onWindows);
  const resize = redrawOnResize(root, draw);
  loadWindows();
  draw();
  return () => {
    resize.disconnect();
    window.removeEventListener("mousemove", onMove);
    window.removeEventListener("mouseup", onUp);
    model.off("change:renders", onSpec);
    model.off("change:selected", onSelected);
    model.off("change:windows", onWindows);
  };
}

export default { render };
