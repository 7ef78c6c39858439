// The Parvis dashboard: a jobs list with live status, and a page per job (live curves, progress and ETA, the
// 2-D density with the draws over it, the 1-D predictive band, downloads and fresh draws).
import { ApiError, apiKey, authRequired, download, events, forgetApiKey, getJson, setApiKey } from "./api.js";
import { bandPlot, densityPlot, lineChart } from "./plots.js";

const view = document.getElementById("view");
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
// The metrics drawn as curves, in this order: the loss (generative and FVI methods), the KSD and MMD to the
// target (the job's `eval`), the kernel bandwidth; other metrics only when none of these is there.
const CURVES = [/loss$|^kl$|elbo/, /^ksd/, /^mmd2/, /^bandwidth$/];
const MAX_CURVES = 6;
// Shown under a metric's chart (and as its tooltip): what a reader could take for an error.
const METRIC_NOTES = {
  ksd_imq: "KSD² estimated by an unbiased U-statistic: it can dip slightly below 0 when the draws fit the target " +
    "well (the true KSD² is ≥ 0 and near 0); only values clearly above 0 signal a misfit.",
};
const DENSITY_GRID = 96;
const BAND_POINTS = 200;
const BAND_LEVELS = [0.025, 0.975];
let current = new AbortController();  // aborted when the view changes: its polls and streams stop

// ------------------------------------------------------------------------------------------------- helpers

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) el.setAttribute(name, value === true ? "" : value);
  }
  el.append(...children.flat().filter((c) => c !== null && c !== undefined));
  return el;
}

const sleep = (ms, signal) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
});

function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
const badge = (status) => h("span", { class: `badge ${status}`, "data-role": "status" }, status);
const targetKind = (job) => job.spec?.target?.kind ?? "";

function showError(where, error) {
  if (error.name === "AbortError") return;
  if (error instanceof ApiError && error.status === 401) {
    askForKey("The key was refused (unknown or revoked).");
    return;
  }
  where.replaceChildren(h("p", { class: "error" }, `${error.code ? `${error.code}: ` : ""}${error.message}`));
}

// ------------------------------------------------------------------------------------------------- the key

function askForKey(message) {
  current.abort();
  const form = document.getElementById("key-form").content.firstElementChild.cloneNode(true);
  const note = form.querySelector("[data-role=message]");
  if (message) Object.assign(note, { textContent: message, hidden: false });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey(form.elements.key.value);
    route();
  });
  view.replaceChildren(form);
  form.elements.key.focus();
}

document.getElementById("forget-key").addEventListener("click", () => { forgetApiKey(); route(); });

// ------------------------------------------------------------------------------------------------- jobs list

function jobRow(job) {
  const fraction = job.progress?.fraction ?? 0;
  return h("tr", { "data-job": job.id, onclick: () => { location.hash = `#/jobs/${job.id}`; } },
    h("td", {}, h("a", { href: `#/jobs/${job.id}` }, job.name || job.id)),
    h("td", {}, job.method), h("td", {}, targetKind(job)), h("td", {}, badge(job.status)),
    h("td", {}, h("progress", { max: 1, value: fraction }), ` ${Math.round(100 * fraction)}%`),
    h("td", {}, job.status === "running" ? duration(job.progress?.eta_s) : "–"),
    h("td", {}, when(job.created_at)));
}

async function showJobs(signal) {
  const body = h("tbody");
  const more = h("button", { hidden: true }, "More");
  view.replaceChildren(h("section", { class: "card" },
    h("h1", {}, "Jobs"),
    h("table", { class: "jobs" },
      h("thead", {}, h("tr", {}, ...["job", "method", "target", "status", "progress", "ETA", "created"].map((c) => h("th", {}, c)))),
      body),
    h("p", { class: "muted", "data-role": "empty", hidden: true }, "No jobs yet: submit one with POST /v1/jobs or the CLI."),
    more));
  let pages = 1;
  let wake = () => {};
  more.addEventListener("click", () => { pages += 1; wake(); });
  while (!signal.aborted) {
    // The first `pages` pages, refreshed every 2 s (the browser revalidates with the ETag: 304 when unchanged).
    const jobs = [];
    let token = null;
    for (let page = 0; page < pages; page++) {
      const list = await getJson(`v1/jobs${token ? `?page_token=${encodeURIComponent(token)}` : ""}`, { signal });
      jobs.push(...list.jobs);
      token = list.next_page_token;
      if (!token) break;
    }
    body.replaceChildren(...jobs.map(jobRow));
    view.querySelector("[data-role=empty]").hidden = jobs.length > 0;
    more.hidden = !token;
    await new Promise((resolve) => { wake = resolve; sleep(2000, signal).then(resolve); });
  }
}

// ------------------------------------------------------------------------------------------------- job page

function jobHeader(job) {
  const p = job.progress ?? {};
  const warnings = job.quality?.warnings ?? [];
  const nextSteps = job.quality?.next_steps ?? [];
  return h("div", {},
    h("h1", {}, job.name || job.id, " ", badge(job.status)),
    h("p", { class: "muted" }, `${job.id} · ${job.method} on ${targetKind(job) || "?"} · created ${when(job.created_at)}`),
    h("div", { class: "progress-line" },
      h("progress", { max: 1, value: p.fraction ?? 0, "data-role": "progress" }),
      h("span", {}, `step ${p.step ?? 0} / ${p.total_steps ?? "?"}`),
      h("span", {}, job.status === "running" ? `ETA ${duration(p.eta_s)}` : ""),
      job.started_at && job.finished_at
        ? h("span", {}, `took ${duration((new Date(job.finished_at) - new Date(job.started_at)) / 1000)}`) : null),
    job.error ? h("p", { class: "error" }, `${job.error.code}: ${job.error.detail}`) : null,
    job.quality?.verdict ? h("p", { "data-role": "verdict", title: job.quality.reason ?? "" },
      h("strong", {}, "Quality: "), job.quality.verdict) : null,
    warnings.length ? h("ul", { class: "warnings" }, warnings.map((w) => h("li", {}, `${w.code}: ${w.message}`))) : null,
    nextSteps.length ? h("div", { class: "next-steps", "data-role": "next-steps" },
      h("strong", {}, "What to try"), h("ul", {}, nextSteps.map((step) => h("li", {}, step)))) : null);
}

/** The metric trace, fetched incrementally (`since_step`) and drawn one chart per curve. */
class Curves {
  constructor(el, jobId) {
    Object.assign(this, { el, jobId, steps: [], rows: [], charts: new Map(), last: null });
  }

  async refresh(signal) {
    for (;;) {
      const query = this.last === null ? "max_points=2000" : `since_step=${this.last}`;
      const trace = await getJson(`v1/jobs/${this.jobId}/metrics?${query}`, { signal });
      for (const point of trace.points) {
        this.steps.push(point.step);
        this.rows.push(point.values);
      }
      if (trace.points.length) this.last = trace.points.at(-1).step;  // none yet: ask the same again
      if (trace.next_since_step === null || trace.next_since_step === undefined) break;
    }
    this.draw();
  }

  names() {
    const seen = new Set();
    for (const row of this.rows) for (const [k, v] of Object.entries(row)) if (typeof v === "number") seen.add(k);
    const rank = (name) => CURVES.findIndex((pattern) => pattern.test(name));
    const wanted = [...seen].filter((k) => rank(k) >= 0).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    return (wanted.length ? wanted : [...seen].sort()).slice(0, MAX_CURVES);
  }

  draw() {
    const names = this.names();
    if (!names.length) {
      if (!this.el.querySelector(".muted")) this.el.replaceChildren(h("p", { class: "muted" }, "No metrics yet."));
      return;
    }
    this.el.querySelector(".muted")?.remove();
    for (const name of names) {
      const values = this.rows.map((row) => (Number.isFinite(row[name]) ? row[name] : null));
      const chart = this.charts.get(name);
      if (chart) chart.setData([this.steps, values]);
      else {
        const box = h("div", { class: "chart", "data-metric": name, title: METRIC_NOTES[name] });
        this.el.append(box);
        this.charts.set(name, lineChart(box, name, this.steps, values));
        if (METRIC_NOTES[name]) box.append(h("p", { class: "metric-note", "data-role": "metric-note" }, METRIC_NOTES[name]));
      }
      this.charts.get(name).root.parentElement.dataset.points = String(values.filter((v) => v !== null).length);
    }
  }
}

async function follow(jobId, onState, signal) {
  // Live status from the event stream; polls instead if the stream cannot be held (e.g. 429 too_many_streams).
  try {
    for await (const state of events(`v1/jobs/${jobId}/events`, signal)) {
      await onState(state);
      if (TERMINAL.has(state.status)) return;
    }
  } catch (error) {
    if (signal.aborted || (error instanceof ApiError && error.status === 401)) throw error;
  }
  while (!signal.aborted) {
    const state = await getJson(`v1/jobs/${jobId}`, { signal });
    await onState(state);
    if (TERMINAL.has(state.status)) return;
    await sleep(2000, signal);
  }
}

async function showJob(jobId, signal) {
  const header = h("section", { class: "card", "data-role": "header" });
  const curves = h("div", { class: "charts", "data-role": "curves" });
  const results = h("div", { "data-role": "results" });
  view.replaceChildren(header, h("section", { class: "card" }, h("h2", {}, "Training curves"), curves), results);
  let job = await getJson(`v1/jobs/${jobId}`, { signal });
  const spec = job.spec;
  header.replaceChildren(jobHeader(job));
  const trace = new Curves(curves, jobId);
  await trace.refresh(signal);
  if (!TERMINAL.has(job.status)) {
    let lastRefresh = Date.now();
    await follow(jobId, async (state) => {
      job = { ...state, spec };
      header.replaceChildren(jobHeader(job));
      if (TERMINAL.has(state.status) || Date.now() - lastRefresh > 1000) {
        lastRefresh = Date.now();
        await trace.refresh(signal);
      }
    }, signal);
    job = await getJson(`v1/jobs/${jobId}`, { signal });
    header.replaceChildren(jobHeader(job));
    await trace.refresh(signal);
  }
  if (job.status === "succeeded") await showResults(job, results, signal);
}

// ------------------------------------------------------------------------------------------------- results

async function showResults(job, el, signal) {
  const actions = h("div", { class: "actions" });
  const plot = h("div", { class: "plot" });
  el.replaceChildren(h("section", { class: "card" }, h("h2", {}, "Result"), actions, plot));
  const particles = await getJson(`v1/jobs/${job.id}/particles`, { signal }).catch((error) => {
    if (error.name === "AbortError") throw error;
    return null;
  });
  const dim = particles?.shape?.[1];
  let redraw = null;
  if (dim === 2) redraw = await showDensity(job, plot, particles.particles, signal);
  else if (["bnn", "function_posterior"].includes(targetKind(job)) && job.spec.target.task !== "classification") {
    await showBand(job, plot, signal);
  } else {
    plot.append(h("p", { class: "muted" }, dim ? `A ${dim}-dimensional posterior: the density plot is drawn for 2-D targets.`
      : "No particles are stored for this job."));
  }
  addActions(job, actions, redraw);
}

function addActions(job, el, redraw) {
  const act = (label, fn) => h("button", { onclick: async (event) => {
    const button = event.currentTarget;
    button.disabled = true;
    try { await fn(); } catch (error) { showError(note, error); } finally { button.disabled = false; }
  } }, label);
  const note = h("span", { class: "note" });
  if (job.sampler_id) {
    const n = h("input", { type: "number", min: 1, value: 1000, "aria-label": "draws", name: "n" });
    const seed = h("input", { type: "number", min: 0, value: 0, "aria-label": "seed", name: "seed" });
    el.append(
      act("Download sampler (.zip)", () => download(`v1/samplers/${job.sampler_id}/download`, `${job.sampler_id}.zip`)),
      act("Download ONNX", () => download(`v1/samplers/${job.sampler_id}/download?format=onnx`, `${job.sampler_id}.onnx`)),
      h("span", { class: "draw" }, "n ", n, " seed ", seed,
        act("Draw samples", async () => {
          const body = { n: Number(n.value), seed: Number(seed.value) };
          const answer = await getJson(`v1/samplers/${job.sampler_id}/sample`, { method: "POST", body });
          if (redraw && answer.shape[1] === 2) await redraw(answer.samples, `${answer.shape[0]} draws (seed ${answer.seed})`);
          const blob = new Blob([JSON.stringify(answer)], { type: "application/json" });
          note.replaceChildren(`${answer.shape[0]} draws of dimension ${answer.shape[1]} `,
            h("a", { href: URL.createObjectURL(blob), download: `${job.sampler_id}-seed${answer.seed}.json` }, "save as JSON"));
        })));
  }
  el.append(act("Download particles (.npy)", () => download(`v1/jobs/${job.id}/particles`, `${job.id}-particles.npy`,
    { accept: "application/x-npy" })), note);
}

function paddedRange(values, margin = 0.15) {
  const lo = Math.min(...values), hi = Math.max(...values);
  const pad = margin * (hi - lo || Math.abs(hi) || 1);
  return [lo - pad, hi + pad];
}

async function densityGrid(job, draws, signal) {
  // The grid covers the draws with a margin: where the posterior is, as far as these draws tell.
  const [xMin, xMax] = paddedRange(draws.map((p) => p[0]));
  const [yMin, yMax] = paddedRange(draws.map((p) => p[1]));
  const query = new URLSearchParams({ x_min: xMin, x_max: xMax, y_min: yMin, y_max: yMax, grid: DENSITY_GRID });
  return getJson(`v1/jobs/${job.id}/density?${query}`, { signal });
}

async function showDensity(job, el, draws, signal) {
  const box = h("div", { class: "chart", "data-role": "density" });
  el.append(box);
  const label = job.sampler_id ? "generator draws (last training batch)" : "particles";
  let chart = densityPlot(box, await densityGrid(job, draws, signal), draws, `${draws.length} ${label}`);
  return async (fresh, freshLabel) => {
    const grid = await densityGrid(job, fresh, signal);
    chart.destroy();
    chart = densityPlot(box, grid, fresh, freshLabel);
  };
}

async function showBand(job, el, signal) {
  const data = job.spec.target.dataset;
  const inline = data && typeof data === "object" && Array.isArray(data.X) && data.X[0]?.length === 1;
  const [lo, hi] = inline ? paddedRange(data.X.map((r) => r[0]), 0.1) : [-3, 3];
  const from = h("input", { type: "number", step: "any", value: lo.toFixed(3), "aria-label": "from" });
  const to = h("input", { type: "number", step: "any", value: hi.toFixed(3), "aria-label": "to" });
  const box = h("div", { class: "chart", "data-role": "band" });
  let chart = null;
  const draw = async () => {
    const a = Number(from.value), b = Number(to.value);
    const x = Array.from({ length: BAND_POINTS }, (_, i) => a + ((b - a) * i) / (BAND_POINTS - 1));
    try {
      const answer = await getJson(`v1/jobs/${job.id}/predict`,
        { method: "POST", body: { x: x.map((v) => [v]), quantiles: BAND_LEVELS }, signal });
      chart?.destroy();
      const observed = inline && data.y ? { x: data.X.map((r) => r[0]), y: data.y } : null;
      chart = bandPlot(box, x, answer.quantiles[0], answer.mean, answer.quantiles[1], BAND_LEVELS, observed);
    } catch (error) {
      if (error.code === "input_invalid") box.replaceChildren(h("p", { class: "muted" }, "The band is drawn for 1-D inputs."));
      else showError(box, error);
    }
  };
  el.append(h("p", { class: "band-range" }, "x from ", from, " to ", to, h("button", { onclick: draw }, "Redraw")), box);
  await draw();
}

// ------------------------------------------------------------------------------------------------- routing

async function route() {
  current.abort();
  current = new AbortController();
  const { signal } = current;
  document.getElementById("forget-key").hidden = !apiKey();
  if (authRequired && !apiKey()) {
    askForKey();
    return;
  }
  const match = location.hash.match(/^#\/jobs\/([\w-]+)$/);
  try {
    if (match) await showJob(match[1], signal);
    else await showJobs(signal);
  } catch (error) {
    if (!signal.aborted) showError(view, error);
  }
}

window.addEventListener("hashchange", route);
route();
