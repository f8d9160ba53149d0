/**
 * What a long-polling pull and its Coordinator say to each other. Split from protocol.ts,
 * which holds a message's own calls.
 */

/**
 * How a long-polling pull's wait at its Coordinator ended: woken by messages, its time
 * up (or cancelled), delivery paused under it, or refused before it waited because the
 * queue's or the token's waiting pulls are at their cap (coordinator/pull-waiters.ts).
 */
export type PullWaitAnswer = "woken" | "ended" | "paused" | { capped: WaitCap; limit: number };

/** The cap of waiting pulls a pull went over: the queue's, or its token's on the queue. */
export type WaitCap = "queue" | "token";

/** What a cancel found: the pull waiting or just woken (cancelled), or why not. */
export type PullCancelAnswer = { cancelled: true } | { cancelled: false; reason: "answered" | "not_waiting" };
