// The dashboard in a real browser: headless Chromium (Debian's when installed, else the
// one inside @sparticuz/chromium; see ./browser.mjs) driven by playwright-core against
// `wrangler dev`. Signs in from the keyboard, creates a queue, sends messages, watches
// the backlog change, looks a message up, peeks, purges it through the confirmation
// dialog; pages the queue list and filters it by name prefix; checks the page never
// reaches another origin.
// Screenshots go to test-artifacts/dashboard/.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT } from "../../cli/wrangler/dev-server.mjs";
import { launchChromium } from "./browser.mjs";
import { startDevService, type DevService } from "./dev-service.mjs";
import { AUTH, HEADERS, TOKEN } from "./helpers.ts";

const ARTIFACTS = join(ROOT, "test-artifacts", "dashboard");
const QUEUE = "dash-e2e";

describe("the dashboard in Chromium", () => {
  let service: DevService | undefined;
  let browser: Browser | undefined;
  let page: Page;
  let base = "";
  const foreign: string[] = [];

  beforeAll(async () => {
    mkdirSync(ARTIFACTS, { recursive: true });
    service = await startDevService("dashboard");
    base = service.base;
    browser = await launchChromium();
    page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
    page.on("request", (r) => {
      if (!r.url().startsWith(base) && !r.url().startsWith("data:")) foreign.push(r.url());
    });
  });

  afterAll(async () => {
    await browser?.close();
    await service?.stop();
  });

  const backlogCell = () => page.locator(`#queues tbody tr[data-queue="${QUEUE}"] td.backlog`);
  const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });

  it("refuses a wrong token, then signs in from the keyboard alone", async () => {
    await page.goto(`${base}/dashboard`);
    await expect.poll(() => page.url()).toBe(`${base}/dashboard/`);
    const token = page.locator("#sign-in-token");
    await expect.poll(() => token.evaluate((el) => el === document.activeElement)).toBe(true);
    await page.keyboard.type("not-the-token");
    await page.keyboard.press("Enter");
    await expect.poll(() => page.locator("#sign-in-error").textContent()).toMatch(/refused/);
    await token.fill("");
    await token.focus();
    await page.keyboard.type(TOKEN);
    await page.keyboard.press("Enter");
    await page.locator("#app").waitFor({ state: "visible" });
    expect(await page.locator("#whoami").textContent()).toBe("account local");
    // Kept for this tab only.
    expect(await page.evaluate(() => sessionStorage.getItem("shardq.session"))).toContain(TOKEN);
    expect(await page.evaluate(() => localStorage.length)).toBe(0);
    await shot("1-signed-in");
  });

  it("creates a queue and shows its shard map", async () => {
    await page.locator("#create-queue summary").click();
    await page.locator("#create-queue-form [name=queue_name]").fill(QUEUE);
    await page.locator("#create-queue-form button[type=submit]").click();
    await expect.poll(() => page.locator("#queue-title").textContent()).toBe(QUEUE);
    await expect.poll(() => backlogCell().textContent()).toBe("0");
    // A new queue's one shard (docs/cost.md, "Start small"), drawn and listed, with the map version.
    await expect.poll(() => page.locator("#shards tbody tr").count()).toBe(1);
    expect(await page.locator("#shard-picture svg rect[rx='4']").count()).toBe(1);
    expect(await page.locator("#map-version").textContent()).toMatch(/^version \d+/);
    // A queue name the API refuses is reported, not swallowed.
    await page.locator("#create-queue summary").click();
    await page.locator("#create-queue-form [name=queue_name]").fill(QUEUE);
    await page.locator("#create-queue-form button[type=submit]").click();
    await expect.poll(() => page.locator("#queue-status").textContent()).toMatch(/already exists/);
    expect(await page.locator('[data-figure="Jurisdiction"]').textContent()).toBe("none");
  });

  it("sends messages and watches the backlog grow; looks one up and peeks at the ready ones", async () => {
    await page.locator("#send-form button[type=submit]").click();
    await expect.poll(() => page.locator("#queue-status").textContent()).toMatch(/^Sent message [0-9a-f]{32}$/);
    const id = (await page.locator("#queue-status").textContent())!.slice("Sent message ".length);
    // 24 more from outside the page: the dashboard picks them up on its own.
    const res = await fetch(`${base}/accounts/local/queues/${QUEUE}/messages/batch`, {
      method: "POST",
      headers: HEADERS,
      body: JSON.stringify({ messages: Array.from({ length: 24 }, (_, i) => ({ body: { n: i } })) }),
    });
    expect(res.status).toBe(200);
    await expect.poll(() => backlogCell().textContent(), { timeout: 15_000 }).toBe("25");
    await expect.poll(() => page.locator('[data-figure="Backlog"]').textContent(), { timeout: 15_000 }).toBe("25");

    await page.locator("#lookup-form button[type=submit]").click(); // the id was filled in by the send
    await expect.poll(() => page.locator("#lookup-result").textContent()).toContain(`"id": "${id}"`);
    expect(await page.locator("#lookup-result").textContent()).toContain('"state": "ready"');

    await page.locator("#peek").click();
    await expect.poll(() => page.locator("#peeked tbody tr").count()).toBe(20);
    const first = page.locator("#peeked tbody tr").first().locator("td");
    expect(await first.first().textContent()).toBe(id);
    // A JSON body is shown as JSON, not as the base64 the API carries it in.
    expect(await first.last().textContent()).toBe('{"hello":"from the dashboard"}');
    // Peeking leases nothing: all 25 are still ready.
    await expect.poll(() => backlogCell().textContent()).toBe("25");
    await shot("2-backlog");
  });

  it("purges the queue only after the name is typed in the confirmation", async () => {
    await page.locator("#purge").click();
    await page.locator("#confirm-input").fill("wrong-name");
    await page.locator("#confirm-ok").click();
    await expect.poll(() => page.locator("#queue-status").textContent()).toBe("Purge cancelled");
    expect(await backlogCell().textContent()).toBe("25");

    await page.locator("#purge").click();
    await page.locator("#confirm-input").fill(QUEUE);
    await shot("3-purge-confirm");
    await page.locator("#confirm-ok").click();
    await expect.poll(() => page.locator("#queue-status").textContent()).toMatch(/^Purged 25 message/);
    await expect.poll(() => backlogCell().textContent(), { timeout: 15_000 }).toBe("0");
    await shot("4-purged");
  });

  it("pauses and resumes delivery, and loaded nothing from another origin", async () => {
    await page.locator("#pause").click();
    await expect
      .poll(() => page.locator(`#queues tbody tr[data-queue="${QUEUE}"] td`).last().textContent())
      .toBe("paused");
    await page.locator("#pause").click();
    await expect.poll(() => page.locator(`#queues tbody tr[data-queue="${QUEUE}"] td`).last().textContent()).toBe("on");
    expect(foreign).toEqual([]);
  });

  it("shows the queue list a page at a time, and only the names that start with what is typed", async () => {
    // 12 more: 13 in all with the first, "dash-e2e" sorting before every "dash-page-".
    const extra = Array.from({ length: 12 }, (_, i) => `dash-page-${String(i).padStart(2, "0")}`);
    for (const queue_name of extra) {
      const res = await fetch(`${base}/accounts/local/queues`, {
        method: "POST",
        headers: HEADERS,
        body: JSON.stringify({ queue_name }),
      });
      expect(res.status).toBe(201);
    }
    const listed = () =>
      page.locator("#queues tbody tr").evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.queue));
    const pageText = () => page.locator("#queues-page").textContent();
    await page.locator("#queues-per-page").selectOption("10");
    await expect.poll(listed).toEqual([QUEUE, ...extra.slice(0, 9)]);
    await expect.poll(pageText).toBe("Page 1 of 2 · queues 1 to 10 of 13");
    expect(await page.locator("#queues-prev").isDisabled()).toBe(true);

    await page.locator("#queues-next").click();
    await expect.poll(listed).toEqual(extra.slice(9));
    await expect.poll(pageText).toBe("Page 2 of 2 · queues 11 to 13 of 13");
    expect(await page.locator("#queues-next").isDisabled()).toBe(true);
    await shot("5-queue-list-page-2");

    // Typing filters from page 1 again.
    await page.locator("#queue-prefix").fill("dash-page-1");
    await expect.poll(listed).toEqual(["dash-page-10", "dash-page-11"]);
    await expect.poll(pageText).toBe("Page 1 of 1 · queues 1 to 2 of 2");
    await page.locator("#queue-prefix").fill("nothing-here");
    await expect.poll(listed).toEqual([]);
    await expect
      .poll(() => page.locator("#queues-empty").textContent())
      .toBe('No queue name starts with "nothing-here".');
    expect(await page.locator("#queues-empty").isVisible()).toBe(true);
    // What no queue name can start with is the API's 400, shown by the list.
    await page.locator("#queue-prefix").fill("Dash");
    await expect.poll(() => page.locator("#queues-status").textContent()).toMatch(/must be the start of a queue name/);
    await page.locator("#queue-prefix").fill("");
    await expect.poll(pageText).toBe("Page 1 of 2 · queues 1 to 10 of 13");
    expect(await page.locator("#queues-status").textContent()).toBe("");
    await shot("6-queue-list-filter-cleared");
  });

  it("never puts the token in a URL when the sign-in form is submitted without scripts", async () => {
    // Scripts off stands in for scripts slow or blocked: the browser submits the form itself.
    const secret = "no-script-secret-token";
    const context = await browser!.newContext({ javaScriptEnabled: false });
    try {
      const bare = await context.newPage();
      const urls: string[] = [];
      bare.on("request", (r) => urls.push(r.url()));
      await bare.goto(`${base}/dashboard/`);
      await bare.getByLabel("Account id").fill("local");
      await bare.getByLabel("API token").fill(secret);
      const navigated = bare.waitForEvent("framenavigated", { timeout: 3_000 }).catch(() => null);
      await bare.getByLabel("API token").press("Enter");
      await navigated; // whether or not the submit navigates
      await bare.waitForLoadState("load");
      urls.push(bare.url());
      expect(urls.length).toBeGreaterThan(1);
      for (const url of urls) {
        expect(url).not.toContain(secret);
        expect(url).not.toContain("token=");
        expect(url).not.toContain("account=");
      }
    } finally {
      await context.close();
    }
  });

  it("creates a queue in a jurisdiction and shows where it is", async () => {
    // Last in this file: the queue list the tests above read holds no other queue. The form may be open or not.
    await page.locator("#create-queue").evaluate((d) => ((d as HTMLDetailsElement).open = true));
    await page.locator("#create-queue-form [name=queue_name]").fill(`${QUEUE}-eu`);
    await page.locator("#create-queue-form [name=jurisdiction]").selectOption("eu");
    await page.locator("#create-queue-form button[type=submit]").click();
    await expect.poll(() => page.locator("#queue-title").textContent()).toBe(`${QUEUE}-eu`);
    await expect.poll(() => page.locator('[data-figure="Jurisdiction"]').textContent()).toBe("eu");
    const res = await fetch(`${base}/accounts/local/queues/${QUEUE}-eu`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(((await res.json()) as { result: { jurisdiction?: string } }).result.jurisdiction).toBe("eu");
  });
});
