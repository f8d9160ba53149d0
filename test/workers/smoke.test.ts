import { describe, expect, it } from "vitest";
import { api, createQueue, queuePath } from "./helpers";

describe("smoke", () => {
  it("creates a queue and sends a message", async () => {
    const q = await createQueue("smoke");
    const res = await api("POST", `${queuePath("smoke")}/messages`, { body: { hello: "world" } });
    expect(res.status).toBe(200);
    expect(res.json.result.message_id).toMatch(/^[0-9a-f]{32}$/);
    const m = await api("GET", `${queuePath(q.queue_id)}/metrics`);
    expect(m.json.result.backlog_count).toBe(1);
  });
});
