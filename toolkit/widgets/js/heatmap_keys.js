// The heatmap's keys (while it has focus): arrows move the selected cell (left and right cross into the
// next panel), PageUp / PageDown four layers, Home / End the first and last column, Enter or Space open
// the cell, + / - zoom about it, 0 shows every cell, Escape clears the selection.

const HEATMAP_KEYS = ["ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "PageUp", "PageDown", "Home", "End",
                      "Enter", " ", "Escape", "+", "=", "-", "0"];

// What `key` does with the selection `sel` ([panel, row, col] or []) over panels `ps` whose windows are
// `windows` (pure): null (not ours), {kind: "reset"}, {kind: "clear"}, {kind: "zoom", k, row, col, factor}
// or {kind: "select", k, row, col, open}.
function keyAction(key, sel, ps, windows) {
  if (!ps.length || !HEATMAP_KEYS.includes(key)) return null;
  if (key === "0") return { kind: "reset" };
  if (key === "Escape") return { kind: "clear" };
  const zoom = key === "+" || key === "=" || key === "-";
  const factor = key === "-" ? 1.25 : 0.8;
  if (sel.length !== 3) { // nothing selected: zoom about the middle of the first panel, or select its first cell
    const w = windows[0];
    if (zoom) return { kind: "zoom", k: 0, row: Math.floor((w[0] + w[1]) / 2), col: Math.floor((w[2] + w[3]) / 2), factor };
    return { kind: "select", k: 0, row: w[0], col: w[2], open: false };
  }
  let [k, r, c] = sel;
  if (zoom) return { kind: "zoom", k, row: r, col: c, factor };
  if (key === "Enter" || key === " ") return { kind: "select", k, row: r, col: c, open: true };
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
  return { kind: "select", k, row: clamp(r, 0, ps[k].rows.length - 1), col: c, open: false };
}

function attachKeys(hm) {
  hm.root.addEventListener("keydown", (ev) => {
    const act = keyAction(ev.key, hm.model.get("selected") || [], hm.panels(), hm.windows);
    if (!act) return;
    ev.preventDefault();
    ev.stopPropagation();
    if (act.kind === "reset") resetAll(hm);
    else if (act.kind === "clear") clearSelection(hm);
    else if (act.kind === "zoom") zoomAt(hm, act.k, act.row, act.col, act.factor);
    else select(hm, act.k, act.row, act.col, act.open);
  });
}
