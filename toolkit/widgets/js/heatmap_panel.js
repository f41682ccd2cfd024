// One heatmap panel as svg markup: its cells in the window shown, the marks of uncertain cells, the
// selected cell's outline, the layer and component axes, its notes and its own colour bar. Pure: the
// markup is a function of the panel, its geometry, its window and the selection (node-tested).

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

// The rows r0..r1-1 that get a layer label: every step-th layer, the first and the last shown; a label
// next to an end is dropped.
function labelledRows(rows, r0, r1, step) {
  const shown = [];
  for (let r = r0; r < r1; r++) {
    const layer = Number(rows[r]);
    const end = r === r0 || r === r1 - 1;
    if (step === 1 || end || ((Number.isFinite(layer) ? layer : r) % step === 0 && r > r0 + 1 && r < r1 - 2)) shown.push(r);
  }
  return shown;
}

// The svg of panel `p` (number k) with geometry g (layoutPanels) showing the window win = [r0, r1, c0, c1];
// `sel` the selected [panel, row, col] (or []); `uid` the heatmap's own prefix of ids. Adds the window and
// the cell size (rh, cw) to g, which hit-testing (cellAt) reads.
function panelSvg(p, k, g, win, sel, uid) {
  const [r0, r1, c0, c1] = win;
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
  if (sel.length === 3 && sel[0] === k && sel[1] >= r0 && sel[1] < r1 && sel[2] >= c0 && sel[2] < c1) {
    const x = g.ml + (sel[2] - c0) * cw, y = g.mt + g.H - (sel[1] - r0 + 1) * rh;
    s += `<rect class="toolkit-selected" data-r="${sel[1]}" data-c="${sel[2]}" x="${x + 1}" y="${y + 1}" width="${Math.max(1, cw - 2)}" height="${Math.max(1, rh - 2)}" fill="none" stroke="#000" stroke-width="2.5"/>`;
    s += `<rect x="${x + 2.6}" y="${y + 2.6}" width="${Math.max(1, cw - 5.2)}" height="${Math.max(1, rh - 5.2)}" fill="none" stroke="#fff" stroke-width="1"/>`;
  }
  for (const r of labelledRows(p.rows, r0, r1, rowStep(rh))) {
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
  if (p.cbar) s += colorbarSvg(p.cbar, g.ml + g.W + 12, g.mt + 10, g.H - 20, `${uid}-grad${k}`);
  s += `<rect class="toolkit-box" x="0" y="0" width="0" height="0" display="none" fill="rgba(31,94,168,0.12)" stroke="#1f5fa8" stroke-dasharray="3,2"/>`;
  return s + "</svg>";
}
