// Charts of the dashboard, all drawn with the vendored uPlot (global `uPlot`, static/vendor/uplot).
const HEIGHT = 220;
const BLUES = [[255, 255, 255], [222, 235, 247], [158, 202, 225], [66, 146, 198], [8, 81, 156]];

const width = (el) => Math.max(280, el.clientWidth || 600);

// Four significant digits: uPlot's default labels round small ranges (a KSD near −0.02) to equal numbers.
const tickLabels = (u, splits) => splits.map((v) => (v === null ? "" : String(Number(v.toPrecision(4)))));

function watchWidth(chart, el) {
  new ResizeObserver(() => chart.setSize({ width: width(el), height: chart.height })).observe(el);
}

/** A metric curve against the step; `chart.setData` replaces it as new points arrive. */
export function lineChart(el, label, steps, values, color = "#1c7ed6") {
  const opts = {
    width: width(el), height: HEIGHT, title: label,
    scales: { x: { time: false } },
    axes: [{ label: "step" }, { values: tickLabels, size: 60 }],
    series: [{ label: "step" }, { label, stroke: color, width: 1.5, spanGaps: true, points: { show: false } }],
  };
  const chart = new uPlot(opts, [steps, values], el);
  watchWidth(chart, el);
  return chart;
}

function blues(t) {
  const s = Math.min(Math.max(t, 0), 1) * (BLUES.length - 1);
  const i = Math.min(Math.floor(s), BLUES.length - 2);
  const f = s - i;
  return BLUES[i].map((c, k) => Math.round(c + f * (BLUES[i + 1][k] - c)));
}

/** An image of exp(log p − max) on the grid, row 0 at the top (largest y). */
function densityImage(grid) {
  const nx = grid.x.length, ny = grid.y.length;
  const canvas = Object.assign(document.createElement("canvas"), { width: nx, height: ny });
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(nx, ny);
  const peak = grid.max_log_prob ?? 0;
  for (let i = 0; i < ny; i++) {
    for (let j = 0; j < nx; j++) {
      const lp = grid.log_prob[i][j];
      const [r, g, b] = blues(lp === null ? 0 : Math.exp(lp - peak));
      const at = 4 * ((ny - 1 - i) * nx + j);
      image.data.set([r, g, b, 255], at);
    }
  }
  ctx.putImageData(image, 0, 0);
  return canvas;
}

/** The target density on its grid with the draws [[x, y], ...] over it. */
export function densityPlot(el, grid, draws, label) {
  const dx = (grid.x.at(-1) - grid.x[0]) / (grid.x.length - 1);
  const dy = (grid.y.at(-1) - grid.y[0]) / (grid.y.length - 1);
  // Grid values are at cell centres: the image covers half a cell beyond the first and last ones.
  const xr = [grid.x[0] - dx / 2, grid.x.at(-1) + dx / 2];
  const yr = [grid.y[0] - dy / 2, grid.y.at(-1) + dy / 2];
  const image = densityImage(grid);
  const sorted = draws.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y)).sort((a, b) => a[0] - b[0]);
  const drawDensity = (u) => {
    const { ctx, bbox } = u;
    const left = u.valToPos(xr[0], "x", true), right = u.valToPos(xr[1], "x", true);
    const top = u.valToPos(yr[1], "y", true), bottom = u.valToPos(yr[0], "y", true);
    ctx.save();
    ctx.beginPath();
    ctx.rect(bbox.left, bbox.top, bbox.width, bbox.height);
    ctx.clip();
    ctx.imageSmoothingEnabled = true;
    ctx.drawImage(image, left, top, right - left, bottom - top);
    ctx.restore();
  };
  const size = Math.min(width(el), 560);
  const opts = {
    width: size, height: size, title: `${label} over the target density`,
    scales: { x: { time: false, range: () => xr }, y: { range: () => yr } },
    axes: [{ label: "x₁" }, { label: "x₂" }],
    series: [{ label: "x₁" }, {
      label, stroke: "#c2410c", paths: () => null,
      points: { show: true, size: 4, width: 1, stroke: "#7c2d12", fill: "rgba(249, 115, 22, 0.8)" },
    }],
    legend: { show: true },
    hooks: { drawClear: [drawDensity] },
  };
  const chart = new uPlot(opts, [sorted.map((p) => p[0]), sorted.map((p) => p[1])], el);
  el.dataset.points = String(sorted.length);
  el.dataset.grid = `${grid.x.length}x${grid.y.length}`;
  return chart;
}

/** 1-D regression: the predictive mean and a quantile band, with the training data as dots when known. */
export function bandPlot(el, x, lower, mean, upper, levels, data) {
  const drawData = (u) => {
    if (!data) return;
    const { ctx } = u;
    ctx.save();
    ctx.fillStyle = "rgba(17, 24, 39, 0.7)";
    for (let i = 0; i < data.x.length; i++) {
      const px = u.valToPos(data.x[i], "x", true), py = u.valToPos(data.y[i], "y", true);
      ctx.beginPath();
      ctx.arc(px, py, 2.5 * devicePixelRatio, 0, 2 * Math.PI);
      ctx.fill();
    }
    ctx.restore();
  };
  const ys = [...lower, ...upper, ...(data ? data.y : [])].filter(Number.isFinite);
  const pad = 0.05 * (Math.max(...ys) - Math.min(...ys) || 1);
  const opts = {
    width: width(el), height: 320, title: "Posterior predictive",
    scales: { x: { time: false }, y: { range: () => [Math.min(...ys) - pad, Math.max(...ys) + pad] } },
    axes: [{ label: "x" }, { label: "y" }],
    series: [
      { label: "x" },
      { label: `q${levels[0]}`, stroke: "rgba(28, 126, 214, 0.5)", points: { show: false } },
      { label: "mean", stroke: "#1c7ed6", width: 2, points: { show: false } },
      { label: `q${levels[1]}`, stroke: "rgba(28, 126, 214, 0.5)", points: { show: false } },
    ],
    bands: [{ series: [3, 1], fill: "rgba(28, 126, 214, 0.18)" }],
    hooks: { draw: [drawData] },
  };
  const chart = new uPlot(opts, [x, lower, mean, upper], el);
  el.dataset.points = String(x.length);
  watchWidth(chart, el);
  return chart;
}
