// The harness's HTTP client for shardq's API, loopback only. Every call ends in one of
// the three outcomes a history records: ok, fail (certainly not applied) or unknown.

/**
 * @typedef {{ outcome: "ok", status: number, result: any }
 *   | { outcome: "fail" | "unknown", status: number | null, error: string }} Outcome
 */

/**
 * @param {{ base: string, token: string, timeoutMs?: number }} opts
 *   base: the service's URL (http://127.0.0.1:<port>); the account is "local"
 */
export function apiClient({ base, token, timeoutMs = 10_000 }) {
  const url = new URL(base);
  if (url.hostname !== "127.0.0.1" && url.hostname !== "localhost")
    throw new Error(`the fault harness talks to loopback only, not ${url.hostname}`);
  const headers = { authorization: `Bearer ${token}`, "content-type": "application/json" };
  const queues = `${base}/accounts/local/queues`;

  /**
   * @param {string} method @param {string} path below .../queues @param {unknown} [body]
   * @param {Record<string, string>} [extra] more headers (an Idempotency-Key)
   * @param {AbortSignal} [abort] the caller giving up (a long poll abandoned): the outcome is then unknown
   * @returns {Promise<Outcome>}
   */
  const call = async (method, path, body, extra, abort) => {
    // The bound is the harness's own timer, not only the fetch's signal: a full run (seed
    // 357234014) had two pulls that never settled, with no socket open, long past their
    // AbortSignal.timeout; their consumers never stopped and the run waited for ever. The
    // controller is held by the timer, and the race ends the call even if fetch ignores it.
    const ac = new AbortController();
    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    const timedOut = new Promise((resolve) => {
      timer = setTimeout(() => {
        ac.abort(new DOMException("the call took too long", "TimeoutError"));
        // Past the abort, a grace for fetch to settle by itself; then the outcome is unknown anyway.
        timer = setTimeout(
          () =>
            resolve(
              /** @type {Outcome} */ ({ outcome: "unknown", status: null, error: "timeout (the call did not settle)" }),
            ),
          1000,
        );
      }, timeoutMs);
    });
    const gone = () => ac.abort(abort?.reason);
    if (abort?.aborted) gone();
    else abort?.addEventListener("abort", gone, { once: true });
    try {
      return await Promise.race([request(method, path, body, extra, ac.signal), timedOut]);
    } finally {
      clearTimeout(timer);
      abort?.removeEventListener("abort", gone);
    }
  };

  /** @returns {Promise<Outcome>} */
  const request = async (
    /** @type {string} */ method,
    /** @type {string} */ path,
    /** @type {unknown} */ body,
    /** @type {Record<string, string> | undefined} */ extra,
    /** @type {AbortSignal} */ signal,
  ) => {
    /** @type {Response} */
    let res;
    try {
      res = await fetch(`${queues}${path}`, {
        method,
        headers: extra ? { ...headers, ...extra } : headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      });
    } catch (err) {
      return { outcome: refused(err) ? "fail" : "unknown", status: null, error: describe(err) };
    }
    /** @type {any} */
    let json;
    try {
      json = await res.json();
    } catch (err) {
      // The answer was cut off: whatever the status said, what happened is not known.
      return { outcome: "unknown", status: res.status, error: `unreadable answer: ${describe(err)}` };
    }
    if (res.ok && json?.success === true) return { outcome: "ok", status: res.status, result: json.result };
    const error = `HTTP ${res.status}: ${json?.errors?.[0]?.message ?? "no error message"}`;
    // A 4xx is a refusal: nothing was applied. A 5xx may come after part of the work.
    return { outcome: res.status >= 400 && res.status < 500 ? "fail" : "unknown", status: res.status, error };
  };

  return { call, queues };
}

/**
 * A connection refused is the one network error that proves the request never left:
 * nothing listened on the port. Anything else (reset, closed, timeout) may come after
 * the service received it.
 * @param {unknown} err
 */
function refused(err) {
  const cause = /** @type {{ cause?: { code?: string } }} */ (err)?.cause;
  return cause?.code === "ECONNREFUSED";
}

/** @param {unknown} err */
export function describe(err) {
  const e = /** @type {{ name?: string, message?: string, cause?: { code?: string, message?: string } }} */ (err);
  if (e?.name === "TimeoutError") return "timeout";
  const cause = e?.cause?.code ?? e?.cause?.message;
  return cause ? `${e?.message ?? "error"} (${cause})` : String(e?.message ?? err);
}

/**
 * A nemesis or set-up call that must succeed: up to 5 tries, 200 ms more apart each time
 * (the service may be restarting), then the run breaks.
 * @param {() => Promise<Outcome>} call
 */
export async function retrying(call) {
  for (let attempt = 1; ; attempt++) {
    const r = await call();
    if (r.outcome === "ok") return r;
    if (attempt >= 5) throw new Error(`nemesis: ${r.error}`);
    await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
  }
}
