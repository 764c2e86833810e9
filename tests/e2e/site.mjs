// Drives the built documentation site in headless Chromium: node tests/e2e/site.mjs BASE_URL [QUERY...]
//
// Types each QUERY into Material's search box and collects the results' links, then walks the site:
// from BASE_URL, every same-origin link of every page (the #fragment dropped), each fetched once.
// Prints one JSON line: {"searches": {query: {"meta": text, "links": [url]}}, "pages": [url],
//   "links": {url: status}, "from": {url: first page linking it}, "errors": [text]}.
// Requests to other origins are refused, so the walk is offline. Env: CHROMIUM_PATH.
import { chromium } from "playwright-core";

const [base, ...queries] = process.argv.slice(2);
if (!base) {
  console.error("usage: node site.mjs BASE_URL [QUERY...]");
  process.exit(2);
}
const origin = new URL(base).origin;
const WAIT = 20_000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
  // The same switches as browser.mjs; Playwright gives each launch a fresh temporary --user-data-dir.
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const report = { searches: {}, pages: [], links: {}, from: {}, errors: [] };
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  await context.route("**/*", (route) =>
    new URL(route.request().url()).origin === origin ? route.continue() : route.abort());
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  page.on("pageerror", (err) => report.errors.push(`${page.url()}: ${err.message}`));

  // ------------------------------------------------------------------ search
  for (const query of queries) {
    await page.goto(base);
    const box = page.locator('input[data-md-component="search-query"]');
    await box.click();  // in a wide window the box is in the header; a click opens it
    await box.pressSequentially(query);  // Material searches on key presses; fill() sends none
    const meta = page.locator(".md-search-result__meta");
    // The meta line says "Initializing search" until the worker has loaded the index, then counts. While the
    // keys are still arriving it may say "No matching documents" for a query not yet whole (seen in CI on a busy
    // machine): wait for a count, and only if none comes take what it says.
    try {
      await meta.filter({ hasText: /\d+ matching document/i }).waitFor({ timeout: WAIT / 2 });
    } catch {
      await meta.filter({ hasText: /match/i }).waitFor();
    }
    const links = await page.$$eval(".md-search-result__item a", (as) => as.map((a) => a.href));
    report.searches[query] = { meta: (await meta.innerText()).trim(), links };
  }

  // ------------------------------------------------------------------ the link walk
  const key = (href) => {
    const url = new URL(href);
    url.hash = "";
    return url.href;
  };
  const queue = [key(base)];
  report.from[queue[0]] = "(start)";
  while (queue.length > 0) {
    const url = queue.shift();
    // A request first, so a link to something that is not a page (an image, a file) is checked without
    // being opened as one; pages are then opened in the browser and their links read from the DOM.
    const response = await context.request.get(url, { maxRedirects: 5 });
    report.links[url] = response.status();
    const type = response.headers()["content-type"] || "";
    if (!response.ok() || !type.startsWith("text/html")) continue;
    const opened = await page.goto(url);
    if (!opened || !opened.ok()) {
      report.links[url] = opened ? opened.status() : 0;
      continue;
    }
    report.pages.push(url);
    const hrefs = await page.$$eval("a[href]", (as) => as.map((a) => a.href));
    for (const href of hrefs) {
      if (!/^https?:/.test(href) || new URL(href).origin !== origin) continue;
      const next = key(href);
      if (!(next in report.from)) {
        report.from[next] = url;
        queue.push(next);
      }
    }
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
