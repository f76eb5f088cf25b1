// The Gatehouse web inbox. Served from the binary as a separate file (the
// Content-Security-Policy allows no inline script).
//
// Rule of this file: attacker-written text (names, descriptions, arguments,
// results) only ever reaches the page through text nodes (`textContent` /
// `createTextNode`). Nothing is ever parsed as HTML (no HTML-string APIs
// at all; a test greps this file for them). Actions are shown as the kernel's
// sanitised prompt (the same text `gatehouse show` prints).
"use strict";

let csrf = "";
let me = "";

// ----- the live view -----

// One server-sent events stream per page (`GET /api/events`): the server
// says which chat changed, and the page fetches what it shows again. No
// polling. `onChange(change)` gets `{chat, inbox, requests}`; a `resync`
// (missed changes) or a reconnect gets `{resync: true}`.
let live = null;
function liveView(onChange) {
  if (live) live.close();
  const es = new EventSource("/api/events");
  live = es;
  let opened = false;
  es.addEventListener("ready", () => {
    // A reconnect may have missed changes: reload once.
    if (opened) onChange({ resync: true });
    opened = true;
  });
  es.addEventListener("change", (ev) => {
    let c = null;
    try {
      c = JSON.parse(ev.data);
    } catch (_) {
      c = { resync: true };
    }
    onChange(c);
  });
  es.addEventListener("resync", () => onChange({ resync: true }));
  es.addEventListener("signed-out", () => {
    es.close();
    // The next request says why (session expired, signed out).
    onChange({ resync: true });
  });
  es.addEventListener("error", () => {
    // Closed for good (refused): the API says why. Otherwise the browser
    // reconnects by itself.
    if (es.readyState === EventSource.CLOSED) onChange({ resync: true });
  });
}

// A view's reload, one at a time: a live-view change that arrives while a
// reload is still awaiting the API runs one more reload after it, instead of
// a second one interleaving with the first (two interleaved reloads would
// each clear and fill the same list).
function oneAtATime(reload) {
  let running = null;
  let again = false;
  const run = async () => {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      let ok;
      do {
        again = false;
        ok = await reload();
      } while (again);
      return ok;
    })();
    try {
      return await running;
    } finally {
      running = null;
    }
  };
  return run;
}

// ----- small DOM helpers (text only) -----

function el(tag, props, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k === "dataset") Object.assign(n.dataset, v);
    else if (k === "href") n.setAttribute("href", v);
    else n[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    n.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return n;
}

function clear(n) {
  while (n.firstChild) n.removeChild(n.firstChild);
}

function showError(msg) {
  const e = document.getElementById("error");
  e.textContent = msg;
  e.hidden = !msg;
}

// ----- the API -----

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  if (r.status === 204) return null;
  let data = null;
  try {
    data = await r.json();
  } catch (_) {
    data = null;
  }
  if (!r.ok) {
    const msg = data && typeof data.error === "string" ? data.error : `HTTP ${r.status}`;
    throw new ApiError(r.status, msg);
  }
  return data;
}

// An API failure shown at the top of the page. A session problem (expired,
// signed out) also disables the page's buttons: nothing more can be sent.
function failed(e) {
  showError(e.message);
  if (e.status === 401) {
    document.body.classList.add("signed-out");
    for (const b of document.querySelectorAll("main button")) b.disabled = true;
  }
}

// ----- the inbox -----

// Cards by action id, kept across polls so selections and results stay.
const cards = new Map();
// Sanitised gatekeeper names (from the server) by group key.
const shownNames = new Map();

function groupKey(a) {
  return JSON.stringify([a.chat, a.gatekeeper]);
}

function card(a) {
  let c = cards.get(a.id);
  if (c) {
    c.action = a;
    return c;
  }
  const choice = el("select", { className: "choice", name: `choice-${a.id}` },
    el("option", { value: "", text: "undecided" }),
    el("option", { value: "approve", text: "approve" }),
    el("option", { value: "reject", text: "reject" }));
  choice.setAttribute("aria-label", `decision for action ${a.id}`);
  const result = el("p", { class: "result" });
  const prompt = el("pre", { class: "prompt", text: a.prompt });
  const node = el("li", { class: "action", dataset: { id: String(a.id) } },
    el("label", { class: "pick" }, `#${a.id} `, choice), prompt, result);
  c = { action: a, node, choice, result, decided: null, submitting: false };
  cards.set(a.id, c);
  return c;
}

function showResult(c, r) {
  c.decided = r;
  c.result.textContent = r.line;
  c.result.className = "result " + r.outcome + (r.ok ? " ok" : " not-ok");
  c.node.classList.add("decided");
  c.choice.disabled = true;
  // The prompt said "pending": show the action as it stands now.
  api("GET", "/api/actions/" + c.action.id)
    .then((a) => {
      c.action = a;
      c.node.querySelector("pre.prompt").textContent = a.prompt;
      revertButton(c);
    })
    .catch(() => {});
}

// An applied action whose gatekeeper declares a tool that undoes it gets a
// Revert button: it stages the revert as a new action, which then waits in
// this inbox for its own decision like any other (nothing is sent now).
function revertButton(c) {
  if (!c.action.revertible || c.revert) return;
  const b = el("button", { type: "button", class: "revert", text: `Revert #${c.action.id}` });
  b.dataset.id = String(c.action.id);
  const said = el("p", { class: "revert-result" });
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      const r = await api("POST", "/api/actions/" + c.action.id + "/revert");
      said.textContent = r.line;
      said.className = "revert-result ok";
    } catch (e) {
      said.textContent = e.message;
      said.className = "revert-result not-ok";
      if (e.status === 401) failed(e);
    }
  });
  c.revert = b;
  c.node.append(b, said);
}

function latchedBanners(names) {
  const b = document.getElementById("banners");
  clear(b);
  for (const n of names) {
    b.append(el("div", { class: "banner lockdown", role: "status" },
      "Chat ", el("strong", { text: n }),
      " is locked down: it read owner-only data, so no action from it can be submitted or auto-approved, and it cannot be shared."));
  }
}

function renderInbox(list, inbox) {
  const seen = new Set();
  const groups = new Map();
  const add = (a) => {
    const k = groupKey(a);
    if (!groups.has(k)) groups.set(k, { chat: a.chat, shown: shownNames.get(k) || "", items: [] });
    groups.get(k).items.push(card(a));
  };
  for (const g of inbox.groups) {
    shownNames.set(JSON.stringify([g.chat, g.gatekeeper]), g.gatekeeper_shown);
    for (const a of g.actions) {
      seen.add(a.id);
      add(a);
    }
  }
  // Decided here (or being decided by a batch in flight, whose live-view
  // refresh can arrive before the batch's answer): keep them, with their
  // results, until the page reloads.
  for (const [id, c] of cards) {
    if (seen.has(id)) continue;
    if (c.decided || c.submitting) add(c.action);
    else cards.delete(id); // decided elsewhere (another person, the CLI)
  }
  const latched = new Set(inbox.latched_chats);
  // Rebuild only when something changed, so an open control keeps focus.
  const signature = JSON.stringify([[...groups.keys()], [...groups.values()].map((g) => g.items.map((c) => c.action.id)), inbox.latched_chats]);
  if (list.dataset.signature === signature) return;
  list.dataset.signature = signature;
  clear(list);
  if (groups.size === 0) {
    list.dataset.signature = "";
    list.append(el("p", { class: "empty", text: "Nothing awaits a decision." }));
    return;
  }
  const ordered = [...groups.values()].sort(
    (x, y) => Math.min(...x.items.map((c) => c.action.id)) - Math.min(...y.items.map((c) => c.action.id)));
  for (const g of ordered) {
    g.items.sort((x, y) => x.action.id - y.action.id);
    const ul = el("ul", { class: "actions" }, ...g.items.map((c) => c.node));
    list.append(el("section", { class: "group" + (latched.has(g.chat) ? " latched" : "") },
      el("h2", {}, "Chat ", el("span", { class: "name", text: g.chat }),
        " · gatekeeper ", el("span", { class: "name", text: g.shown })),
      ul));
  }
}

async function inboxView(main) {
  clear(main);
  const list = el("div", { id: "inbox" });
  const status = el("span", { id: "batch-status" });
  const submit = el("button", { type: "button", id: "submit-decisions", text: "Submit decisions" });
  const allApprove = el("button", { type: "button", id: "approve-all", text: "Mark all approve" });
  const allReject = el("button", { type: "button", id: "reject-all", text: "Mark all reject" });
  const none = el("button", { type: "button", id: "clear-all", text: "Clear" });
  main.append(
    el("h1", { text: "Waiting for a decision" }),
    el("p", { class: "hint", text: "Oldest first, grouped by chat and gatekeeper. Each action is shown exactly as `gatehouse show` prints it; nothing has been sent for any of them. Choose approve or reject for as many as you like, then submit them in one go." }),
    el("div", { class: "batch" }, allApprove, allReject, none, submit, status),
    list
  );
  let inbox = { groups: [], latched_chats: [] };
  const refresh = oneAtATime(async () => {
    try {
      inbox = await api("GET", "/api/inbox");
      latchedBanners(inbox.latched_chats);
      renderInbox(list, inbox);
    } catch (e) {
      failed(e);
      return false;
    }
    return true;
  });
  const mark = (verb) => {
    for (const c of cards.values()) if (!c.decided) c.choice.value = verb;
  };
  allApprove.addEventListener("click", () => mark("approve"));
  allReject.addEventListener("click", () => mark("reject"));
  none.addEventListener("click", () => mark(""));
  submit.addEventListener("click", async () => {
    const open = [...cards.values()].filter((c) => !c.decided && c.choice.value);
    if (open.length === 0) {
      status.textContent = "Choose approve or reject for some actions first.";
      return;
    }
    const body = {
      approve: open.filter((c) => c.choice.value === "approve").map((c) => c.action.id),
      reject: open.filter((c) => c.choice.value === "reject").map((c) => c.action.id),
    };
    submit.disabled = true;
    status.textContent = "Deciding…";
    for (const c of open) c.submitting = true;
    try {
      const r = await api("POST", "/api/decisions", body);
      for (const res of r.results) {
        const c = cards.get(res.id);
        if (c) showResult(c, res);
      }
      const good = r.results.filter((x) => x.ok).length;
      status.textContent = `${good} of ${r.results.length} done.`;
    } catch (e) {
      status.textContent = "";
      failed(e);
    } finally {
      for (const c of open) c.submitting = false;
      submit.disabled = false;
    }
    await refresh();
  });
  if (await refresh()) {
    // Live update over server-sent events: new actions appear without a
    // reload, and nothing polls.
    liveView((c) => {
      if (c.resync || c.inbox) refresh();
    });
  }
}

// ----- ledger -----

const FILTERS = [
  ["chat", "Chat", "text"],
  ["kind", "Kind", "kind"],
  ["approved_by", "Approved by", "text"],
  ["observed_by", "Observed by (gadget)", "text"],
  ["server_claims", "On a server's read-only claim", "check"],
  ["auto_approved", "Auto-approved", "check"],
];

function entryTable(entries) {
  if (entries.length === 0) return el("p", { class: "empty", text: "No entries." });
  const head = el("tr", {}, ...["#", "Chat", "Kind", "Gatekeeper:tool", "Caller", "State", "Resolved by", "Auto", "Classified by"].map((h) => el("th", { text: h })));
  // A workflow approval request (in an "approved by" answer) is a record
  // of its own, numbered apart from the ledger: its id says so.
  const rows = entries.map((e) => el("tr", { class: "entry", dataset: { id: String(e.id), kind: e.kind } },
    el("td", { text: e.kind === "request" ? `request ${e.id}` : String(e.id) }),
    el("td", { text: e.shown.chat }),
    el("td", { text: e.shown.kind }),
    el("td", { text: e.shown.what }),
    el("td", { text: e.shown.caller }),
    el("td", { text: e.shown.state }),
    el("td", { text: e.shown.resolved_by || "" }),
    el("td", { text: e.auto_approved ? "yes" : "" }),
    el("td", { text: e.shown.classified_by || "" })));
  return el("table", { class: "ledger" }, el("thead", {}, head), el("tbody", {}, ...rows));
}

async function ledgerView(main) {
  clear(main);
  const params = new URLSearchParams(location.search);
  const form = el("form", { id: "ledger-filters" });
  const inputs = {};
  for (const [name, label, type] of FILTERS) {
    let input;
    if (type === "check") {
      input = el("input", { type: "checkbox", name, checked: params.get(name) === "true" });
    } else if (type === "kind") {
      input = el("select", { name },
        el("option", { value: "", text: "any" }),
        el("option", { value: "action", text: "action" }),
        el("option", { value: "observation", text: "observation" }));
      input.value = params.get(name) || "";
    } else {
      input = el("input", { type: "text", name, value: params.get(name) || "" });
    }
    inputs[name] = input;
    form.append(el("label", {}, label + " ", input));
  }
  form.append(el("button", { type: "submit", text: "Apply filters" }));
  const out = el("div", { id: "ledger" });
  main.append(el("h1", { text: "Ledger" }), form, out);
  const load = async () => {
    const q = new URLSearchParams();
    for (const [name, , type] of FILTERS) {
      const i = inputs[name];
      if (type === "check") {
        if (i.checked) q.set(name, "true");
      } else if (i.value.trim()) q.set(name, i.value.trim());
    }
    history.replaceState(null, "", "/ledger" + (q.toString() ? "?" + q : ""));
    try {
      const entries = await api("GET", "/api/ledger?" + q);
      clear(out);
      out.append(entryTable(entries));
      showError("");
    } catch (e) {
      failed(e);
    }
  };
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    load();
  });
  await load();
}

// ----- a chat -----

async function chatView(main, name) {
  clear(main);
  try {
    const chat = await api("GET", "/api/chats/" + encodeURIComponent(name));
    const banners = document.getElementById("banners");
    clear(banners);
    if (chat.latched) latchedBanners([chat.name]);
    main.append(
      el("h1", {}, "Chat ", el("span", { class: "name", text: chat.name })),
      el("p", { text: `Owner: ${chat.owner}. Pending actions: ${chat.pending}.` }),
      el("h2", { text: "Observations" }),
      el("p", { class: "hint", text: "Everything a read in this chat touched." })
    );
    const obs = await api("GET", "/api/chats/" + encodeURIComponent(name) + "/observations");
    main.append(entryTable(obs));
  } catch (e) {
    failed(e);
  }
}

// ----- rules -----

async function rulesView(main) {
  clear(main);
  const list = el("ul", { id: "rules" });
  const tag = el("input", { type: "text", name: "tag", id: "rule-tag", placeholder: "gatekeeper:tool" });
  const form = el("form", { id: "rule-form" }, el("label", {}, "Auto-approve ", tag),
    el("button", { type: "submit", text: "Enable rule (key two)" }));
  const report = el("div", { id: "rule-report" });
  main.append(
    el("h1", { text: "Auto-approval rules" }),
    el("p", { class: "hint", text: "An action is approved automatically only when both keys hold: key one (an operator vetted the gatekeeper and the tool is a non-destructive, idempotent action) and key two (a person's rule for exactly that gatekeeper:tool)." }),
    form, report, el("h2", { text: "Enabled rules" }), list);
  const load = async () => {
    try {
      const rules = await api("GET", "/api/rules");
      clear(list);
      if (rules.length === 0) list.append(el("li", { text: "No rules: every action waits for a person." }));
      for (const r of rules) list.append(el("li", { text: `${r.tag_shown} — enabled by ${r.enabled_by}` }));
    } catch (e) {
      failed(e);
    }
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(report);
    try {
      const r = await api("POST", "/api/rules", { tag: tag.value });
      report.className = r.key_one ? "both-keys" : "key-one-missing";
      for (const line of r.explanation) report.append(el("p", { text: line }));
      for (const d of r.applied) report.append(el("p", { class: "result", text: d.line }));
      showError("");
    } catch (e) {
      failed(e);
    }
    await load();
  });
  await load();
}

// ----- workflow requests -----

// Approval requests with their allowed-calls lists, shown as the kernel's
// text (exactly what `gatehouse workflow requests` prints), and the
// decisions the kernel says this person may take; each run's steps and
// invocations ("who allowed this call, on what grounds").
async function workflowsView(main) {
  clear(main);
  const list = el("ul", { id: "requests" });
  const runs = el("div", { id: "runs" });
  const status = el("p", { id: "request-status", class: "result" });
  main.append(
    el("h1", { text: "Workflow approvals" }),
    el("p", { class: "hint", text: "An approval covers its step and every later step up to the next request. Calls are checked against the allowed-calls list before anything reaches a gatekeeper; nothing else will be permitted." }),
    status, list, el("h2", { text: "Runs" }), runs);
  const decide = async (id, verb) => {
    status.textContent = "Deciding…";
    try {
      const r = await api("POST", `/api/workflow/requests/${id}/${verb}`, {});
      status.textContent = `request #${id}: ${verb} done; run ${r.run.run} is ${r.run.state}.`;
      showError("");
    } catch (e) {
      status.textContent = "";
      failed(e);
    }
    await load();
  };
  const load = oneAtATime(async () => {
    let requests;
    try {
      requests = await api("GET", "/api/workflow/requests");
    } catch (e) {
      failed(e);
      return false;
    }
    clear(list);
    if (requests.length === 0) list.append(el("li", { class: "empty", text: "No approval requests." }));
    const runIds = [];
    for (const r of requests) {
      const q = r.request;
      if (!runIds.includes(q.run)) runIds.push(q.run);
      const buttons = el("div", { class: "request-actions" });
      const add = (ok, verb, label) => {
        if (!ok) return;
        const b = el("button", { type: "button", class: verb, text: label });
        b.addEventListener("click", () => {
          b.disabled = true;
          decide(q.id, verb);
        });
        buttons.append(b);
      };
      add(r.may_approve, "approve", "Approve");
      add(r.may_reject, "reject", "Reject");
      add(r.may_withdraw, "withdraw", "Withdraw approval");
      add(r.may_resubmit, "resubmit", "Re-submit");
      list.append(el("li", { class: "request " + q.state, dataset: { id: String(q.id), run: String(q.run) } },
        el("pre", { class: "request-text", text: r.text }), buttons));
    }
    clear(runs);
    for (const run of runIds) {
      const box = el("section", { class: "run", dataset: { run: String(run) } });
      runs.append(box);
      try {
        const s = await api("GET", `/api/workflow/runs/${run}`);
        box.append(el("h3", { text: `Run ${s.run}: ${s.state}` }));
        box.append(el("ul", { class: "steps" }, ...s.steps.map((x) =>
          el("li", { class: "step " + x.status, text: `${x.step}: ${x.status}${x.note ? " (" + x.note + ")" : ""}` }))));
        const inv = await api("GET", `/api/workflow/runs/${run}/invocations`);
        box.append(el("h4", { text: "Invocations: who allowed each call, on what grounds (argument digests only)" }));
        box.append(inv.length === 0
          ? el("p", { class: "empty", text: "No calls yet." })
          : el("pre", { class: "invocations", text: inv.map((i) => i.line).join("\n") }));
      } catch (e) {
        failed(e);
      }
    }
    return true;
  });
  if (await load()) {
    liveView((c) => {
      if (c.resync || c.requests) load();
    });
  }
}

// ----- frame -----

async function frame() {
  const s = await api("GET", "/api/session");
  csrf = s.csrf;
  me = s.user;
  document.getElementById("who").textContent = `Signed in as ${me}`;
  const out = document.getElementById("signout");
  out.hidden = false;
  out.addEventListener("click", async () => {
    try {
      await api("DELETE", "/api/session");
      location.assign("/signin");
    } catch (e) {
      failed(e);
    }
  });
  const nav = document.getElementById("nav");
  try {
    for (const c of await api("GET", "/api/chats")) {
      nav.append(el("a", { href: "/chats/" + encodeURIComponent(c.name), class: c.latched ? "latched" : "" },
        c.latched ? `${c.name} (locked down)` : c.name));
    }
  } catch (e) {
    failed(e);
  }
}

async function start() {
  const main = document.getElementById("main");
  const path = location.pathname;
  try {
    await frame();
  } catch (e) {
    clear(main);
    main.append(el("p", {}, el("a", { href: "/signin", text: "Sign in" })));
    failed(e);
    return;
  }
  if (path === "/ledger") return ledgerView(main);
  if (path === "/rules") return rulesView(main);
  if (path === "/workflows") return workflowsView(main);
  if (path.startsWith("/chats/")) return chatView(main, decodeURIComponent(path.slice("/chats/".length)));
  return inboxView(main);
}

document.addEventListener("DOMContentLoaded", start);
