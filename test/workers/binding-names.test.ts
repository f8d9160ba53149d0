import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import wranglerToml from "../../wrangler.toml?raw";
import { CONSUMER_BINDING_PREFIX, consumerBinding, isServiceBinding } from "../../src/kernel/consumer-settings";

/**
 * CONSUMER_<SCRIPT_NAME> is how shardq finds a consumer Worker's service binding, so a
 * binding of shardq's own under that prefix would pass for a consumer (the
 * consumer-shard namespace, once CONSUMER_SHARD, for a consumer named "shard").
 */

/** Binding names wrangler.toml declares, with the table each is in: [vars] keys, and `name`/`binding` of every binding table. */
function declaredBindings(toml: string): Array<{ table: string; name: string }> {
  const out: Array<{ table: string; name: string }> = [];
  let table = "";
  for (const raw of toml.split("\n")) {
    const line = raw.replace(/#.*$/, "").trim();
    const header = /^\[\[?\s*([^\]]+?)\s*\]\]?$/.exec(line);
    if (header) {
      table = header[1]!;
      continue;
    }
    const kv = /^([A-Za-z0-9_]+)\s*=\s*"([^"]*)"/.exec(line);
    if (!kv || table === "" || table === "migrations" || table === "site") continue;
    if (table === "vars") out.push({ table, name: kv[1]! });
    else if (kv[1] === "name" || kv[1] === "binding") out.push({ table, name: kv[2]! });
  }
  return out;
}

describe(`binding names: ${CONSUMER_BINDING_PREFIX}* is for consumer Workers only`, () => {
  it(`wrangler.toml declares no binding of shardq's own starting with ${CONSUMER_BINDING_PREFIX}`, () => {
    const declared = declaredBindings(wranglerToml);
    const internal = declared.filter((b) => b.table !== "services");
    expect(internal.filter((b) => b.name.startsWith(CONSUMER_BINDING_PREFIX))).toEqual([]);
    // The parser saw the service's bindings (it did not pass by finding nothing).
    expect(internal.map((b) => b.name)).toEqual(
      expect.arrayContaining([
        "COORDINATOR",
        "STORAGE_SHARD",
        "SHARD_CONSUMERS",
        "SHARD_MAPS",
        "ACCOUNT_RATE_LIMITER",
        "REGIONS",
      ]),
    );
  });

  it(`every binding the running service has under ${CONSUMER_BINDING_PREFIX} is a service binding (wrangler.toml and vitest.config.ts)`, () => {
    const names = Object.keys(env).filter((k) => k.startsWith(CONSUMER_BINDING_PREFIX));
    expect(names).toContain("CONSUMER_SHARDQ_EXAMPLE_CONSUMER");
    const notServices = names.filter((k) => !isServiceBinding((env as unknown as Record<string, unknown>)[k]));
    expect(notServices).toEqual([]);
  });

  it("finds a consumer's binding only when it is a service binding", () => {
    expect(consumerBinding(env, "shardq-example-consumer", "local")).not.toBeNull();
    expect(consumerBinding(env, "nobody-bound-this", "local")).toBeNull();
    // A Durable Object namespace, a KV namespace or a var under a consumer's name is not one.
    expect(consumerBinding({ CONSUMER_SHARD: env.SHARD_CONSUMERS }, "shard", "local")).toBeNull();
    expect(consumerBinding({ CONSUMER_MAPS: env.SHARD_MAPS }, "maps", "local")).toBeNull();
    expect(consumerBinding({ CONSUMER_REGIONS: "wnam" }, "regions", "local")).toBeNull();
    expect(consumerBinding({ CONSUMER_X: env.EXAMPLE_CONSUMER }, "x", "local")).toBe(env.EXAMPLE_CONSUMER);
  });
});
