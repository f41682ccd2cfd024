// The heatmap's colour bars (toolkit.widgets.heatmap_spec.colorbar): a panel's own, or one shared by every
// panel in a column on their right. A bar of one value (`constant`) is one swatch at its one tick.

// The colour bar's label as the lines it is drawn in: it runs along the bar (rotated), so each of its
// lines is wrapped to the bar's height `barH` (about 6.3 px a character): at 1050 px a long label
// ("relative change", "white = 0.772 (median of 3 panels pooled)") was cut to "relative w".
function cbarLabelLines(label, barH) {
  return String(label || "") ? wrapText(String(label), barH, 6.3) : [];
}

// The widest tick label, in characters (a "10^{k}" label as its digits).
function widestTick(cbar) {
  return Math.max(0, ...(cbar.ticks || []).map(([, label]) => String(label).replace(/[${}^]/g, "").length));
}

// Pixels a colour bar of height `barH` takes right of its panel's plot (or in its own svg): the 12 px gap,
// the bar, its ticks and their labels (about 6.3 px a character) and one 13 px line per line of its
// label (cbarLabelLines).
function colorbarWidth(cbar, barH = 180) {
  if (!cbar) return 0;
  const lines = Math.max(1, cbarLabelLines(cbar.label, barH).length);
  return Math.ceil(12 + 26 + Math.max(1, widestTick(cbar)) * 6.3 + 13 * lines + 4);
}

// The bar as svg markup at (x0, y0), h pixels tall; `gid` names its gradient, unique in the page (panels of
// one width gave their bars one id, so a constant panel's bar showed another panel's gradient).
function colorbarSvg(cbar, x0, y0, h, gid) {
  let s = `<g class="toolkit-cbar">`;
  if (cbar.constant) { // one value: one swatch of its colour at its one tick, no range
    const sh = Math.min(h, 28);
    s += `<rect class="toolkit-cbar-swatch" x="${x0}" y="${(y0 + (h - sh) / 2).toFixed(1)}" width="14" height="${sh}" fill="${cbar.colors[0]}" stroke="#555" stroke-width="0.6"/>`;
  } else {
    const stops = cbar.colors.map((c, i) => `<stop offset="${(i / (cbar.colors.length - 1)).toFixed(4)}" stop-color="${c}"/>`).join("");
    s += `<defs><linearGradient id="${gid}" x1="0" y1="1" x2="0" y2="0">${stops}</linearGradient></defs>`;
    s += `<rect class="toolkit-cbar-bar" x="${x0}" y="${y0}" width="14" height="${h}" fill="url(#${gid})" stroke="#555" stroke-width="0.6"/>`;
  }
  const lo = cbar.colors[0], hi = cbar.colors[cbar.colors.length - 1];
  if (cbar.extend === "max" || cbar.extend === "both")
    s += `<path class="toolkit-cbar-extend" d="M${x0} ${y0} L${x0 + 7} ${y0 - 9} L${x0 + 14} ${y0} Z" fill="${hi}" stroke="#555" stroke-width="0.6"/>`;
  if (cbar.extend === "min" || cbar.extend === "both")
    s += `<path class="toolkit-cbar-extend" d="M${x0} ${y0 + h} L${x0 + 7} ${y0 + h + 9} L${x0 + 14} ${y0 + h} Z" fill="${lo}" stroke="#555" stroke-width="0.6"/>`;
  for (const [pos, label] of cbar.ticks) {
    const y = y0 + h * (1 - pos);
    s += `<line x1="${x0 + 14}" x2="${x0 + 18}" y1="${y}" y2="${y}" stroke="#333"/>`;
    s += tickLabel(x0 + 21, y + 4, label, { class: "toolkit-cbar-tick", "font-size": "11" });
  }
  const lx = x0 + 26 + widestTick(cbar) * 6.3;
  cbarLabelLines(cbar.label, h).forEach((line, i) => {
    const x = lx + 13 * i;
    s += `<text class="toolkit-cbar-label" transform="translate(${x.toFixed(1)},${(y0 + h / 2).toFixed(1)}) rotate(90)" text-anchor="middle" font-size="11">${esc(line)}</text>`;
  });
  return s + "</g>";
}

// The shared bar in its own svg, in a column right of the panels (which wrap in their own box: the bar, one
// more wrapping item, dropped below them at 1050 px); `height`: the tallest panel's svg.
function sharedColorbarSvg(cbar, ps, height, gid) {
  const w = colorbarWidth(cbar, sharedBarHeight(ps)) - 4;
  return `<div class="toolkit-heatmap-cbar-column"><svg class="toolkit-heatmap-shared-cbar" width="${w}" height="${height}" viewBox="0 0 ${w} ${height}">` +
    `${colorbarSvg(cbar, 8, 34, Math.max(60, height - 110), gid)}</svg></div>`;
}

// Each svg of `stage` widened (and heightened) to its colour bar's text as the browser measured it (the
// widths above are estimates, 6.3 px a character, and a wider font cut the label at the svg's edge); the
// host element `el` grows by as much. Returns the pixels added.
function fitColorbarText(stage, el) {
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
  return extra;
}
