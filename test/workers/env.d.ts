import type { Env as ShardqEnv } from "../../src/env";

declare global {
  namespace Cloudflare {
    interface Env extends ShardqEnv {}
  }
}
export {};
