// Opens a tether eval report.html in headless Chromium: node tests/e2e/eval_report.mjs /path/to/report.html
//
// Checks: the page loads nothing from anywhere (no request but the file itself), shows one accuracy bar
// per category with the width the accuracy says, opens the failing case FAILING_CASE and sees its
// expected and proposed calls and reason, and that the model's hostile text stayed text (no script ran,
// no element was injected). Env: EXPECT_ROWS ("category=percent,..."), FAILING_CASE, SCREENSHOT_DIR,
// CHROMIUM_PATH. Exit 0 when every check passed.
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { chromium } from "playwright-core";

const file = process.argv[2];
const failing = process.env.FAILING_CASE;
const rows = (process.env.EXPECT_ROWS || "").split(",").filter(Boolean).map((pair) => pair.split("="));
if (!file || !failing || !rows.length) {
  console.error("usage: FAILING_CASE=id EXPECT_ROWS=cat=50.0%,... node eval_report.mjs REPORT.html");
  process.exit(2);
}
const shots = process.env.SCREENSHOT_DIR || mkdtempSync(join(tmpdir(), "tether-eval-report-"));
mkdirSync(shots, { recursive: true });
const url = pathToFileURL(resolve(file)).href;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const problems = [];
const check = (ok, what) => {
  console.log(`${ok ? "•" : "✗"} ${what}`);
  if (!ok) problems.push(what);
};

try {
  const page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
  page.setDefaultTimeout(15_000);
  const requests = [];
  page.on("request", (req) => requests.push(req.url()));
  page.on("pageerror", (err) => problems.push(`page error: ${err.message}`));
  page.on("dialog", async (dialog) => {
    problems.push(`a dialog opened: ${dialog.message()}`);
    await dialog.dismiss();
  });
  await page.goto(url);
  await page.locator('[data-testid="summary"]').waitFor();

  // ------------------------------------------------------------ the bars
  const bars = page.locator('[data-testid="accuracy-bar"]');
  check((await bars.count()) === rows.length, `${rows.length} accuracy bars (found ${await bars.count()})`);
  for (const [category, percent] of rows) {
    const row = page.locator(`[data-testid="category-row"][data-category="${category}"]`);
    const shown = (await row.locator('[data-testid="accuracy"]').textContent()).trim();
    check(shown === percent, `${category}: accuracy ${percent} (shown ${shown})`);
    const track = await row.locator('[data-testid="accuracy-bar"]').boundingBox();
    const fill = await row.locator(".fill").boundingBox();
    check(track && track.width > 50 && track.height > 5, `${category}: the bar is visible`);
    const drawn = (100 * fill.width) / track.width;
    check(Math.abs(drawn - parseFloat(percent)) < 2, `${category}: the bar is ${percent} full (drawn ${drawn.toFixed(1)}%)`);
  }

  // ------------------------------------------------------------ a failing case
  const details = page.locator(`[data-testid="failing-case"][data-case="${failing}"]`);
  await details.waitFor();
  const expected = details.locator('[data-testid="expected"]');
  check(!(await expected.isVisible()), "the failing case starts closed");
  await details.locator("summary").click();
  await expected.waitFor({ state: "visible" });
  check(await details.evaluate((d) => d.open), "the failing case opens");
  check((await expected.textContent()).length > 2, "its expected calls are shown");
  check((await details.locator('[data-testid="actual"]').isVisible()), "its proposed calls are shown");
  check((await details.locator('[data-testid="reason"]').textContent()).trim().length > 1, "its reason is shown");
  await page.screenshot({ path: join(shots, "eval-report.png"), fullPage: true });
  console.log(`screenshot: ${join(shots, "eval-report.png")}`);

  // ------------------------------------------------------------ hostile text stayed text
  for (const open of await page.locator('[data-testid="failing-case"]').all()) {
    await open.evaluate((d) => { d.open = true; });
  }
  const injected = await page.evaluate(() => ({
    scripts: document.querySelectorAll("script").length,
    images: document.querySelectorAll("img").length,
    title: document.title,
    pwned: window.pwned === true,
    shown: document.body.innerText.includes("<script>"),
  }));
  check(injected.scripts === 0 && injected.images === 0, "no element came from model output");
  check(!injected.pwned && injected.title !== "pwned", "no script ran");
  check(injected.shown, "the model's markup is shown as text");
  const foreign = requests.filter((r) => r !== url);
  check(foreign.length === 0, `no request but the file itself (${foreign.join(" ") || "none"})`);
} catch (err) {
  problems.push(`error: ${err.message}`);
} finally {
  await browser.close();
}
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log("ok");
