// The fixture's own producer Worker (scripts/make-upgrade-fixture.mjs copies it into its worker
// directory): one `send()` per request, as a user's Worker would call it. `type=bytes` sends the
// request body's bytes; `type=v8` a structured value JSON cannot hold. Answers with the message
// id shardq adds to the response.
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname !== "/send" || request.method !== "POST") return new Response("POST /send?type=bytes|v8&delay=s", { status: 404 });
    const delaySeconds = Number(url.searchParams.get("delay") ?? 0);
    const type = url.searchParams.get("type");
    const body =
      type === "bytes"
        ? await request.arrayBuffer()
        : { at: new Date(Date.UTC(2026, 0, 2, 3, 4, 5)), tags: new Set(["a", "b"]), map: new Map([["k", 1], ["l", [2, 3]]]), big: 2n ** 70n, nothing: undefined, bytes: new Uint8Array([0, 1, 255]), nan: NaN };
    try {
      const sent = await env.QUEUE.send(body, { contentType: type, delaySeconds });
      return Response.json({ id: sent.messageId });
    } catch (err) {
      return Response.json({ error: String(err) }, { status: 503 });
    }
  },
};
