// cq's dashboard: one snapshot (GET /state), then every change from the
// event stream (GET /events), which resumes by seq when it reconnects.
// Every request goes through fetch with the token, when one is given, in
// an Authorization header (the stream too: an EventSource cannot send
// one): no cookie, so no other site can make the browser send it.
// Everything is built with textContent, never from HTML strings: task
// commands and questions are user data.
"use strict";

const tasks = new Map();      // id → task, as /state and /tasks/{id} give it
let queues = {}, workers = [], schedules = [];
let lastSeq = 0;
const maxTasks = 500;

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

// keepFocus re-renders the rows of body, then gives the focus back to the
// same control of the same row (data-id, data-queue), so that a keyboard
// user's place survives the live updates.
function keepFocus(body, render) {
  const a = document.activeElement;
  const row = a && body.contains(a) ? a.closest("tr") : null;
  const key = row ? (row.dataset.id || row.dataset.queue) : null;
  render();
  if (key == null) return;
  for (const r of body.children) {
    if ((r.dataset.id || r.dataset.queue) !== key) continue;
    const n = r.querySelector(a.tagName.toLowerCase());
    if (n) n.focus();
  }
}

function token() { return sessionStorage.getItem("cq-token") || ""; }

function askToken() {
  const form = document.getElementById("token-form");
  if (!form.hidden) return;
  form.hidden = false;
  document.getElementById("token").focus();
}

async function api(path, opts) {
  opts = opts || {};
  const headers = Object.assign({}, opts.headers);
  if (token()) headers["Authorization"] = "Bearer " + token();
  const r = await fetch(path, Object.assign({}, opts, { headers }));
  if (r.status === 401) {
    askToken();
    throw new Error(token() ? "the token was refused" : "a token is needed");
  }
  if (!r.ok) {
    let msg = r.status + "";
    try { msg = (await r.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new Error(msg);
  }
  return r;
}

function command(t) {
  if (t.shell) return t.shell;
  if (t.intent) return "intent:" + t.intent;
  return (t.cmd || []).join(" ");
}

function progressText(p) {
  if (!p) return "";
  let s = "";
  if (p.done != null && p.total != null) s = p.done + "/" + p.total + (p.total > 0 ? " (" + Math.floor(p.done * 100 / p.total) + "%)" : "");
  else if (p.done != null) s = p.done + " done";
  else if (p.total != null) s = "of " + p.total;
  if (p.message) s += (s ? " " : "") + p.message;
  return s;
}

function progressCell(t) {
  const td = el("td");
  if (t.question && t.state === "doing") { td.append("asking: " + t.question.question); return td; }
  const p = t.progress;
  if (!p) return td;
  if (p.done != null && p.total > 0) td.append(el("progress", { max: p.total, value: p.done, "aria-label": "progress of " + t.id }), " ");
  td.append(progressText(p));
  return td;
}

// labelCells gives each cell of table's body its column's name, which a
// phone's layout shows beside the value (style.css).
function labelCells(table) {
  const heads = [...table.querySelectorAll("thead th")].map(th => th.textContent);
  for (const tr of table.tBodies[0].rows) [...tr.cells].forEach((td, i) => { td.dataset.label = heads[i] || ""; });
}

function renderTasks() {
  const list = [...tasks.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0));
  const body = document.querySelector("#tasks tbody");
  keepFocus(body, () => body.replaceChildren(...list.slice(0, maxTasks).map(t => el("tr", { "data-id": t.id },
    el("td", { class: "id" }, el("a", { href: "#task/" + t.id }, t.id)),
    el("td", { class: "state state-" + t.state }, t.state),
    el("td", {}, t.queue),
    progressCell(t),
    el("td", { class: "cmd", title: command(t) }, command(t))))));
  labelCells(document.getElementById("tasks"));
  renderAsks();
}

// The open questions' items, kept while their question is open, so that
// a reason being typed is not lost to a live update.
const askItems = new Map();
function renderAsks() {
  const open = [...tasks.values()].filter(t => t.state === "doing" && t.question && t.question.state === "open");
  document.getElementById("asks-empty").hidden = open.length > 0;
  const items = open.map(t => {
    const key = t.question.run_id + " " + t.question.asked_at;
    if (!askItems.has(key)) askItems.set(key, askItem(t));
    return [key, askItems.get(key)];
  });
  const keep = new Set(items.map(([k]) => k));
  for (const k of askItems.keys()) if (!keep.has(k)) askItems.delete(k);
  const list = document.getElementById("asks");
  const now = items.map(([, li]) => li);
  if (now.length !== list.children.length || now.some((li, i) => list.children[i] !== li)) list.replaceChildren(...now);
}

function askItem(t) {
  const q = t.question;
  const reason = el("input", { type: "text", id: "reason-" + q.run_id, autocomplete: "off" });
  const answer = approve => async () => {
    try {
      await api("/runs/" + encodeURIComponent(q.run_id) + "/answer", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ approve, reason: reason.value }),
      });
      setLive((approve ? "approved: " : "denied: ") + q.question);
      refreshTask(t.id);
    } catch (e) { setLive("answer not sent: " + e.message); }
  };
  return el("li", { "data-id": t.id },
    el("div", { class: "q" }, q.question),
    el("div", { class: "muted" }, "task ", el("a", { href: "#task/" + t.id }, t.id), " · asked " + q.asked_at),
    el("label", { for: "reason-" + q.run_id }, "Reason (optional)"), reason,
    el("div", {},
      el("button", { type: "button", class: "approve", "aria-label": "Approve: " + q.question, onclick: answer(true) }, "Approve"),
      el("button", { type: "button", class: "deny", "aria-label": "Deny: " + q.question, onclick: answer(false) }, "Deny")));
}

function renderQueues() {
  const body = document.querySelector("#queues tbody");
  keepFocus(body, () => body.replaceChildren(...Object.entries(queues).map(([name, q]) => el("tr", { "data-queue": name },
    el("td", {}, name), el("td", {}, q.backlog), el("td", {}, q.running),
    el("td", {}, q.concurrency ? q.concurrency : "none"), el("td", { class: "paused" }, q.paused ? "paused" : "no"),
    el("td", {}, el("button", { type: "button", class: "pause", "aria-label": (q.paused ? "Resume" : "Pause") + " queue " + name,
      onclick: async () => {
        try {
          await api("/queues/" + encodeURIComponent(name), {
            method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ paused: !q.paused }),
          });
          setLive("queue " + name + (q.paused ? " resumed" : " paused"));
        } catch (e) { setLive("queue " + name + " not changed: " + e.message); }
        refreshOverview();
      } }, q.paused ? "Resume" : "Pause"))))));
  labelCells(document.getElementById("queues"));
}

function renderWorkers() {
  document.querySelector("#workers tbody").replaceChildren(...workers.map(w => el("tr", {},
    el("td", { class: "id" }, w.id), el("td", {}, w.host),
    el("td", {}, (w.queues && w.queues.length) ? w.queues.join(", ") : "all"),
    el("td", {}, w.concurrency), el("td", {}, w.last_seen))));
  labelCells(document.getElementById("workers"));
}

function renderSchedules() {
  document.getElementById("schedules-empty").hidden = schedules.length > 0;
  document.querySelector("#schedules tbody").replaceChildren(...schedules.map(s => el("tr", { "data-schedule": s.name },
    el("td", {}, s.name), el("td", { class: "cmd" }, s.schedule), el("td", {}, s.tz), el("td", {}, s.next_slot || ""),
    el("td", { class: "id" }, s.last_task ? el("a", { href: "#task/" + s.last_task }, s.last_task) : ""),
    el("td", { class: s.last_state ? "state state-" + s.last_state : "" }, s.last_state || ""),
    el("td", {}, s.paused ? "paused" : "no"))));
  labelCells(document.getElementById("schedules"));
}

async function refreshHealth() {
  try {
    const r = await fetch("/health", { headers: token() ? { Authorization: "Bearer " + token() } : {} });
    const h = await r.json();
    if (!h.status) return;
    const p = document.getElementById("health");
    p.textContent = "health: " + h.status + (h.warnings && h.warnings.length ? " · " + h.warnings[0] : "");
    p.className = "verdict " + h.status;
  } catch (_) { /* shown at the next try */ }
}

async function refreshOverview() {
  try {
    const qs = await (await api("/queues")).json();
    queues = {};
    for (const q of qs) queues[q.name] = q;
    renderQueues();
    workers = await (await api("/workers")).json();
    renderWorkers();
    schedules = await (await api("/schedules")).json();
    renderSchedules();
  } catch (e) { setLive(e.message); }
  refreshHealth();
}

const pending = new Map();
function refreshTask(id) {
  if (pending.has(id)) return;
  pending.set(id, setTimeout(async () => {
    pending.delete(id);
    try {
      const t = await (await api("/tasks/" + encodeURIComponent(id))).json();
      tasks.set(t.id, t);
      renderTasks();
      if (shown === t.id) renderTask(t);
    } catch (_) { tasks.delete(id); renderTasks(); }
  }, 150));
}

let overviewTimer = null;
function refreshOverviewSoon() {
  if (overviewTimer) return;
  overviewTimer = setTimeout(() => { overviewTimer = null; refreshOverview(); }, 500);
}

function setLive(s) { document.getElementById("live").textContent = s; }

function apply(ev) {
  lastSeq = ev.seq;
  const id = ev.task_id;
  if (id) {
    const t = tasks.get(id);
    if (t && ev.kind.startsWith("task.") && ev.to) t.state = ev.to;
    if (t && ev.kind === "run.progress" && ev.data) t.progress = Object.assign({ run_id: ev.run_id }, ev.data);
    refreshTask(id);
    renderTasks();
  }
  refreshOverviewSoon();
}

// follow reads the event stream until stopped, reconnecting from the last
// seq applied after a cut, with a growing pause.
let streamAbort = null;
async function follow() {
  if (streamAbort) streamAbort.abort();
  const ctl = new AbortController();
  streamAbort = ctl;
  let pause = 500;
  while (!ctl.signal.aborted) {
    try {
      const r = await api("/events?since=" + lastSeq, { signal: ctl.signal, headers: { Accept: "text/event-stream" } });
      setLive("live · seq " + lastSeq);
      pause = 500;
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let end;
        while ((end = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, end);
          buf = buf.slice(end + 2);
          for (const line of block.split("\n")) {
            if (line.startsWith("data: ")) { apply(JSON.parse(line.slice(6))); setLive("live · seq " + lastSeq); }
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      if (!document.getElementById("token-form").hidden) { setLive(e.message); return; }
    }
    setLive("reconnecting…");
    await new Promise(res => setTimeout(res, pause));
    pause = Math.min(2 * pause, 10000);
  }
}

// The task page.
let shown = null, logAbort = null;
function renderTask(t) {
  document.getElementById("task-title").textContent = "Task " + t.id;
  const dl = document.getElementById("task-fields");
  const rows = [["state", t.state], ["queue", t.queue], ["attempts", t.attempts], ["command", command(t)],
    ["progress", progressText(t.progress)], ["question", t.question ? t.question.question : ""],
    ["created", t.created_at], ["finished", t.finished_at], ["reason", t.reason]];
  dl.replaceChildren(...rows.filter(r => r[1] !== "" && r[1] != null).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  document.querySelector("#task-runs tbody").replaceChildren(...(t.runs || []).map(r => el("tr", {},
    el("td", { class: "id" }, r.id), el("td", {}, r.attempt), el("td", { class: "state-" + r.state }, r.state),
    el("td", {}, r.exit_code != null ? r.exit_code : (r.signal || "")), el("td", {}, r.started_at || ""),
    el("td", {}, progressText(r.progress)))));
  labelCells(document.getElementById("task-runs"));
}

async function followLog(id) {
  const pre = document.getElementById("task-log");
  pre.textContent = "";
  logAbort = new AbortController();
  try {
    const r = await api("/tasks/" + encodeURIComponent(id) + "/logs?follow=1", { signal: logAbort.signal });
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pre.textContent += dec.decode(value, { stream: true });
    }
  } catch (e) {
    if (e.name !== "AbortError" && !pre.textContent) pre.textContent = "(" + e.message + ")";
  }
}

async function route() {
  const m = location.hash.match(/^#task\/(.+)$/);
  if (logAbort) { logAbort.abort(); logAbort = null; }
  shown = m ? decodeURIComponent(m[1]) : null;
  document.getElementById("task").hidden = !shown;
  document.getElementById("overview").hidden = !!shown;
  if (!shown) return;
  try {
    const t = await (await api("/tasks/" + encodeURIComponent(shown))).json();
    renderTask(t);
    followLog(shown);
  } catch (e) { document.getElementById("task-title").textContent = "Task " + shown + ": " + e.message; }
}

// load reads the snapshot and follows the events from its seq.
async function load() {
  try {
    const st = await (await api("/state")).json();
    lastSeq = st.seq;
    tasks.clear();
    for (const t of st.tasks) tasks.set(t.id, t);
    queues = st.queues;
    workers = st.workers;
    renderTasks(); renderQueues(); renderWorkers();
    refreshOverview();
    follow();
  } catch (e) { setLive("cannot read the queue: " + e.message); }
}

function start() {
  document.getElementById("back").addEventListener("click", e => { e.preventDefault(); location.hash = ""; });
  document.getElementById("token-form").addEventListener("submit", e => {
    e.preventDefault();
    sessionStorage.setItem("cq-token", document.getElementById("token").value.trim());
    document.getElementById("token").value = "";
    document.getElementById("token-form").hidden = true;
    load();
    route();
  });
  window.addEventListener("hashchange", route);
  // Workers come and go, and health ages, without an event of their own.
  setInterval(() => { if (document.getElementById("token-form").hidden) refreshOverview(); }, 5000);
  load();
  route();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
