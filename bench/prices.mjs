// Every price the benchmark's cost model uses (bench/compare.mjs, "Cost model" in
// bench/README.md): Cloudflare's published list prices on the Workers Paid plan, each with
// the page it comes from, the date it was read, and the page's own words. Usage included
// in the plan (the first million requests, the first 50 million rows written, ...) is left
// out on every line, for shardq and for Cloudflare Queues alike: these are the prices of
// the next million, which is what a busy queue pays.
//
// Read on 2026-11-23 with the search tool, from its stored copies of the pages below and of
// their source in github.com/cloudflare/cloudflare-docs (the files named in `source`). A
// stored copy may lag the live page: read them again before quoting a figure outside this repo.

export const PRICES_READ_ON = "2026-11-23";

const DO_PRICING = "https://developers.cloudflare.com/durable-objects/platform/pricing/";
const DO_PRICING_SOURCE =
  "cloudflare/cloudflare-docs: src/content/partials/durable-objects/durable-objects-pricing.mdx";
const WORKERS_PRICING = "https://developers.cloudflare.com/workers/platform/pricing/";
const WORKERS_PRICING_SOURCE = "cloudflare/cloudflare-docs: src/content/docs/workers/platform/pricing.mdx";
const QUEUES_PRICING = "https://developers.cloudflare.com/queues/platform/pricing/";
const QUEUES_PRICING_SOURCE = "cloudflare/cloudflare-docs: src/content/partials/workers/queues_pricing.mdx";

/**
 * @typedef {{ usd: number, per: number, perLabel: string, unit: string, url: string, source: string, read: string, quote: string }} Price
 * `usd` for `per` units of `unit` (`perLabel` says it in words).
 */

/** @satisfies {Record<string, Price>} */
export const PRICES = {
  doRequests: {
    usd: 0.15,
    per: 1e6,
    perLabel: "million requests",
    unit: "Durable Object requests (RPC calls and alarm invocations)",
    url: DO_PRICING,
    source: DO_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "Requests: 1 million, + $0.15/million. Includes HTTP requests, RPC sessions, WebSocket messages, and alarm invocations. " +
      "Every RPC method call on a Durable Objects stub is its own RPC session and therefore a single billed request.",
  },
  doDuration: {
    usd: 12.5,
    per: 1e6,
    perLabel: "million GB-s",
    unit: "GB-s of Durable Object duration (128 MB per active object)",
    url: DO_PRICING,
    source: DO_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "Duration: 400,000 GB-s, + $12.50/million GB-s. Duration billing charges for the 128 MB of memory your Durable Object is allocated, regardless of actual usage. " +
      "Durable Objects that are idle and eligible for hibernation are not billed for duration, even before the runtime has hibernated them.",
  },
  rowsRead: {
    usd: 0.001,
    per: 1e6,
    perLabel: "million rows",
    unit: "SQLite rows read",
    url: DO_PRICING,
    source: DO_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "Rows reads: First 25 billion / month included + $0.001 / million rows. Key-value methods like get(), put(), delete(), or list() store and query data in a hidden SQLite table and are billed as rows read and rows written.",
  },
  rowsWritten: {
    usd: 1.0,
    per: 1e6,
    perLabel: "million rows",
    unit: "SQLite rows written (index entries, deletes and setAlarm() included)",
    url: DO_PRICING,
    source: DO_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "Rows written: First 50 million / month included + $1.00 / million rows. Each setAlarm() is billed as a single row written. Deletes are counted as rows written.",
  },
  storage: {
    usd: 0.2,
    per: 1,
    perLabel: "GB-month",
    unit: "GB-month of SQL stored data",
    url: DO_PRICING,
    source: DO_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "SQL Stored data: 5 GB-month, + $0.20/ GB-month. Durable Objects will be billed for stored data until the data is removed. " +
      "(Workflows pricing, which bills storage 'identical to Durable Objects SQL storage': A GB-month is calculated by averaging the peak storage per day over a billing period (30 days).)",
  },
  workerRequests: {
    usd: 0.3,
    per: 1e6,
    perLabel: "million requests",
    unit: "Worker requests (inbound; not subrequests, not calls over a service binding)",
    url: WORKERS_PRICING,
    source: WORKERS_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "Standard: 10 million included per month +$0.30 per additional million. Inbound requests to your Worker. Cloudflare does not bill for subrequests you make from your Worker. " +
      "Requests made from your Worker to another worker via a Service Binding do not incur additional request fees. [...] if Worker A makes a subrequest to Worker B via a Service Binding, " +
      "or calls an RPC method provided by Worker B via a Service Binding, this is billed as: One request (for the initial invocation of Worker A); The total amount of CPU time used across both Worker A and Worker B.",
  },
  workerCpuMs: {
    usd: 0.02,
    per: 1e6,
    perLabel: "million CPU ms",
    unit: "Worker CPU milliseconds",
    url: WORKERS_PRICING,
    source: WORKERS_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote: "30 million CPU milliseconds included per month +$0.02 per additional million CPU milliseconds.",
  },
  queuesOperations: {
    usd: 0.4,
    per: 1e6,
    perLabel: "million operations",
    unit: "Cloudflare Queues operations (each 64 KB written, read or deleted)",
    url: QUEUES_PRICING,
    source: QUEUES_PRICING_SOURCE,
    read: PRICES_READ_ON,
    quote:
      "Standard operations: 1,000,000 operations/month included + $0.40/million operations. An operation is counted for each 64 KB of data that is written, read, or deleted. " +
      "A KB is defined as 1,000 bytes, and each message includes approximately 100 bytes of internal metadata. Operations are per message, not per batch. " +
      "In most cases, it takes 3 operations to deliver a message: 1 write, 1 read, and 1 delete. Each retry incurs a read operation.",
  },
};

/** Cloudflare Queues bills each 64 KB (of 1,000 bytes) of a message, metadata included, as one operation. */
export const QUEUES_OPERATION_BYTES = 64_000;
/** "each message includes approximately 100 bytes of internal metadata" (PRICES.queuesOperations). */
export const QUEUES_METADATA_BYTES = 100;
/** A delivered message: one write, one read, one delete (PRICES.queuesOperations). */
export const QUEUES_OPERATIONS_PER_DELIVERY = 3;
/** Durable Objects are billed as 128 MB each (PRICES.doDuration). */
export const DO_MEMORY_GB = 0.128;
/** The 30-day month storage is billed over (PRICES.storage). */
export const SECONDS_PER_MONTH = 30 * 86_400;

/** Dollars for `count` units at `price`. @param {Price} price @param {number} count */
export const usd = (price, count) => (price.usd * count) / price.per;

/**
 * What Cloudflare Queues would bill for delivering these messages: per message, one write, one
 * read and one delete of each 64 KB chunk (body and metadata), and one more read per
 * redelivery. Dollars.
 * @param {{ delivered: number, bytesPerMessage: number, redeliveries?: number }} m
 */
export function queuesUsd({ delivered, bytesPerMessage, redeliveries = 0 }) {
  const chunks = Math.max(1, Math.ceil((bytesPerMessage + QUEUES_METADATA_BYTES) / QUEUES_OPERATION_BYTES));
  return usd(PRICES.queuesOperations, chunks * (delivered * QUEUES_OPERATIONS_PER_DELIVERY + redeliveries));
}

/** The price table as Markdown, for the report. */
export function pricesMarkdown() {
  return [
    "| what | list price | source (read " + PRICES_READ_ON + ") |",
    "| --- | --- | --- |",
    ...Object.values(PRICES).map(
      (p) => `| ${p.unit} | $${p.usd.toFixed(p.usd < 0.01 ? 3 : 2)} per ${p.perLabel} | ${p.url} |`,
    ),
  ].join("\n");
}
