// The page of `codeact serve`: the caller's runs, and one run's events live.
// Everything a model, a tool or a client wrote is put into the page as text
// (textContent, createTextNode), never as markup. The event stream is read with
// fetch, not EventSource, because the token goes in the Authorization header
// (the server ignores tokens in URLs).
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("codeact-token") || "";
let selected = null;
let streamAbort = null;
let nextPage = null;

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function show(problem) { $("problem").textContent = problem || ""; }

async function api(method, path, body) {
  const options = { method, headers: { Authorization: "Bearer " + token } };
  if (body !== undefined) {
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function json(value) {
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

// Keywords, strings, numbers and comments of Rhai, JavaScript and Python as
// spans whose text is set with textContent.
function highlighted(code) {
  const pre = el("pre", "code");
  const token = /(\/\/[^\n]*|#[^\n{]*$|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|`[^`]*`|\b\d+(?:\.\d+)?\b|\b(?:let|const|var|fn|function|def|return|if|else|elif|for|while|loop|in|try|catch|throw|import|from|true|false|null|None|True|False|async|await|break|continue)\b)/gm;
  let last = 0;
  for (const match of code.matchAll(token)) {
    if (match.index > last) pre.appendChild(document.createTextNode(code.slice(last, match.index)));
    const text = match[0];
    const kind = /^(\/\/|#)/.test(text) ? "com" : /^["'`]/.test(text) ? "str" : /^\d/.test(text) ? "num" : "kw";
    pre.appendChild(el("span", kind, text));
    last = match.index + text.length;
  }
  if (last < code.length) pre.appendChild(document.createTextNode(code.slice(last)));
  return pre;
}

async function loadAgents() {
  const data = await api("GET", "/agents");
  const select = $("agent");
  select.replaceChildren();
  for (const agent of data.agents) {
    const option = el("option", "", agent.name + (agent.description ? " — " + agent.description : ""));
    option.value = agent.name;
    select.appendChild(option);
  }
}

function runItem(run) {
  const item = el("li");
  item.dataset.id = run.id;
  if (run.id === selected) item.classList.add("selected");
  item.appendChild(el("span", "status " + run.status, run.status));
  item.appendChild(document.createTextNode(" " + run.agent + ": " + run.task));
  item.addEventListener("click", () => openRun(run.id));
  return item;
}

async function loadRuns(more) {
  const path = more && nextPage ? "/runs?limit=20&after=" + encodeURIComponent(nextPage) : "/runs?limit=20";
  const data = await api("GET", path);
  if (!more) $("runs").replaceChildren();
  for (const run of data.runs) $("runs").appendChild(runItem(run));
  nextPage = data.next;
  $("more").hidden = !nextPage;
}

function renderSummary(run) {
  const box = $("summary");
  box.replaceChildren();
  box.appendChild(el("h2", "", run.agent + " · " + run.id));
  box.appendChild(el("span", "status " + run.status, run.status));
  box.appendChild(el("pre", "", run.task));
  if (run.error) box.appendChild(el("pre", "", "error: " + run.error));
  if (run.usage) box.appendChild(el("div", "", "usage: " + run.usage.input_tokens + " in, " + run.usage.output_tokens + " out · " + run.steps + " step(s)"));
  $("message").hidden = !(run.chat && run.status !== "running" && run.status !== "awaiting_approval");
}

// One list item per event; text deltas of a step gather in one item.
let streaming = null;
function renderEvent(data) {
  const steps = $("steps");
  const kind = data.event;
  if (kind === "text_delta") {
    if (!streaming || streaming.step !== data.step) {
      const item = el("li", "model_text");
      item.appendChild(el("span", "kind", "model (step " + data.step + ")"));
      const text = el("pre");
      item.appendChild(text);
      steps.appendChild(item);
      streaming = { step: data.step, text };
    }
    streaming.text.textContent += data.text;
    return;
  }
  if (kind === "model_reply" || kind === "message" || kind === "model_request") {
    if (kind === "model_reply") streaming = null;
    return;
  }
  const item = el("li", kind);
  item.appendChild(el("span", "kind", kind.replace(/_/g, " ")));
  if (data.agent) item.appendChild(el("span", "agent", "[" + data.agent + "]"));
  switch (kind) {
    case "script_started": item.appendChild(highlighted(data.code)); break;
    case "observation":
      item.appendChild(el("pre", "", json(data.value)));
      if (data.logs) item.appendChild(el("pre", "logs", data.logs));
      break;
    case "error":
      item.appendChild(el("pre", "", data.message));
      if (data.logs) item.appendChild(el("pre", "logs", data.logs));
      break;
    case "tool_call":
      item.appendChild(el("pre", "", data.name + "(" + json(data.args) + ")"));
      item.appendChild(el("pre", "", "→ " + json(data.outcome)));
      break;
    case "approval_awaited": {
      item.appendChild(el("pre", "", data.tool + "(" + json(data.args) + ")"));
      const approve = el("button", "approve", "Approve");
      const deny = el("button", "deny", "Deny");
      const decide = (yes) => api("POST", "/runs/" + selected + "/approvals/" + encodeURIComponent(data.id),
        yes ? { approve: true } : { approve: false, reason: "denied on the page" })
        .then(() => openRun(selected)).catch((e) => show(e.message));
      approve.addEventListener("click", () => decide(true));
      deny.addEventListener("click", () => decide(false));
      item.appendChild(approve);
      item.appendChild(deny);
      break;
    }
    case "approval_decided":
      // The call is decided: its buttons are spent.
      for (const button of steps.querySelectorAll("button.approve, button.deny")) button.remove();
      item.appendChild(el("pre", "", (data.approved ? "approved " : "denied ") + data.tool + " by " + data.decided_by + (data.reason ? ": " + data.reason : "")));
      break;
    case "result_refused": item.appendChild(el("pre", "", data.reason)); break;
    case "final_output":
      item.appendChild(el("pre", "", json(data.output.content)));
      for (const artifact of data.output.artifacts || []) {
        item.appendChild(el("div", "artifact", "artifact: " + artifact.path + " (" + artifact.bytes + " bytes)"));
      }
      break;
    case "usage": item.appendChild(el("span", "", data.total.input_tokens + " in, " + data.total.output_tokens + " out so far")); break;
    case "finished": item.appendChild(el("pre", "", json(data.outcome))); break;
    case "failed": item.appendChild(el("pre", "", data.error)); break;
    case "handover": item.appendChild(el("span", "", data.from + " → " + data.to)); break;
    case "turn_started": item.appendChild(el("span", "", "turn " + data.turn)); break;
    case "run_started": item.appendChild(el("span", "", data.model + " · " + data.runtime)); break;
    default: break;
  }
  steps.appendChild(item);
}

// Reads the run's events over fetch and parses the SSE framing.
async function follow(id, signal) {
  const response = await fetch("/runs/" + id + "/events", { headers: { Authorization: "Bearer " + token }, signal });
  if (!response.ok) throw new Error((await response.json().catch(() => ({}))).error || response.statusText);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      let data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data += line.slice(5).replace(/^ /, "");
      }
      if (!data) continue;
      const parsed = JSON.parse(data);
      if (name === "end") {
        api("GET", "/runs/" + id).then(renderSummary).catch(() => {});
        loadRuns(false).catch(() => {});
        return;
      }
      renderEvent(parsed);
    }
  }
}

async function openRun(id) {
  selected = id;
  for (const item of $("runs").children) item.classList.toggle("selected", item.dataset.id === id);
  if (streamAbort) streamAbort.abort();
  streamAbort = new AbortController();
  streaming = null;
  $("steps").replaceChildren();
  try {
    renderSummary(await api("GET", "/runs/" + id));
    await follow(id, streamAbort.signal);
  } catch (e) {
    if (e.name !== "AbortError") show(e.message);
  }
}

async function start() {
  show("");
  try {
    await loadAgents();
    await loadRuns(false);
  } catch (e) {
    show(e.message);
  }
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("codeact-token", token);
  start();
});
$("new-run").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    const run = await api("POST", "/runs", { agent: $("agent").value, task: $("task").value, chat: $("chat").checked });
    await loadRuns(false);
    openRun(run.id);
  } catch (e) { show(e.message); }
});
$("message").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api("POST", "/runs/" + selected + "/messages", { message: $("next").value });
    $("next").value = "";
    openRun(selected);
  } catch (e) { show(e.message); }
});
$("more").addEventListener("click", () => loadRuns(true).catch((e) => show(e.message)));
if (token) start();
