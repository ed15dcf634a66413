// cq's dashboard: one snapshot (GET /state), then every change from the
// event stream (GET /events), which resumes by seq when it reconnects.
// Everything is built with textContent, never from HTML strings: task
// commands and questions are user data.
"use strict";

const tasks = new Map();      // id → task, as /state and /tasks/{id} give it
let queues = {}, workers = [];
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

function token() { return sessionStorage.getItem("cq-token") || ""; }

async function api(path, opts) {
  opts = opts || {};
  const headers = Object.assign({}, opts.headers);
  if (token()) headers["Authorization"] = "Bearer " + token();
  const r = await fetch(path, Object.assign({}, opts, { headers }));
  if (r.status === 401) {
    document.getElementById("token-form").hidden = false;
    throw new Error("a token is needed");
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
  if (t.question) { td.append("asking: " + t.question.question); return td; }
  const p = t.progress;
  if (!p) return td;
  if (p.done != null && p.total > 0) td.append(el("progress", { max: p.total, value: p.done, "aria-label": "progress of " + t.id }), " ");
  td.append(progressText(p));
  return td;
}

function renderTasks() {
  const list = [...tasks.values()].sort((a, b) => (a.created_at < b.created_at ? 1 : a.created_at > b.created_at ? -1 : 0));
  const body = document.querySelector("#tasks tbody");
  body.replaceChildren(...list.slice(0, maxTasks).map(t => el("tr", { "data-id": t.id },
    el("td", { class: "id" }, el("a", { href: "#task/" + t.id }, t.id)),
    el("td", { class: "state state-" + t.state }, t.state),
    el("td", {}, t.queue),
    progressCell(t),
    el("td", { class: "cmd", title: command(t) }, command(t)))));
  renderAsks();
}

function renderAsks() {
  const open = [...tasks.values()].filter(t => t.state === "doing" && t.question && t.question.state === "open");
  document.getElementById("asks-empty").hidden = open.length > 0;
  document.getElementById("asks").replaceChildren(...open.map(t => {
    const reason = el("input", { type: "text", id: "reason-" + t.id, autocomplete: "off" });
    const answer = approve => async () => {
      try {
        await api("/runs/" + encodeURIComponent(t.question.run_id) + "/answer", {
          method: "POST", headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ approve, reason: reason.value }),
        });
        refreshTask(t.id);
      } catch (e) { setLive("answer not sent: " + e.message); }
    };
    return el("li", {},
      el("div", { class: "q" }, t.question.question),
      el("div", { class: "muted" }, "task ", el("a", { href: "#task/" + t.id }, t.id), " · asked " + t.question.asked_at),
      el("label", { for: "reason-" + t.id }, "Reason (optional)"), reason,
      el("div", {},
        el("button", { type: "button", class: "approve", onclick: answer(true) }, "Approve"),
        el("button", { type: "button", class: "deny", onclick: answer(false) }, "Deny")));
  }));
}

function renderQueues() {
  document.querySelector("#queues tbody").replaceChildren(...Object.entries(queues).map(([name, q]) => el("tr", {},
    el("td", {}, name), el("td", {}, q.backlog), el("td", {}, q.running),
    el("td", {}, q.concurrency ? q.concurrency : "none"), el("td", {}, q.paused ? "paused" : "no"))));
}

function renderWorkers() {
  document.querySelector("#workers tbody").replaceChildren(...workers.map(w => el("tr", {},
    el("td", { class: "id" }, w.id), el("td", {}, w.host),
    el("td", {}, (w.queues && w.queues.length) ? w.queues.join(", ") : "all"),
    el("td", {}, w.concurrency), el("td", {}, w.last_seen))));
}

async function refreshHealth() {
  try {
    const r = await fetch("/health", { headers: token() ? { Authorization: "Bearer " + token() } : {} });
    const h = await r.json();
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

function follow() {
  const es = new EventSource("/events?since=" + lastSeq);
  es.onopen = () => setLive("live · seq " + lastSeq);
  es.onmessage = m => { apply(JSON.parse(m.data)); setLive("live · seq " + lastSeq); };
  es.onerror = () => setLive("reconnecting…");
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

async function start() {
  document.getElementById("back").addEventListener("click", e => { e.preventDefault(); location.hash = ""; });
  document.getElementById("token-form").addEventListener("submit", e => {
    e.preventDefault();
    sessionStorage.setItem("cq-token", document.getElementById("token").value.trim());
    document.getElementById("token-form").hidden = true;
    start();
  });
  window.addEventListener("hashchange", route);
  try {
    const st = await (await api("/state")).json();
    lastSeq = st.seq;
    tasks.clear();
    for (const t of st.tasks) tasks.set(t.id, t);
    queues = st.queues;
    workers = st.workers;
    renderTasks(); renderQueues(); renderWorkers();
    refreshHealth();
    follow();
    // Workers come and go, and health ages, without an event of their own.
    setInterval(refreshOverview, 5000);
  } catch (e) { setLive("cannot read the queue: " + e.message); }
  route();
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
