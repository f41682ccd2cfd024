// The explorer's heatmap in the browser (toolkit.widgets.heatmap_view.HeatmapView).
//
// Python sends `spec`: for each panel its cells' colours (the same RGBA matplotlib paints,
// computed by toolkit.plot), hover texts, labels and colour bar. Everything a user does with
// the grid happens here, without a round trip: hover tooltips, box zoom (drag), pan
// (shift-drag, or the pan tool), wheel zoom (once the heatmap has focus, or with Ctrl),
// double-click to reset, arrow keys to move the selected cell, Enter or a click to open it.
// The selected cell (`selected`) and the zoom (`windows`) are synced back to Python; opening a
// cell sends {event: "open", panel, row, col}.
//
// This module composes the parts bundled before it (toolkit.widgets._assets.BUNDLES), one job each:
// heatmap_layout.js (sizes), heatmap_colorbar.js, heatmap_panel.js (a panel's svg), heatmap_hover.js
// (tooltip), heatmap_dragbox.js (zoom and pan), heatmap_keys.js and heatmap_select.js (the selected cell
// and its drill-down). They share `hm`: the model, the elements and the view's state.

function render({ model, el }) {
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

  const hm = {
    model, el, root, tools, stage, info, tip,
    uid: "tk" + Math.random().toString(36).slice(2, 9), // this heatmap's prefix of svg ids
    mode: "zoom", windows: [], geoms: [], drawnSelection: "", lastClick: null, drag: null,
    pointer: null, // the last pointer position over the grid (clientX, clientY), for the tooltip
    spec: () => model.get("spec") || { panels: [] },
    panels: () => hm.spec().panels || [],
    draw,
  };

  function draw() {
    const t0 = performance.now();
    const ps = hm.panels();
    if (hm.windows.length !== ps.length) loadWindows(hm);
    hm.geoms = layoutPanels(hm);
    const sel = model.get("selected") || [];
    let html = `<div class="toolkit-heatmap-grid">${ps.map((p, k) => panelSvg(p, k, hm.geoms[k], hm.windows[k], sel, hm.uid)).join("")}</div>`;
    const shared = hm.spec().shared_cbar;
    if (shared && ps.length) html += sharedColorbarSvg(shared, ps, Math.max(...hm.geoms.map((g) => g.height)), `${hm.uid}-grad-shared`);
    stage.innerHTML = html;
    fitColorbarText(stage, el);
    hm.drawnSelection = JSON.stringify(sel);
    showInfo(hm);
    root.dataset.renders = String(model.get("renders"));
    root.dataset.drawMs = (performance.now() - t0).toFixed(1);
    root.dataset.windows = JSON.stringify(hm.windows);
  }

  buildTools(hm);
  attachHover(hm);
  const detachDragbox = attachDragbox(hm);
  attachKeys(hm);

  const onSpec = () => { loadWindows(hm); draw(); refreshTip(hm); };
  const onSelected = () => { if (JSON.stringify(model.get("selected") || []) !== hm.drawnSelection) draw(); };
  const onWindows = () => {
    if (JSON.stringify(model.get("windows") || []) !== JSON.stringify(hm.windows)) { loadWindows(hm); draw(); }
  };
  model.on("change:renders", onSpec);
  model.on("change:selected", onSelected);
  model.on("change:windows", onWindows);
  const resize = redrawOnResize(root, draw);
  loadWindows(hm);
  draw();
  return () => {
    resize.disconnect();
    detachDragbox();
    model.off("change:renders", onSpec);
    model.off("change:selected", onSelected);
    model.off("change:windows", onWindows);
  };
}

export default { render };
