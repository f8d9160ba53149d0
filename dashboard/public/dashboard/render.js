// What one queue's panel shows: figures, the last hour's charts, the shard map, the
// consumer and its shards, the autoscaler's decisions. Each function redraws its part
// from the API's answers.
import { lineChart, shardPicture } from "./charts.js";
import { age, bytes, cell, num, sumBeats, time } from "./format.js";

const $ = (sel) => document.querySelector(sel);

export function renderFigures(info, metrics) {
  const b = sumBeats(metrics);
  const paused = info.settings.delivery_paused;
  $("#pause").textContent = paused ? "Resume delivery" : "Pause delivery";
  const figures = [
    ["Backlog", num(metrics.backlog_count)],
    ["Bytes", bytes(metrics.backlog_bytes)],
    ["Oldest message", age(metrics.oldest_message_timestamp_ms)],
    ["In / s", num(Math.round(b.inPerS))],
    ["Out / s", num(Math.round(b.outPerS))],
    ["Consumers running", num(metrics.consumer_concurrency)],
    ["Dead-lettered", num(b.dead)],
    // Ordered lanes: keys held back (in flight, waiting on a retry, a delay or a hand-off) of the keys with messages.
    ["Keys held", metrics.ordering ? `${num(metrics.ordering.held_keys)} of ${num(metrics.ordering.lanes)}` : "–"],
    ["Delivery", paused ? "paused" : "on"],
    ["Jurisdiction", info.jurisdiction ?? "none"],
  ];
  $("#figures").replaceChildren(
    ...figures.map(([label, value]) => {
      const d = document.createElement("div");
      const v = document.createElement("strong");
      v.textContent = value;
      v.dataset.figure = label;
      const l = document.createElement("span");
      l.textContent = label;
      d.append(v, l);
      return d;
    }),
  );
}

export function renderCharts(series) {
  const pts = series.points;
  lineChart($("#chart-backlog"), [
    { label: "backlog", color: "#3182ce", values: pts.map((p) => [p.at_ms, p.backlog_count]) },
  ]);
  lineChart($("#chart-rates"), [
    { label: "in/s", color: "#2f855a", values: pts.map((p) => [p.at_ms, p.messages_in_per_second]) },
    { label: "out/s", color: "#c05621", values: pts.map((p) => [p.at_ms, p.messages_out_per_second]) },
  ]);
}

export function renderShards(view, metrics) {
  $("#map-version").textContent =
    `version ${view.version ?? "–"}${view.published ? `, published ${view.published.version}` : ""}`;
  const backlog = new Map(metrics.shards.map((s) => [s.name, s]));
  const shards = view.shards.map((s) => ({
    ...s,
    backlog: backlog.get(s.name)?.backlog_count ?? s.heartbeat?.backlog_count ?? null,
    healthy: s.heartbeat ? s.heartbeat.healthy : null,
  }));
  shardPicture($("#shard-picture"), shards, view.version);
  $("#shards tbody").replaceChildren(
    ...shards.map((s) => {
      const tr = document.createElement("tr");
      const h = backlog.get(s.name)?.heartbeat;
      cell(tr, s.name, "mono");
      cell(tr, s.region);
      cell(tr, s.state, `state-${s.state}`);
      cell(tr, num(s.backlog), "n");
      cell(tr, h ? num(h.messages_in_per_second) : "–", "n");
      cell(tr, h ? num(h.messages_out_per_second) : "–", "n");
      cell(tr, h ? num(h.leased) : "–", "n");
      cell(tr, s.healthy === null ? "no report yet" : s.healthy ? "yes" : "missed heartbeats");
      return tr;
    }),
  );
}

export function renderConsumer(consumers, consumerShards) {
  const c = consumers[0];
  const box = $("#consumer");
  if (!c) {
    box.textContent = "No consumer: messages wait until one is added.";
  } else {
    const s = c.settings ?? {};
    box.textContent = `${c.type === "worker" ? `Worker ${c.script_name ?? c.script}` : "HTTP pull"}: batches of ${s.batch_size ?? "–"}, wait ${s.max_wait_time_ms ?? "–"} ms, ${s.max_retries ?? "–"} retries${c.dead_letter_queue ? `, dead letters to ${c.dead_letter_queue}` : ""}.`;
  }
  $("#add-consumer").hidden = Boolean(c);
  $("#redrive").hidden = !c?.dead_letter_queue;
  $("#consumer-shards tbody").replaceChildren(
    ...(consumerShards?.shards ?? []).map((s) => {
      const tr = document.createElement("tr");
      cell(tr, String(s.index ?? s.idx), "n");
      cell(tr, s.running ? "running" : "idle");
      cell(tr, num(s.delivered), "n");
      cell(tr, num(s.batches), "n");
      cell(tr, num(s.errors), "n");
      cell(tr, time(s.received_at));
      return tr;
    }),
  );
}

export function renderDecisions(decisions) {
  const list = $("#decisions");
  if (!decisions?.length) {
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = "No decisions yet.";
    list.replaceChildren(li);
    return;
  }
  list.replaceChildren(
    ...decisions.slice(0, 20).map((d) => {
      const li = document.createElement("li");
      const when = document.createElement("time");
      when.textContent = time(d.at);
      const kind = document.createElement("strong");
      kind.textContent = ` ${d.kind} `;
      li.append(when, kind, document.createTextNode(d.reason));
      return li;
    }),
  );
}
