// Drives the tether tickets page in headless Chromium: node tests/e2e/browser.mjs http://127.0.0.1:PORT
//
// alice asks about her ticket (a get_ticket call, a streamed answer), asks to close it (an approval
// waits); carol, an agent, approves it in her own browser context; alice sees the run finish.
// Env: TICKET_ID, TICKET_TITLE (what the scripted model answers about), SCREENSHOT_DIR, CHROMIUM_PATH.
// Exit 0 when every step passed; screenshots are printed as "screenshot: <path>".
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";

const base = process.argv[2];
const ticketId = process.env.TICKET_ID;
const title = process.env.TICKET_TITLE;
if (!base || !ticketId || !title) {
  console.error("usage: TICKET_ID=... TICKET_TITLE=... node browser.mjs BASE_URL");
  process.exit(2);
}
const shots = process.env.SCREENSHOT_DIR || mkdtempSync(join(tmpdir(), "tether-e2e-"));
mkdirSync(shots, { recursive: true });
const WAIT = 20_000;

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH || "/usr/bin/chromium",
  // Playwright gives each launch a fresh temporary --user-data-dir.
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

const problems = [];
const step = (what) => console.log(`• ${what}`);
const tid = (id) => `[data-testid="${id}"]`;

async function open(name) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT);
  page.on("pageerror", (err) => problems.push(`${name}: page error: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() === "error" && !/Failed to load resource/.test(msg.text())) problems.push(`${name}: console: ${msg.text()}`);
  });
  await page.goto(base);
  return page;
}

async function signIn(page, username, password) {
  await page.locator(tid("signin")).waitFor();
  await page.fill(tid("username"), username);
  await page.fill(tid("password"), password);
  await page.click(tid("signin-submit"));
}

async function shot(page, name) {
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
}

async function expectText(locator, pattern) {
  await locator.filter({ hasText: pattern }).first().waitFor();
}

let alice;
let carol;
try {
  // ---------------------------------------------------------------- alice signs in
  alice = await open("alice");
  const eventBodies = [];
  alice.on("response", (res) => {
    if (res.url().endsWith("/events")) res.text().then((t) => eventBodies.push(t), () => {});
  });

  step("a wrong password is reported from the problem document");
  await signIn(alice, "alice", "not-her-password");
  await expectText(alice.locator(tid("error")), /wrong username or password/);

  step("alice signs in");
  await signIn(alice, "alice", "alice-pass");
  await alice.locator(tid("app")).waitFor();
  await expectText(alice.locator(tid("current-user")), /^alice$/);
  if (await alice.locator(tid("approvals-panel")).isVisible()) throw new Error("a customer sees the Approvals panel");
  if (await alice.locator(tid("error")).isVisible()) throw new Error("the sign-in error is still shown after signing in");

  // ---------------------------------------------------------------- she asks about her ticket
  step("alice asks about her ticket; get_ticket runs and the answer streams in");
  const hostile = `<img src=x onerror="window.__xss=1">`;
  await alice.fill(tid("prompt"), `What is the status of ${ticketId}? ${hostile}`);
  await alice.press(tid("prompt"), "Enter");
  const first = alice.locator(tid("run")).nth(0);
  await first.locator(`${tid("event")}[data-kind="call_executed"][data-tool="get_ticket"][data-outcome="ok"]`).waitFor();
  await expectText(first.locator(tid("answer")), title);
  await alice.locator(`${tid("run")}[data-status="completed"]`).first().waitFor();
  const result = await first.locator(`[data-tool="get_ticket"] ${tid("result")}`).textContent();
  if (!result.includes(ticketId)) throw new Error(`the get_ticket result shown is not the ticket: ${result}`);

  step("untrusted text is shown as text");
  const promptShown = await first.locator(tid("run-prompt")).textContent();
  if (!promptShown.includes(hostile)) throw new Error(`the prompt is not shown literally: ${promptShown}`);
  if ((await alice.locator("main img").count()) > 0 || (await alice.evaluate(() => window.__xss))) {
    throw new Error("the prompt's HTML was interpreted");
  }

  step("the answer arrived as streamed text events");
  await alice.waitForTimeout(200);
  if (!eventBodies.some((body) => body.includes("event: text"))) {
    throw new Error(`no text event reached the page; streams seen: ${eventBodies.length}`);
  }
  await shot(alice, "alice-chat");

  // ---------------------------------------------------------------- she asks to close it
  step("alice asks to close it; the close waits for approval");
  await alice.fill(tid("prompt"), `Please close ${ticketId}, it is solved.`);
  await alice.click(tid("send"));
  const second = alice.locator(tid("run")).nth(1);
  await second.locator(`${tid("approval-request")}[data-tool="close_ticket"]`).waitFor();
  await alice.locator(`${tid("run")}[data-status="awaiting_approval"]`).waitFor();
  await expectText(second.locator(tid("run-status")), /awaiting approval/);
  // The page says why the call waits: the tool's own rule here (and any tool that tainted the run).
  await expectText(second.locator(`${tid("approval-request")}[data-tool="close_ticket"] ${tid("approval-reason-text")}`), /close_ticket requires approval/);

  // ---------------------------------------------------------------- carol approves
  step("carol (agent) signs in and sees the pending close");
  carol = await open("carol");
  await signIn(carol, "carol", "carol-pass");
  await carol.locator(tid("approvals-panel")).waitFor();
  const pending = carol.locator(`${tid("approval")}[data-tool="close_ticket"]`);
  await expectText(pending.locator(tid("approval-args")), ticketId);
  await expectText(pending.locator(tid("approval-reason-text")), /Needs approval: close_ticket requires approval/);
  await shot(carol, "carol-approvals");
  await pending.locator(tid("approval-reason")).fill("customer confirmed it is solved");
  await pending.locator(tid("approve")).click();
  await carol.locator(tid("approval")).first().waitFor({ state: "detached" });
  await expectText(carol.locator(tid("approvals-empty")), /Nothing waiting/);

  // ---------------------------------------------------------------- alice sees it finish
  step("alice sees the close run and the run finish");
  await second.locator(`${tid("event")}[data-kind="approval_decided"][data-approved="true"]`).waitFor();
  await second.locator(`${tid("event")}[data-kind="call_executed"][data-tool="close_ticket"][data-outcome="ok"]`).waitFor();
  await alice.locator(`${tid("run")}[data-status="completed"]`).nth(1).waitFor();
  await expectText(second.locator(tid("answer")), /closed/);

  step("My runs lists both runs; the close run's record shows the call and the answer");
  await alice.click(tid("runs-refresh"));
  await alice.locator(`${tid("run-item")}[data-status="completed"]`).nth(1).waitFor();
  const closeRunId = await second.getAttribute("data-run-id");
  await alice.click(`${tid("run-item")}[data-run-id="${closeRunId}"]`);
  const view = alice.locator(tid("run-view"));
  await view.waitFor();
  await view.locator(`[data-tool="close_ticket"][data-outcome="ok"]`).waitFor();
  await expectText(view.locator(tid("answer")), /closed/);
  await shot(alice, "alice-run-view");
  await alice.click(tid("back-to-chat"));
  await alice.locator(tid("chat-log")).waitFor();

  step("another user's run is a 404, shown plainly");
  const status = await carol.evaluate(async (id) => {
    const { token } = JSON.parse(sessionStorage.getItem("tether.session"));
    const res = await fetch(`/api/runs/${id}`, { headers: { Authorization: `Bearer ${token}` } });
    return [res.status, res.headers.get("content-type")];
  }, closeRunId);
  if (status[0] !== 404 || !String(status[1]).includes("problem+json")) throw new Error(`carol reading alice's run: ${status}`);

  if (problems.length) throw new Error(`the page reported errors:\n${problems.join("\n")}`);
  await shot(alice, "alice-final");
  console.log("ok");
} catch (err) {
  console.error(`FAILED: ${err.stack || err}`);
  for (const [name, page] of [["alice", alice], ["carol", carol]]) {
    if (!page) continue;
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
