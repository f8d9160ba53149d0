import { HttpError } from "../src/errors";
import type { Env } from "../src/env";

export interface Principal {
  accountId: string;
}

interface TokenTable {
  source: string;
  /** SHA-256 of each token (hex) -> its account. Comparing digests keeps lookups free of token-dependent timing. */
  byDigest: Map<string, Principal>;
}

let table: TokenTable | null = null;

async function tokens(env: Env): Promise<TokenTable> {
  const source = env.AUTH_TOKENS ?? "";
  if (table && table.source === source) return table;
  const byDigest = new Map<string, Principal>();
  if (source.trim() !== "") {
    let parsed: unknown;
    try {
      parsed = JSON.parse(source);
    } catch {
      throw new Error('AUTH_TOKENS is not valid JSON; expected {"<token>": {"account": "<account id>"}}');
    }
    for (const [token, value] of Object.entries(parsed as Record<string, { account?: unknown }>)) {
      if (typeof value?.account !== "string" || value.account === "") throw new Error("AUTH_TOKENS: every token needs an account");
      byDigest.set(await sha256Hex(token), { accountId: value.account });
    }
  }
  table = { source, byDigest };
  return table;
}

/** The account a request's bearer token belongs to; 401 for a missing, malformed or unknown token. */
export async function authenticate(request: Request, env: Env): Promise<Principal> {
  const header = request.headers.get("authorization");
  if (!header) throw new HttpError("unauthorized", "missing Authorization header; expected 'Bearer <token>'", "authorization");
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match) throw new HttpError("unauthorized", "malformed Authorization header; expected 'Bearer <token>'", "authorization");
  const principal = (await tokens(env)).byDigest.get(await sha256Hex(match[1]!));
  if (!principal) throw new HttpError("unauthorized", "invalid token", "authorization");
  return principal;
}

async function sha256Hex(s: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}
