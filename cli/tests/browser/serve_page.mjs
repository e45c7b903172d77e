// Drives `codeact serve`'s page in a real headless Chromium for cli/tests/serve.rs:
// signs in with a token, starts a run of the given agent with the given task,
// waits for its final output, and prints what the page shows as one JSON line.
// Usage: node serve_page.mjs URL TOKEN AGENT TASK SCREENSHOT
// PLAYWRIGHT_MODULES names the node_modules holding playwright-core;
// CODEACT_CHROMIUM the browser (default /usr/bin/chromium).
import { createRequire } from "node:module";
import path from "node:path";

const [url, token, agent, task, screenshot] = process.argv.slice(2);
const require = createRequire(path.join(process.env.PLAYWRIGHT_MODULES, "noop.js"));
const { chromium } = require("playwright-core");

const browser = await chromium.launch({
  executablePath: process.env.CODEACT_CHROMIUM || "/usr/bin/chromium",
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const problems = [];
  page.on("pageerror", (error) => problems.push(String(error)));
  await page.goto(url);
  await page.fill("#token", token);
  await page.click("#login button");
  await page.waitForSelector(`#agent option[value="${agent}"]`, { state: "attached", timeout: 15000 });
  await page.selectOption("#agent", agent);
  await page.fill("#task", task);
  await page.click("#new-run button");
  // The run's last event is its finish; the summary shows the outcome by then.
  await page.waitForFunction(
    () => document.querySelector("#steps")?.textContent.includes("finished"),
    null,
    { timeout: 30000 },
  );
  await page.waitForTimeout(300);
  const shown = await page.evaluate(() => ({
    steps: [...document.querySelectorAll("#steps > li")].map((item) => item.textContent),
    summary: document.querySelector("#summary").textContent,
    runs: [...document.querySelectorAll("#runs > li")].map((item) => item.textContent),
    // Markup a model or a user wrote must stay text: no element may come of it.
    injected: document.querySelectorAll("#steps b, #summary b, #runs b, #steps img, #runs img").length,
  }));
  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ ...shown, problems }));
} finally {
  await browser.close();
}
