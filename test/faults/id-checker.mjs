// The checker's id rules: message ids are unique per queue, whoever chose them,
// and a send's answer with an id means that message is stored under it. From the history
// alone:
//
//   answered twice     one id answered to two sends of different messages (harness ids)
//   another id         a send that chose its id (`id` in its invoke value) answered with another
//   another body       a delivery under an acknowledged id carrying another message than the
//                      one that id was acknowledged for
//
// Sends under a chosen id (id-collisions.mjs) are counted by what they chose and how they
// were answered: a `steal` (a new message under an id answered before) may only be refused
// (409) or left unknown, and a yes to it shows up as "answered twice"; a `same` (that
// message again) and an `own` id may be answered with their id or, `same`, refused.

import { callsOf } from "./history.mjs";

/** How many examples of each anomaly a result keeps. */
const EXAMPLES = 20;

/**
 * @param {import("./history.mjs").Op[]} ops
 * @param {Array<{ h: string | null, id: string, q: string, g: boolean }>} deliveries
 */
export function checkIds(ops, deliveries) {
  /** The harness id each id was first acknowledged for. */
  const owner = /** @type {Map<string, string>} */ (new Map());
  const answeredTwice = /** @type {Array<{ id: string, first: string, then: string }>} */ ([]);
  const anotherId = /** @type {Array<{ h: string, chose: string, answered: string }>} */ ([]);
  const anotherBody = /** @type {Array<{ id: string, acknowledged: string, delivered: string, q: string }>} */ ([]);
  const chosen =
    /** @type {Record<string, { ok: number, refused: number, other_refusal: number, unknown: number }>} */ ({});
  for (const { inv, done: o } of callsOf(ops, "send")) {
    if (!o) continue;
    const v = inv.value ?? {};
    if (typeof v.chose === "string") {
      const c = (chosen[v.chose] ??= { ok: 0, refused: 0, other_refusal: 0, unknown: 0 });
      if (o.type === "ok") c.ok++;
      else if (o.type === "fail") o.value?.status === 409 ? c.refused++ : c.other_refusal++;
      else c.unknown++;
    }
    if (o.type !== "ok") continue;
    /** @type {string[]} */ (v.hs ?? []).forEach((h, i) => {
      const id = o.value?.ids?.[i];
      if (typeof id !== "string") return;
      if (typeof v.id === "string" && id !== v.id) anotherId.push({ h, chose: v.id, answered: id });
      const first = owner.get(id);
      if (first === undefined) owner.set(id, h);
      else if (first !== h) answeredTwice.push({ id, first, then: h });
    });
  }
  for (const d of deliveries) {
    if (d.h === null || d.g) continue;
    const h = owner.get(d.id);
    if (h !== undefined && h !== d.h) anotherBody.push({ id: d.id, acknowledged: h, delivered: d.h, q: d.q });
  }
  const failures = /** @type {string[]} */ ([]);
  if (answeredTwice.length)
    failures.push(`${answeredTwice.length} message ids answered to sends of two different messages`);
  if (anotherId.length)
    failures.push(`${anotherId.length} sends under an id of their choosing answered with another id`);
  if (anotherBody.length)
    failures.push(`${anotherBody.length} deliveries of an acknowledged id with another message's body`);
  return {
    figures: {
      acknowledged_ids: owner.size,
      chosen,
      answered_twice: answeredTwice.length,
      another_id: anotherId.length,
      delivered_with_another_body: anotherBody.length,
    },
    examples: {
      answered_twice: answeredTwice.slice(0, EXAMPLES),
      another_id: anotherId.slice(0, EXAMPLES),
      delivered_with_another_body: anotherBody.slice(0, EXAMPLES),
    },
    failures,
  };
}
