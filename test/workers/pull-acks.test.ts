/**
 * Settling pulled messages over HTTP: acks, retries with their delays, late and forged lease ids,
 * the dead-letter queue or a drop once max_retries is used up, and lease extensions.
 */
import { env } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import { storageShardFor } from "../../src/kernel/addressing";
import {
  ack,
  api,
  backlog,
  createQueue,
  OTHER_TOKEN,
  pull,
  queuePath,
  queuesPath,
  send,
  storedMessages,
} from "./helpers";
import { clockedPullQueue, ids, pullOne } from "./pull-helpers";

const extend = (q: string, body: unknown) => api("POST", `${queuePath(q)}/messages/extend`, body);

describe("acknowledging pulled messages", () => {
  it("deletes exactly the acked messages; the rest come back after the timeout", async () => {
    const { clock } = await clockedPullQueue("ack-some");
    for (let i = 0; i < 5; i++) await send("ack-some", i);
    const batch = (await pull("ack-some", { batch_size: 5 })).json.result.messages as Array<{
      id: string;
      lease_id: string;
    }>;
    const acked = batch.slice(0, 3);
    // A lease id listed twice counts once.
    const res = await ack("ack-some", { acks: [...acked, acked[0]!].map((m) => ({ lease_id: m.lease_id })) });
    expect(res.status).toBe(200);
    expect(res.json.result).toEqual({ ackCount: 3, retryCount: 0, warnings: {} });
    expect(await backlog("ack-some")).toBe(2);
    const left = batch
      .slice(3)
      .map((m) => m.id)
      .sort();
    expect((await storedMessages("ack-some")).messages.map((m) => m.id).sort()).toEqual(left);
    clock.advance(1000);
    const again = await pull("ack-some", { batch_size: 10 });
    expect(ids(again)).toEqual(left);
    expect(again.json.result.messages.every((m: { attempts: number }) => m.attempts === 2)).toBe(true);
  });

  it("refuses a lease id both in acks and in retries with a 400 naming retries[i].lease_id, settling nothing of the request", async () => {
    const { clock } = await clockedPullQueue("ack-and-retry");
    for (let i = 0; i < 2; i++) await send("ack-and-retry", i);
    const [a, b] = (await pull("ack-and-retry", { batch_size: 2 })).json.result.messages as Array<{
      id: string;
      lease_id: string;
    }>;
    const res = await ack("ack-and-retry", {
      acks: [{ lease_id: a!.lease_id }, { lease_id: b!.lease_id }],
      retries: [{ lease_id: b!.lease_id, delay_seconds: 5 }],
    });
    expect(res.status).toBe(400);
    expect(res.json.errors[0].field).toBe("retries[0].lease_id");
    expect(res.json.errors[0].message).toContain("acks[1]");
    // Refused whole: both messages are still stored and come back when their leases end.
    expect(await backlog("ack-and-retry")).toBe(2);
    clock.advance(1000);
    expect(ids(await pull("ack-and-retry", { batch_size: 10 }))).toEqual([a!.id, b!.id].sort());
  });

  it("brings a retried message back after its delay_seconds, or the consumer's retry_delay", async () => {
    const { clock } = await clockedPullQueue("ack-retry", {
      settings: { visibility_timeout_ms: 1000, retry_delay: 30 },
    });
    await send("ack-retry", "own delay");
    await send("ack-retry", "consumer delay");
    const [a, b] = (await pull("ack-retry", { batch_size: 2 })).json.result.messages;
    const res = await ack("ack-retry", {
      retries: [{ lease_id: a.lease_id, delay_seconds: 60 }, { lease_id: b.lease_id }],
    });
    expect(res.json.result).toEqual({ ackCount: 0, retryCount: 2, warnings: {} });
    expect(await backlog("ack-retry")).toBe(2);
    clock.advance(29_999);
    expect((await pull("ack-retry", { batch_size: 10 })).json.result.messages).toEqual([]);
    clock.advance(1);
    const back = (await pull("ack-retry", { batch_size: 10 })).json.result.messages;
    expect(back).toMatchObject([{ id: b.id, attempts: 2 }]);
    await ack("ack-retry", { acks: [{ lease_id: back[0].lease_id }] });
    clock.advance(29_999);
    expect((await pull("ack-retry", { batch_size: 10 })).json.result.messages).toEqual([]);
    clock.advance(1);
    expect((await pull("ack-retry", { batch_size: 10 })).json.result.messages).toMatchObject([
      { id: a.id, attempts: 2 },
    ]);
  });

  it("refuses a late ack after another pull took the message over, with a warning, changing nothing", async () => {
    const { clock } = await clockedPullQueue("ack-late");
    await send("ack-late", "contested");
    const first = await pullOne("ack-late");
    clock.advance(1000);
    const second = await pullOne("ack-late");
    const late = await ack("ack-late", { acks: [{ lease_id: first.lease_id }] });
    expect(late.status).toBe(200);
    expect(late.json.result).toMatchObject({ ackCount: 0, retryCount: 0 });
    expect(late.json.result.warnings[first.lease_id]).toContain("pulled again");
    expect(await backlog("ack-late")).toBe(1);
    // The current holder's lease is untouched: the message is still invisible, and its ack counts.
    expect((await pull("ack-late")).json.result.messages).toEqual([]);
    expect((await ack("ack-late", { acks: [{ lease_id: second.lease_id }] })).json.result).toEqual({
      ackCount: 1,
      retryCount: 0,
      warnings: {},
    });
    expect(await backlog("ack-late")).toBe(0);
  });

  it("accepts an ack after the timeout when no one else pulled the message (as Cloudflare does)", async () => {
    const { clock } = await clockedPullQueue("ack-after-timeout");
    await send("ack-after-timeout", 1);
    const m = await pullOne("ack-after-timeout");
    clock.advance(10_000);
    expect((await ack("ack-after-timeout", { acks: [{ lease_id: m.lease_id }] })).json.result.ackCount).toBe(1);
    expect(await backlog("ack-after-timeout")).toBe(0);
  });

  it("gives forged, tampered, other queues' and other accounts' lease ids a warning, never a 5xx, changing nothing", async () => {
    await clockedPullQueue("ack-forged");
    await send("ack-forged", "mine");
    const mine = await pullOne("ack-forged");
    const [payload, signature] = mine.lease_id.split(".");
    const flip = (s: string, i: number) => s.slice(0, i) + (s[i] === "A" ? "B" : "A") + s.slice(i + 1);
    const reencoded = btoa(atob(payload.replace(/-/g, "+").replace(/_/g, "/")).replace(/,1\]$/, ",0]"))
      .replace(/\+/g, "-")
      .replace(/\//g, "_")
      .replace(/=+$/, "");

    await clockedPullQueue("ack-forged-sibling");
    await send("ack-forged-sibling", "sibling");
    const sibling = await pullOne("ack-forged-sibling");

    // The other account has a queue of the same name, with a pull consumer of its own.
    const other = { token: OTHER_TOKEN };
    expect((await api("POST", queuesPath("other"), { queue_name: "ack-forged" }, other)).status).toBe(201);
    expect(
      (await api("POST", `${queuePath("ack-forged", "other")}/consumers`, { type: "http_pull" }, other)).status,
    ).toBe(201);
    await api("POST", `${queuePath("ack-forged", "other")}/messages`, { body: "theirs" }, other);
    const theirs = (await pull("ack-forged", {}, { token: OTHER_TOKEN, account: "other" })).json.result.messages[0];

    const bad = {
      "not-a-lease": "not a lease id",
      "a.b.c": "not a lease id",
      [`${payload}.${flip(signature, 3)}`]: "invalid signature",
      [`${flip(payload, 10)}.${signature}`]: "invalid signature",
      [`${reencoded}.${signature}`]: "invalid signature",
      [`${payload}.`]: "not a lease id",
      [sibling.lease_id]: "another queue",
      [theirs.lease_id]: "another queue",
      ["x".repeat(5000)]: "not a lease id",
    };
    const tokens = Object.keys(bad);
    // As acks, then as retries (one lease id in both lists of a request is refused whole).
    for (const list of ["acks", "retries"]) {
      const acked = await ack("ack-forged", { [list]: tokens.map((t) => ({ lease_id: t })) });
      expect(acked.status).toBe(200);
      expect(acked.json.result.ackCount).toBe(0);
      expect(acked.json.result.retryCount).toBe(0);
      for (const [token, why] of Object.entries(bad)) expect(acked.json.result.warnings[token]).toContain(why);
    }
    const extended = await extend("ack-forged", { lease_ids: tokens, visibility_timeout_ms: 60_000 });
    expect(extended.status).toBe(200);
    expect(extended.json.result.extended).toBe(0);
    expect(Object.keys(extended.json.result.warnings).sort()).toEqual([...tokens].sort());
    // Our lease id is just as useless on the other account's queue of the same name.
    const cross = await ack(
      "ack-forged",
      { acks: [{ lease_id: mine.lease_id }] },
      { token: OTHER_TOKEN, account: "other" },
    );
    expect(cross.json.result.ackCount).toBe(0);
    expect(cross.json.result.warnings[mine.lease_id]).toContain("another queue");

    // Nothing moved: every message is still stored and leased, and the real lease ids still work.
    expect(await backlog("ack-forged")).toBe(1);
    expect(await backlog("ack-forged-sibling")).toBe(1);
    expect((await pull("ack-forged")).json.result.messages).toEqual([]);
    expect((await ack("ack-forged", { acks: [{ lease_id: mine.lease_id }] })).json.result.ackCount).toBe(1);
    expect((await ack("ack-forged-sibling", { acks: [{ lease_id: sibling.lease_id }] })).json.result.ackCount).toBe(1);
    expect(
      (await ack("ack-forged", { acks: [{ lease_id: theirs.lease_id }] }, { token: OTHER_TOKEN, account: "other" }))
        .json.result.ackCount,
    ).toBe(1);
  });

  it("sends a retry that used up max_retries to the dead-letter queue: body, id and timestamp intact, attempts from 1 again", async () => {
    await createQueue("ack-dlq-dead");
    expect((await api("POST", `${queuePath("ack-dlq-dead")}/consumers`, { type: "http_pull" })).status).toBe(201);
    const { clock } = await clockedPullQueue("ack-dlq", { dead_letter_queue: "ack-dlq-dead" });
    const id = (await send("ack-dlq", "doomed", { content_type: "text" })).json.result.message_id;
    const sentAt = clock.now();
    clock.advance(60_000);
    const first = await pullOne("ack-dlq");
    // attempts 1 <= max_retries 1: an ordinary retry.
    expect((await ack("ack-dlq", { retries: [{ lease_id: first.lease_id }] })).json.result).toEqual({
      ackCount: 0,
      retryCount: 1,
      warnings: {},
    });
    const second = await pullOne("ack-dlq");
    expect(second).toMatchObject({ id, attempts: 2 });
    expect((await ack("ack-dlq", { retries: [{ lease_id: second.lease_id, delay_seconds: 5 }] })).json.result).toEqual({
      ackCount: 0,
      retryCount: 1,
      warnings: {},
    });
    expect(await backlog("ack-dlq")).toBe(0);
    const dead = (await storedMessages("ack-dlq-dead")).messages;
    expect(dead).toHaveLength(1);
    // As Cloudflare's: the dead-letter queue's own max_retries counts from its first delivery there.
    expect(dead[0]).toMatchObject({ id, contentType: "text", attempts: 0, enqueuedAt: sentAt });
    expect(new TextDecoder().decode(dead[0]!.body)).toBe("doomed");
    const there = (await pull("ack-dlq-dead", { batch_size: 10 })).json.result.messages;
    expect(there).toEqual([expect.objectContaining({ id, body: "doomed", attempts: 1, timestamp_ms: sentAt })]);
  });

  it("drops a retry that used up max_retries when there is no dead-letter queue", async () => {
    const { shards } = await clockedPullQueue("ack-drop", {
      settings: { visibility_timeout_ms: 1000, max_retries: 0 },
    });
    await send("ack-drop", "gone");
    const m = await pullOne("ack-drop");
    expect((await ack("ack-drop", { retries: [{ lease_id: m.lease_id }] })).json.result).toEqual({
      ackCount: 0,
      retryCount: 1,
      warnings: {},
    });
    expect(await backlog("ack-drop")).toBe(0);
    let dropped = 0;
    for (const s of shards) dropped += (await storageShardFor(env, s).stats()).totals.dropped;
    expect(dropped).toBe(1);
  });
});

describe("extending leases", () => {
  it("keeps a message invisible past its original timeout, and refuses a lease that was taken over", async () => {
    const { clock } = await clockedPullQueue("extend-lease");
    const id = (await send("extend-lease", "slow work")).json.result.message_id;
    const m = await pullOne("extend-lease");
    clock.advance(900);
    const res = await extend("extend-lease", { lease_ids: [m.lease_id], visibility_timeout_ms: 5000 });
    expect(res.status).toBe(200);
    expect(res.json.result).toEqual({ extended: 1, warnings: {} });
    clock.advance(1000); // past the original 1000 ms
    expect((await pull("extend-lease")).json.result.messages).toEqual([]);
    clock.advance(4000); // 900 + 5000 ms
    const again = await pullOne("extend-lease");
    expect(again).toMatchObject({ id, attempts: 2 });
    const stale = await extend("extend-lease", { lease_ids: [m.lease_id], visibility_timeout_ms: 5000 });
    expect(stale.json.result.extended).toBe(0);
    expect(stale.json.result.warnings[m.lease_id]).toContain("pulled again");
  });
});
