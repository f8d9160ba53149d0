import { env, listDurableObjectIds, runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { consumerShardFor, coordinatorFor, idempotencyKeysFor, storageShardFor } from "../../src/kernel/addressing";
import { newQueueId } from "../../src/kernel/ids";
import {
  JURISDICTIONS,
  jurisdictionOfObject,
  jurisdictionOfQueue,
  jurisdictionOfShard,
  localJurisdiction,
  localPrefix,
  namespaceIn,
  type Jurisdiction,
} from "../../src/kernel/jurisdiction";
import type { Env } from "../../src/kernel/env";
import { api, createQueue, queuePath, queuesPath } from "./helpers";

/** A namespace that records what it was asked, with `jurisdiction()` as Cloudflare has it. */
function recordingNamespace(log: string[], j?: string) {
  const ns: Record<string, unknown> = {
    idFromName: (name: string) => {
      log.push(`${j ?? "-"} idFromName ${name}`);
      return { name, jurisdiction: j, toString: () => `${j ?? "-"}/${name}` };
    },
    get: (id: { jurisdiction?: string; toString(): string }) => {
      if (id.jurisdiction !== j) throw new TypeError("jurisdiction of the id and of the namespace differ");
      log.push(`${j ?? "-"} get ${id.toString()}`);
      return {};
    },
    jurisdiction: (to: string) => recordingNamespace(log, to),
  };
  return ns;
}

const recordingEnv = (log: string[]) =>
  ({
    COORDINATOR: recordingNamespace(log),
    STORAGE_SHARD: recordingNamespace(log),
    SHARD_CONSUMERS: recordingNamespace(log),
    IDEMPOTENCY_KEYS: recordingNamespace(log),
  }) as unknown as Env;

describe("a queue id carries its jurisdiction", () => {
  it("draws ids in each jurisdiction and random ids in none", () => {
    for (const j of JURISDICTIONS) {
      const id = newQueueId(j);
      expect(id).toMatch(/^[0-9a-f]{32}$/);
      expect(jurisdictionOfQueue(id)).toBe(j);
      expect(jurisdictionOfShard(`${id}:local:3`)).toBe(j);
    }
    for (let i = 0; i < 2000; i++) expect(jurisdictionOfQueue(newQueueId())).toBeUndefined();
    // Anything that is not a queue id (a test's shard name, a half id) is in no jurisdiction.
    expect(jurisdictionOfShard("shard-a")).toBeUndefined();
    expect(jurisdictionOfQueue(newQueueId("eu").slice(0, 31) + "x")).toBeUndefined();
  });

  it("cannot be moved to another jurisdiction by changing its tag or its head", () => {
    const eu = newQueueId("eu");
    const us = newQueueId("us");
    expect(jurisdictionOfQueue(eu.slice(0, 16) + us.slice(16))).toBeUndefined();
    expect(jurisdictionOfQueue(us.slice(0, 16) + eu.slice(16))).toBeUndefined();
  });
});

describe("every object of a queue in a jurisdiction is addressed through that jurisdiction's namespace", () => {
  it("goes through jurisdiction() for each part, and never for a queue in none", () => {
    const log: string[] = [];
    const e = recordingEnv(log);
    const q = newQueueId("fedramp");
    coordinatorFor(e, q);
    storageShardFor(e, `${q}:weur:1`, "weur");
    consumerShardFor(e, q, 2);
    idempotencyKeysFor(e, q, 5);
    expect(log).toEqual([
      `fedramp idFromName ${q}`,
      `fedramp get fedramp/${q}`,
      `fedramp idFromName ${q}:weur:1`,
      `fedramp get fedramp/${q}:weur:1`,
      `fedramp idFromName ${q}:consumer:2`,
      `fedramp get fedramp/${q}:consumer:2`,
      `fedramp idFromName ${q}:idempotency:5`,
      `fedramp get fedramp/${q}:idempotency:5`,
    ]);
    log.length = 0;
    const plain = newQueueId();
    coordinatorFor(e, plain);
    storageShardFor(e, `${plain}:local:1`);
    expect(log.every((l) => l.startsWith("- "))).toBe(true);
  });

  it("throws Cloudflare's refusal of a jurisdiction instead of falling back to the plain namespace", () => {
    const refusing = {
      ...recordingNamespace([]),
      jurisdiction: () => {
        throw new Error("jurisdiction not enabled for this account");
      },
    };
    expect(() => namespaceIn(refusing as unknown as DurableObjectNamespace, "eu")).toThrow(/not enabled/);
  });

  it("under workerd keeps each jurisdiction's objects apart, and refuses an id of another", () => {
    const eu = namespaceIn(env.COORDINATOR, "eu");
    const us = namespaceIn(env.COORDINATOR, "us");
    const plainId = env.COORDINATOR.idFromName("same-name");
    expect(eu.idFromName("same-name").equals(plainId)).toBe(false);
    expect(eu.idFromName("same-name").equals(us.idFromName("same-name"))).toBe(false);
    expect(() => eu.get(plainId)).toThrow(/not of jurisdiction "eu"/);
    expect(() => eu.get(us.idFromName("x"))).toThrow(/not of jurisdiction "eu"/);
    expect(() => localJurisdiction(env.COORDINATOR, "eu").jurisdiction("us")).toThrow(/cannot be narrowed/);
  });

  it("refuses to start a queue in an object outside the queue's jurisdiction", async () => {
    const q = newQueueId("eu");
    // The plain namespace's object for that name: what an address forgetting the jurisdiction would reach.
    const stray = env.COORDINATOR.get(env.COORDINATOR.idFromName(q));
    await expect(
      stray.initialize({
        accountId: "local",
        queueId: q,
        queueName: "stray",
        settings: { delivery_delay: 0, delivery_paused: false, message_retention_period: 345600 },
      }),
    ).rejects.toThrow(/jurisdiction "eu"/);
    const inEu = coordinatorFor(env, q);
    await runInDurableObject(inEu, (_o, state) => expect(jurisdictionOfObject(state.id)).toBe("eu"));
  });
});

describe("jurisdictions over the REST API", () => {
  const plainIds = async (ns: DurableObjectNamespace<any>) =>
    new Set((await listDurableObjectIds(ns)).map((id) => id.toString()));

  it("creates a queue in a jurisdiction, shows it, keeps it, and puts every object of the queue there", async () => {
    const created = await api("POST", queuesPath(), { queue_name: "in-eu", jurisdiction: "eu" });
    expect(created.status).toBe(201);
    expect(created.json.result.jurisdiction).toBe("eu");
    const id: string = created.json.result.queue_id;
    expect(jurisdictionOfQueue(id)).toBe("eu");
    expect((await api("GET", queuePath("in-eu"))).json.result.jurisdiction).toBe("eu");
    const listed = (await api("GET", `${queuesPath()}?name=in-eu`)).json.result[0];
    expect(listed.jurisdiction).toBe("eu");
    // A queue in none shows none, as Cloudflare's.
    const plain = await createQueue("in-none");
    expect((await api("GET", queuePath("in-none"))).json.result).not.toHaveProperty("jurisdiction");

    // Its whole life: sends (one with an Idempotency-Key), a pull consumer, a pull, an ack, metrics, a purge.
    expect((await api("POST", `${queuePath("in-eu")}/messages`, { body: "a" })).status).toBe(200);
    expect(
      (await api("POST", `${queuePath("in-eu")}/messages`, { body: "b" }, { headers: { "idempotency-key": "k-1" } }))
        .status,
    ).toBe(200);
    expect(
      (await api("POST", `${queuePath("in-eu")}/messages/batch`, { messages: [{ body: "c" }, { body: "d" }] })).status,
    ).toBe(200);
    expect((await api("POST", `${queuePath("in-eu")}/consumers`, { type: "http_pull" })).status).toBe(201);
    const pulled = await api("POST", `${queuePath("in-eu")}/messages/pull`, { batch_size: 10 });
    expect(pulled.json.result.messages.length).toBeGreaterThan(0);
    const acks = pulled.json.result.messages.map((m: { lease_id: string }) => ({ lease_id: m.lease_id }));
    expect((await api("POST", `${queuePath("in-eu")}/messages/ack`, { acks })).status).toBe(200);
    const metrics = await api("GET", `${queuePath("in-eu")}/metrics`);
    expect(metrics.json.result.jurisdiction).toBe("eu");

    const shardNames: string[] = metrics.json.result.shards.map((s: { name: string }) => s.name);
    expect(shardNames.length).toBeGreaterThan(0);
    const eu = (ns: DurableObjectNamespace<any>, name: string) => ns.idFromName(localPrefix("eu") + name).toString();
    const plainId = (ns: DurableObjectNamespace<any>, name: string) => ns.idFromName(name).toString();
    const coordinators = await plainIds(env.COORDINATOR);
    const shards = await plainIds(env.STORAGE_SHARD);
    const keys = await plainIds(env.IDEMPOTENCY_KEYS);
    expect(coordinators.has(eu(env.COORDINATOR, id))).toBe(true);
    expect(coordinators.has(plainId(env.COORDINATOR, id))).toBe(false);
    for (const name of shardNames) {
      expect(shards.has(eu(env.STORAGE_SHARD, name))).toBe(true);
      expect(shards.has(plainId(env.STORAGE_SHARD, name))).toBe(false);
    }
    // No object of the queue's at any name outside the jurisdiction: every stored object named after it is under its prefix.
    const idempotencyInEu = [...Array(64).keys()].filter((b) =>
      keys.has(eu(env.IDEMPOTENCY_KEYS, `${id}:idempotency:${b}`)),
    );
    const idempotencyPlain = [...Array(64).keys()].filter((b) =>
      keys.has(plainId(env.IDEMPOTENCY_KEYS, `${id}:idempotency:${b}`)),
    );
    expect(idempotencyInEu.length).toBeGreaterThan(0);
    expect(idempotencyPlain).toEqual([]);
    // The queue in none lives in the plain namespace.
    expect(coordinators.has(plainId(env.COORDINATOR, plain.queue_id))).toBe(true);
  });

  it("refuses an unknown jurisdiction at creation, and any change of it afterwards (400 naming jurisdiction)", async () => {
    const bad = await api("POST", queuesPath(), { queue_name: "in-mars", jurisdiction: "mars" });
    expect(bad.status).toBe(400);
    expect(bad.json.errors[0].field).toBe("jurisdiction");
    expect(bad.json.errors[0].message).toContain('"eu"');
    expect((await api("GET", queuePath("in-mars"))).status).toBe(404);

    await api("POST", queuesPath(), { queue_name: "stays-us", jurisdiction: "us" });
    for (const [to, status] of [
      ["eu", 400],
      ["fedramp", 400],
      ["us", 200],
    ] as Array<[Jurisdiction, number]>) {
      const res = await api("PATCH", queuePath("stays-us"), { jurisdiction: to, settings: { delivery_delay: 1 } });
      expect(res.status, to).toBe(status);
      if (status === 400) expect(res.json.errors[0].field).toBe("jurisdiction");
    }
    const after = (await api("GET", queuePath("stays-us"))).json.result;
    expect(after.jurisdiction).toBe("us");
    // The refused changes changed nothing; the accepted one (its own jurisdiction) took its settings.
    expect(after.settings.delivery_delay).toBe(1);
    await createQueue("none-stays");
    const toEu = await api("PATCH", queuePath("none-stays"), { jurisdiction: "eu" });
    expect(toEu.status).toBe(400);
    expect(toEu.json.errors[0].field).toBe("jurisdiction");
  });

  it("refuses a dead-letter queue in another jurisdiction (400 naming dead_letter_queue), takes one in the same", async () => {
    await api("POST", queuesPath(), { queue_name: "src-eu", jurisdiction: "eu" });
    await api("POST", queuesPath(), { queue_name: "dlq-eu", jurisdiction: "eu" });
    await api("POST", queuesPath(), { queue_name: "dlq-us", jurisdiction: "us" });
    await createQueue("dlq-none");
    for (const dlq of ["dlq-us", "dlq-none"]) {
      const res = await api("POST", `${queuePath("src-eu")}/consumers`, { type: "http_pull", dead_letter_queue: dlq });
      expect(res.status, dlq).toBe(400);
      expect(res.json.errors[0].field).toBe("dead_letter_queue");
      expect(res.json.errors[0].message).toContain("jurisdiction");
    }
    // Nor from a queue in none into one in a jurisdiction.
    await createQueue("src-none");
    const intoEu = await api("POST", `${queuePath("src-none")}/consumers`, {
      type: "http_pull",
      dead_letter_queue: "dlq-eu",
    });
    expect(intoEu.status).toBe(400);
    const ok = await api("POST", `${queuePath("src-eu")}/consumers`, {
      type: "http_pull",
      dead_letter_queue: "dlq-eu",
    });
    expect(ok.status).toBe(201);
  });
});
