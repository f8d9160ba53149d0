// The name of the service binding shardq reaches a consumer Worker by, written once for
// the service (src/kernel/consumer-settings.ts, bundled by wrangler) and for the Node
// scripts that write configs binding those Workers (cli/workers/worker-configs.mjs): plain
// JavaScript because Node runs the scripts as they are and cannot import TypeScript.
// Its types are in binding-names.d.mts beside it.

/**
 * Names starting with this belong to consumer Workers' service bindings, and to nothing
 * else: none of shardq's own bindings may start with it (test/workers/binding-names.test.ts).
 */
export const CONSUMER_BINDING_PREFIX = "CONSUMER_";

/**
 * The service binding shardq uses to reach a Worker consumer: "my-consumer" -> CONSUMER_MY_CONSUMER.
 * @param {string} scriptName
 * @returns {string}
 */
export function consumerBindingName(scriptName) {
  return `${CONSUMER_BINDING_PREFIX}${scriptName.toUpperCase().replace(/[^A-Z0-9]/g, "_")}`;
}
