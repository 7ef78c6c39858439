// Calls to the Parvis API from the dashboard: the key entered once (localStorage) goes with every call.
const KEY_STORAGE = "parvis.apiKey";
// The page lives at <root>/ui/: API paths are resolved against <root>/, so a proxy prefix is kept.
const API_ROOT = new URL("../", document.baseURI);

export const authRequired = document.body.dataset.auth === "true";

export const apiKey = () => localStorage.getItem(KEY_STORAGE);
export const setApiKey = (key) => localStorage.setItem(KEY_STORAGE, key.trim());
export const forgetApiKey = () => localStorage.removeItem(KEY_STORAGE);

export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || `HTTP ${status}`);
    this.status = status;
    this.code = problem?.code || "http_error";
  }
}

function headers(extra = {}) {
  const key = apiKey();
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

/** fetch() of an API path ("v1/jobs"), throwing ApiError with the problem's code on any non-2xx answer. */
export async function call(path, { method = "GET", body, accept = "application/json", signal } = {}) {
  const init = { method, signal, headers: headers({ Accept: accept }) };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(new URL(path, API_ROOT), init);
  if (!response.ok) {
    const problem = await response.json().catch(() => null);
    throw new ApiError(response.status, problem);
  }
  return response;
}

export const getJson = async (path, options) => (await call(path, options)).json();

/** Save an API answer as a file: a plain link cannot carry the Authorization header. */
export async function download(path, filename, options) {
  const blob = await (await call(path, { accept: "*/*", ...options })).blob();
  const link = Object.assign(document.createElement("a"), { href: URL.createObjectURL(blob), download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
}

/** Server-Sent Events read with fetch() (EventSource cannot send a header): yields each event's parsed data;
 * an `error` event (its data a problem body, e.g. the key was revoked) throws ApiError. */
export async function* events(path, signal) {
  const response = await call(path, { accept: "text/event-stream", signal });
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const lines = block.split("\n");
      const data = lines.filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim());
      if (!data.length) continue;
      const parsed = JSON.parse(data.join("\n"));
      if (lines.some((line) => /^event:\s*error$/.test(line))) {
        throw new ApiError(parsed.status || 500, parsed);
      }
      yield parsed;
    }
  }
}
