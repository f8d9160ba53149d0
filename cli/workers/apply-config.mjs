// Makes a running shardq match shardq.config.json (or a config of the same shape, such as
// the one `shardq dev` and `shardq deploy-config` derive from Workers' wrangler configs):
// creates missing queues, applies their settings, and adds or updates each queue's
// consumer. Used by `npm start`, `shardq dev` and `shardq apply`.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT } from "../wrangler/dev-server.mjs";

/**
 * @typedef {object} QueuesConfig
 * @property {string} account
 * @property {Array<{ queue_name: string, jurisdiction?: "eu" | "us" | "fedramp", settings?: Record<string, unknown>, consumer?: { type?: string, script_name?: string, settings?: Record<string, unknown>, dead_letter_queue?: string | null } }>} [queues]
 */

/**
 * @param {string} base  service URL, e.g. http://localhost:8787
 * @param {string} token
 * @param {string | QueuesConfig} [fileOrConfig]  a file to read, or the config itself
 * @returns {Promise<QueuesConfig>}
 */
export async function applyConfig(base, token, fileOrConfig = join(ROOT, "shardq.config.json")) {
  /** @type {QueuesConfig} */
  const config = typeof fileOrConfig === "string" ? JSON.parse(readFileSync(fileOrConfig, "utf8")) : fileOrConfig;
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

  // Every queue first: a consumer's dead-letter queue must exist before the consumer,
  // wherever the file lists it.
  for (const q of config.queues ?? []) {
    const created = await call("POST", queues, {
      queue_name: q.queue_name,
      ...(q.jurisdiction ? { jurisdiction: q.jurisdiction } : {}),
      ...(q.settings ? { settings: q.settings } : {}),
    });
    if (created.status === 409) {
      // A jurisdiction is chosen at creation: a queue that exists elsewhere than the file says is not moved, and the file is refused.
      const existing = (await call("GET", `${queues}/${q.queue_name}`)).json.result;
      if ((existing?.jurisdiction ?? null) !== (q.jurisdiction ?? null)) {
        throw new Error(
          `queue ${q.queue_name} exists in ${existing?.jurisdiction ? `jurisdiction "${existing.jurisdiction}"` : "no jurisdiction"} and the config asks for ${q.jurisdiction ? `"${q.jurisdiction}"` : "none"}: a queue's jurisdiction is chosen when it is created (delete the queue and apply again to move it)`,
        );
      }
    }
    if (created.status === 409 && q.settings) {
      const patched = await call("PATCH", `${queues}/${q.queue_name}`, { settings: q.settings });
      if (patched.status !== 200) fail(`settings of ${q.queue_name}`, patched);
    } else if (created.status !== 201 && created.status !== 409) {
      fail(`queue ${q.queue_name}`, created);
    }
  }
  for (const q of config.queues ?? []) {
    if (!q.consumer) continue;
    const existing = (await call("GET", `${queues}/${q.queue_name}/consumers`)).json.result?.[0];
    const same =
      existing &&
      existing.type === (q.consumer.type ?? "worker") &&
      existing.script_name === (q.consumer.script_name ?? null);
    if (existing && !same) await call("DELETE", `${queues}/${q.queue_name}/consumers/${existing.consumer_id}`);
    const res = same
      ? await call("PATCH", `${queues}/${q.queue_name}/consumers/${existing.consumer_id}`, {
          settings: q.consumer.settings ?? {},
          dead_letter_queue: q.consumer.dead_letter_queue ?? null,
        })
      : await call("POST", `${queues}/${q.queue_name}/consumers`, q.consumer);
    if (res.status !== 200 && res.status !== 201) fail(`consumer of ${q.queue_name}`, res);
  }
  return config;
}
