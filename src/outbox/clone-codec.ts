/**
 * A `v8` body as text an outbox row can hold. The binding serialises such a body with V8's
 * structured serialisation when it is sent, but the outbox must keep it from the moment it is
 * recorded, in SQLite, and a Worker has no API that hands out V8's bytes. So the body is first
 * passed through structuredClone() (which refuses exactly what V8's serialiser refuses, reads
 * getters and drops prototypes as it does, and fixes the value as it is at record time), and the
 * clone is written here as JSON: a table of nodes, the root first, each object once, so shared
 * references and cycles survive as they do through V8.
 *
 * A node is a JSON string, finite number (not -0), boolean or null standing for itself, or an
 * array whose first element names what it is:
 *   ["u"] undefined                         ["n", "NaN" | "Infinity" | "-Infinity" | "-0"]
 *   ["b", digits] bigint                    ["D", ms | null] Date
 *   ["R", source, flags] RegExp             ["B", base64] ArrayBuffer
 *   ["V", type, buffer, offset, length] typed array or DataView
 *   ["M", key, value, ...] Map              ["S", value, ...] Set
 *   ["A", item, ...] array without holes    ["a", length, key, value, ...] array with holes or extra keys
 *   ["O", key, value, ...] object           ["E", name, message, stack, cause, enumerable] Error (-1: absent)
 *   ["W", "Boolean" | "Number" | "String" | "BigInt", value] a primitive's wrapper object
 * where each value, item, buffer, message, stack and cause is a node's index and each key a string.
 */
import { fromBase64, toBase64 } from "../envelope/envelope";

type Node = string | number | boolean | null | unknown[];

const VIEWS = {
  Int8Array,
  Uint8Array,
  Uint8ClampedArray,
  Int16Array,
  Uint16Array,
  Int32Array,
  Uint32Array,
  Float32Array,
  Float64Array,
  BigInt64Array,
  BigUint64Array,
} as const;
type ViewName = keyof typeof VIEWS | "DataView";

const ERRORS: Record<string, ErrorConstructor> = {
  Error,
  EvalError,
  RangeError,
  ReferenceError,
  SyntaxError,
  TypeError,
  URIError,
};

/** The body as the outbox stores it; throws (a DataCloneError) what structuredClone cannot carry. */
export function encodeClone(body: unknown): string {
  const value: unknown = structuredClone(body);
  const nodes: Node[] = [];
  const seen = new Map<object, number>();
  const add = (v: unknown): number => {
    if (typeof v === "object" && v !== null) {
      const known = seen.get(v);
      if (known !== undefined) return known;
      const at = nodes.push(null) - 1;
      seen.set(v, at);
      nodes[at] = objectNode(v, add);
      return at;
    }
    return nodes.push(primitiveNode(v)) - 1;
  };
  add(value);
  return JSON.stringify(nodes);
}

function primitiveNode(v: unknown): Node {
  switch (typeof v) {
    case "string":
    case "boolean":
      return v;
    case "object":
      return null;
    case "number":
      if (Object.is(v, -0)) return ["n", "-0"];
      return Number.isFinite(v) ? v : ["n", String(v)];
    case "bigint":
      return ["b", v.toString()];
    case "undefined":
      return ["u"];
    default:
      // structuredClone has refused these already (functions, symbols).
      throw new TypeError(`a ${typeof v} cannot be cloned`);
  }
}

function objectNode(v: object, add: (v: unknown) => number): Node {
  if (Array.isArray(v)) {
    const keys = Object.keys(v);
    // Own keys list indices first, in order: a dense array's are exactly "0" to length - 1.
    if (keys.length === v.length && keys.every((k, i) => k === String(i))) return ["A", ...v.map(add)];
    return ["a", v.length, ...keys.flatMap((k) => [k, add((v as unknown as Record<string, unknown>)[k])])];
  }
  if (v instanceof Date) {
    const t = v.getTime();
    return ["D", Number.isNaN(t) ? null : t];
  }
  if (v instanceof RegExp) return ["R", v.source, v.flags];
  if (v instanceof ArrayBuffer) return ["B", toBase64(new Uint8Array(v))];
  if (ArrayBuffer.isView(v)) {
    const name = (v instanceof DataView ? "DataView" : v.constructor.name) as ViewName;
    if (name !== "DataView" && !(name in VIEWS)) throw new TypeError(`a ${name} cannot be recorded`);
    const length = v instanceof DataView ? v.byteLength : (v as unknown as { length: number }).length;
    return ["V", name, add(v.buffer), v.byteOffset, length];
  }
  if (v instanceof Map) return ["M", ...[...v].flatMap(([k, x]) => [add(k), add(x)])];
  if (v instanceof Set) return ["S", ...[...v].map(add)];
  if (v instanceof Error) {
    const own = (k: string) => (Object.hasOwn(v, k) ? add((v as unknown as Record<string, unknown>)[k]) : -1);
    // V8 keeps a stack on the error or behind an accessor of its prototype, by version: read it
    // either way, and note which of the three were enumerable, as the clone has them.
    const stack = typeof v.stack === "string" ? add(v.stack) : -1;
    const enumerable = ["message", "stack", "cause"].filter((k) => Object.getOwnPropertyDescriptor(v, k)?.enumerable);
    return ["E", v.name in ERRORS ? v.name : "Error", own("message"), stack, own("cause"), enumerable];
  }
  const tag = Object.prototype.toString.call(v).slice(8, -1);
  if (tag === "Boolean" || tag === "Number" || tag === "String" || tag === "BigInt")
    return ["W", tag, add((v as { valueOf(): unknown }).valueOf())];
  if (tag !== "Object") throw new TypeError(`a ${tag} cannot be recorded`);
  return ["O", ...Object.keys(v).flatMap((k) => [k, add((v as Record<string, unknown>)[k])])];
}

/** The body encodeClone() stored, rebuilt. */
export function decodeClone(text: string): unknown {
  const nodes = JSON.parse(text) as Node[];
  const built = new Map<number, unknown>();
  const get = (i: number): unknown => {
    if (built.has(i)) return built.get(i);
    const n = nodes[i];
    if (n === undefined) throw new RangeError(`a recorded body refers to node ${i}, which it lacks`);
    if (!Array.isArray(n)) return n;
    return build(i, n, built, get);
  };
  return get(0);
}

function build(i: number, n: unknown[], built: Map<number, unknown>, get: (i: number) => unknown): unknown {
  const [tag, ...rest] = n as [string, ...unknown[]];
  const ref = (k: number) => get(rest[k] as number);
  const hold = <T>(v: T): T => (built.set(i, v), v);
  switch (tag) {
    case "u":
      return undefined;
    case "n":
      return rest[0] === "-0" ? -0 : Number(rest[0]);
    case "b":
      return BigInt(rest[0] as string);
    case "D":
      return hold(new Date(rest[0] === null ? NaN : (rest[0] as number)));
    case "R":
      return hold(new RegExp(rest[0] as string, rest[1] as string));
    case "B":
      return hold(fromBase64(rest[0] as string)!.buffer);
    case "V": {
      const [name, , offset, length] = rest as [ViewName, number, number, number];
      const buffer = ref(1) as ArrayBuffer;
      return hold(name === "DataView" ? new DataView(buffer, offset, length) : new VIEWS[name](buffer, offset, length));
    }
    case "M": {
      const m = hold(new Map<unknown, unknown>());
      for (let k = 0; k < rest.length; k += 2) m.set(ref(k), ref(k + 1));
      return m;
    }
    case "S": {
      const s = hold(new Set<unknown>());
      for (let k = 0; k < rest.length; k++) s.add(ref(k));
      return s;
    }
    case "A": {
      const a = hold(new Array<unknown>(rest.length));
      for (let k = 0; k < rest.length; k++) a[k] = ref(k);
      return a;
    }
    case "a": {
      const a = hold(new Array<unknown>(rest[0] as number)) as unknown as Record<string, unknown>;
      for (let k = 1; k < rest.length; k += 2) a[rest[k] as string] = ref(k + 1);
      return a;
    }
    case "O": {
      const o = hold({} as Record<string, unknown>);
      for (let k = 0; k < rest.length; k += 2)
        Object.defineProperty(o, rest[k] as string, {
          value: ref(k + 1),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      return o;
    }
    case "E": {
      const Kind = ERRORS[rest[0] as string] ?? Error;
      const e = hold(new Kind());
      const enumerable = (rest[4] ?? []) as string[];
      const set = (key: string, k: number) => {
        if ((rest[k] as number) >= 0)
          Object.defineProperty(e, key, {
            value: ref(k),
            writable: true,
            configurable: true,
            enumerable: enumerable.includes(key),
          });
        else delete (e as unknown as Record<string, unknown>)[key];
      };
      set("message", 1);
      set("stack", 2);
      set("cause", 3);
      return e;
    }
    case "W":
      return hold(Object(ref(1)));
    default:
      throw new TypeError(`a recorded body holds a node of unknown kind ${JSON.stringify(tag)}`);
  }
}
