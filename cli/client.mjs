// The HTTP client of `shardq`: Cloudflare's envelope in, typed errors out.

/** @typedef {{ code?: number, message: string, field?: string }} ApiErrorDetail */
/** @typedef {{ success: boolean, errors: ApiErrorDetail[], messages: unknown[], result: any, result_info?: { page: number, per_page: number, count: number, total_count: number } }} Envelope */

/** The API answered with an error: its status and the envelope's errors, as the broker wrote them. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {ApiErrorDetail[]} errors
   */
  constructor(status, errors) {
    super(errors[0]?.message ?? `HTTP ${status}`);
    this.name = "ApiError";
    this.status = status;
    this.errors = errors;
  }
}

/** The service could not be reached at all (refused, unknown host, timeout). */
export class ConnectionError extends Error {
  /**
   * @param {string} url
   * @param {string} reason  "connection refused", "host not found", ...
   * @param {string} [code]  ECONNREFUSED, ENOTFOUND, ...
   */
  constructor(url, reason, code) {
    super(`cannot reach ${url}: ${reason}`);
    this.name = "ConnectionError";
    this.url = url;
    this.code = code;
  }
}

/**
 * @param {{ url: string, token: string, account: string, timeoutMs?: number }} opts
 */
export function createClient({ url, token, account, timeoutMs = 120_000 }) {
  const base = `${url.replace(/\/+$/, "")}/accounts/${encodeURIComponent(account)}`;
  return {
    /**
     * One API call. `path` starts at the account ("/queues/orders"); a body is sent as JSON.
     * @param {string} method
     * @param {string} path
     * @param {unknown} [body]
     * @returns {Promise<Envelope>}
     */
    async call(method, path, body) {
      /** @type {Response} */
      let res;
      try {
        res = await fetch(base + path, {
          method,
          headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { "content-type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
        });
      } catch (err) {
        throw connectionError(url, err, timeoutMs);
      }
      const text = await res.text();
      /** @type {Envelope | undefined} */
      let envelope;
      try {
        envelope = JSON.parse(text);
      } catch {
        envelope = undefined;
      }
      if (!envelope || typeof envelope !== "object" || typeof envelope.success !== "boolean") {
        const snippet = text.trim().slice(0, 200) || "(empty body)";
        throw new ApiError(res.status, [{ message: `unexpected answer from ${url} (HTTP ${res.status}, not shardq's JSON envelope; is --url right?): ${snippet}` }]);
      }
      if (!envelope.success || !res.ok) {
        throw new ApiError(res.status, envelope.errors?.length ? envelope.errors : [{ message: `HTTP ${res.status}` }]);
      }
      return envelope;
    },
  };
}

/** @typedef {ReturnType<typeof createClient>} Client */

/**
 * fetch's "fetch failed" made readable: the system error code sits in `cause`, or in
 * `cause.errors` when a name resolved to several addresses (localhost: ::1 and 127.0.0.1).
 * @param {string} url
 * @param {unknown} err
 * @param {number} timeoutMs
 */
function connectionError(url, err, timeoutMs) {
  const e = /** @type {{ name?: string, message?: string, cause?: { code?: string, message?: string, errors?: Array<{ code?: string }> } }} */ (err);
  if (e?.name === "TimeoutError" || e?.name === "AbortError") return new ConnectionError(url, `no answer within ${timeoutMs / 1000} s`, "ETIMEDOUT");
  const code = e?.cause?.code ?? e?.cause?.errors?.find((x) => x.code)?.code;
  const reasons = /** @type {Record<string, string>} */ ({
    ECONNREFUSED: "connection refused",
    ENOTFOUND: "host not found",
    EAI_AGAIN: "host name lookup failed",
    ECONNRESET: "connection reset",
    ETIMEDOUT: "connection timed out",
    EHOSTUNREACH: "host unreachable",
  });
  const reason = (code && reasons[code]) ?? e?.cause?.message ?? e?.message ?? String(err);
  return new ConnectionError(url, reason, code);
}
