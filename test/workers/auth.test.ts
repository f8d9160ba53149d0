import { describe, expect, it } from "vitest";
import { OTHER_TOKEN, api, createQueue, queuePath, queuesPath } from "./helpers";

describe("bearer-token auth and account isolation", () => {
  it.each([
    ["no Authorization header", null, undefined],
    ["a malformed header", null, { authorization: "Basic dXNlcjpwYXNz" }],
    ["an empty bearer", null, { authorization: "Bearer " }],
    ["an unknown token", "not-a-token", undefined],
  ])("refuses %s with 401 and a JSON error", async (_what, token, headers) => {
    const res = await api("GET", queuesPath(), undefined, { token, headers });
    expect(res.status).toBe(401);
    expect(res.json.success).toBe(false);
    expect(res.json.errors[0].field).toBe("authorization");
  });

  it("needs a token on every route, even unknown ones", async () => {
    expect((await api("GET", "/", undefined, { token: null })).status).toBe(401);
    expect((await api("POST", `${queuePath("x")}/messages`, { body: 1 }, { token: null })).status).toBe(401);
  });

  it("answers 404 when a token is used on another account's paths", async () => {
    await createQueue("private");
    const res = await api("GET", queuesPath("local"), undefined, { token: OTHER_TOKEN });
    expect(res.status).toBe(404);
    const send = await api("POST", `${queuePath("private", "local")}/messages`, { body: "x" }, { token: OTHER_TOKEN });
    expect(send.status).toBe(404);
  });

  it("never lets one account reach another's queue by name or id, and tells it nothing", async () => {
    const q = await createQueue("mine");
    for (const ref of ["mine", q.queue_id]) {
      const get = await api("GET", queuePath(ref, "other"), undefined, { token: OTHER_TOKEN });
      const missing = await api("GET", queuePath(ref === "mine" ? "never-made" : "ffffffffffffffffffffffffffffffff", "other"), undefined, { token: OTHER_TOKEN });
      expect(get.status).toBe(404);
      // The answer for another account's queue is the answer for no queue at all, but for the name echoed back.
      expect(get.json.errors[0].code).toBe(missing.json.errors[0].code);
      const send = await api("POST", `${queuePath(ref, "other")}/messages`, { body: "x" }, { token: OTHER_TOKEN });
      expect(send.status).toBe(404);
      const del = await api("DELETE", queuePath(ref, "other"), undefined, { token: OTHER_TOKEN });
      expect(del.status).toBe(404);
    }
    const list = await api("GET", queuesPath("other"), undefined, { token: OTHER_TOKEN });
    expect(list.status).toBe(200);
    expect(list.json.result.map((x: { queue_name: string }) => x.queue_name)).not.toContain("mine");
    // Still there for its owner.
    expect((await api("GET", queuePath("mine"))).status).toBe(200);
  });

  it("lets two accounts have queues of the same name, each its own", async () => {
    await createQueue("shared-name");
    const theirs = await api("POST", queuesPath("other"), { queue_name: "shared-name" }, { token: OTHER_TOKEN });
    expect(theirs.status).toBe(201);
    await api("POST", `${queuePath("shared-name", "other")}/messages`, { body: "theirs" }, { token: OTHER_TOKEN });
    const mine = await api("GET", `${queuePath("shared-name")}/metrics`);
    expect(mine.json.result.backlog_count).toBe(0);
  });
});
