// Drives the page of a served agent (tether serve agent.py:agent) in headless Chromium:
//   node tests/e2e/serve_page.mjs http://127.0.0.1:PORT SCENARIO
// approve: alice pastes her key, starts a run, sees it wait; bob (approver) approves it from his inbox with the
//          keyboard; alice sees the result. Then a conversation of two turns.
// hostile: the same with a prompt holding HTML; nothing of it may become markup or run.
// nokey:   --auth none: no key asked; the local caller starts a run and approves it, then denies another.
// reconcile: an approved refund was cut off by a crash (set up by the test); bob says it ran, in the inbox's form;
//          alice opens the run from her list and sees it finish.
// Env: ALICE_KEY, BOB_KEY (approve, hostile), HOSTILE, SCREENSHOT_DIR, CHROMIUM_PATH.
// Exit 0 when every step passed (the last line printed is "ok"); screenshots are printed as "screenshot: <path>".
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const [base, scenario] = process.argv.slice(2);
if (!base || !["approve", "hostile", "nokey", "reconcile"].includes(scenario)) {
  console.error("usage: node serve_page.mjs BASE_URL approve|hostile|nokey|reconcile");
  process.exit(2);
}
const { ALICE_KEY: aliceKey, BOB_KEY: bobKey, HOSTILE: hostile = "" } = process.env;
const shots = process.env.SCREENSHOT_DIR || mkdtempSync(join(tmpdir(), "tether-serve-page-"));
mkdirSync(shots, { recursive: true });
const WAIT = 20_000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

const problems = [];
const pages = [];
const streams = [];  // the requests for a run's events: who asked, and with which headers
const step = (what) => console.log(`• ${what}`);
const tid = (id) => `[data-testid="${id}"]`;

async function open(name) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  page.on("pageerror", (err) => problems.push(`${name}: page error: ${err.message}`));
  page.on("console", (msg) => {
    // A 401 while the page probes for a key is expected; a CSP violation or a script error is not.
    if (msg.type() === "error" && !/Failed to load resource/.test(msg.text())) problems.push(`${name}: console: ${msg.text()}`);
  });
  page.on("request", (req) => {
    if (new URL(req.url()).pathname.endsWith("/events")) streams.push({ who: name, url: req.url(), headers: req.headers() });
  });
  pages.push([name, page]);
  await page.goto(base);
  return page;
}

async function shot(page, name) {
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
}

async function expectText(locator, pattern) {
  await locator.filter({ hasText: pattern }).first().waitFor();
}

async function pasteKey(page, key) {
  await page.locator(tid("signin")).waitFor();
  await page.fill(tid("key"), key);
  await page.press(tid("key"), "Enter");
  await page.locator(tid("app")).waitFor();
}

// The page keeps the key in this tab's sessionStorage only: not in localStorage, a cookie or the URL.
async function keyKeptInTheTabOnly(page, key) {
  const kept = await page.evaluate(() => ({
    session: sessionStorage.getItem("tether.serve.key"),
    local: localStorage.length,
    cookie: document.cookie,
    url: location.href,
  }));
  if (kept.session !== key) throw new Error("the key is not in sessionStorage");
  if (kept.local !== 0 || kept.cookie !== "" || kept.url.includes(key)) throw new Error(`the key leaked: ${JSON.stringify(kept)}`);
}

async function send(page, prompt) {
  const runs = await page.locator(tid("run")).count();
  await page.fill(tid("prompt"), prompt);
  await page.press(tid("prompt"), "Control+Enter");
  await page.locator(tid("run")).nth(runs).waitFor();
  const id = await page.locator(tid("run")).first().getAttribute("data-run-id");  // the newest run is on top
  return page.locator(`${tid("run")}[data-run-id="${id}"]`);
}

// Nothing the service, the model or a tool wrote became markup: no element of theirs, no script ran.
async function noMarkupFrom(page, who) {
  const found = await page.evaluate(() => ({
    elements: document.querySelectorAll("main img, main script, main x-evil, main iframe").length,
    xss: window.__xss ?? null,
  }));
  if (found.elements || found.xss !== null) throw new Error(`${who}: hostile text became markup: ${JSON.stringify(found)}`);
}

async function startAndWait(page, prompt) {
  step("a run starts; the lookup runs and the refund waits for approval");
  const run = await send(page, prompt);
  await run.locator(`${tid("event")}[data-kind="call_executed"][data-tool="lookup_order"][data-outcome="ok"]`).waitFor();
  await run.locator(`${tid("approval-request")}[data-tool="refund"]`).waitFor();
  await page.locator(`${tid("run")}[data-status="awaiting_approval"]`).first().waitFor();
  await expectText(run.locator(tid("run-status")), /awaiting approval/);
  return run;
}

// The inbox item of the refund: its arguments exactly (the secret redacted), why it waits, the run's prompt.
async function checkInboxItem(page, order, prompt, owner) {
  const item = page.locator(`${tid("approval")}[data-tool="refund"]`);
  await item.waitFor();
  const arg = (name) => item.locator(`dd[data-name="${name}"]`);
  const orderShown = await arg("order_id").textContent();
  if (orderShown !== JSON.stringify(order)) throw new Error(`order_id shown as ${orderShown}`);
  if ((await arg("amount").textContent()) !== "42") throw new Error("amount is not shown as 42");
  await arg("api_token").locator(tid("redacted")).waitFor();
  if ((await item.textContent()).includes("sk-live")) throw new Error("the inbox shows a secret");
  await expectText(item.locator(tid("approval-reason")), /refund requires approval/);
  const promptShown = await item.locator(tid("approval-prompt")).textContent();
  if (promptShown !== prompt) throw new Error(`the run's prompt is shown as ${promptShown}`);
  await expectText(item, new RegExp(`asked by ${owner}`));
  return item;
}

async function seeItFinish(page, run, answer) {
  step("the run goes on after the decision and the page shows the result");
  await run.locator(`${tid("event")}[data-kind="approval_decided"][data-approved="true"]`).waitFor();
  await run.locator(`${tid("event")}[data-kind="call_executed"][data-tool="refund"][data-outcome="ok"]`).waitFor();
  await page.locator(`${tid("run")}[data-status="completed"]`).first().waitFor();
  const shown = await run.locator(tid("answer")).textContent();
  if (shown !== answer) throw new Error(`the answer shown is ${JSON.stringify(shown)}, not ${JSON.stringify(answer)}`);
}

async function approveByKeyboard(page, item) {
  step("the approver approves from the keyboard");
  await item.locator(tid("decision-reason")).focus();
  await page.keyboard.type("checked with the customer");
  await page.keyboard.press("Tab");  // the Approve button comes next in the focus order
  const focused = await page.evaluate(() => document.activeElement?.dataset.testid);
  if (focused !== "approve") throw new Error(`Tab from the reason goes to ${focused}, not Approve`);
  await page.keyboard.press("Enter");
  await item.waitFor({ state: "detached" });
  await page.locator(tid("inbox-empty")).waitFor();
  await page.waitForFunction(() => document.activeElement?.dataset.testid === "inbox-refresh");  // focus not lost
}

async function approve() {
  step("without a key the page asks for one; a wrong key is refused");
  const alice = await open("alice");
  await alice.locator(tid("signin")).waitFor();
  await alice.fill(tid("key"), "tk_not-a-key");
  await alice.click(tid("key-submit"));
  await expectText(alice.locator(tid("error")), /does not accept that key/);
  if (await alice.locator(tid("app")).isVisible()) throw new Error("a wrong key let the page in");

  step("alice pastes her key");
  await pasteKey(alice, aliceKey);
  await keyKeptInTheTabOnly(alice, aliceKey);
  const prompt = "Please refund order A7.";
  const run = await startAndWait(alice, prompt);

  step("alice's inbox shows her call waiting, with no buttons: she is no approver");
  const waiting = alice.locator(`${tid("approval")}[data-tool="refund"]`);
  await waiting.locator(tid("not-decidable")).waitFor();
  if (await waiting.locator(tid("approve")).count()) throw new Error("alice may approve");

  step("bob (approver) finds the call in his inbox with its arguments, why, and the run's prompt");
  const bob = await open("bob");
  await pasteKey(bob, bobKey);
  const item = await checkInboxItem(bob, "A7", prompt, "alice");
  await shot(bob, "bob-inbox");
  await approveByKeyboard(bob, item);
  await seeItFinish(alice, run, "Refunded 42 on order A7.");
  await alice.locator(tid("inbox-empty")).waitFor();  // decided: gone from her inbox too
  await shot(alice, "alice-done");

  step("alice's page followed the run with her key in a header, and after the pause resumed with Last-Event-ID");
  const hers = streams.filter((s) => s.who === "alice");
  if (hers.length < 2) throw new Error(`alice's page opened ${hers.length} event stream(s); the run paused, so 2 at least`);
  if (!hers.every((s) => s.headers.authorization === `Bearer ${aliceKey}` && !s.url.includes(aliceKey))) {
    throw new Error("an event stream went without the key in its Authorization header");
  }
  const resumed = hers.slice(1).map((s) => Number(s.headers["last-event-id"]));
  if (!resumed.every((n) => Number.isInteger(n) && n > 0)) throw new Error(`streams reopened without Last-Event-ID: ${resumed}`);

  step("a reload keeps the key (this tab) and lists the run");
  await alice.reload();
  await alice.locator(tid("app")).waitFor();
  await alice.locator(`${tid("run-item")}[data-status="completed"]`).first().waitFor();
  await alice.click(`${tid("run-item")}[data-status="completed"]`);
  await expectText(alice.locator(tid("answer")), /Refunded 42 on order A7\./);

  step("a conversation: two turns, the second seeing the first");
  await alice.check(tid("mode-conversation"));
  const first = await send(alice, "say: hello");
  await expectText(first.locator(tid("answer")), /^You said hello$/);
  await alice.locator(tid("conversation")).waitFor();
  const conversation = await alice.locator(tid("conversation-id")).textContent();
  const second = await send(alice, "say: again");
  await expectText(second.locator(tid("answer")), /^You said again$/);
  if ((await alice.locator(tid("conversation-id")).textContent()) !== conversation) throw new Error("the second turn opened a new conversation");
  await alice.click(tid("runs-refresh"));
  await alice.locator(`${tid("run-item")}`).filter({ hasText: "turn 2" }).waitFor();

  step("forgetting the key asks for one again");
  await alice.click(tid("forget-key"));
  await alice.locator(tid("signin")).waitFor();
  if (await alice.evaluate(() => sessionStorage.getItem("tether.serve.key")) !== null) throw new Error("the key is still kept");
}

async function hostileText() {
  const alice = await open("alice");
  await pasteKey(alice, aliceKey);
  const prompt = `refund ${hostile}`;
  step("a prompt holding HTML: the lookup, the refund's arguments and the answer all carry it");
  const run = await startAndWait(alice, prompt);
  const promptShown = await run.locator(tid("run-prompt")).textContent();
  if (promptShown !== prompt) throw new Error(`the prompt is not shown literally: ${promptShown}`);
  // Arguments are shown as JSON: a string in quotes, exactly as the call will receive it.
  const argShown = await run.locator(`${tid("approval-request")}[data-tool="refund"] dd[data-name="order_id"]`).textContent();
  if (argShown !== JSON.stringify(hostile)) throw new Error(`the waiting call's order_id is shown as ${argShown}`);
  await noMarkupFrom(alice, "alice");

  step("bob's inbox shows the hostile arguments and prompt as text");
  const bob = await open("bob");
  await pasteKey(bob, bobKey);
  const item = await checkInboxItem(bob, hostile, prompt, "alice");
  await noMarkupFrom(bob, "bob");
  await shot(bob, "bob-hostile-inbox");
  await approveByKeyboard(bob, item);
  await seeItFinish(alice, run, `Refunded 42 on order ${hostile}.`);
  const result = await run.locator(`[data-tool="lookup_order"] ${tid("result")}`).textContent();
  if (!result.includes(JSON.stringify(hostile))) throw new Error(`the lookup's result is not shown literally: ${result}`);

  step("a model's answer holding HTML is shown as text");
  const said = await send(alice, `say: ${hostile}`);
  await expectText(said.locator(tid("answer")), `You said ${hostile}`);
  await noMarkupFrom(alice, "alice");
  await shot(alice, "alice-hostile");
}

async function noKey() {
  step("with --auth none the page opens without asking for a key");
  const local = await open("local");
  await local.locator(tid("app")).waitFor();
  if (await local.locator(tid("signin")).isVisible()) throw new Error("the page asks for a key");
  const run = await startAndWait(local, "Please refund order A7.");
  step("the local caller holds the approver role and decides in its own inbox");
  const item = await checkInboxItem(local, "A7", "Please refund order A7.", "local");
  await approveByKeyboard(local, item);
  await seeItFinish(local, run, "Refunded 42 on order A7.");

  step("a second refund is denied, with a reason; it never runs");
  const again = await startAndWait(local, "Refund order A7 again.");
  const second = await checkInboxItem(local, "A7", "Refund order A7 again.", "local");
  await second.locator(tid("decision-reason")).fill("already refunded");
  await second.locator(tid("deny")).click();
  await second.waitFor({ state: "detached" });
  await again.locator(`${tid("event")}[data-kind="approval_decided"][data-approved="false"]`).filter({ hasText: "already refunded" }).waitFor();
  await again.locator(`${tid("event")}[data-kind="call_rejected"][data-tool="refund"][data-outcome="denied"]`).waitFor();
  await local.locator(`${tid("run")}[data-run-id="${await again.getAttribute("data-run-id")}"][data-status="completed"]`).waitFor();
}

async function reconcile() {
  step("bob's inbox asks whether the refund a crash cut off ran");
  const bob = await open("bob");
  await pasteKey(bob, bobKey);
  const item = bob.locator(`${tid("approval")}[data-kind="reconcile"][data-tool="refund"]`);
  await expectText(item.locator("h3"), /Did refund run\?/);
  if ((await item.locator(`dd[data-name="order_id"]`).textContent()) !== '"A7"') throw new Error("the cut-off call's arguments are not shown");
  step("he says it ran, and what it returned, from the keyboard");
  await item.locator(tid("reconcile")).click();  // nothing chosen yet: the page asks for an answer first
  await expectText(bob.locator(tid("error")), /Say whether the call took effect/);
  await bob.click(tid("error-dismiss"));
  await item.locator(tid("executed-yes")).check();
  await item.locator(tid("reconcile-result")).fill("refunded 42 on order A7");
  await item.locator(tid("reconcile-result")).press("Tab");
  await bob.keyboard.press("Enter");  // the Settle button
  await item.waitFor({ state: "detached" });
  await bob.locator(tid("inbox-empty")).waitFor();

  step("alice opens the run from her list and sees it finish");
  const alice = await open("alice");
  await pasteKey(alice, aliceKey);
  await alice.locator(tid("run-item")).first().click();
  const run = alice.locator(tid("run")).first();
  await alice.locator(`${tid("run")}[data-status="completed"]`).waitFor();
  await expectText(run.locator(tid("answer")), /^Refunded 42 on order A7\.$/);
  await shot(alice, "alice-reconciled");
}

try {
  if (scenario === "approve") await approve();
  else if (scenario === "reconcile") await reconcile();
  else if (scenario === "hostile") await hostileText();
  else await noKey();
  if (problems.length) throw new Error(`the page reported errors:\n${problems.join("\n")}`);
  console.log("ok");
} catch (err) {
  console.error(`FAILED: ${err.stack || err}`);
  for (const [name, page] of pages) {
    try {
      await shot(page, `failure-${name}`);
      console.error(`--- ${name}'s page text ---\n${await page.locator("body").innerText()}`);
    } catch {
      // the page is gone
    }
  }
  if (problems.length) console.error(problems.join("\n"));
  process.exitCode = 1;
} finally {
  await browser.close();
}
