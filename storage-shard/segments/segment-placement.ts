/**
 * Which messages of a write share a segment, and what kind of segment each is: ready on
 * arrival, due later (scheduled), keyed (in the write's order, delayed ones too), or keyed
 * copies written again (scheduled, due never: KEYED_DUE). segment-writes.ts writes them.
 */
import { SEGMENT_MAX_BYTES, SEGMENT_MAX_MESSAGES, type Header } from "./segment";

/** A message to write into a new segment: its header but for what its place decides, and its body. */
export type NewMessage = Omit<Header, "id" | "size" | "indexed"> & {
  /** Absent: the shard draws a located id. */
  id?: string;
  body: Uint8Array;
};

/**
 * A scheduled segment of rewritten keyed copies: never offered by the due index (its
 * messages wait for their key: key-book.ts), found at start by this due time.
 */
export const KEYED_DUE = Number.MAX_SAFE_INTEGER;

/** Whether a message is a keyed copy written again (a retry, a lease that ran out): it keeps its place in its key's order. */
export function isKeyedCopy(m: Pick<NewMessage, "key" | "copy">): boolean {
  return m.key !== undefined && m.copy !== "";
}

/**
 * A keyed message sent, delayed or not, goes with its batch in a segment the cursor reads, in
 * the batch's order (its key's order is its place: a delayed one holds those behind it);
 * a keyed copy written again goes in a segment of its own kind (KEYED_DUE).
 */
function kindOf(m: Pick<NewMessage, "dueAt" | "key" | "copy">): "ready" | "due" | "keyed" | "keyed copy" {
  if (m.key !== undefined) return m.copy !== "" ? "keyed copy" : "keyed";
  return m.dueAt > 0 ? "due" : "ready";
}

/**
 * Which messages share a segment: those ready on arrival apart from those due later, and
 * keyed ones apart from both (each kind in request order), each run cut at SEGMENT_MAX_BYTES and
 * SEGMENT_MAX_MESSAGES. The same messages always give the same groups, so a batch
 * written again finds its ids (appendAgain).
 */
export function placement(messages: readonly Pick<NewMessage, "dueAt" | "body" | "key" | "copy">[]): number[][] {
  const groups: number[][] = [];
  for (const kind of ["ready", "due", "keyed", "keyed copy"] as const) {
    let group: number[] = [];
    let bytes = 0;
    messages.forEach((m, i) => {
      if (kindOf(m) !== kind) return;
      if (group.length > 0 && (bytes + m.body.byteLength > SEGMENT_MAX_BYTES || group.length >= SEGMENT_MAX_MESSAGES)) {
        groups.push(group);
        group = [];
        bytes = 0;
      }
      group.push(i);
      bytes += m.body.byteLength;
    });
    if (group.length > 0) groups.push(group);
  }
  return groups;
}
