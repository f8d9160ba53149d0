// Makes a running shardq match shardq.config.json: creates missing queues, applies
// their settings, and adds or updates each queue's consumer. Used by `npm start`.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "./dev-server.mjs";

/**
 * @param {string} base  service URL, e.g. http://localhost:8787
 * @param {string} token
 * @param {string} [file]
 */
export async function applyConfig(base, token, file = join(ROOT, "shardq.config.json")) {
  const config = JSON.parse(readFileSync(file, "utf8"));
  const queues = `${base}/accounts/${config.account}/queues`;
  const call = async (/** @type {string} */ method, /** @type {string} */ url, /** @type {unknown} */ body) => {
    const res = await fetch(url, {
      method,
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, json: /** @type {any} */ (await res.json()) };
  };
  const fail = (/** @type {string} */ what, /** @type {{ status: number, json: any }} */ res) => {
    throw new Error(`${what}: ${res.status} ${JSON.stringify(res.json.errors)}`);
  };

  for (const q of config.queues ?? []) {
    const created = await call("POST", queues, { queue_name: q.queue_name, ...(q.settings ? { settings: q.settings } : {}) });
    if (created.status === 409 && q.settings) {
      const patched = await call("PATCH", `${queues}/${q.queue_name}`, { settings: q.settings });
      if (patched.status !== 200) fail(`settings of ${q.queue_name}`, patched);
    } else if (created.status !== 201 && created.status !== 409) {
      fail(`queue ${q.queue_name}`, created);
    }
    if (!q.consumer) continue;
    const existing = (await call("GET", `${queues}/${q.queue_name}/consumers`)).json.result?.[0];
    const same = existing && existing.type === (q.consumer.type ?? "worker") && existing.script_name === (q.consumer.script_name ?? null);
    if (existing && !same) await call("DELETE", `${queues}/${q.queue_name}/consumers/${existing.consumer_id}`);
    const res = same
      ? await call("PATCH", `${queues}/${q.queue_name}/consumers/${existing.consumer_id}`, { settings: q.consumer.settings ?? {}, dead_letter_queue: q.consumer.dead_letter_queue ?? null })
      : await call("POST", `${queues}/${q.queue_name}/consumers`, q.consumer);
    if (res.status !== 200 && res.status !== 201) fail(`consumer of ${q.queue_name}`, res);
  }
  return config;
}
