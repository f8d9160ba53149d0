// The push sink: where the push consumer Worker (test/fixtures/push-consumer/) reports each invocation
// of its queue() handler, on loopback. A start report is logged as the invocation of a
// "push" operation of the process "push-consumer" (the messages delivered), the end
// report as its completion (what the handler acked and retried, whether it threw, hung or
// acked late). The sink answers only once the line is written, and the Worker awaits the
// answer before it goes on: a logged span [start, end] lies within the invocation's own.
// An invocation cut off by a kill has no end.
import { createServer } from "node:http";

/**
 * @param {{ history: import("./history.mjs").History, tally: { delivered: number } }} o
 * @returns {Promise<{ url: string, close: () => Promise<void>, counts: { starts: number, ends: number, bad: number } }>}
 */
export async function startPushSink(o) {
  /** invocation id -> operation number, while open */
  /** @type {Map<string, number>} */
  const open = new Map();
  /** Invocations already ended: a retried end report is answered, not logged twice. */
  /** @type {Set<string>} */
  const ended = new Set();
  const counts = { starts: 0, ends: 0, bad: 0 };
  let closed = false;

  const server = createServer((req, res) => {
    /** @type {Buffer[]} */
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      const answer = (/** @type {number} */ status) => {
        res.writeHead(status, { "content-type": "text/plain" });
        res.end(status === 200 ? "ok" : "no");
      };
      if (req.method !== "POST" || req.url !== "/push") return answer(404);
      // After the history closed nothing may be written: the run is over.
      if (closed) return answer(503);
      /** @type {any} */
      let r;
      try {
        r = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch {
        counts.bad++;
        return answer(400);
      }
      const d = typeof r?.d === "string" ? r.d : null;
      if (d === null) {
        counts.bad++;
        return answer(400);
      }
      if (r.kind === "start") {
        if (!open.has(d) && !ended.has(d)) {
          const msgs = Array.isArray(r.msgs) ? r.msgs : [];
          open.set(d, o.history.invoke("push-consumer", "push", { q: String(r.q), d, msgs }));
          o.tally.delivered += msgs.length;
          counts.starts++;
        }
        return answer(200);
      }
      if (r.kind === "end") {
        const op = open.get(d);
        if (op !== undefined) {
          open.delete(d);
          ended.add(d);
          const { kind: _kind, d: _d, ...outcome } = r;
          o.history.complete(op, "ok", outcome);
          counts.ends++;
        } else if (!ended.has(d)) counts.bad++;
        return answer(200);
      }
      counts.bad++;
      return answer(400);
    });
  });
  await new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(undefined));
  });
  const { port } = /** @type {import("node:net").AddressInfo} */ (server.address());
  return {
    url: `http://127.0.0.1:${port}`,
    counts,
    // Stops logging at once (the history is about to close); the socket closes after.
    close: async () => {
      closed = true;
      server.closeAllConnections();
      await new Promise((r) => server.close(() => r(undefined)));
    },
  };
}
