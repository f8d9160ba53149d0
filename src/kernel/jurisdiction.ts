/**
 * Jurisdictions (docs/jurisdictions.md): a queue chosen at creation to store and process its
 * messages only inside the EU, the US or FedRAMP data centres. Every Durable Object of such a
 * queue (its Coordinator, storage shards, consumer shards, idempotency tables) is addressed
 * through its namespace's `jurisdiction()`, so Cloudflare places it there and an id minted in
 * one jurisdiction reaches no object of another.
 *
 * The jurisdiction is part of the queue's id, as a Durable Object id carries its own: the id's
 * last 16 hex are a hash of its first 16 and the jurisdiction. Every address is then derived
 * from a queue id or a shard name (which starts with one) alone, with no lookup, and no path
 * can address a queue's objects outside its jurisdiction by forgetting to ask. A queue without
 * a jurisdiction keeps 32 random hex; one of those matches a jurisdiction's hash with a chance
 * of 3 in 2^64, far below a random id colliding with another.
 */
export const JURISDICTIONS = ["eu", "us", "fedramp"] as const;
export type Jurisdiction = (typeof JURISDICTIONS)[number];

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK = 0xffffffffffffffffn;

/** 64-bit FNV-1a: a tag nobody picks (queue ids are drawn here), not a secret. */
function fnv64(text: string): string {
  let h = FNV_OFFSET;
  for (let i = 0; i < text.length; i++) h = ((h ^ BigInt(text.charCodeAt(i))) * FNV_PRIME) & MASK;
  return h.toString(16).padStart(16, "0");
}

const tagOf = (head: string, j: Jurisdiction) => fnv64(`shardq-jurisdiction:${j}:${head}`);

/** A queue id in `j` from 16 random hex: those, then their tag. */
export function queueIdIn(randomHead: string, j: Jurisdiction): string {
  return randomHead + tagOf(randomHead, j);
}

/** Queue ids seen, with their jurisdiction: an address is derived on every request. */
const known = new Map<string, Jurisdiction | null>();
const KNOWN_MAX = 10_000;

/** The jurisdiction a queue id was drawn in, or undefined for a queue without one (and for anything not a queue id). */
export function jurisdictionOfQueue(queueId: string): Jurisdiction | undefined {
  if (queueId.length !== 32) return undefined;
  let j = known.get(queueId);
  if (j === undefined) {
    const head = queueId.slice(0, 16);
    const tail = queueId.slice(16);
    j = JURISDICTIONS.find((c) => tagOf(head, c) === tail) ?? null;
    if (known.size >= KNOWN_MAX) known.clear();
    known.set(queueId, j);
  }
  return j ?? undefined;
}

/** A storage shard's jurisdiction: its name starts with its queue's id (`<queueId>:<region>:<n>`). */
export function jurisdictionOfShard(shardName: string): Jurisdiction | undefined {
  const colon = shardName.indexOf(":");
  return jurisdictionOfQueue(colon < 0 ? shardName : shardName.slice(0, colon));
}

/** The error a namespace of workerd (local `wrangler dev`, tests) throws for `jurisdiction()`. */
const NOT_IN_WORKERD = /not implemented in workerd/i;

type Namespace = DurableObjectNamespace<any>;
const scoped = new WeakMap<Namespace, Map<Jurisdiction, Namespace>>();

/**
 * `ns` restricted to `j` (`ns` itself without one). On Cloudflare that is `ns.jurisdiction(j)`,
 * and any refusal of it (an account without the jurisdiction) is thrown, never worked around.
 * workerd has no jurisdictions to enforce and refuses the call: there a stand-in keeps the
 * jurisdiction's objects apart by name (localJurisdiction), so local state is laid out as
 * Cloudflare's would be and an id of one jurisdiction still reaches nothing of another.
 */
export function namespaceIn<N extends Namespace>(ns: N, j: Jurisdiction | undefined): N {
  if (!j) return ns;
  let byJ = scoped.get(ns);
  if (!byJ) scoped.set(ns, (byJ = new Map()));
  let out = byJ.get(j);
  if (!out) {
    try {
      out = ns.jurisdiction(j);
    } catch (err) {
      if (!NOT_IN_WORKERD.test(String(err))) throw err;
      out = localJurisdiction(ns, j);
    }
    byJ.set(j, out);
  }
  return out as N;
}

/** The name prefix under which workerd keeps a jurisdiction's objects apart. */
export const localPrefix = (j: Jurisdiction) => `jurisdiction:${j}/`;

/**
 * workerd's stand-in for `ns.jurisdiction(j)`: names are kept under the jurisdiction's prefix,
 * and an id minted anywhere else (another jurisdiction's, or the plain namespace's) is refused
 * by `get`, as Cloudflare refuses an id of another jurisdiction.
 */
export function localJurisdiction<N extends Namespace>(ns: N, j: Jurisdiction): N {
  const prefix = localPrefix(j);
  // Untyped here: the stub types of a generic namespace are too deep for the checker to follow.
  const plain = ns as unknown as {
    idFromName(name: string): DurableObjectId;
    get(id: DurableObjectId, opts?: DurableObjectNamespaceGetDurableObjectOptions): unknown;
  };
  const stand = {
    idFromName: (name: string) => plain.idFromName(prefix + name),
    newUniqueId: () => {
      throw new Error(`newUniqueId() in jurisdiction "${j}" is not available under workerd: shardq names its objects`);
    },
    idFromString: (id: string) => {
      throw new Error(
        `idFromString("${id}") in jurisdiction "${j}" is not available under workerd: shardq names its objects`,
      );
    },
    get: (id: DurableObjectId, opts?: DurableObjectNamespaceGetDurableObjectOptions) => {
      if (!id.name?.startsWith(prefix))
        throw new TypeError(`the Durable Object id ${id.toString()} is not of jurisdiction "${j}"`);
      return plain.get(id, opts);
    },
    getByName: (name: string, opts?: DurableObjectNamespaceGetDurableObjectOptions) =>
      plain.get(plain.idFromName(prefix + name), opts),
    jurisdiction: (other: string) => {
      if (other !== j) throw new TypeError(`a namespace of jurisdiction "${j}" cannot be narrowed to "${other}"`);
      return stand;
    },
  };
  return stand as unknown as N;
}

/** The jurisdiction an object is in, from its own id (Cloudflare's, or the local stand-in's name). */
export function jurisdictionOfObject(id: DurableObjectId): Jurisdiction | undefined {
  if (id.jurisdiction) return id.jurisdiction as Jurisdiction;
  return JURISDICTIONS.find((j) => id.name?.startsWith(localPrefix(j)));
}

/**
 * Refuses to serve a queue from an object outside the queue's jurisdiction: an address that
 * went around namespaceIn would otherwise create the queue's state where it must not be.
 */
export function assertInJurisdiction(objectId: DurableObjectId, queueId: string): void {
  const want = jurisdictionOfQueue(queueId);
  const here = jurisdictionOfObject(objectId);
  if (want !== here)
    throw new Error(
      `queue ${queueId} is ${want ? `in jurisdiction "${want}"` : "in no jurisdiction"}, and this object is ${here ? `in "${here}"` : "in none"}`,
    );
}

/** The `jurisdiction` field of a queue's description and metrics: present only for a queue in one, as Cloudflare shows it. */
export function jurisdictionField(queueId: string): { jurisdiction?: Jurisdiction } {
  const j = jurisdictionOfQueue(queueId);
  return j ? { jurisdiction: j } : {};
}

/** How an error names where a queue is: `jurisdiction "eu"`, or no jurisdiction. */
export function jurisdictionName(queueId: string): string {
  const j = jurisdictionOfQueue(queueId);
  return j ? `jurisdiction "${j}"` : "no jurisdiction";
}
