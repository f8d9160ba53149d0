import { HttpError } from "../../src/kernel/errors";
import type { Env } from "../../src/kernel/env";

/**
 * What a token may do. `send`: post messages. `consume`: pull, ack and extend leases.
 * `admin`: everything else (queues, consumers, purge, redrive, lookups, peeks, the
 * operator's figures). None implies another; a token without `scopes` has all three.
 * Which route needs which scope is decided in one table, ROUTES in broker/http/route-table.ts.
 */
export type Scope = "send" | "consume" | "admin";
export const SCOPES: readonly Scope[] = ["send", "consume", "admin"];

export interface Principal {
  accountId: string;
  scopes: ReadonlySet<Scope>;
  /** Names the token without disclosing it (a prefix of its digest): what per-token caps count by. */
  tokenId: string;
}

interface TokenEntry {
  principal: Principal;
  revoked: boolean;
}

interface TokenTable {
  source: string;
  /** SHA-256 of each token (hex) -> its entry. Comparing digests keeps lookups free of token-dependent timing. */
  byDigest: Map<string, TokenEntry>;
}

let table: TokenTable | null = null;

const SHAPE =
  'expected {"<token>": {"account": "<account id>", "scopes"?: ["send", "consume", "admin"], "revoked"?: true}}';

async function tokens(env: Env): Promise<TokenTable> {
  const source = env.AUTH_TOKENS ?? "";
  if (table && table.source === source) return table;
  const byDigest = new Map<string, TokenEntry>();
  if (source.trim() !== "") {
    let parsed: unknown;
    try {
      parsed = JSON.parse(source);
    } catch {
      throw new Error(`AUTH_TOKENS is not valid JSON; ${SHAPE}`);
    }
    for (const [token, value] of Object.entries(
      parsed as Record<string, { account?: unknown; scopes?: unknown; revoked?: unknown }>,
    )) {
      if (typeof value?.account !== "string" || value.account === "")
        throw new Error(`AUTH_TOKENS: every token needs an account; ${SHAPE}`);
      const digest = await sha256Hex(token);
      byDigest.set(digest, {
        principal: { accountId: value.account, scopes: parseScopes(value.scopes), tokenId: digest.slice(0, 16) },
        revoked: value.revoked === true,
      });
    }
  }
  table = { source, byDigest };
  return table;
}

/** A misconfigured entry fails loudly (a 500 and a log) rather than grant more than it says. */
function parseScopes(raw: unknown): ReadonlySet<Scope> {
  if (raw === undefined) return new Set(SCOPES);
  if (!Array.isArray(raw) || raw.length === 0 || !raw.every((s) => SCOPES.includes(s as Scope))) {
    throw new Error(`AUTH_TOKENS: "scopes" must list one or more of ${SCOPES.join(", ")}; ${SHAPE}`);
  }
  return new Set(raw as Scope[]);
}

/** The account a request's bearer token belongs to; 401 for a missing, malformed, unknown or revoked token. */
export async function authenticate(request: Request, env: Env): Promise<Principal> {
  const header = request.headers.get("authorization");
  if (!header)
    throw new HttpError("unauthorized", "missing Authorization header; expected 'Bearer <token>'", "authorization");
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  if (!match)
    throw new HttpError("unauthorized", "malformed Authorization header; expected 'Bearer <token>'", "authorization");
  const entry = (await tokens(env)).byDigest.get(await sha256Hex(match[1]!));
  if (!entry) throw new HttpError("unauthorized", "invalid token", "authorization");
  if (entry.revoked) throw new HttpError("unauthorized", "this token has been revoked", "authorization");
  return entry.principal;
}

/** 403 unless the token holds one of `accepted`. Depends on the route only, so it discloses nothing about any queue. */
export function authorize(principal: Principal, accepted: readonly Scope[], method: string, path: string): void {
  if (accepted.some((s) => principal.scopes.has(s))) return;
  const needs =
    accepted.length === 1
      ? `the "${accepted[0]}" scope`
      : `one of the scopes ${accepted.map((s) => `"${s}"`).join(", ")}`;
  throw new HttpError("forbidden", `this token lacks ${needs}, which ${method} ${path} needs`, "authorization");
}

async function sha256Hex(s: string): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(s)));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}
