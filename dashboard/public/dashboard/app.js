// The shardq dashboard: what is in each queue and how fast it moves, the shard map,
// consumers and the autoscaler, and the actions an operator takes. Plain DOM, text
// set with textContent only (queue names and message bodies are user data).
import { api, apiPage, ApiError, queuePath, saveSession, session } from "./api.js";
import { age, bytes, cell, num, readableBody, sumBeats, time } from "./format.js";
import { renderCharts, renderConsumer, renderDecisions, renderFigures, renderShards } from "./render.js";

const $ = (sel) => document.querySelector(sel);
const LIST_EVERY_MS = 3000;
const QUEUE_EVERY_MS = 2000;

let selected = null; // the queue name shown in detail
let timers = [];

function status(text, isError = false) {
  const el = $("#queue-status");
  el.textContent = text;
  el.classList.toggle("error", isError);
}

function report(err) {
  if (err instanceof ApiError && err.status === 401) return signOut("Your token was refused: sign in again.");
  status(err instanceof Error ? err.message : String(err), true);
}

// ---- sign-in ----

async function signIn(account, token) {
  await api("/queues?per_page=1", { auth: { account, token } }); // proves the token before keeping it
  saveSession({ account, token });
}

function signOut(message = "") {
  saveSession(null);
  timers.forEach(clearInterval);
  timers = [];
  selected = null;
  Object.assign(list, { page: 1, prefix: "" });
  $("#queue-prefix").value = "";
  $("#app").hidden = true;
  $("#sign-out").hidden = true;
  $("#whoami").textContent = "";
  $("#sign-in").hidden = false;
  $("#sign-in-error").textContent = message;
  $("#sign-in-token").focus();
}

function start() {
  const s = session();
  $("#sign-in").hidden = true;
  $("#app").hidden = false;
  $("#sign-out").hidden = false;
  $("#whoami").textContent = `account ${s.account}`;
  refreshList();
  timers.push(setInterval(refreshList, LIST_EVERY_MS));
  timers.push(setInterval(() => selected && refreshQueue(), QUEUE_EVERY_MS));
}

// ---- the queue list ----

// An account may hold 10,000 queues: the list shows one page, filtered by name prefix,
// and asks for figures of that page's queues only.
const list = { page: 1, perPage: 20, prefix: "", asked: 0 };

async function refreshList() {
  const asked = ++list.asked;
  try {
    const query = new URLSearchParams({ page: String(list.page), per_page: String(list.perPage) });
    if (list.prefix) query.set("name_prefix", list.prefix);
    const { result: queues, info } = await apiPage(`/queues?${query}`);
    const total = info?.total_count ?? queues.length;
    const pages = info?.total_pages ?? 1;
    // The page was emptied by deletes (or a filter narrowed): show the last one that has queues.
    if (queues.length === 0 && list.page > 1 && total > 0) {
      list.page = pages;
      return refreshList();
    }
    // The list carries each queue's settings; its figures come from its shards.
    const rows = await Promise.all(
      queues.map(async (q) => ({ q, metrics: await api(`${queuePath(q.queue_name)}/metrics`), info: q })),
    );
    if (asked !== list.asked) return; // a later refresh (another page or filter) answers instead
    $("#queues-status").textContent = "";
    const body = $("#queues tbody");
    body.replaceChildren(
      ...rows.map(({ q, metrics, info }) => {
        const tr = document.createElement("tr");
        const b = sumBeats(metrics);
        const name = cell(tr, "");
        const link = document.createElement("button");
        link.type = "button";
        link.className = "link";
        link.textContent = q.queue_name;
        link.dataset.queue = q.queue_name;
        link.addEventListener("click", () => select(q.queue_name));
        name.append(link);
        cell(tr, num(metrics.backlog_count), "n backlog");
        cell(tr, bytes(metrics.backlog_bytes), "n");
        cell(tr, age(metrics.oldest_message_timestamp_ms), "n");
        cell(tr, num(Math.round(b.inPerS)), "n");
        cell(tr, num(Math.round(b.outPerS)), "n");
        cell(tr, num(metrics.consumer_concurrency), "n");
        cell(tr, num(b.dead), "n");
        cell(tr, info.settings.delivery_paused ? "paused" : "on", info.settings.delivery_paused ? "paused" : "");
        if (q.queue_name === selected) tr.classList.add("selected");
        tr.dataset.queue = q.queue_name;
        return tr;
      }),
    );
    $("#queues-empty").hidden = rows.length > 0;
    $("#queues-empty").textContent = list.prefix
      ? `No queue name starts with "${list.prefix}".`
      : "No queues yet: create one above.";
    const from = (list.page - 1) * list.perPage + 1;
    $("#queues-page").textContent = rows.length
      ? `Page ${list.page} of ${pages} · queues ${from} to ${from + rows.length - 1} of ${total}`
      : "0 queues";
    $("#queues-prev").disabled = list.page <= 1;
    $("#queues-next").disabled = list.page >= pages;
  } catch (err) {
    if (asked !== list.asked) return;
    if (err instanceof ApiError && err.status === 401) return report(err);
    $("#queues-status").textContent = err instanceof Error ? err.message : String(err);
  }
}

/** Another page, size or filter: shown now, not at the next tick. */
function showList(change) {
  Object.assign(list, change);
  refreshList();
}

// ---- one queue ----

async function select(name) {
  selected = name;
  $("#queue").hidden = false;
  $("#queue-title").textContent = name;
  $("#peeked tbody").replaceChildren();
  $("#lookup-result").textContent = "";
  status("");
  for (const tr of document.querySelectorAll("#queues tbody tr"))
    tr.classList.toggle("selected", tr.dataset.queue === name);
  await refreshQueue();
  $("#queue-title").scrollIntoView({ block: "start" });
}

let current = { info: null, consumers: [] };

async function refreshQueue() {
  const name = selected;
  if (!name) return;
  try {
    const path = queuePath(name);
    const [info, metrics, shards, series, consumers] = await Promise.all([
      api(path),
      api(`${path}/metrics`),
      api(`${path}/shards`),
      api(`${path}/series`),
      api(`${path}/consumers`),
    ]);
    if (name !== selected) return;
    current = { info, consumers };
    renderFigures(info, metrics);
    renderCharts(series);
    renderShards(shards, metrics);
    renderConsumer(consumers, shards.consumer_shards);
    renderDecisions(shards.decisions);
    const s = $("#settings-form");
    if (!s.contains(document.activeElement)) {
      s.delivery_delay.value = info.settings.delivery_delay;
      s.message_retention_period.value = info.settings.message_retention_period;
    }
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      selected = null;
      $("#queue").hidden = true;
      return;
    }
    report(err);
  }
}

// ---- actions ----

function confirmByName(text, name) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = text;
  const input = $("#confirm-input");
  input.value = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok" && input.value === name), {
      once: true,
    });
    dialog.showModal();
    input.focus();
  });
}

async function act(label, fn) {
  status(`${label}…`);
  try {
    const msg = await fn();
    status(msg ?? `${label}: done`);
    await Promise.all([refreshQueue(), refreshList()]);
  } catch (err) {
    report(err);
  }
}

function wire() {
  $("#sign-in-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    // By id: the inputs have no name, so that a native submit can never carry the token (index.html).
    const account = $("#sign-in-account");
    const token = $("#sign-in-token");
    $("#sign-in-error").textContent = "";
    try {
      await signIn(account.value.trim(), token.value.trim());
      token.value = "";
      start();
    } catch (err) {
      $("#sign-in-error").textContent =
        err instanceof ApiError && (err.status === 401 || err.status === 404)
          ? "That account and token were refused."
          : String(err.message ?? err);
    }
  });
  $("#sign-out").addEventListener("click", () => signOut());
  $("#queue-prefix").addEventListener("input", (e) => showList({ prefix: e.target.value, page: 1 }));
  $("#queues-per-page").addEventListener("change", (e) => showList({ perPage: Number(e.target.value), page: 1 }));
  $("#queues-prev").addEventListener("click", () => showList({ page: Math.max(1, list.page - 1) }));
  $("#queues-next").addEventListener("click", () => showList({ page: list.page + 1 }));
  $("#queues-filter").addEventListener("submit", (e) => e.preventDefault());

  $("#create-queue-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = e.target;
    const name = f.queue_name.value.trim();
    act(`Creating ${name}`, async () => {
      const jurisdiction = f.jurisdiction.value;
      await api("/queues", {
        method: "POST",
        body: {
          queue_name: name,
          ...(jurisdiction ? { jurisdiction } : {}),
          settings: {
            delivery_delay: Number(f.delivery_delay.value),
            message_retention_period: Number(f.message_retention_period.value),
          },
        },
      });
      f.queue_name.value = "";
      f.jurisdiction.value = "";
      $("#create-queue").open = false;
      await refreshList();
      await select(name);
      return `Queue ${name} created`;
    });
  });

  $("#pause").addEventListener("click", () => {
    const paused = current.info?.settings.delivery_paused;
    act(paused ? "Resuming delivery" : "Pausing delivery", async () => {
      await api(queuePath(selected), { method: "PATCH", body: { settings: { delivery_paused: !paused } } });
      return paused ? "Delivery resumed" : "Delivery paused";
    });
  });

  $("#purge").addEventListener("click", async () => {
    const name = selected;
    if (
      !(await confirmByName(`Delete every message in ${name}, ready, delayed and leased? This cannot be undone.`, name))
    )
      return status("Purge cancelled");
    act(`Purging ${name}`, async () => {
      let purged = 0;
      for (let i = 0; i < 100; i++) {
        const r = await api(`${queuePath(name)}/purge`, {
          method: "POST",
          body: { delete_messages_permanently: true },
        });
        purged += r?.purged ?? 0;
        if (r?.completed !== false) break;
      }
      return `Purged ${num(purged)} message(s) from ${name}`;
    });
  });

  $("#delete-queue").addEventListener("click", async () => {
    const name = selected;
    if (!(await confirmByName(`Delete queue ${name} and all its messages?`, name))) return status("Delete cancelled");
    act(`Deleting ${name}`, async () => {
      await api(queuePath(name), { method: "DELETE" });
      selected = null;
      $("#queue").hidden = true;
      return `Queue ${name} deleted`;
    });
  });

  $("#redrive").addEventListener("click", () => {
    const dlq = current.consumers[0]?.dead_letter_queue;
    if (!dlq) return;
    act(`Redriving ${dlq}`, async () => {
      const r = await api(`${queuePath(dlq)}/redrive`, { method: "POST", body: { target_queue: selected } });
      return `Moved ${num(r?.moved ?? 0)} message(s) from ${dlq} back to ${selected}`;
    });
  });

  $("#add-consumer-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = e.target;
    const body = {
      type: f.type.value,
      ...(f.type.value === "worker" ? { script_name: f.script_name.value.trim() } : {}),
      settings: {
        batch_size: Number(f.batch_size.value),
        max_wait_time_ms: Number(f.max_wait_time_ms.value),
        max_retries: Number(f.max_retries.value),
      },
      ...(f.dead_letter_queue.value.trim() ? { dead_letter_queue: f.dead_letter_queue.value.trim() } : {}),
    };
    act("Adding the consumer", async () => {
      await api(`${queuePath(selected)}/consumers`, { method: "POST", body });
      return "Consumer added";
    });
  });

  $("#settings-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = e.target;
    act("Saving settings", async () => {
      await api(queuePath(selected), {
        method: "PATCH",
        body: {
          settings: {
            delivery_delay: Number(f.delivery_delay.value),
            message_retention_period: Number(f.message_retention_period.value),
          },
        },
      });
      return "Settings saved";
    });
  });

  $("#send-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = e.target;
    act("Sending", async () => {
      let body = f.body.value;
      if (f.content_type.value === "json") {
        try {
          body = JSON.parse(body);
        } catch {
          throw new Error("The test message is not valid JSON: choose text, or fix it.");
        }
      }
      const r = await api(`${queuePath(selected)}/messages`, {
        method: "POST",
        body: { body, content_type: f.content_type.value },
      });
      $("#lookup-form").elements.message_id.value = r?.message_id ?? "";
      return `Sent message ${r?.message_id ?? ""}`;
    });
  });

  $("#lookup-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const id = e.target.elements.message_id.value.trim();
    const out = $("#lookup-result");
    try {
      out.textContent = JSON.stringify(await api(`${queuePath(selected)}/messages/${encodeURIComponent(id)}`), null, 2);
    } catch (err) {
      out.textContent = err.message;
    }
  });

  $("#peek").addEventListener("click", async () => {
    try {
      const r = await api(`${queuePath(selected)}/messages?limit=20`);
      $("#peeked tbody").replaceChildren(
        ...r.messages.map((m) => {
          const tr = document.createElement("tr");
          cell(tr, m.id, "mono");
          cell(tr, time(m.timestamp_ms));
          cell(tr, String(m.attempts), "n");
          cell(tr, m.content_type);
          const body = readableBody(m);
          cell(tr, body.length > 200 ? `${body.slice(0, 200)}…` : body, "mono body");
          return tr;
        }),
      );
      status(r.messages.length ? `${r.messages.length} ready message(s), oldest first` : "No ready messages");
    } catch (err) {
      report(err);
    }
  });
}

wire();
if (session()) start();
else $("#sign-in-token").focus();
