export const ROOT: string;
export function freePort(): Promise<number>;
export function startWrangler(opts: {
  args: string[];
  readyUrl: string;
  log?: (line: string) => void;
  timeoutMs?: number;
  env?: Record<string, string>;
}): Promise<{ pid: number | undefined; output: () => string; stop: (signal?: NodeJS.Signals) => Promise<void> }>;
