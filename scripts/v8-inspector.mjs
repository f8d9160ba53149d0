// The V8 inspector that `wrangler dev --inspector-port P` serves for the first Worker it runs:
// the heap of the isolate that runs shardq's objects (bench/heap.mjs, the large-backlog run).
/**
 * The V8 inspector of the first Worker wrangler dev runs. workerd handles an inspector
 * command that needs the isolate only when a request enters it, so each command is followed
 * by requests (`poke`) until it is answered.
 */
export class Inspector {
  /** @param {WebSocket} ws @param {() => Promise<unknown>} poke */
  constructor(ws, poke) {
    this.ws = ws;
    this.poke = poke;
    this.next = 0;
    /** @type {Map<number, (m: any) => void>} */
    this.pending = new Map();
    ws.onmessage = (e) => {
      const m = JSON.parse(String(e.data));
      const done = m.id !== undefined ? this.pending.get(m.id) : undefined;
      if (done) {
        this.pending.delete(m.id);
        done(m);
      }
    };
  }

  /** @param {number} port @param {() => Promise<unknown>} poke */
  static async connect(port, poke) {
    // wrangler's inspector proxy refuses a connection without an Origin.
    // @ts-ignore: Node's WebSocket (undici) takes headers.
    const ws = new WebSocket(`ws://127.0.0.1:${port}/ws`, { headers: { origin: `http://127.0.0.1:${port}` } });
    await new Promise((resolve, reject) => {
      ws.onopen = resolve;
      ws.onerror = () => reject(new Error(`the inspector on port ${port} refused the connection`));
    });
    const inspector = new Inspector(ws, poke);
    await inspector.call("HeapProfiler.enable");
    return inspector;
  }

  /** @param {string} method @returns {Promise<any>} */
  async call(method) {
    const id = ++this.next;
    const answered = new Promise((resolve) => this.pending.set(id, resolve));
    this.ws.send(JSON.stringify({ id, method, params: {} }));
    const deadline = Date.now() + 30_000;
    for (let done = false; !done;) {
      done = await Promise.race([
        answered.then(() => true),
        this.poke().then(() => new Promise((r) => setTimeout(() => r(false), 50))),
      ]);
      if (!done && Date.now() > deadline) throw new Error(`the inspector did not answer ${method} in 30 s`);
    }
    const m = await answered;
    if (m.error) throw new Error(`${method}: ${JSON.stringify(m.error)}`);
    return m.result;
  }

  /** The heap after a full collection. @returns {Promise<{ usedSize: number, totalSize: number }>} */
  async heap() {
    await this.call("HeapProfiler.collectGarbage");
    return this.call("Runtime.getHeapUsage");
  }

  close() {
    this.ws.close();
  }
}

/**
 * The heap of the isolate behind the inspector on `port` after a full collection (bytes used),
 * poking `base`'s /healthz (served by no object) to let workerd handle the commands.
 * @param {number} port @param {string} base @returns {Promise<number>}
 */
export async function isolateHeapUsed(port, base) {
  const inspector = await Inspector.connect(port, () => fetch(`${base}/healthz`).then((r) => r.arrayBuffer()));
  try {
    return (await inspector.heap()).usedSize;
  } finally {
    inspector.close();
  }
}
