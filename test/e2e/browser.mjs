// The headless Chromium the browser tests drive, chosen in one place: CHROMIUM_PATH if
// set, else Debian's /usr/bin/chromium when it is installed, else the Chromium that ships
// inside the @sparticuz/chromium devDependency (inflated from node_modules into the temp
// directory on first use: nothing is downloaded and nothing is installed system-wide).
// `npm install && npm test` therefore works on a machine without any browser.
import { existsSync } from "node:fs";
import sparticuz from "@sparticuz/chromium";
import { chromium } from "playwright-core";

const DEBIAN_CHROMIUM = "/usr/bin/chromium";

/** The flags every browser test needs, whichever binary runs. */
const TEST_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"];

/**
 * @sparticuz/chromium's flags are tuned for AWS Lambda. Kept: its quieting and
 * no-GPU flags. Left out: `--single-process` (needed on Lambda only; here it makes
 * closing a second browser context kill the shared renderer), the flags that would make
 * the page under test less like a real browser (`--disable-web-security`,
 * `--allow-running-insecure-content`, no site isolation), its `--headless='shell'`
 * (Playwright passes `--headless` itself; the binary is the headless shell anyway), and
 * its `--enable-features`/`--disable-features` lists, which would replace Playwright's
 * own (Chromium keeps only the last value of a switch).
 */
const SPARTICUZ_DROPPED = [
  "--single-process",
  "--headless",
  "--disable-web-security",
  "--allow-running-insecure-content",
  "--disable-site-isolation-trials",
  "--disable-features=",
  "--enable-features=",
];

/** @param {string} flag */
const switchName = (flag) => flag.split("=")[0];

/**
 * Merges flag lists: the first occurrence of a switch wins, so `primary` overrides `rest`.
 * @param {string[]} primary
 * @param {string[]} rest
 */
function mergeArgs(primary, rest) {
  const merged = [...primary];
  const seen = new Set(primary.map(switchName));
  for (const flag of rest) {
    if (seen.has(switchName(flag))) continue;
    seen.add(switchName(flag));
    merged.push(flag);
  }
  return merged;
}

/** @typedef {{ source: "CHROMIUM_PATH" | "debian" | "@sparticuz/chromium", executablePath: string, args: string[] }} BrowserChoice */

/** @returns {Promise<BrowserChoice>} which Chromium to launch, and with what flags. */
export async function chooseChromium() {
  const fromEnv = process.env.CHROMIUM_PATH;
  if (fromEnv) {
    if (!existsSync(fromEnv)) throw new Error(`CHROMIUM_PATH is set to ${fromEnv}, which does not exist`);
    return { source: "CHROMIUM_PATH", executablePath: fromEnv, args: TEST_ARGS };
  }
  if (existsSync(DEBIAN_CHROMIUM)) return { source: "debian", executablePath: DEBIAN_CHROMIUM, args: TEST_ARGS };
  // No WebGL needed (the dashboard draws SVG): no SwiftShader flags.
  sparticuz.setGraphicsMode = false;
  const own = sparticuz.args.filter(
    (f) => !SPARTICUZ_DROPPED.some((d) => (d.endsWith("=") ? f.startsWith(d) : switchName(f) === d)),
  );
  return {
    source: "@sparticuz/chromium",
    executablePath: await sparticuz.executablePath(),
    args: mergeArgs(TEST_ARGS, own),
  };
}

/**
 * Launches headless Chromium and logs which binary it is.
 * @returns {Promise<import("playwright-core").Browser>}
 */
export async function launchChromium() {
  const choice = await chooseChromium();
  const browser = await chromium.launch({ executablePath: choice.executablePath, headless: true, args: choice.args });
  console.log(`browser: ${choice.source} ${choice.executablePath} (Chromium ${browser.version()})`);
  return browser;
}
