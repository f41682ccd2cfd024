// The heatmap's sizes (toolkit.widgets.heatmap_view): how wide each panel's plot is in the width it is
// given, the margins around it, and the sizes the host element asks of the explorer's flex row.
// Pure functions, node-tested, but for layoutPanels, which applies them to the page.

const MIN_PLOT_W = 120, MAX_CELL_W = 64, MIN_CELL_W = 12, ROW_PX = 16;

// Every how many rows a layer label is drawn, for rows of rowPx pixels (labels at least 13 px apart).
function rowStep(rowPx) {
  for (const s of [1, 2, 4, 8, 16, 32, 64]) if (s * rowPx >= 13) return s;
  return 128;
}

// The height of a panel's plot, of its own colour bar (the plot's less 20 px), and the least height of the
// shared one beside panels that tall (drawn 110 px shorter than the tallest panel's svg, which is at least
// 44 px taller than its plot).
function plotHeight(p) { return clamp(p.rows.length * ROW_PX, 200, 600); }
function panelBarHeight(p) { return plotHeight(p) - 20; }
function sharedBarHeight(ps) { return Math.max(60, Math.max(...ps.map(panelBarHeight)) - 50); }

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

// One panel's geometry for a plot W pixels wide and `chrome` pixels around it: the plot's height H, its
// margins (ml, mt, mb), the title's and the x label's lines, and the svg's width and height.
function panelGeometry(p, W, chrome) {
  const H = plotHeight(p);
  const maxLabel = Math.max(1, ...p.cols.map((c) => String(c).length));
  const xlabel = p.xlabel ? wrapText(p.xlabel, W + 40, 6.2) : [];
  const title = wrapText(p.title || "", W + 2 * 52 - 8, 6.8); // centred on the plot: inside the svg
  const mt = 10 + 16 * title.length;
  const mb = 12 + maxLabel * 5.2 + 14 * xlabel.length + 6;
  return { W, H, ml: 52, mt, mb, title, xlabel, width: W + chrome, height: mt + H + mb };
}

// The geometry of every panel in the heatmap's width, and the host element's sizes: its width (what the
// panels want), and, as CSS variables (widgets.css), from one row of panels at their least width up to what
// they want, so the explorer's side panel goes below the heatmap instead of a panel wrapping under the
// others (the stacked layout of a narrow output, a column where a flex basis is a height, drops them).
function layoutPanels(hm) {
  const ps = hm.panels();
  const avail = Math.max(260, (hm.root.clientWidth || 700) - 4);
  const { W, chrome, total, minTotal } = panelWidths(ps, hm.spec().shared_cbar, avail);
  const wanted = Math.ceil(total + 8) + "px";
  if (hm.el.style.width !== wanted) hm.el.style.width = wanted;
  hm.el.classList.add("toolkit-heatmap-host");
  hm.el.style.setProperty("--toolkit-heatmap-wanted", wanted);
  hm.el.style.setProperty("--toolkit-heatmap-least", Math.ceil(minTotal + 8) + "px");
  return ps.map((p, k) => panelGeometry(p, W[k], chrome[k]));
}
