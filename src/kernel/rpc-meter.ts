import type { CostMeter } from "./sql-meter";

/**
 * What workerd calls on a Durable Object as events and refuses to serve over RPC: not RPCs. An
 * object counts its alarms itself (CostMeter.alarms); no object here answers fetch, connect or
 * WebSockets.
 */
const RUNTIME_HANDLERS: ReadonlySet<PropertyKey> = new Set([
  "fetch",
  "connect",
  "alarm",
  "webSocketMessage",
  "webSocketClose",
  "webSocketError",
]);

/**
 * The one place a Durable Object's RPCs are counted: `object` as its callers must reach it, each
 * call of one of its methods adding one to `meter.rpcs`, except the runtime's handlers and the
 * methods named in `uncounted`: the benchmark's read of the meter, the fault harness's hook, and
 * the object's own work that tests drive through runInDurableObject.
 *
 * The object's constructor returns this, as its last statement: workerd keeps what the constructor
 * returns, and calls RPC methods, fetch and alarm on it (so do the vitest pool's Durable Object handles and its
 * runInDurableObject). The method itself runs with `this` the object, not the proxy, and so does
 * everything the object made (its fields' closures were made with `this` the object): a method
 * that calls another of its object's methods is one request, not two, without a second, private
 * method to call instead.
 *
 * Only the class that is instantiated may return it: below a subclass's super() call, `this`
 * would be the proxy, and the calls its fields' closures make would be counted.
 *
 * Instance fields are left as they are: workerd serves only prototype methods over RPC.
 */
export function meteredRpcs<T extends object>(
  object: T,
  meter: CostMeter,
  uncounted: ReadonlyArray<keyof T & string>,
): T {
  const notRpcs = new Set<PropertyKey>([...RUNTIME_HANDLERS, ...uncounted]);
  const calls = new Map<PropertyKey, { method: unknown; call: (...args: unknown[]) => unknown }>();
  return new Proxy(object, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (typeof value !== "function" || prop === "constructor" || Object.hasOwn(target, prop)) return value;
      // Object.prototype's methods stay themselves: workerd refuses them over RPC by identity.
      if (value === (Object.prototype as Record<PropertyKey, unknown>)[prop]) return value;
      let known = calls.get(prop);
      if (known?.method !== value) {
        const method = value as (...args: unknown[]) => unknown;
        const counts = typeof prop === "string" && !notRpcs.has(prop);
        known = {
          method,
          call: (...args: unknown[]) => {
            if (counts) meter.rpcs++;
            return method.apply(target, args);
          },
        };
        calls.set(prop, known);
      }
      return known.call;
    },
    // Accessors and fields are set on the object itself, as the object's own code sets them.
    set: (target, prop, value) => Reflect.set(target, prop, value),
  });
}
