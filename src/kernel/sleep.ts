/** Waits `ms` milliseconds; zero or less resolves at once, without a timer. */
export const sleep = (ms: number): Promise<void> =>
  ms > 0 ? new Promise((r) => setTimeout(r, ms)) : Promise.resolve();
