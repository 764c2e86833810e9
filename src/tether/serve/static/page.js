// The page of a served agent (tether serve PATH:agent): start runs and conversations, watch their steps,
// decide the calls waiting for approval. Plain DOM, no build step, one module.
//
// Everything the server, a model, a tool or another person wrote is untrusted: it reaches the page only
// through text nodes, textContent and setAttribute, never innerHTML. The key or token a person pastes in is
// kept in this tab's sessionStorage (never localStorage, never a URL) and sent as Authorization: Bearer.

const KEY = "tether.serve.key";
const TERMINAL = new Set([
  "completed", "max_steps", "budget_exhausted", "truncated", "content_filtered", "protocol_error",
  "loop_detected", "repair_exhausted", "model_error", "cancelled", "failed", "error",
]);
const WAITING = new Set(["awaiting_approval", "awaiting_reconciliation"]);
const REDACTED = "[redacted]";  // tether.core.redact.REDACTED: the inbox shows a secret's place, never its value
const INBOX_EVERY_MS = 3000;
const WAIT_EVERY_MS = 1500;

const state = { key: null, needsKey: true, conversation: null, views: new Map(), inboxTimer: null };

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const short = (s, n = 200) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
const json = (v) => (typeof v === "string" ? v : JSON.stringify(v));
const words = (status) => String(status ?? "").replaceAll("_", " ");
// Stored events keep no user or model text: the store writes "<N chars>" in its place.
const placeholder = (v) => typeof v === "string" && /^<(\d+ chars|omitted)>$/.test(v);

// el("li", {class: "x", testid: "y", "data-kind": k}, "text", child): strings become text nodes, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value == null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "testid") node.dataset.testid = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child != null && child !== false) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// ------------------------------------------------------------------ errors and the API

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function describe(detail) {
  if (detail == null) return "";
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {  // FastAPI's validation errors
    return detail.map((d) => (d && d.msg ? `${(d.loc || []).slice(1).join(".") || "request"}: ${d.msg}` : json(d))).join("; ");
  }
  return json(detail);
}

function showError(err) {
  $("error-text").textContent = err instanceof Error ? err.message : String(err);
  $("error").hidden = false;
}

function clearError() {
  $("error").hidden = true;
  $("error-text").textContent = "";
}

async function problem(res) {
  let detail = `${res.status} ${res.statusText || "error"}`;
  try {
    const body = await res.json();  // application/problem+json
    detail = describe(body.detail) || body.title || detail;
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(res.status, detail);
}

function headers(extra) {
  const sent = { ...extra };
  if (state.key) sent.Authorization = `Bearer ${state.key}`;
  return sent;
}

async function api(method, path, body) {
  const sent = headers({ Accept: "application/json" });
  if (body !== undefined) sent["Content-Type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers: sent, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, `Cannot reach the service (${e.message})`);
  }
  if (!res.ok) {
    const err = await problem(res);
    if (res.status === 401 && state.needsKey) askForKey(`The service refused the key: ${err.message}`);
    throw err;
  }
  return res.status === 204 ? null : res.json();
}

const runPath = (id) => `/runs/${encodeURIComponent(id)}`;

// ------------------------------------------------------------------ server-sent events over fetch()
// EventSource cannot send an Authorization header, so the stream is read and parsed here.

async function* sse(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { event: "", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(buffer);
      if (!m || (m[0] === "\r" && m.index === buffer.length - 1)) break;  // "\r" may be half of "\r\n"
      const line = buffer.slice(0, m.index);
      buffer = buffer.slice(m.index + m[0].length);
      if (line === "") {
        if (event.data.length) yield { event: event.event, data: event.data.join("\n"), id: event.id };
        event = { event: "", data: [], id: null };
        continue;
      }
      if (line.startsWith(":")) continue;  // a keep-alive
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? "" : line.slice(colon + 1);
      if (val.startsWith(" ")) val = val.slice(1);
      if (field === "event") event.event = val;
      else if (field === "data") event.data.push(val);
      else if (field === "id") event.id = val;
    }
  }
}

// ------------------------------------------------------------------ arguments, shown exactly

// A call's arguments as a list of name → value; a redacted value says so and shows no value.
function argumentList(args) {
  const list = el("dl", { class: "args", testid: "args" });
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    list.append(el("dt", {}, "arguments"), el("dd", {}, el("code", {}, json(args))));
    return list;
  }
  for (const [name, value] of Object.entries(args)) {
    const shown = value === REDACTED
      ? el("span", { class: "redacted", testid: "redacted", title: "a secret; the service does not show it" }, "redacted")
      : el("code", { testid: "arg-value" }, typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value, null, 2));
    list.append(el("dt", { "data-name": name }, name), el("dd", { "data-name": name }, shown));
  }
  if (!list.children.length) list.append(el("dt", {}, "no arguments"));
  return list;
}

function resultSummary(result) {
  if (result == null) return "";
  try {
    const env = typeof result === "string" ? JSON.parse(result) : result;
    if (env && env.ok === true) return short(json(env.result));
    if (env && env.ok === false && env.error) return short(`${env.error.code}: ${env.error.message}`);
  } catch {
    // not an envelope
  }
  return short(json(result));
}

// ------------------------------------------------------------------ a run, watched live

class RunView {
  constructor(runId, prompt, conversation) {
    this.runId = runId;
    this.lastSeq = 0;
    this.text = "";
    this.finished = false;
    this.paused = false;
    this.abort = new AbortController();
    this.status = el("span", { class: "status", testid: "run-status", role: "status" }, "starting");
    this.cancel = el("button", { type: "button", class: "link", testid: "cancel", onclick: () => this.cancelRun() }, "Cancel");
    this.timeline = el("ol", { class: "timeline", testid: "timeline" });
    this.answer = el("div", { class: "bubble answer", testid: "answer", hidden: true });
    this.prompt = el("div", { class: "bubble user", testid: "run-prompt" }, prompt ?? "");
    this.prompt.hidden = prompt == null;
    this.root = el("article", { class: "run", testid: "run", "data-run-id": runId, "data-status": "starting", "aria-label": `Run ${runId.slice(0, 12)}` },
      el("div", { class: "run-meta" }, this.status, " ",
        el("code", { class: "runid", title: runId }, runId.slice(0, 12)),
        conversation ? el("span", { class: "muted" }, ` · conversation ${conversation.slice(0, 12)}`) : null, " ", this.cancel),
      this.prompt, this.timeline, this.answer);
    state.views.set(runId, this);
  }

  setStatus(status) {
    this.status.textContent = words(status);
    this.status.dataset.status = status;
    this.root.dataset.status = status;
    this.cancel.hidden = TERMINAL.has(status);
  }

  add(kind, attrs, ...children) {
    const item = el("li", { class: `event ${kind}`, testid: "event", "data-kind": kind, ...attrs }, ...children);
    this.timeline.append(item);
    return item;
  }

  showAnswer(text, streaming) {
    this.answer.textContent = text ?? "";
    this.answer.hidden = !text;
    this.answer.classList.toggle("streaming", streaming);
  }

  onSse(ev) {
    let obj;
    try {
      obj = JSON.parse(ev.data);
    } catch {
      return;
    }
    if (obj === null || typeof obj !== "object") return;
    const seq = ev.id == null || ev.id === "" ? NaN : Number(ev.id);
    if (!Number.isNaN(seq)) {
      if (seq <= this.lastSeq) return;  // replayed after a reconnect
      this.lastSeq = seq;
    }
    const data = obj.data && typeof obj.data === "object" ? obj.data : {};
    this.apply(ev.event || obj.kind || "message", data, obj.step);
  }

  apply(kind, d, step) {
    const tool = d.tool ?? null;
    switch (kind) {
      case "run_started":
      case "run_resumed":
        this.paused = false;
        this.setStatus("running");
        if (kind === "run_resumed") this.add(kind, {}, "Resumed");
        return;
      case "step_started":
        this.text = "";
        if (!this.finished) this.showAnswer("", false);
        this.setStatus("running");
        this.add(kind, {}, `Step ${step ?? ""}`.trim());
        return;
      case "text":
        this.text += d.text ?? "";
        this.showAnswer(this.text, true);
        return;
      case "model_replied":
        if (d.error) this.add(kind, { "data-outcome": "error" }, "Model error: ", el("code", {}, short(String(d.error), 300)));
        else this.add(kind, {}, `Model replied (${d.finish_reason ?? "?"})${d.tool_calls ? ` · ${d.tool_calls} tool call${d.tool_calls === 1 ? "" : "s"}` : ""}`);
        return;
      case "call_validated":
        this.add(kind, { "data-tool": tool, "data-call-id": d.id }, "Calling ", el("b", {}, tool ?? "?"), " ", el("code", {}, short(json(d.arguments ?? {}), 300)));
        return;
      case "call_executed":
      case "call_recovered":
      case "call_rejected": {
        const outcome = String(d.outcome ?? "?");
        const verb = kind === "call_rejected" ? "Rejected " : kind === "call_recovered" ? "Recovered " : "";
        const item = this.add(kind, { "data-tool": tool, "data-outcome": outcome, "data-call-id": d.id }, verb,
          el("b", {}, tool ?? "?"), " → ", el("span", { class: `outcome ${outcome === "ok" ? "ok" : "bad"}`, testid: "outcome" }, outcome), " ",
          el("code", { class: "result", testid: "result" }, resultSummary(d.result)));
        const calling = [...this.timeline.children].find((li) => li.dataset.kind === "call_validated" && li.dataset.callId === String(d.id));
        if (calling) calling.replaceWith(item);  // the line that announced the call becomes its outcome
        return;
      }
      case "approval_requested":
        this.setStatus("awaiting_approval");
        this.add(kind, { "data-tool": tool, "data-call-id": d.id, testid: "approval-request" }, "Waiting for approval: ",
          el("b", {}, tool ?? "?"), d.reason ? el("span", { class: "reason" }, ` (${d.reason})`) : null, argumentList(d.arguments ?? {}));
        return;
      case "approval_decided":
        this.add(kind, { "data-call-id": d.id, "data-approved": String(!!d.approved) },
          el("span", { class: `outcome ${d.approved ? "ok" : "bad"}` }, d.approved ? "Approved" : "Denied"),
          d.tool ? ` ${d.tool}` : "", d.by ? ` by ${d.by}` : "", d.reason ? ` (${d.reason})` : "");
        return;
      case "reconciliation_needed":
        this.setStatus("awaiting_reconciliation");
        this.add(kind, { "data-tool": tool, "data-call-id": d.id }, "Outcome unknown: ", el("b", {}, tool ?? "?"), ", a person must say whether it ran");
        return;
      case "reconciled":
        this.add(kind, { "data-call-id": d.id }, `Settled: ${tool ?? "?"} ${d.executed ? "ran" : "did not run"}${d.by ? ` (${d.by})` : ""}`);
        return;
      case "run_paused":
        this.paused = true;
        this.setStatus(d.status || "paused");
        return;
      case "run_finished": {
        this.finished = true;
        this.paused = false;
        const status = d.status || "completed";
        this.setStatus(status);
        this.showAnswer(placeholder(d.output) ? this.text : d.output ?? this.text, false);
        if (status !== "completed" || d.reason) this.add(kind, { "data-outcome": status }, `Finished: ${words(status)}${d.reason ? ` (${d.reason})` : ""}`);
        return;
      }
      case "intent_recorded":
      case "outcome_recorded":
        return;  // bookkeeping of durable runs; the call_* events say the same to a person
      default:
        this.add(kind, {}, words(kind), d.reason ? `: ${d.reason}` : "");
    }
  }

  async streamOnce() {
    const sent = headers({ Accept: "text/event-stream" });
    if (this.lastSeq > 0) sent["Last-Event-ID"] = String(this.lastSeq);
    const res = await fetch(`${runPath(this.runId)}/events`, { headers: sent, signal: this.abort.signal, cache: "no-store" });
    if (!res.ok) throw await problem(res);
    for await (const ev of sse(res)) this.onSse(ev);
  }

  // Replayed (stored) events carry placeholders for results and the answer: take them from the run's record.
  async fillIn() {
    const run = await api("GET", runPath(this.runId));
    const results = new Map();
    for (const s of run.steps || []) for (const c of s.calls || []) results.set(c.id, c.result);
    for (const node of this.timeline.querySelectorAll('[data-testid="result"]')) {
      const id = node.closest("li").dataset.callId;
      if (placeholder(node.textContent) && results.get(id) != null) node.textContent = resultSummary(results.get(id));
    }
    if (run.status && !WAITING.has(run.status)) this.setStatus(run.status);
    if (TERMINAL.has(run.status)) {
      this.finished = true;
      this.showAnswer(run.output ?? this.text, false);
      if (run.reason && !this.timeline.querySelector('[data-kind="run_finished"]')) {
        this.add("run_finished", { "data-outcome": run.status }, `Finished: ${words(run.status)} (${run.reason})`);
      }
    }
    return run;
  }

  // While a person decides, the stream has ended: look at the run now and then, and follow it again once it goes on.
  async waitForAPerson() {
    loadInbox();
    while (!this.abort.signal.aborted) {
      await sleep(WAIT_EVERY_MS);
      const run = await api("GET", runPath(this.runId));
      if (!WAITING.has(run.status)) return;
    }
  }

  // Follow the run to its end, reconnecting with Last-Event-ID after a pause or a dropped connection.
  async follow() {
    let failures = 0;
    while (!this.finished && !this.abort.signal.aborted) {
      try {
        this.paused = false;
        await this.streamOnce();
        const run = await this.fillIn();
        if (this.finished) break;
        if (WAITING.has(run.status)) {
          this.setStatus(run.status);
          await this.waitForAPerson();
          loadInbox();  // decided: no longer waiting in anyone's inbox
          failures = 0;
          continue;
        }
        failures += 1;  // the stream ended with the run still going: a dropped connection
      } catch (e) {
        if (this.abort.signal.aborted) return;
        if (e instanceof ApiError && e.status >= 400 && e.status < 500) {
          showError(e);
          return;
        }
        failures += 1;
      }
      if (failures > 20) {
        showError(new Error(`Lost the events of run ${this.runId}`));
        return;
      }
      await sleep(Math.min(300 * failures, 3000));
    }
    loadRuns();
  }

  async cancelRun() {
    this.cancel.disabled = true;
    try {
      const run = await api("POST", `${runPath(this.runId)}/cancel`);
      this.setStatus(run.status);
    } catch (e) {
      showError(e);
    } finally {
      this.cancel.disabled = false;
    }
  }

  close() {
    this.abort.abort();
    state.views.delete(this.runId);
  }
}

function watch(runId, prompt, conversation) {
  const existing = state.views.get(runId);
  if (existing) {
    existing.root.scrollIntoView({ block: "nearest" });
    return existing;
  }
  const view = new RunView(runId, prompt, conversation);
  $("log").prepend(view.root);
  view.follow();
  return view;
}

// ------------------------------------------------------------------ starting runs and conversation turns

async function send(prompt) {
  if (document.querySelector('[data-testid="mode-conversation"]').checked) {
    if (!state.conversation) {
      state.conversation = (await api("POST", "/conversations")).id;
      showConversation();
    }
    const turn = await api("POST", `/conversations/${encodeURIComponent(state.conversation)}/turns`, { text: prompt });
    watch(turn.run_id, prompt, state.conversation).setStatus(turn.status || "ready");
  } else {
    const run = await api("POST", "/runs", { prompt });
    watch(run.run_id, prompt, null).setStatus(run.status || "ready");
  }
  loadRuns();
}

function showConversation() {
  const on = document.querySelector('[data-testid="mode-conversation"]').checked;
  $("conversation").hidden = !on || !state.conversation;
  $("conversation-id").textContent = state.conversation ? `conversation ${state.conversation.slice(0, 12)}` : "";
}

// ------------------------------------------------------------------ my runs

async function loadRuns() {
  let body;
  try {
    body = await api("GET", "/runs?limit=20");
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) showError(e);
    return;
  }
  const runs = body.runs || [];
  $("runs-list").replaceChildren(...runs.map((r) => {
    const when = r.created_at ? new Date(r.created_at * 1000).toLocaleTimeString() : "";
    return el("li", {},
      el("button", { type: "button", class: "run-item", testid: "run-item", "data-run-id": r.run_id, "data-status": r.status, onclick: () => watch(r.run_id, null, r.conversation_id) },
        el("span", { class: "status", "data-status": r.status }, words(r.status)), " ",
        el("code", { title: r.run_id }, r.run_id.slice(0, 12)), " ",
        el("small", {}, [when, `${r.steps} step${r.steps === 1 ? "" : "s"}`, r.conversation_id ? `turn ${r.turn}` : ""].filter(Boolean).join(" · "))));
  }));
  $("runs-empty").hidden = runs.length > 0;
}

// ------------------------------------------------------------------ the approvals inbox

async function decide(item, entry, approve) {
  const reason = item.querySelector('[data-testid="decision-reason"]').value.trim() || null;
  for (const b of item.querySelectorAll("button")) b.disabled = true;
  try {
    // Bound to the fingerprint the inbox gave: a call whose arguments changed since is refused (409).
    await api("POST", `${runPath(entry.run_id)}/approvals/${encodeURIComponent(entry.call_id)}`, { approve, fingerprint: entry.fingerprint, reason });
    item.dataset.decided = approve ? "approved" : "denied";
    item.querySelector('[data-testid="decision"]').textContent = approve ? "Approved" : "Denied";
    setTimeout(() => loadInbox().then(focusNext), 500);
  } catch (e) {
    for (const b of item.querySelectorAll("button")) b.disabled = false;
    showError(e);
  }
}

async function settle(item, entry, form) {
  const executed = form.querySelector('input[type="radio"]:checked');
  if (!executed) {
    showError(new Error("Say whether the call took effect"));
    return;
  }
  let result = null;
  const raw = form.querySelector("textarea").value.trim();
  if (raw) {
    try {
      result = JSON.parse(raw);
    } catch {
      result = raw;  // plain text is a string result
    }
  }
  for (const b of item.querySelectorAll("button")) b.disabled = true;
  try {
    await api("POST", `${runPath(entry.run_id)}/calls/${encodeURIComponent(entry.call_id)}/reconcile`, { executed: executed.value === "yes", result });
    item.dataset.decided = "settled";
    item.querySelector('[data-testid="decision"]').textContent = "Settled";
    setTimeout(() => loadInbox().then(focusNext), 500);
  } catch (e) {
    for (const b of item.querySelectorAll("button")) b.disabled = false;
    showError(e);
  }
}

// After a decision the item goes: keyboard focus moves on to the next one waiting, else to Refresh.
function focusNext() {
  const active = document.activeElement;
  if (active && active !== document.body && active.isConnected && !active.disabled) return;
  const next = document.querySelector('[data-testid="inbox-list"] [data-testid="approve"], [data-testid="inbox-list"] input[type="radio"]');
  (next || $("inbox-refresh")).focus();
}

function decisionControls(item, entry) {
  const label = `${entry.tool} in run ${entry.run_id.slice(0, 12)}`;
  if (entry.kind === "reconcile") {
    const name = `executed-${entry.run_id}-${entry.call_id}`;
    const form = el("form", { class: "settle", testid: "reconcile-form", onsubmit: (e) => { e.preventDefault(); settle(item, entry, form); } },
      el("fieldset", {}, el("legend", {}, `Did ${entry.tool} take effect?`),
        el("label", {}, el("input", { type: "radio", name, value: "yes", testid: "executed-yes" }), " yes, it ran"),
        el("label", {}, el("input", { type: "radio", name, value: "no", testid: "executed-no" }), " no, it did not")),
      el("label", {}, "What it returned (JSON or text, optional)", el("textarea", { rows: 2, testid: "reconcile-result" })),
      el("div", { class: "buttons" }, el("button", { type: "submit", testid: "reconcile", "aria-label": `Settle ${label}` }, "Settle"),
        el("span", { class: "decision", testid: "decision", role: "status" })));
    return form;
  }
  return el("div", { class: "decide" },
    el("label", {}, "Reason (optional) ", el("input", { type: "text", testid: "decision-reason", maxlength: 1000 })),
    el("div", { class: "buttons" },
      el("button", { type: "button", class: "approve", testid: "approve", "aria-label": `Approve ${label}`, onclick: () => decide(item, entry, true) }, "Approve"),
      el("button", { type: "button", class: "deny", testid: "deny", "aria-label": `Deny ${label}`, onclick: () => decide(item, entry, false) }, "Deny"),
      el("span", { class: "decision", testid: "decision", role: "status" })));
}

function inboxItem(entry) {
  const key = `${entry.run_id}/${entry.call_id}`;
  const when = entry.requested_at ? new Date(entry.requested_at * 1000).toLocaleTimeString() : "";
  const item = el("li", { class: "approval", testid: "approval", "data-key": key, "data-run-id": entry.run_id, "data-call-id": entry.call_id, "data-tool": entry.tool, "data-kind": entry.kind, "data-fingerprint": entry.fingerprint },
    entry.kind === "reconcile"
      ? el("h3", {}, "Did ", el("b", { testid: "approval-tool" }, entry.tool ?? "?"), " run?")
      : el("h3", {}, entry.decidable ? "Approve " : "Waiting for approval: ", el("b", { testid: "approval-tool" }, entry.tool ?? "?"), entry.decidable ? "?" : ""),
    el("p", { class: "reason", testid: "approval-reason" }, entry.kind === "reconcile"
      ? "The call was cut off before its outcome was recorded; it never runs again blindly."
      : `Why: ${entry.reason || "the agent's rules ask for a person's decision"}`),
    el("div", { class: "section-label" }, entry.kind === "reconcile" ? "The arguments it was called with" : "The arguments it will run with"),
    argumentList(entry.arguments ?? {}),
    el("div", { class: "section-label" }, "The run's prompt"),
    el("blockquote", { class: "quote", testid: "approval-prompt" }, entry.prompt ?? "(none)"),
    el("p", { class: "muted" }, `asked by ${entry.owner ?? "?"}`, when ? ` at ${when}` : "", " · run ", el("code", { title: entry.run_id }, entry.run_id.slice(0, 12))));
  item.append(entry.decidable ? decisionControls(item, entry) : el("p", { class: "muted", testid: "not-decidable" }, "Waiting for a person with the approver role."));
  return item;
}

async function loadInbox() {
  let body;
  try {
    body = await api("GET", "/approvals");
  } catch (e) {
    if (!(e instanceof ApiError && e.status === 401)) showError(e);
    return;
  }
  const list = $("inbox-list");
  const entries = body.approvals || [];
  const keys = new Set(entries.map((a) => `${a.run_id}/${a.call_id}`));
  for (const item of [...list.children]) if (!keys.has(item.dataset.key)) item.remove();  // decided
  for (const entry of entries) {
    const key = `${entry.run_id}/${entry.call_id}`;
    const shown = [...list.children].find((item) => item.dataset.key === key);
    if (shown && shown.dataset.fingerprint === entry.fingerprint) continue;  // keep what is being typed
    const item = inboxItem(entry);
    if (shown) shown.replaceWith(item);
    else list.append(item);
  }
  $("inbox-empty").hidden = list.children.length > 0;
}

// ------------------------------------------------------------------ the key

function askForKey(message) {
  forget();
  $("app").hidden = true;
  $("who").hidden = true;
  $("signin").hidden = false;
  if (message) showError(new Error(message));
  $("key").focus();
}

function forget() {
  for (const view of [...state.views.values()]) view.close();
  clearInterval(state.inboxTimer);
  state.key = null;
  state.conversation = null;
  sessionStorage.removeItem(KEY);
  for (const id of ["log", "runs-list", "inbox-list"]) $(id).replaceChildren();
}

function enter() {
  $("signin").hidden = true;
  $("app").hidden = false;
  $("who").hidden = false;
  $("auth-mode").textContent = state.needsKey ? "using the key of this tab" : "no key needed (loopback)";
  $("forget-key").hidden = !state.needsKey;
  loadRuns();
  loadInbox();
  clearInterval(state.inboxTimer);
  state.inboxTimer = setInterval(loadInbox, INBOX_EVERY_MS);
  $("prompt").focus();
}

// Whether the service takes this key (or, without one, needs none): the inbox answers every caller.
async function accepted() {
  const res = await fetch("/approvals?limit=1", { headers: headers({ Accept: "application/json" }), cache: "no-store" });
  if (res.status === 401) return false;
  if (!res.ok) throw await problem(res);
  return true;
}

async function boot() {
  fetch("/openapi.json").then((r) => (r.ok ? r.json() : null)).then((doc) => {
    const title = doc && doc.info && typeof doc.info.title === "string" ? doc.info.title : null;
    if (title) {
      $("title").textContent = title;
      document.title = title;
    }
  }, () => {});
  state.key = sessionStorage.getItem(KEY);
  try {
    if (state.key === null) {
      if (await accepted()) {
        state.needsKey = false;  // --auth none: every caller is the local principal
        return enter();
      }
      return askForKey(null);
    }
    if (await accepted()) return enter();
    askForKey("The key kept in this tab is no longer accepted.");
  } catch (e) {
    showError(e);
  }
}

function wire() {
  $("signin-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    clearError();
    const key = $("key").value.trim();
    if (!key) return;
    $("key-submit").disabled = true;
    state.key = key;
    try {
      if (!(await accepted())) {
        state.key = null;
        showError(new Error("The service does not accept that key."));
        $("key").select();
        return;
      }
      sessionStorage.setItem(KEY, key);
      $("key").value = "";
      state.needsKey = true;
      enter();
    } catch (err) {
      state.key = null;
      showError(err);
    } finally {
      $("key-submit").disabled = false;
    }
  });
  $("start-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const prompt = $("prompt").value.trim();
    if (!prompt) return;
    clearError();
    $("send").disabled = true;
    try {
      await send(prompt);
      $("prompt").value = "";
    } catch (err) {
      showError(err);
    } finally {
      $("send").disabled = false;
      $("prompt").focus();
    }
  });
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !e.isComposing) {
      e.preventDefault();
      $("start-form").requestSubmit();
    }
  });
  for (const radio of document.querySelectorAll('input[name="mode"]')) radio.addEventListener("change", showConversation);
  $("new-conversation").addEventListener("click", () => {
    state.conversation = null;
    showConversation();
    $("prompt").focus();
  });
  $("forget-key").addEventListener("click", () => {
    clearError();
    askForKey(null);
  });
  $("error-dismiss").addEventListener("click", clearError);
  $("runs-refresh").addEventListener("click", loadRuns);
  $("inbox-refresh").addEventListener("click", loadInbox);
}

wire();
boot();
