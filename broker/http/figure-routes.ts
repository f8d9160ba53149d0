/**
 * The routes that read figures (./route-table.ts): every queue of the account in Prometheus'
 * format, and one queue's backlog, control plane and last hour.
 */
import { prometheusMetrics } from "../metrics/prometheus-api";
import { queueMetrics, seriesResult, shardsResult } from "../openapi/figure-results";
import { getSeries } from "./dashboard-api";
import { getMetrics } from "./messages-api";
import type { Route } from "./route";
import { A, account, C, ok, QUEUE, queueRef, S } from "./route-kit";
import { getShards } from "./shards-api";

export const FIGURE_ROUTES: readonly Route[] = [
  {
    method: "GET",
    path: "/metrics",
    access: [A],
    handle: (req, env) => prometheusMetrics(env, account(req)),
    operationId: "prometheusMetrics",
    tag: "Figures",
    summary: "Every queue of the token's account, in Prometheus' text format",
    description:
      "Gauges read now from the storage shards and Coordinators; counters as the shards' heartbeats last reported them (docs/monitoring.md).",
    answer: {
      kind: "raw",
      mediaType: "text/plain",
      schema: { type: "string" },
      description: "The Prometheus text exposition format, version 0.0.4.",
    },
  },
  {
    method: "GET",
    path: `${QUEUE}/metrics`,
    access: [S, C, A],
    cloudflare: true,
    handle: (req, env) => getMetrics(env, account(req), queueRef(req)),
    operationId: "getQueueMetrics",
    tag: "Figures",
    summary: "The queue's backlog, summed and per shard",
    answer: ok(queueMetrics, "The queue's figures."),
  },
  {
    method: "GET",
    path: `${QUEUE}/shards`,
    access: [A],
    handle: (req, env) => getShards(env, account(req), queueRef(req)),
    operationId: "getShards",
    tag: "Figures",
    summary: "The queue's control plane",
    answer: ok(shardsResult, "Shard map, heartbeats, consumer shards, decisions."),
  },
  {
    method: "GET",
    path: `${QUEUE}/series`,
    access: [A],
    handle: (req, env) => getSeries(env, account(req), queueRef(req)),
    operationId: "getSeries",
    tag: "Figures",
    summary: "The queue's last hour, a point per step",
    answer: ok(seriesResult, "Points, oldest first."),
  },
];
