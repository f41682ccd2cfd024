// Shared by the toolkit's widgets (prepended to each widget's module by Python).
const SVG_NS = "http://www.w3.org/2000/svg";

function esc(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function clamp(x, lo, hi) { return Math.max(lo, Math.min(hi, x)); }

// Where a tooltip of w x h pixels goes for the pointer at (x, y) in a box of boxW x boxH (all relative
// to the box): right of and below the pointer, left of it where it would leave the box on the right,
// above it where it would leave the box at the bottom (a box with overflow: hidden cuts it off there).
function tipPosition(x, y, w, h, boxW, boxH) {
  const left = x + 14 + w > boxW ? x - 10 - w : x + 14;
  const top = y + 12 + h > boxH ? y - 8 - h : y + 12;
  return { left: Math.max(0, left), top: Math.max(0, top) };
}

function svgText(x, y, text, attrs) {
  const extra = Object.entries(attrs || {}).map(([k, v]) => ` ${k}="${esc(v)}"`).join("");
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}"${extra}>${esc(text)}</text>`;
}

// "10^k" labels as 10 with a superscript; everything else as it is.
function tickLabel(x, y, label, attrs) {
  const m = /^\$?10\^\{?(-?\d+)\}?\$?$/.exec(label);
  if (!m) return svgText(x, y, label, attrs);
  const extra = Object.entries(attrs || {}).map(([k, v]) => ` ${k}="${esc(v)}"`).join("");
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}"${extra}>10<tspan dy="-5" font-size="80%">${m[1]}</tspan></text>`;
}

// Lines of text that fit `width` pixels at about `charPx` per character.
function wrapText(text, width, charPx) {
  const perLine = Math.max(8, Math.floor(width / charPx));
  const out = [];
  for (const para of String(text).split("\n")) {
    let line = "";
    for (const word of para.split(" ")) {
      if (line && (line + " " + word).length > perLine) { out.push(line); line = word; }
      else line = line ? line + " " + word : word;
    }
    out.push(line);
  }
  return out;
}

// Nice linear ticks (1, 2, 5 x 10^k) inside [lo, hi].
function linearTicks(lo, hi, count) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((k) => k * mag).find((s) => s >= raw) || 10 * mag;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  return out;
}

// Decades inside [lo, hi] (every k-th when there are many).
function logTicks(lo, hi) {
  const a = Math.ceil(Math.log10(lo) - 1e-9), b = Math.floor(Math.log10(hi) + 1e-9);
  const k = Math.max(1, Math.ceil((b - a + 1) / 6));
  const out = [];
  for (let e = a; e <= b; e += k) out.push(Math.pow(10, e));
  if (out.length < 2) return [lo, hi];
  return out;
}

// A number as Python's toolkit.plot.numbers.format_value prints it (the same rule, tested against it):
// `digits` significant digits (ties away from zero), plain from 0.001 to 9999 with trailing zeros dropped,
// scientific outside ("1.90e+04"); "" for NaN.
// toolkit.plot.numbers.format_value: `trim` false keeps a plain number's trailing zeros ("192.0").
function formatNumber(x, digits = 3, trim = true) {
  x = Number(x);
  if (Number.isNaN(x)) return "";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return "0";
  const d = clamp(Math.round(digits) || 3, 1, 15);
  const r = Number(x.toPrecision(d));
  const a = Math.abs(r);
  if (a >= 1e-3 && a < 1e4) {
    const e = Number(r.toExponential().split("e")[1]);
    let s = r.toFixed(Math.max(0, d - 1 - e));
    if (trim && s.includes(".")) s = s.replace(/0+$/, "").replace(/\.$/, "");
    return s;
  }
  return x.toExponential(d - 1).replace(/e([+-])(\d)$/, "e$10$2");
}

function logLabel(t) {
  const e = Math.round(Math.log10(t));
  return Math.abs(Math.log10(t) - e) < 1e-9 ? `10^{${e}}` : formatNumber(t);
}

// Call draw() again when the element's width changes (once per frame at most); returns the observer.
function redrawOnResize(root, draw) {
  let pending = false, lastWidth = -1;
  const observer = new ResizeObserver(() => {
    if (pending || root.clientWidth === lastWidth) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; lastWidth = root.clientWidth; draw(); });
  });
  observer.observe(root);
  return observer;
}
