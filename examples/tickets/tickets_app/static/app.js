// The tether tickets web page: sign in, chat with the agent, watch its steps, approve calls.
// Plain DOM, no build step. Everything the server, the model, tools or users wrote is untrusted:
// it reaches the page only through text nodes, textContent and setAttribute, never innerHTML.
"use strict";

(() => {
  const SESSION_KEY = "tether.session";
  const TERMINAL = new Set([
    "completed", "max_steps", "budget_exhausted", "truncated", "content_filtered", "protocol_error",
    "loop_detected", "repair_exhausted", "model_error", "cancelled", "failed", "error",
  ]);
  const PAUSED = new Set(["awaiting_approval", "awaiting_reconciliation", "paused"]);
  const META_KEYS = new Set(["seq", "at", "ts", "time", "run_id", "kind", "type", "event"]);

  const state = { token: null, user: null, views: new Set(), approvalsTimer: null, detailTimer: null };

  const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // el("li", {class: "x", testid: "y", "data-kind": k}, "text", child) — strings become text nodes.
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

  const short = (s, n = 160) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
  // Stored events keep no user or model text: the store writes "<N chars>" in its place.
  const placeholder = (v) => typeof v === "string" && /^<(\d+ chars|omitted)>$/.test(v);
  const json = (v) => (typeof v === "string" ? v : JSON.stringify(v));

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
    const text = err instanceof Error ? err.message : String(err);
    $("error-text").textContent = text;
    $("error").hidden = false;
  }

  function clearError() {
    $("error").hidden = true;
    $("error-text").textContent = "";
  }

  async function problem(res) {
    let detail = `${res.status} ${res.statusText || "error"}`;
    try {
      const body = await res.json();
      detail = describe(body.detail) || body.title || detail;
    } catch {
      // not JSON: keep the status line
    }
    if (res.status === 401 && state.token) signOut();
    return new ApiError(res.status, detail);
  }

  function authHeaders(extra) {
    const headers = { ...extra };
    if (state.token) headers.Authorization = `Bearer ${state.token}`;
    return headers;
  }

  async function api(method, path, body) {
    const headers = authHeaders({ Accept: "application/json" });
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new ApiError(0, `Cannot reach the server (${e.message})`);
    }
    if (!res.ok) throw await problem(res);
    return res.status === 204 ? null : res.json();
  }

  const runPath = (id) => `/api/runs/${encodeURIComponent(id)}`;

  // ------------------------------------------------------------------ Server-Sent Events over fetch()
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
        if (line.startsWith(":")) continue;  // comment / keep-alive
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

  // ------------------------------------------------------------------ a run, watched live

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

  class RunView {
    constructor(runId, prompt) {
      this.runId = runId;
      this.lastSeq = -1;
      this.seen = new Set();
      this.text = "";
      this.finished = false;
      this.paused = false;
      this.abort = new AbortController();
      this.status = el("span", { class: "status", testid: "run-status" }, "starting");
      this.timeline = el("ol", { class: "timeline", testid: "timeline" });
      this.answer = el("div", { class: "bubble answer", testid: "answer", hidden: true });
      this.root = el("article", { class: "run", testid: "run", "data-run-id": runId, "data-status": "starting" },
        el("div", { class: "bubble user", testid: "run-prompt" }, prompt),
        el("div", { class: "agent" },
          el("div", { class: "run-meta" }, this.status, el("code", { class: "runid", title: runId }, runId.slice(0, 12))),
          this.timeline, this.answer));
      state.views.add(this);
    }

    setStatus(status) {
      this.status.textContent = status.replaceAll("_", " ");
      this.status.dataset.status = status;
      this.root.dataset.status = status;
    }

    add(kind, attrs, ...children) {
      const item = el("li", { class: `event ${kind}`, testid: "event", "data-kind": kind, ...attrs }, ...children);
      this.timeline.append(item);
      scrollLog();
      return item;
    }

    showAnswer(text, streaming) {
      this.answer.textContent = text;
      this.answer.hidden = !text;
      this.answer.classList.toggle("streaming", streaming);
      scrollLog();
    }

    onSse(ev) {
      let obj;
      try {
        obj = JSON.parse(ev.data);
      } catch {
        obj = { text: ev.data };
      }
      if (obj === null || typeof obj !== "object" || Array.isArray(obj)) obj = { value: obj };
      const kind = (ev.event && ev.event !== "message" ? ev.event : "") || obj.kind || obj.type || obj.event || "message";
      let data = obj;
      if (obj.data && typeof obj.data === "object" && !Array.isArray(obj.data) && (obj.kind || obj.type || "seq" in obj || "step" in obj)) {
        data = obj.data;
      }
      const step = obj.step ?? data.step;
      const rawSeq = ev.id ?? obj.seq;
      const seq = rawSeq == null || rawSeq === "" ? NaN : Number(rawSeq);
      if (!Number.isNaN(seq)) {
        if (seq <= this.lastSeq) return;  // replayed after a reconnect
        this.lastSeq = seq;
      } else if (kind !== "text") {
        const sig = json([kind, step, Object.entries(data).filter(([k]) => !META_KEYS.has(k)).sort()]);
        if (this.seen.has(sig)) return;
        this.seen.add(sig);
      }
      this.apply(kind, data, step);
    }

    apply(kind, d, step) {
      const tool = d.tool ?? null;
      switch (kind) {
        case "run_started":
          this.setStatus("running");
          return;
        case "step_started":
          this.text = "";
          if (!this.finished) this.showAnswer("", false);
          this.setStatus("running");
          this.add(kind, {}, `Step ${step ?? ""}`.trim());
          return;
        case "text":
          this.text += d.text ?? d.value ?? "";
          this.showAnswer(this.text, true);
          return;
        case "model_replied":
          if (d.error) this.add(kind, { "data-outcome": "error" }, "Model error: ", el("code", {}, short(String(d.error), 300)));
          else this.add(kind, {}, `Model replied (${d.finish_reason ?? "?"})${d.tool_calls ? ` · ${d.tool_calls} tool call${d.tool_calls === 1 ? "" : "s"}` : ""}`);
          return;
        case "call_validated":
          this.add(kind, { "data-tool": tool, "data-call-id": d.id }, "Calling ", el("b", {}, tool ?? "?"), "…");
          return;
        case "call_executed":
        case "call_recovered":
        case "call_rejected": {
          const outcome = String(d.outcome ?? "?");
          const verb = kind === "call_rejected" ? "Rejected " : kind === "call_recovered" ? "Recovered " : "";
          const item = this.add(kind, { "data-tool": tool, "data-outcome": outcome, "data-call-id": d.id }, verb,
            el("b", {}, tool ?? "?"), " → ",
            el("span", { class: `outcome ${outcome === "ok" ? "ok" : "bad"}`, testid: "outcome" }, outcome), " ",
            el("code", { class: "result", testid: "result", title: short(json(d.result ?? ""), 2000) }, resultSummary(d.result)));
          // The line that announced the call becomes its outcome.
          const calling = [...this.timeline.children].find((li) => li.dataset.kind === "call_validated" && li.dataset.callId === String(d.id));
          if (calling) calling.replaceWith(item);
          return;
        }
        case "approval_requested":
          this.setStatus("awaiting_approval");
          this.add(kind, { "data-tool": tool, "data-call-id": d.id, testid: "approval-request" }, "Waiting for approval: ",
            el("b", {}, tool ?? "?"), " ", el("code", {}, short(json(d.arguments ?? {}), 200)), approvalReason(d.reason));
          return;
        case "approval_decided":
          this.add(kind, { "data-call-id": d.id, "data-approved": String(!!d.approved) },
            el("span", { class: `outcome ${d.approved ? "ok" : "bad"}` }, d.approved ? "Approved" : "Denied"),
            d.tool ? ` ${d.tool}` : "", d.by ? ` by ${d.by}` : "", d.reason ? ` — ${d.reason}` : "");
          return;
        case "run_paused":
          this.paused = true;
          this.setStatus(d.status || "paused");
          this.add(kind, {}, `Paused${d.reason ? `: ${d.reason}` : ""}`);
          return;
        case "run_resumed":
          this.paused = false;
          this.setStatus("running");
          this.add(kind, {}, "Resumed");
          return;
        case "run_finished": {
          this.finished = true;
          this.paused = false;
          const status = d.status || "completed";
          this.setStatus(status);
          this.showAnswer(placeholder(d.output) ? this.text : d.output ?? this.text, false);
          if (status !== "completed" || d.reason) this.add(kind, { "data-outcome": status }, `Finished: ${status.replaceAll("_", " ")}${d.reason ? ` — ${d.reason}` : ""}`);
          loadRuns();
          return;
        }
        case "intent_recorded":
        case "outcome_recorded":
          return;  // bookkeeping of durable runs; call_* events say the same to a person
        default:
          this.add(kind, {}, kind.replaceAll("_", " "), d.reason ? `: ${d.reason}` : "");
      }
    }

    async streamOnce() {
      const headers = authHeaders({ Accept: "text/event-stream" });
      if (this.lastSeq >= 0) headers["Last-Event-ID"] = String(this.lastSeq);
      const res = await fetch(`${runPath(this.runId)}/events`, { headers, signal: this.abort.signal, cache: "no-store" });
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
        if (placeholder(node.textContent) && results.get(id) != null) {
          node.textContent = resultSummary(results.get(id));
          node.title = short(json(results.get(id)), 2000);
        }
      }
      if (this.finished && run.output != null) this.showAnswer(run.output, false);
      return run;
    }

    async waitWhilePaused() {
      while (!this.abort.signal.aborted) {
        await sleep(1500);
        const run = await api("GET", runPath(this.runId));
        if (!PAUSED.has(run.status)) {
          this.paused = false;
          return;
        }
      }
    }

    // Follow the run to its end: re-open the stream after a pause (someone approved) or a dropped connection.
    async follow() {
      let failures = 0;
      while (!this.finished && !this.abort.signal.aborted) {
        try {
          this.paused = false;
          await this.streamOnce();
          if (this.finished || this.paused) await this.fillIn();
          if (this.finished) break;
          if (this.paused) {
            loadRuns();
            await this.waitWhilePaused();
            continue;
          }
          failures += 1;
        } catch (e) {
          if (this.abort.signal.aborted) return;
          if (e instanceof ApiError && e.status >= 400 && e.status < 500) {
            showError(e);
            return;
          }
          failures += 1;
        }
        if (failures > 20) {
          showError(new Error(`Lost the event stream of run ${this.runId}`));
          return;
        }
        await sleep(Math.min(500 * failures, 3000));
      }
    }

    close() {
      this.abort.abort();
      state.views.delete(this);
    }
  }

  function scrollLog() {
    const log = $("chat-log");
    log.scrollTop = log.scrollHeight;
  }

  async function send(prompt) {
    const { run_id: runId, status } = await api("POST", "/api/runs", { prompt });
    const view = new RunView(runId, prompt);
    view.setStatus(status || "running");
    $("chat-log").append(view.root);
    scrollLog();
    loadRuns();
    view.follow();
  }

  // ------------------------------------------------------------------ my runs, and one run's record

  async function loadRuns() {
    if (!state.token) return;
    try {
      const body = await api("GET", "/api/runs");
      const runs = Array.isArray(body) ? body : body.runs || body.items || [];
      const list = $("runs-list");
      list.replaceChildren(...runs.map((r) => {
        const id = r.run_id ?? r.id;
        const when = r.created_at ? new Date(r.created_at * (r.created_at < 1e12 ? 1000 : 1)).toLocaleTimeString() : "";
        return el("li", {},
          el("button", { type: "button", class: "run-item", testid: "run-item", "data-run-id": id, "data-status": r.status, onclick: () => openRun(id) },
            el("span", { class: "status", "data-status": r.status }, String(r.status ?? "").replaceAll("_", " ")),
            el("span", { class: "title" }, r.prompt ? short(r.prompt, 60) : el("code", { title: id }, id.slice(0, 12))),
            el("small", {}, [when, r.steps != null ? `${r.steps} step${r.steps === 1 ? "" : "s"}` : ""].filter(Boolean).join(" · "))));
      }));
      $("runs-empty").hidden = runs.length > 0;
    } catch (e) {
      showError(e);
    }
  }

  function renderRun(run) {
    const view = $("run-view");
    const id = run.run_id ?? run.id;
    const items = [
      el("div", { class: "run-meta" }, el("span", { class: "status", testid: "run-status", "data-status": run.status }, String(run.status).replaceAll("_", " ")),
        run.reason ? el("span", { class: "reason" }, run.reason) : null),
    ];
    if (run.prompt) items.push(el("div", { class: "bubble user", testid: "run-prompt" }, run.prompt));
    const steps = run.steps || [];
    const timeline = el("ol", { class: "timeline", testid: "timeline" });
    for (const s of steps) {
      const said = s.content && s.content !== run.output ? el("div", { class: "content" }, short(s.content, 400)) : null;
      timeline.append(el("li", { class: "event step_started", testid: "event", "data-kind": "step" }, `Step ${s.step ?? ""}`, said));
      for (const c of s.calls || []) {
        const outcome = c.outcome || (c.executed ? "…" : "not run");
        timeline.append(el("li", { class: "event call_executed", testid: "event", "data-kind": "call", "data-tool": c.tool, "data-outcome": outcome },
          el("b", {}, c.tool ?? "?"), c.arguments ? el("code", {}, ` ${short(json(c.arguments), 120)}`) : null, " → ",
          el("span", { class: `outcome ${outcome === "ok" ? "ok" : "bad"}`, testid: "outcome" }, outcome),
          c.result ? el("code", { class: "result", testid: "result" }, ` ${resultSummary(c.result)}`) : null));
      }
    }
    const pending = run.pending_approvals ?? run.approvals ?? run.pending ?? [];
    for (const p of pending) {
      timeline.append(el("li", { class: "event approval_requested", testid: "approval-request", "data-tool": p.tool, "data-call-id": p.call_id ?? p.id },
        "Waiting for approval: ", el("b", {}, p.tool ?? "?"), " ", el("code", {}, short(json(p.arguments ?? {}), 200)), approvalReason(p.reason)));
    }
    items.push(timeline);
    if (run.output) items.push(el("div", { class: "bubble answer", testid: "answer" }, run.output));
    view.replaceChildren(...items);
    view.dataset.runId = id;
    view.dataset.status = run.status;
    $("run-view-id").textContent = id;
  }

  async function openRun(id) {
    clearInterval(state.detailTimer);
    try {
      renderRun(await api("GET", runPath(id)));
    } catch (e) {
      showError(e);
      return;
    }
    showRunView(true);
    // A run still going (or waiting for someone's approval) is re-read until it ends.
    state.detailTimer = setInterval(async () => {
      if ($("run-view").hidden || $("run-view").dataset.runId !== id) return clearInterval(state.detailTimer);
      try {
        const run = await api("GET", runPath(id));
        renderRun(run);
        if (TERMINAL.has(run.status)) clearInterval(state.detailTimer);
      } catch (e) {
        clearInterval(state.detailTimer);
        showError(e);
      }
    }, 2000);
  }

  function showRunView(on) {
    $("run-view").hidden = !on;
    $("run-view-head").hidden = !on;
    $("chat-log").hidden = on;
    $("chat-form").hidden = on;
    if (!on) clearInterval(state.detailTimer);
  }

  // ------------------------------------------------------------------ approvals (agents and admins)

  // Why a call waits for a person, e.g. "the run read untrusted text from search_kb" (shown as text).
  function approvalReason(reason) {
    return reason ? el("span", { class: "reason", testid: "approval-reason-text" }, ` — needs approval: ${reason}`) : null;
  }

  async function decide(item, approval, approved) {
    const reason = item.querySelector("input").value.trim() || null;
    for (const b of item.querySelectorAll("button")) b.disabled = true;
    try {
      await api("POST", `${runPath(approval.runId)}/approvals/${encodeURIComponent(approval.callId)}`, { approved, reason, fingerprint: approval.fingerprint });
      item.dataset.decided = approved ? "approved" : "denied";
      item.querySelector(".decision").textContent = approved ? "Approved" : "Denied";
      setTimeout(loadApprovals, 800);
    } catch (e) {
      for (const b of item.querySelectorAll("button")) b.disabled = false;
      showError(e);
    }
  }

  async function loadApprovals() {
    if (!state.token || $("approvals-panel").hidden) return;
    let body;
    try {
      body = await api("GET", "/api/approvals");
    } catch (e) {
      showError(e);
      return;
    }
    const list = $("approvals-list");
    const entries = (Array.isArray(body) ? body : body.approvals || body.items || []).map((a) => ({
      runId: a.run_id, callId: a.call_id ?? a.id, tool: a.tool, args: a.arguments ?? {}, fingerprint: a.fingerprint ?? null, reason: a.reason ?? "",
      who: a.owner ?? a.requested_by ?? a.username ?? "", prompt: a.prompt ?? "",
    }));
    const keys = new Set(entries.map((a) => `${a.runId}/${a.callId}`));
    for (const item of [...list.children]) if (!keys.has(item.dataset.key)) item.remove();  // decided elsewhere
    for (const a of entries) {
      const key = `${a.runId}/${a.callId}`;
      if ([...list.children].some((item) => item.dataset.key === key)) continue;  // keep what is being typed
      const who = typeof a.who === "object" && a.who ? a.who.username ?? a.who.id : a.who;
      const item = el("li", { class: "approval", testid: "approval", "data-key": key, "data-run-id": a.runId, "data-call-id": a.callId, "data-tool": a.tool },
        el("div", {}, el("b", { testid: "approval-tool" }, a.tool ?? "?"), " ", el("code", { testid: "approval-args" }, short(json(a.args), 300))),
        a.reason ? el("div", { class: "reason", testid: "approval-reason-text" }, `Needs approval: ${a.reason}`) : null,
        el("div", { class: "muted" }, who ? `asked by ${who} · ` : "", "run ", el("code", { title: a.runId }, String(a.runId).slice(0, 12))),
        a.prompt ? el("div", { class: "muted quote" }, short(a.prompt, 200)) : null,
        el("input", { type: "text", placeholder: "Reason (optional)", testid: "approval-reason", "aria-label": "Reason" }),
        el("div", { class: "buttons" },
          el("button", { type: "button", class: "approve", testid: "approve", onclick: () => decide(item, a, true) }, "Approve"),
          el("button", { type: "button", class: "deny", testid: "deny", onclick: () => decide(item, a, false) }, "Deny"),
          el("span", { class: "decision", testid: "approval-decision" })));
      list.append(item);
    }
    $("approvals-empty").hidden = list.children.length > 0;
  }

  // ------------------------------------------------------------------ session

  function isApprover(user) {
    const roles = new Set([user.role, ...(user.roles || [])]);
    return roles.has("agent") || roles.has("admin");
  }

  function enter(token, user) {
    state.token = token;
    state.user = user;
    sessionStorage.setItem(SESSION_KEY, JSON.stringify({ token, user }));
    $("signin").hidden = true;
    $("app").hidden = false;
    $("who").hidden = false;
    $("current-user").textContent = user.username ?? user.id ?? "";
    $("current-role").textContent = user.role ?? "";
    const approver = isApprover(user);
    $("approvals-panel").hidden = !approver;
    clearInterval(state.approvalsTimer);
    if (approver) {
      loadApprovals();
      state.approvalsTimer = setInterval(loadApprovals, 3000);
    }
    showRunView(false);
    loadRuns();
    $("prompt").focus();
  }

  function signOut() {
    for (const view of [...state.views]) view.close();
    clearInterval(state.approvalsTimer);
    clearInterval(state.detailTimer);
    state.token = null;
    state.user = null;
    sessionStorage.removeItem(SESSION_KEY);
    for (const id of ["chat-log", "run-view", "runs-list", "approvals-list"]) $(id).replaceChildren();
    $("app").hidden = true;
    $("who").hidden = true;
    $("signin").hidden = false;
    $("username").focus();
  }

  async function restore() {
    let saved = null;
    try {
      saved = JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
    } catch {
      // ignore a damaged entry
    }
    if (!saved || !saved.token) return signOut();
    state.token = saved.token;
    try {
      enter(saved.token, await api("GET", "/api/me"));
    } catch {
      signOut();
    }
  }

  function wire() {
    $("signin-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      clearError();
      const form = e.currentTarget;
      const button = $("signin-submit");
      button.disabled = true;
      try {
        const body = await api("POST", "/api/auth/token", { username: form.username.value.trim(), password: form.password.value });
        form.password.value = "";
        enter(body.access_token, body.user);
      } catch (err) {
        showError(err);
      } finally {
        button.disabled = false;
      }
    });
    $("chat-form").addEventListener("submit", async (e) => {
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
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        $("chat-form").requestSubmit();
      }
    });
    $("signout").addEventListener("click", () => {
      clearError();
      signOut();
    });
    $("error-dismiss").addEventListener("click", clearError);
    $("runs-refresh").addEventListener("click", loadRuns);
    $("approvals-refresh").addEventListener("click", loadApprovals);
    $("back-to-chat").addEventListener("click", () => showRunView(false));
  }

  wire();
  restore();
})();
