// The page toolkit.widgets.export_html writes: the live explorer's heatmap and drill-down modules
// (inlined as JSON strings, loaded from Blob URLs: no network, works from file://) driven by a
// stand-in for the widget model, with every metric's spec and every stored cell's drill-down
// computed by Python at export.
const data = JSON.parse(document.getElementById("toolkit-data").textContent);
const sources = JSON.parse(document.getElementById("toolkit-modules").textContent);

async function load(code) {
  const url = URL.createObjectURL(new Blob([code], { type: "text/javascript" }));
  try { return (await import(url)).default; } finally { URL.revokeObjectURL(url); }
}

// What a widget's front end asks of its model: get/set/on/save_changes/send (anywidget's interface).
function standInModel(values, onSend) {
  const handlers = {};
  return {
    get: (name) => values[name],
    set: (name, value) => { values[name] = value; },
    save_changes: () => {},
    on: (event, fn) => { (handlers[event] = handlers[event] || []).push(fn); },
    off: () => {},
    send: (msg) => onSend && onSend(msg),
    update: (changes) => {
      Object.assign(values, changes);
      for (const name of Object.keys(changes)) for (const fn of handlers["change:" + name] || []) fn();
    },
  };
}

const [heatmap, chart] = await Promise.all([load(sources.heatmap), load(sources.chart)]);
const chartModel = standInModel({ spec: {}, renders: 0 });
// A cell without a stored spectrum, named by its model, layer and component (the rows and columns the
// heatmap shows), and what gives it one.
const noSpectrum = (k, row, col) => {
  const p = (model.get("spec").panels || [])[k] || { rows: [], cols: [] };
  const many = (model.get("spec").panels || []).length > 1;
  const where = `layer ${p.rows[row] ?? row}, ${p.cols[col] ?? col}` + (many && p.title ? ` of ${p.title.split(": ")[0]}` : "");
  return { title: "", panels: [], status: "", note: data.note ? `${where}: ${data.note}` :
    `no stored spectrum for ${where}: export a Dataset measured with keep_spectra=True` };
};
const open = (msg) => {
  if (!msg || msg.event !== "open") return;
  const spec = data.drilldowns[`${msg.panel},${msg.row},${msg.col}`] || noSpectrum(msg.panel, msg.row, msg.col);
  chartModel.update({ spec, renders: chartModel.get("renders") + 1 });
};
const model = standInModel({ spec: data.heatmaps[data.metrics[0]], selected: [], windows: [], renders: 1 }, open);
heatmap.render({ model, el: document.getElementById("toolkit-heatmap") });
chart.render({ model: chartModel, el: document.getElementById("toolkit-drilldown") });

const menu = document.getElementById("toolkit-metric");
data.metrics.forEach((m, i) => menu.add(new Option((data.labels || [])[i] || m, m)));  // the live menu's labels
menu.addEventListener("change", () => {
  model.update({ spec: data.heatmaps[menu.value], renders: model.get("renders") + 1 });
});
document.body.dataset.ready = "true";
