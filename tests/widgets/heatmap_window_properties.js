// The heatmap's window arithmetic and hit-testing on 4000 random panels (run by test_heatmap_js.py after
// heatmap.js); prints the first failures as JSON, [] when none.
let seed = 12345;
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo));  // lo..hi-1
const bad = [];
for (let t = 0; t < 4000; t++) {
  const nRows = int(1, 40), nCols = int(1, 20), p = { rows: Array(nRows), cols: Array(nCols) };
  const r0 = int(0, nRows), c0 = int(0, nCols), w = [r0, int(r0 + 1, nRows + 1), c0, int(c0 + 1, nCols + 1)];
  const row = int(-3, nRows + 3), col = int(-3, nCols + 3);
  const inRow = clamp(row, 0, nRows - 1), inCol = clamp(col, 0, nCols - 1);
  const shown = windowShowing(w, row, col, nRows, nCols);
  if (!validWindow(shown, p) || shown[1] - shown[0] !== w[1] - w[0] || shown[3] - shown[2] !== w[3] - w[2]
      || inRow < shown[0] || inRow >= shown[1] || inCol < shown[2] || inCol >= shown[3]) bad.push(["show", w, row, col, shown]);
  const r = int(w[0], w[1]), c = int(w[2], w[3]);
  const zin = zoomWindow(w, r, c, 0.8, nRows, nCols), zout = zoomWindow(w, r, c, 1.25, nRows, nCols);
  if (!validWindow(zin, p) || r < zin[0] || r >= zin[1] || c < zin[2] || c >= zin[3]) bad.push(["zoom in", w, r, c, zin]);
  if ((w[1] - w[0] > 1 && zin[1] - zin[0] >= w[1] - w[0]) || (w[3] - w[2] > 1 && zin[3] - zin[2] >= w[3] - w[2])) bad.push(["no smaller", w, zin]);
  if (!validWindow(zout, p) || zout[1] - zout[0] < w[1] - w[0] || zout[3] - zout[2] < w[3] - w[2]
      || (w[1] - w[0] < nRows && zout[1] - zout[0] === w[1] - w[0])) bad.push(["zoom out", w, zout]);
  const pan = panWindow(w, int(-50, 50), int(-50, 50), nRows, nCols);
  if (!validWindow(pan, p) || pan[1] - pan[0] !== w[1] - w[0] || pan[3] - pan[2] !== w[3] - w[2]) bad.push(["pan", w, pan]);
  // a panel drawn with cells 10 x 7 px, plot at (50, 20): the centre of each cell hits it
  const g = { ml: 50, mt: 20, cw: 10, rh: 7, r0: w[0], r1: w[1], c0: w[2], c1: w[3],
              W: 10 * (w[3] - w[2]), H: 7 * (w[1] - w[0]) };
  const x = g.ml + (c - w[2] + 0.5) * g.cw, y = g.mt + g.H - (r - w[0] + 0.5) * g.rh;
  const hit = cellAt(g, x, y);
  if (!hit.inside || hit.row !== r || hit.col !== c) bad.push(["hit", w, r, c, hit]);
  const away = cellAt(g, g.ml - 5, g.mt - 5);
  if (away.inside || away.row < w[0] || away.row >= w[1] || away.col < w[2] || away.col >= w[3]) bad.push(["outside", away]);
  const r2 = int(r, w[1]), c2 = int(c, w[3]);  // a box from cell (r, c) to cell (r2, c2), corners inside them
  const box = [g.ml + (c - w[2] + 0.2) * g.cw, g.mt + g.H - (r2 - w[0] + 0.8) * g.rh,
               g.ml + (c2 - w[2] + 0.8) * g.cw, g.mt + g.H - (r - w[0] + 0.2) * g.rh];
  const bw = boxWindow(g, box);
  if (!validWindow(bw, p) || bw.join() !== [r, r2 + 1, c, c2 + 1].join()) bad.push(["box", w, [r, r2, c, c2], bw]);
  const tiny = boxWindow(g, [x, y, x, y]);  // a box of no size still leaves one cell
  if (!validWindow(tiny, p)) bad.push(["tiny box", w, tiny]);
}
console.log(JSON.stringify(bad.slice(0, 5)));
