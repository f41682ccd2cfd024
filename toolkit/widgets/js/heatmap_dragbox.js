// Zoom and pan of the heatmap (plotly.js's dragbox, smaller): the window arithmetic (pure, node-tested),
// the zoom / pan / reset tools, box zoom (drag), pan (shift-drag, or the pan tool), wheel zoom (once the
// heatmap has focus, or with Ctrl) and double-click to reset. The zoom (`windows`) is synced to Python.

// ------------------------------------------------------------------ window arithmetic (pure)
// A window is [r0, r1, c0, c1]: the rows r0..r1-1 and columns c0..c1-1 of a panel of nRows x nCols cells.
// Every function below returns a valid window (validWindow) for any valid window it is given.

function fullWindow(p) { return [0, p.rows.length, 0, p.cols.length]; }

function validWindow(w, p) {
  return Array.isArray(w) && w.length === 4 && w[0] >= 0 && w[1] <= p.rows.length && w[0] < w[1] &&
    w[2] >= 0 && w[3] <= p.cols.length && w[2] < w[3];
}

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

// ------------------------------------------------------------------ the windows of a heatmap `hm`
function syncWindows(hm) {
  hm.model.set("windows", hm.windows.map((w) => w.slice()));
  hm.model.save_changes();
}

// Python's windows where they are valid for the panels shown, else every cell.
function loadWindows(hm) {
  const got = hm.model.get("windows") || [];
  hm.windows = hm.panels().map((p, k) => (validWindow(got[k], p) ? got[k].slice() : fullWindow(p)));
}

function resetAll(hm) {
  hm.windows = hm.panels().map(fullWindow);
  syncWindows(hm);
  hm.draw();
}

function zoomAt(hm, k, row, col, factor) {
  const p = hm.panels()[k];
  hm.windows[k] = zoomWindow(hm.windows[k], row, col, factor, p.rows.length, p.cols.length);
  syncWindows(hm);
  hm.draw();
}

// The zoom / pan / reset buttons and the hint, in `hm.tools`.
function buildTools(hm) {
  const buttons = {};
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
      if (name === "reset") { resetAll(hm); return; }
      hm.mode = name;
      for (const [n, x] of Object.entries(buttons)) x.classList.toggle("active", n === hm.mode);
    });
    buttons[name] = b;
    hm.tools.append(b);
  }
  buttons.zoom.classList.add("active");
  const hint = document.createElement("span");
  hint.className = "toolkit-heatmap-hint";
  hint.textContent = "drag: zoom · shift-drag: pan · double-click: reset · arrows + Enter: cells";
  hm.tools.append(hint);
}

// Drag (box zoom or pan), click and double-click, wheel zoom; returns what removes the window's listeners.
function attachDragbox(hm) {
  const { stage, root } = hm;
  stage.addEventListener("mousedown", (ev) => {
    if (ev.button !== 0) return;
    const hit = locate(hm, ev);
    if (!hit || !hit.inside) return;
    ev.preventDefault();
    root.focus({ preventScroll: true });
    hm.drag = { hit, x0: ev.clientX, y0: ev.clientY, pan: hm.mode === "pan" || ev.shiftKey, win: hm.windows[hit.panel].slice(), moved: false };
  });
  const onMove = (ev) => {
    const drag = hm.drag;
    if (!drag) return;
    const dx = ev.clientX - drag.x0, dy = ev.clientY - drag.y0;
    if (Math.abs(dx) + Math.abs(dy) > 4) drag.moved = true;
    if (!drag.moved) return;
    hideTip(hm);
    const k = drag.hit.panel, g = hm.geoms[k], p = hm.panels()[k];
    if (drag.pan) {
      const next = panWindow(drag.win, Math.round(dy / g.rh), Math.round(dx / g.cw), p.rows.length, p.cols.length);
      if (next[0] !== hm.windows[k][0] || next[2] !== hm.windows[k][2]) { hm.windows[k] = next; hm.draw(); }
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
  const onUp = () => {
    const d = hm.drag;
    if (!d) return;
    hm.drag = null;
    const k = d.hit.panel, g = hm.geoms[k];
    if (!d.moved) {
      // a second click within 400 ms: a double-click, which shows every cell again (the first click
      // redrew the panel, so the browser's own dblclick may not fire on the new element)
      const now = performance.now();
      if (hm.lastClick && hm.lastClick.k === k && now - hm.lastClick.t < 400) {
        hm.lastClick = null;
        hm.windows[k] = fullWindow(hm.panels()[k]);
        syncWindows(hm);
        hm.draw();
        return;
      }
      hm.lastClick = { k, t: now };
      select(hm, k, d.hit.row, d.hit.col, true);
      return;
    }
    if (d.pan) { syncWindows(hm); return; }
    if (!d.box) return;
    hm.windows[k] = boxWindow(g, d.box);
    syncWindows(hm);
    hm.draw();
  };
  window.addEventListener("mousemove", onMove);
  window.addEventListener("mouseup", onUp);
  stage.addEventListener("wheel", (ev) => {
    if (!(document.activeElement === root || ev.ctrlKey)) return; // the page scrolls until the heatmap has focus
    const hit = locate(hm, ev);
    if (!hit || !hit.inside) return;
    ev.preventDefault();
    zoomAt(hm, hit.panel, hit.row, hit.col, ev.deltaY > 0 ? 1.25 : 0.8);
  }, { passive: false });
  return () => {
    window.removeEventListener("mousemove", onMove);
    window.removeEventListener("mouseup", onUp);
  };
}
