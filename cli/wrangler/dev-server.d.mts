export const ROOT: string;
export function freePort(): Promise<number>;
export function portIsFree(port: number, host: string): Promise<boolean>;
export function wranglerBin(): string;
export function startWrangler(opts: {
  args: string[];
  readyUrl: string;
  readyLine?: RegExp;
  log?: (line: string) => void;
  timeoutMs?: number;
  env?: Record<string, string>;
  cwd?: string;
  signal?: AbortSignal;
}): Promise<{
  pid: number | undefined;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  stop: (signal?: NodeJS.Signals) => Promise<void>;
}>;
export function startWranglerOnFreePort(
  opts: (port: number) => Parameters<typeof startWrangler>[0],
  attempts?: number,
): Promise<Awaited<ReturnType<typeof startWrangler>> & { port: number }>;
