/**
 * A producer Worker written for Cloudflare Queues, unchanged under shardq:
 *   POST /send?count=N&batch=B&from=K  sends bodies { order: K..K+N-1 }: one send() each when
 *                                      B is 1, else sendBatch() of B at a time
 *   POST /send-json                    sends the request's JSON body as one message
 * It awaits each call and relies on nothing more: what send() resolves to differs between
 * Cloudflare (and versions of shardq).
 */
interface Env {
  ORDERS: Queue;
}

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (request.method === "POST" && url.pathname === "/send") {
      const count = Number(url.searchParams.get("count") ?? "1");
      const batch = Number(url.searchParams.get("batch") ?? "1");
      const from = Number(url.searchParams.get("from") ?? "0");
      if (![count, batch, from].every(Number.isInteger) || count < 1 || batch < 1 || batch > 100) {
        return Response.json({ error: "count, batch (1 to 100) and from must be whole numbers" }, { status: 400 });
      }
      for (let i = 0; i < count; i += batch) {
        const orders = Array.from({ length: Math.min(batch, count - i) }, (_, j) => from + i + j);
        if (batch === 1) await env.ORDERS.send({ order: orders[0] });
        else await env.ORDERS.sendBatch(orders.map((order) => ({ body: { order } })));
      }
      return Response.json({ sent: count });
    }
    if (request.method === "POST" && url.pathname === "/send-json") {
      await env.ORDERS.send(await request.json());
      return Response.json({ sent: 1 });
    }
    return Response.json({ error: "try POST /send?count=10&batch=1 or POST /send-json" }, { status: 404 });
  },
};
