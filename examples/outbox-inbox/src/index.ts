/**
 * Two Durable Objects and a queue between them, each change made once (docs/outbox-inbox.md):
 *
 *   Account  a balance; withdraw() lowers it and records a transfer in the same transaction
 *            (shardq/outbox), so the transfer is sent if and only if the balance changed
 *   Ledger   the transfers received; record() enters each one once (shardq/inbox), however
 *            often the queue delivers it
 *
 *   POST /accounts/<name>/withdraw?amount=5   answers { balance, transfer } (the transfer's id), or 409
 *   GET  /ledger                               every entry, and the total per account
 *
 * Plain Cloudflare Queues code: `wrangler dev` runs it on Cloudflare's local queues, and
 * `npx shardq dev -c examples/outbox-inbox/wrangler.toml` on shardq, unchanged. The outbox's
 * default id mode (an envelope around each body) works with both bindings.
 */
import { DurableObject } from "cloudflare:workers";
import { outbox, type Outbox } from "shardq/outbox";
import { forInbox, inbox, settle, type Inbox, type InboxOutcome } from "shardq/inbox";

interface Env {
  ACCOUNT: DurableObjectNamespace<Account>;
  LEDGER: DurableObjectNamespace<Ledger>;
  TRANSFERS: Queue<Transfer>;
}

interface Transfer {
  account: string;
  amount: number;
}

const OPENING_BALANCE = 100;

export class Account extends DurableObject<Env> {
  readonly #outbox: Outbox<Transfer>;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS account (one INTEGER PRIMARY KEY, balance INTEGER NOT NULL)");
    ctx.storage.sql.exec("INSERT OR IGNORE INTO account VALUES (1, ?)", OPENING_BALANCE);
    this.#outbox = outbox(ctx, env.TRANSFERS);
  }

  /** Lowers the balance and records the transfer, both or neither. */
  withdraw(account: string, amount: number): { balance: number; transfer: string } {
    return this.ctx.storage.transactionSync(() => {
      const { balance } = this.ctx.storage.sql
        .exec<{ balance: number }>("UPDATE account SET balance = balance - ? RETURNING balance", amount)
        .one();
      // Throwing rolls back the update and the recorded transfer with it: nothing is sent.
      if (balance < 0) throw new RangeError(`${account} has ${balance + amount}, less than ${amount}`);
      return { balance, transfer: this.#outbox.send({ account, amount }) };
    });
  }

  /** The outbox retries failed sends from the alarm; this object has no alarm of its own. */
  override async alarm(): Promise<void> {
    await this.#outbox.alarm();
  }
}

export class Ledger extends DurableObject<Env> {
  readonly #inbox: Inbox;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    ctx.storage.sql.exec(
      "CREATE TABLE IF NOT EXISTS entries (transfer TEXT PRIMARY KEY, account TEXT NOT NULL, amount INTEGER NOT NULL)",
    );
    this.#inbox = inbox(ctx);
  }

  /** Enters each transfer once, in order; the outcomes tell the queue handler what to ack. */
  record(messages: Array<{ id: string; body: unknown }>): InboxOutcome[] {
    return this.#inbox.each<Transfer>(messages, (tx) => {
      tx.sql.exec("INSERT INTO entries VALUES (?, ?, ?)", tx.id, tx.body.account, tx.body.amount);
    });
  }

  entries() {
    const sql = this.ctx.storage.sql;
    return {
      entries: sql.exec("SELECT transfer, account, amount FROM entries").toArray(),
      totals: sql.exec("SELECT account, sum(amount) AS total FROM entries GROUP BY account").toArray(),
    };
  }
}

export default {
  async fetch(request, env): Promise<Response> {
    const url = new URL(request.url);
    const withdraw = /^\/accounts\/([\w-]{1,64})\/withdraw$/.exec(url.pathname);
    if (withdraw && request.method === "POST") {
      const amount = Number(url.searchParams.get("amount") ?? "1");
      if (!Number.isInteger(amount) || amount < 1)
        return Response.json({ error: "amount: a whole number, 1 or more" }, { status: 400 });
      const name = withdraw[1]!;
      try {
        return Response.json(await env.ACCOUNT.getByName(name).withdraw(name, amount));
      } catch (err) {
        return Response.json({ error: (err as Error).message }, { status: 409 });
      }
    }
    if (url.pathname === "/ledger" && request.method === "GET")
      return Response.json(await env.LEDGER.getByName("main").entries());
    return Response.json({ error: "try POST /accounts/<name>/withdraw?amount=5 or GET /ledger" }, { status: 404 });
  },

  /** A Message cannot cross to the object: plain copies go, and the outcomes come back to settle the batch. */
  async queue(batch, env): Promise<void> {
    const outcomes = await env.LEDGER.getByName("main").record(forInbox(batch.messages));
    settle(batch.messages, outcomes);
  },
} satisfies ExportedHandler<Env, Transfer>;
