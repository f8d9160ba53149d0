// The dashboard's only way out: the service's own HTTP API, on this origin, with the
// token kept in sessionStorage (gone when the tab closes).
const KEY = "shardq.session";

export function session() {
  try {
    return JSON.parse(sessionStorage.getItem(KEY) ?? "null");
  } catch {
    return null;
  }
}

export function saveSession(s) {
  if (s) sessionStorage.setItem(KEY, JSON.stringify(s));
  else sessionStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, message, field) {
    super(message);
    this.status = status;
    this.field = field;
  }
}

/** Calls `/accounts/<account><path>`; resolves to the envelope's result, rejects with the API's own message. */
export async function api(path, options = {}) {
  return (await envelope(path, options))?.result;
}

/** As api(), for a list: its page of results and the envelope's result_info (page, per_page, count, total_count, total_pages). */
export async function apiPage(path, options = {}) {
  const json = await envelope(path, options);
  return { result: json?.result ?? [], info: json?.result_info ?? null };
}

async function envelope(path, { method = "GET", body, auth = session() } = {}) {
  if (!auth) throw new ApiError(401, "not signed in");
  const res = await fetch(`/accounts/${encodeURIComponent(auth.account)}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${auth.token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  let json = null;
  try {
    json = await res.json();
  } catch {
    // not JSON: reported below by status
  }
  if (!res.ok || json?.success === false) {
    const e = json?.errors?.[0];
    throw new ApiError(res.status, e?.message ?? `HTTP ${res.status}`, e?.field);
  }
  return json;
}

export const queuePath = (name) => `/queues/${encodeURIComponent(name)}`;
