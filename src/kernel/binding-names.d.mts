// Types of binding-names.mjs (plain JavaScript, so Node scripts can import it too).

/**
 * Names starting with this belong to consumer Workers' service bindings, and to nothing
 * else: none of shardq's own bindings may start with it (test/workers/binding-names.test.ts).
 */
export declare const CONSUMER_BINDING_PREFIX: "CONSUMER_";

/** The service binding shardq uses to reach a Worker consumer: "my-consumer" -> CONSUMER_MY_CONSUMER. */
export declare function consumerBindingName(scriptName: string): string;
