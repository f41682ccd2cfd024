// The selected cell and its drill-down: selecting a cell (a click, the arrow keys) outlines it, moves the
// window to show it and writes it under the figure; opening it (a click, Enter) asks Python for its
// drill-down with {event: "open", panel, row, col}.

// The message that opens cell (row, col) of panel k.
function openMessage(k, row, col) { return { event: "open", panel: k, row, col }; }

// What the line under the figure says: the selected cell's hover text on one line, or the spec's hint.
function infoText(spec, sel) {
  const text = sel.length === 3 ? hoverText(spec.panels || [], sel[0], sel[1], sel[2]) : null;
  return text === null ? { text: spec.hint || "", selected: "" }
    : { text: text.split("\n").join("  ·  "), selected: sel.join(",") };
}

function showInfo(hm) {
  const got = infoText(hm.spec(), hm.model.get("selected") || []);
  hm.info.textContent = got.text;
  hm.info.dataset.selected = got.selected;
}

// Select cell (row, col) of panel k (clamped into the panel), its window moved to show it; `open`: and
// open its drill-down.
function select(hm, k, row, col, open) {
  const p = hm.panels()[k];
  if (!p) return;
  row = clamp(row, 0, p.rows.length - 1);
  col = clamp(col, 0, p.cols.length - 1);
  hm.windows[k] = windowShowing(hm.windows[k], row, col, p.rows.length, p.cols.length);
  hm.model.set("selected", [k, row, col]);
  hm.model.set("windows", hm.windows.map((x) => x.slice()));
  hm.model.save_changes();
  hm.draw();
  if (open) hm.model.send(openMessage(k, row, col));
}

function clearSelection(hm) {
  hm.model.set("selected", []);
  hm.model.save_changes();
  hideTip(hm);
  hm.draw();
}
