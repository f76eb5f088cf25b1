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
//
// One card per pending action, built from the kernel's renderings (the
// card fields of `GET /api/inbox`): a summary line, the arguments as a
// table, who staged it, why it is held, and what its chat has read. Text
// a gadget or a gatekeeper wrote is always shown inside a quoted, dashed
// box labelled with its author (`.ext`), and never inside a button, a
// link or a label: the page's own controls are only ever the kernel's
// words.
//
// Deciding: Approve / Reject mark a card at once, but nothing is sent
// and nothing is claimed until the batch is submitted: a few seconds
// after the last mark (one timer, restarted by every mark), or at once
// with Enter / "Submit now". Until then Undo (or `u`) takes the last mark
// back, and pressing a pressed button again takes that one back.

// How long a batch waits for more marks (or an Undo) before it is sent.
const BATCH_WAIT_MS = 5000;
// The first page is small so the first cards show at once; the rest come
// in larger pages, rendered a slice per animation frame.
const FIRST_PAGE = 40;
const NEXT_PAGE = 500;
const SLICE = 60;

// Cards by action id, kept across reloads so marks and results stay.
const cards = new Map();
// Chat groups by chat name: {section, list, observed, info}.
const groups = new Map();
// The batch: marks not yet sent, in the order they were made.
const batch = { marks: new Map(), order: [], timer: 0, sending: false, auto: true };

function announce(msg) {
  const a = document.getElementById("announce");
  if (!a) return;
  // A fresh text node each time, so the same words are announced again.
  clear(a);
  a.append(document.createTextNode(msg));
}

// Attacker-written text: quoted, boxed and labelled with its author.
function ext(text, by, tag) {
  const who = by === "gatekeeper" ? "written by the gatekeeper" : "written by the gadget";
  const n = el(tag || "q", { class: "ext by-" + by, text });
  n.title = who;
  return n;
}

function summaryNode(card) {
  const p = el("p", { class: "summary", id: `summary-${card.id}` });
  // The gadget's pieces come in pairs: an argument's name, then its value
  // (quoted); a tool's name is boxed as the gatekeeper's.
  let gadget = 0;
  for (const piece of card.summary_pieces) {
    if (piece.by === "gadget") {
      gadget += 1;
      p.append(ext(piece.text, piece.by, gadget % 2 === 0 ? "q" : "span"));
    } else if (piece.by === "gatekeeper") p.append(ext(piece.text, piece.by, "span"));
    else if (piece.by === "name") p.append(el("span", { class: "name", text: piece.text }));
    else p.append(document.createTextNode(piece.text));
  }
  return p;
}

function argsNode(card) {
  const body = el("tbody", {});
  for (const r of card.args) {
    body.append(el("tr", {},
      el("th", { scope: "row" }, ext(r.name, "gadget", "span")),
      el("td", { class: "kind-" + r.kind }, ext(r.value, "gadget", "span"))));
  }
  const table = el("table", { class: "args" },
    el("caption", {}, "Arguments ", el("span", { class: "by", text: "(written by the gadget)" })),
    el("thead", {}, el("tr", {}, el("th", { scope: "col", text: "Name" }), el("th", { scope: "col", text: "Value" }))),
    body);
  const wrap = el("div", { class: "args-wrap" }, table);
  if (card.args_note) wrap.append(el("p", { class: "note", text: card.args_note }));
  return wrap;
}

// One formatter for every card (making one is the slow part).
const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
function timeText(ms) {
  return dateTime.format(new Date(ms));
}

function factsNode(card) {
  const held = el("ul", { class: "held" }, ...card.held.map((h) => el("li", { text: h })));
  const dl = el("dl", { class: "facts" },
    el("dt", { text: "Staged by" }),
    el("dd", {}, card.staged_by + " · ", el("time", { dateTime: new Date(card.created_at).toISOString(), text: timeText(card.created_at) })));
  if (card.reverts) dl.append(el("dt", { text: "Reverts" }), el("dd", { text: `action #${card.reverts} (a new action that undoes it)` }));
  if (card.held.length) dl.append(el("dt", { text: "Why held" }), el("dd", {}, held));
  return dl;
}

// The full prompt (the terminal's text, `gatehouse show ID`), one click
// away: fetched when first opened.
function fullNode(c) {
  const pre = el("pre", { class: "prompt" });
  const d = el("details", { class: "full" }, el("summary", { text: "Full prompt and arguments (JSON)" }), pre);
  d.addEventListener("toggle", () => {
    if (!d.open || c.promptLoaded) return;
    c.promptLoaded = true;
    pre.textContent = "Loading…";
    api("GET", "/api/actions/" + c.id)
      .then((a) => {
        pre.textContent = a.prompt;
      })
      .catch((e) => {
        c.promptLoaded = false;
        pre.textContent = "";
        failed(e);
      });
  });
  c.pre = pre;
  return d;
}

function cardNode(c) {
  const a = c.card;
  const node = el("li", { class: "action card", dataset: { id: String(a.id), chat: a.chat }, tabIndex: -1 });
  node.setAttribute("aria-labelledby", `summary-${a.id}`);
  const state = el("span", { class: "mark", id: `mark-${a.id}` });
  const head = el("div", { class: "card-head" }, el("span", { class: "id", text: `#${a.id}` }), summaryNode(a), state);
  const decide = el("div", { class: "decide" });
  if (a.may_decide) {
    const approve = el("button", { type: "button", class: "approve", text: "Approve" });
    const reject = el("button", { type: "button", class: "reject", text: "Reject" });
    approve.setAttribute("aria-pressed", "false");
    reject.setAttribute("aria-pressed", "false");
    approve.setAttribute("aria-describedby", `summary-${a.id}`);
    reject.setAttribute("aria-describedby", `summary-${a.id}`);
    approve.addEventListener("click", () => mark(c, "approve", false));
    reject.addEventListener("click", () => mark(c, "reject", false));
    decide.append(approve, reject);
    c.buttons = { approve, reject };
  } else {
    decide.append(el("p", { class: "hint", text: "You may see this chat but not decide in it." }));
  }
  c.result = el("p", { class: "result" });
  c.stateNode = state;
  node.append(head, factsNode(a), argsNode(a), fullNode(c), decide, c.result);
  node.addEventListener("focus", () => {
    lastFocused = c.id;
  });
  return node;
}

let lastFocused = null;

function card(a) {
  let c = cards.get(a.id);
  if (c) {
    c.card = a;
    return c;
  }
  c = { id: a.id, card: a, node: null, mark: null, decided: null, submitting: false, buttons: null };
  c.node = cardNode(c);
  cards.set(a.id, c);
  return c;
}

function showMark(c) {
  const m = c.mark;
  c.node.classList.toggle("marked-approve", m === "approve");
  c.node.classList.toggle("marked-reject", m === "reject");
  if (c.buttons) {
    c.buttons.approve.setAttribute("aria-pressed", String(m === "approve"));
    c.buttons.reject.setAttribute("aria-pressed", String(m === "reject"));
  }
  c.stateNode.textContent = m === "approve" ? "Approved — not sent yet" : m === "reject" ? "Rejected — not sent yet" : "";
}

function batchBar() {
  return document.getElementById("batchbar");
}

// The one timer of the page: the batch's wait before it is sent. (The
// live view needs none: it is a server-sent events stream.)
function armBatch() {
  if (batch.timer) clearTimeout(batch.timer);
  batch.timer = 0;
  // A time limit a person can turn off (WCAG 2.2.1): "Send by itself".
  if (batch.marks.size === 0 || !batch.auto) return;
  batch.timer = setTimeout(() => {
    batch.timer = 0;
    submitBatch();
  }, BATCH_WAIT_MS);
}

function showBatch(said) {
  const bar = batchBar();
  if (!bar) return;
  const n = batch.marks.size;
  const approve = [...batch.marks.values()].filter((v) => v === "approve").length;
  const status = document.getElementById("batch-status");
  bar.classList.toggle("open", n > 0 || batch.sending);
  document.getElementById("undo").disabled = n === 0 || batch.sending;
  document.getElementById("submit-decisions").disabled = n === 0 || batch.sending;
  if (said !== undefined) status.textContent = said;
  else if (batch.sending) status.textContent = "Sending…";
  else if (n === 0) status.textContent = "Nothing marked. Approve or Reject a card; nothing is sent until the batch is submitted.";
  else if (batch.auto) status.textContent = `${n} marked (${approve} approve, ${n - approve} reject): sent in ${BATCH_WAIT_MS / 1000} s unless you undo.`;
  else status.textContent = `${n} marked (${approve} approve, ${n - approve} reject): not sent until you submit them.`;
  // Restart the countdown bar's animation (decoration only).
  const old = document.getElementById("countdown");
  if (old) {
    const fresh = el("span", { id: "countdown", class: n > 0 && !batch.sending && batch.auto ? "running" : "" });
    fresh.setAttribute("aria-hidden", "true");
    old.replaceWith(fresh);
  }
}

function mark(c, verb, advance) {
  if (c.decided || c.submitting || !c.buttons || batch.sending) return;
  const was = c.mark;
  const to = was === verb ? null : verb;
  c.mark = to;
  batch.order = batch.order.filter((id) => id !== c.id);
  if (to) {
    batch.marks.set(c.id, to);
    batch.order.push(c.id);
  } else {
    batch.marks.delete(c.id);
  }
  showMark(c);
  armBatch();
  const said = to
    ? `${to === "approve" ? "Approved" : "Rejected"} #${c.id} — not sent yet. Undo with u.`
    : `Took back the mark on #${c.id}.`;
  showBatch(said);
  announce(said);
  if (advance && to) move(1);
}

function undo() {
  if (batch.sending) return;
  const id = batch.order.pop();
  if (id === undefined) return;
  batch.marks.delete(id);
  const c = cards.get(id);
  if (c) {
    c.mark = null;
    showMark(c);
    c.node.focus();
  }
  armBatch();
  const said = `Undone: #${id} is not marked; nothing was sent.`;
  showBatch(said);
  announce(said);
}

async function submitBatch() {
  if (batch.timer) clearTimeout(batch.timer);
  batch.timer = 0;
  if (batch.sending || batch.marks.size === 0) return;
  const marks = [...batch.marks.entries()];
  batch.marks.clear();
  batch.order = [];
  batch.sending = true;
  const open = marks.map(([id]) => cards.get(id)).filter((c) => c);
  for (const c of open) {
    c.submitting = true;
    if (c.buttons) {
      c.buttons.approve.disabled = true;
      c.buttons.reject.disabled = true;
    }
    c.stateNode.textContent = "Sending…";
  }
  showBatch();
  const body = {
    approve: marks.filter(([, v]) => v === "approve").map(([id]) => id),
    reject: marks.filter(([, v]) => v === "reject").map(([id]) => id),
  };
  let said = "";
  try {
    const r = await api("POST", "/api/decisions", body);
    for (const res of r.results) {
      const c = cards.get(res.id);
      if (c) showResult(c, res);
    }
    const good = r.results.filter((x) => x.ok).length;
    said = `${good} of ${r.results.length} done.`;
  } catch (e) {
    failed(e);
    said = "The batch was not sent: " + e.message;
    for (const c of open) {
      if (c.decided) continue;
      c.mark = null;
      showMark(c);
      if (c.buttons && e.status !== 401) {
        c.buttons.approve.disabled = false;
        c.buttons.reject.disabled = false;
      }
    }
  } finally {
    for (const c of open) c.submitting = false;
    batch.sending = false;
  }
  showBatch(said);
  announce(said);
  if (inboxRefresh) await inboxRefresh({ resync: true });
}

function showResult(c, r) {
  c.decided = r;
  c.mark = null;
  c.result.textContent = r.line;
  c.result.className = "result " + r.outcome + (r.ok ? " ok" : " not-ok");
  c.node.classList.remove("marked-approve", "marked-reject");
  c.node.classList.add("decided");
  c.stateNode.textContent = r.ok ? r.outcome : "not done";
  if (c.buttons) {
    c.buttons.approve.remove();
    c.buttons.reject.remove();
    c.buttons = null;
  }
  // The prompt said "pending": show the action as it stands now.
  api("GET", "/api/actions/" + c.id)
    .then((a) => {
      c.action = a;
      if (c.promptLoaded) c.pre.textContent = a.prompt;
      revertButton(c);
    })
    .catch(() => {});
}

// An applied action whose gatekeeper declares a tool that undoes it gets a
// Revert button: it stages the revert as a new action, which then waits in
// this inbox for its own decision like any other (nothing is sent now).
function revertButton(c) {
  if (!c.action || !c.action.revertible || c.revert) return;
  const b = el("button", { type: "button", class: "revert", text: `Revert #${c.id}` });
  b.dataset.id = String(c.id);
  const said = el("p", { class: "revert-result" });
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      const r = await api("POST", "/api/actions/" + c.id + "/revert");
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

// What a chat has read (its observation set, SPEC S1) as chips: per
// gatekeeper, reads and distinct sources, restricted ones called out.
function observedNode(chatName, observed) {
  const list = el("ul", { class: "observed" });
  list.setAttribute("aria-label", `What chat ${chatName} has read`);
  if (!observed || observed.reads === 0) {
    list.append(el("li", { class: "chip none", text: "has read nothing" }));
    return list;
  }
  for (const g of observed.gatekeepers) {
    const chip = el("li", { class: "chip" + (g.restricted ? " restricted" : "") },
      el("span", { class: "name", text: g.gatekeeper }),
      ` ${g.reads} read${g.reads === 1 ? "" : "s"} · ${g.sources} source${g.sources === 1 ? "" : "s"}`);
    if (g.restricted) chip.append(el("strong", { text: ` · ${g.restricted} restricted` }));
    list.append(chip);
  }
  return list;
}

function group(info) {
  let g = groups.get(info.name);
  if (!g) {
    const list = el("ol", { class: "actions" });
    const heading = el("h2", {}, "Chat ", el("a", { href: "/chats/" + encodeURIComponent(info.name), class: "name", text: info.shown }));
    const section = el("section", { class: "group", dataset: { chat: info.name } });
    section.setAttribute("aria-label", `Chat ${info.shown}`);
    g = { section, list, heading, observed: null, info };
    section.append(heading, el("div", { class: "observed-wrap" }), list);
    groups.set(info.name, g);
  }
  g.info = info;
  g.section.classList.toggle("latched", info.latched);
  const wrap = g.section.querySelector(".observed-wrap");
  clear(wrap);
  wrap.append(el("span", { class: "hint", text: "Has read: " }), observedNode(info.shown, info.observed));
  return g;
}

function firstId(g) {
  const f = g.list.firstElementChild;
  return f ? Number(f.dataset.id) : Infinity;
}

// Put a group's section where it belongs: groups by their oldest card.
function placeGroup(root, g) {
  if (g.section.parentNode === root) return;
  const mine = firstId(g);
  for (const other of root.querySelectorAll("section.group")) {
    const o = groups.get(other.dataset.chat);
    if (o && firstId(o) > mine) {
      root.insertBefore(g.section, other);
      return;
    }
  }
  root.append(g.section);
}

// Add cards to their groups in id order.
function placeCards(root, list) {
  for (const c of list) {
    const g = groups.get(c.card.chat);
    if (!g) continue;
    if (c.node.parentNode !== g.list) {
      let before = null;
      for (const n of g.list.children) {
        if (Number(n.dataset.id) > c.id) {
          before = n;
          break;
        }
      }
      g.list.insertBefore(c.node, before);
    }
    placeGroup(root, g);
  }
}

function nextFrame() {
  return new Promise((resolve) => requestAnimationFrame(() => resolve()));
}

let inboxRefresh = null;
let firstCardMarked = false;

function visibleCards() {
  return [...document.querySelectorAll("#inbox li.action")];
}

// j / k: the next / previous card.
function move(step) {
  const list = visibleCards();
  if (list.length === 0) return;
  const at = document.activeElement && document.activeElement.closest ? document.activeElement.closest("li.action") : null;
  let i = at ? list.indexOf(at) : list.findIndex((n) => Number(n.dataset.id) === lastFocused);
  if (i < 0) i = step > 0 ? -1 : list.length;
  const next = list[Math.max(0, Math.min(list.length - 1, i + step))];
  next.focus();
  next.scrollIntoView({ block: "nearest" });
}

function focusedCard() {
  const at = document.activeElement && document.activeElement.closest ? document.activeElement.closest("li.action") : null;
  return at ? cards.get(Number(at.dataset.id)) : null;
}

function onKey(ev) {
  if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const t = ev.target;
  const tag = t && t.tagName ? t.tagName.toLowerCase() : "";
  if (tag === "input" || tag === "textarea" || tag === "select" || (t && t.isContentEditable)) return;
  if (ev.key === "Enter") {
    // Enter on a control is that control's; anywhere else it submits.
    if (tag === "button" || tag === "a" || tag === "summary") return;
    if (batch.marks.size === 0) return;
    ev.preventDefault();
    submitBatch();
    return;
  }
  if (ev.key === "j" || ev.key === "k") {
    ev.preventDefault();
    move(ev.key === "j" ? 1 : -1);
  } else if (ev.key === "a" || ev.key === "r") {
    const c = focusedCard();
    if (!c) return;
    ev.preventDefault();
    mark(c, ev.key === "a" ? "approve" : "reject", true);
  } else if (ev.key === "u") {
    ev.preventDefault();
    undo();
  }
}

async function inboxView(main) {
  clear(main);
  const list = el("div", { id: "inbox" });
  const count = el("span", { id: "pending-count", class: "count" });
  const status = el("span", { id: "batch-status" });
  status.setAttribute("role", "status");
  const submit = el("button", { type: "button", id: "submit-decisions", class: "primary", text: "Submit now" });
  const undoButton = el("button", { type: "button", id: "undo", text: "Undo" });
  const countdown = el("span", { id: "countdown" });
  countdown.setAttribute("aria-hidden", "true");
  const auto = el("input", { type: "checkbox", id: "auto-send", checked: true });
  const autoLabel = el("label", { class: "auto" }, auto, ` Send by itself ${BATCH_WAIT_MS / 1000} s after the last mark`);
  auto.addEventListener("change", () => {
    batch.auto = auto.checked;
    armBatch();
    showBatch();
  });
  const bar = el("div", { id: "batchbar", class: "batch" }, status, autoLabel, el("span", { class: "batch-buttons" }, undoButton, submit), countdown);
  bar.setAttribute("role", "region");
  bar.setAttribute("aria-label", "Decisions not sent yet");
  main.append(
    el("h1", {}, "Waiting for a decision ", count),
    el("p", { class: "hint" },
      "Oldest first, by chat. Nothing has been sent for any of these. ",
      el("span", { class: "legend" }, ext("Text like this", "gadget", "span"), " was written by a gadget or a gatekeeper, never by Gatehouse.")),
    el("p", { class: "hint keys", id: "keys" },
      "Keys: ", el("kbd", { text: "j" }), " / ", el("kbd", { text: "k" }), " move, ",
      el("kbd", { text: "a" }), " approve, ", el("kbd", { text: "r" }), " reject, ",
      el("kbd", { text: "u" }), " undo, ", el("kbd", { text: "Enter" }), " send now."),
    bar,
    list
  );
  showBatch();
  undoButton.addEventListener("click", undo);
  submit.addEventListener("click", () => submitBatch());
  document.addEventListener("keydown", onKey);

  // Load one chat's cards (a live-view change), or every page.
  const load = async (chat) => {
    const seen = new Set();
    let after = null;
    let first = true;
    let total = 0;
    let latched = [];
    for (;;) {
      const q = new URLSearchParams();
      q.set("limit", String(first && !chat ? FIRST_PAGE : NEXT_PAGE));
      if (after !== null) q.set("after", String(after));
      if (chat) q.set("chat", chat);
      const page = await api("GET", "/api/inbox?" + q);
      if (first) {
        latched = page.latched_chats;
        latchedBanners(latched);
      }
      total = page.total;
      for (const info of page.chats) group(info);
      const fresh = page.cards.map((a) => {
        seen.add(a.id);
        return card(a);
      });
      for (let i = 0; i < fresh.length; i += SLICE) {
        placeCards(list, fresh.slice(i, i + SLICE));
        const empty = list.querySelector("p.empty");
        if (empty) empty.remove();
        if (!firstCardMarked && list.querySelector("li.action")) {
          firstCardMarked = true;
          performance.mark("gatehouse:first-card");
        }
        if (i + SLICE < fresh.length) await nextFrame();
      }
      first = false;
      if (page.next_after === null || page.next_after === undefined) break;
      after = page.next_after;
      await nextFrame();
    }
    // Cards no longer pending: decided here (kept, with their results,
    // until the page reloads) or elsewhere (another person, the CLI):
    // those go, and any mark on them is dropped (nothing was sent).
    for (const [id, c] of cards) {
      if (seen.has(id) || (chat && c.card.chat !== chat)) continue;
      if (c.decided || c.submitting) continue;
      if (batch.marks.has(id)) {
        batch.marks.delete(id);
        batch.order = batch.order.filter((x) => x !== id);
        announce(`#${id} was decided elsewhere; your mark on it was dropped.`);
        showBatch();
      }
      c.node.remove();
      cards.delete(id);
    }
    for (const [name, g] of groups) {
      if (g.list.children.length === 0) {
        g.section.remove();
        groups.delete(name);
      }
    }
    const pending = [...cards.values()].filter((c) => !c.decided).length;
    count.textContent = chat ? `(${pending})` : `(${total})`;
    if (cards.size === 0 && !list.querySelector("p.empty")) {
      list.append(el("p", { class: "empty", text: "Nothing awaits a decision." }));
    }
    performance.mark("gatehouse:inbox-ready");
  };
  const changed = new Set();
  let full = true;
  const reload = oneAtATime(async () => {
    try {
      const chats = [...changed];
      const everything = full;
      changed.clear();
      full = false;
      if (everything) await load(null);
      else for (const c of chats) await load(c);
      showError("");
    } catch (e) {
      failed(e);
      return false;
    }
    return true;
  });
  inboxRefresh = (c) => {
    if (c.resync || !c.chat) full = true;
    else changed.add(c.chat);
    return reload();
  };
  if (await reload()) {
    // A link from elsewhere (a face's pending write) names one card.
    const wanted = /^#action-(\d+)$/.exec(location.hash);
    const target = wanted ? cards.get(Number(wanted[1])) : null;
    if (target && target.node) {
      target.node.focus();
      target.node.scrollIntoView({ block: "center" });
    }
    // Live update over server-sent events: new actions appear without a
    // reload, and nothing polls.
    liveView((c) => {
      if (c.resync || c.inbox) inboxRefresh(c);
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

function dayOf(ms) {
  return new Date(ms).toLocaleDateString(undefined, { weekday: "short", year: "numeric", month: "short", day: "numeric" });
}

// Entries as a timeline a person can scan: grouped by day, newest first,
// one line each: when, who, what, state (every field the kernel's
// `ledger_shown`, the terminal's `log` fields).
function timeline(entries) {
  if (entries.length === 0) return el("p", { class: "empty", text: "No entries." });
  const sorted = [...entries].sort((x, y) => (y.decided_at || y.approved_at || y.created_at || 0) - (x.decided_at || x.approved_at || x.created_at || 0) || y.id - x.id);
  const out = el("div", { class: "timeline" });
  let day = null;
  let list = null;
  for (const e of sorted) {
    const at = e.decided_at || e.approved_at || e.created_at || 0;
    const d = dayOf(at);
    if (d !== day) {
      day = d;
      list = el("ol", { class: "day-entries" });
      out.append(el("section", { class: "day" }, el("h2", { class: "day-title", text: d }), list));
    }
    const s = e.shown;
    // A workflow approval request (in an "approved by" answer) is a record
    // of its own, numbered apart from the ledger: its id says so.
    const id = e.kind === "request" ? `request ${e.id}` : `#${e.id}`;
    const stateWord = (s.state || "").split(" ")[0];
    list.append(el("li", { class: "entry kind-" + s.kind, dataset: { id: String(e.id), kind: e.kind } },
      el("time", { dateTime: new Date(at).toISOString(), text: new Date(at).toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit" }) }),
      el("span", { class: "eid", text: id }),
      el("span", { class: "who", text: s.caller }),
      el("span", { class: "what" }, el("span", { class: "kind", text: s.kind }), " ", el("span", { class: "name", text: s.what })),
      el("span", { class: "where", text: "in " + s.chat }),
      el("span", { class: "state state-" + stateWord, text: s.status || s.state })));
  }
  return out;
}

async function ledgerView(main) {
  clear(main);
  const params = new URLSearchParams(location.search);
  const form = el("form", { id: "ledger-filters", class: "filters" });
  const inputs = {};
  for (const [name, label, type] of FILTERS) {
    let input;
    const id = "filter-" + name;
    if (type === "check") {
      input = el("input", { type: "checkbox", name, id, checked: params.get(name) === "true" });
    } else if (type === "kind") {
      input = el("select", { name, id },
        el("option", { value: "", text: "any" }),
        el("option", { value: "action", text: "action" }),
        el("option", { value: "observation", text: "observation" }),
        el("option", { value: "hook", text: "hook" }));
      input.value = params.get(name) || "";
    } else {
      input = el("input", { type: "text", name, id, value: params.get(name) || "" });
    }
    inputs[name] = input;
    form.append(el("label", { class: "filter " + type }, label + " ", input));
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
      out.append(timeline(entries));
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
      el("h2", { text: "What it has read" }),
      el("p", { class: "hint", text: "Every source a read in this chat touched (its observation set), per gatekeeper." }),
      observedNode(chat.name, chat.observed),
      el("h2", { text: "History" })
    );
    const faces = await api("GET", "/api/faces");
    if (faces.length > 0) main.append(facesNode(chat.name, faces));
    const history = await api("GET", "/api/ledger?" + new URLSearchParams({ chat: chat.name }));
    const box = el("div", { id: "chat-history" }, timeline(history));
    main.append(box);
  } catch (e) {
    failed(e);
  }
}

// ----- faces -----

// A gadget's face: its own page in a sandboxed frame (an opaque origin
// with no network, served by `/faces/NAME` under its own policy). Its one
// way out is this bridge: it speaks the MCP Apps protocol (JSON-RPC 2.0
// over postMessage) and sends each `tools/call` to the server as a call of
// the signed-in person in this chat, where the kernel gates it like any
// turn. The page's answers go back to the frame; the actions a call staged
// are drawn here, by the inbox, from the server's rendering, never by the
// face (which could draw anything inside its own frame).
const openFaces = new Map();
// Calls of one face waiting to be sent, at most.
const FACE_QUEUE = 16;

function facesNode(chatName, faces) {
  const box = el("section", { id: "faces", class: "faces" });
  box.setAttribute("aria-label", "Gadget faces");
  box.append(
    el("h2", { text: "Gadget faces" }),
    el("p", { class: "hint", text: "A gadget's own page. Each of its calls runs as your turn in this chat: reads are recorded, writes wait for a decision here in the inbox." })
  );
  const buttons = el("p", { class: "face-buttons" });
  for (const f of faces) {
    const open = el("button", { type: "button", class: "open-face", text: "Open " });
    open.append(ext(f.title, "gadget", "span"));
    open.dataset.gadget = f.gadget;
    open.addEventListener("click", () => {
      open.disabled = true;
      box.append(faceNode(chatName, f));
    });
    buttons.append(open);
  }
  box.append(buttons);
  return box;
}

function faceNode(chatName, f) {
  const frame = el("iframe", { class: "face-frame", src: "/faces/" + encodeURIComponent(f.gadget) });
  // Scripts only: no same origin (cookies, storage, the inbox's DOM), no
  // top navigation, no popups, no forms, no features.
  frame.setAttribute("sandbox", "allow-scripts");
  frame.setAttribute("referrerpolicy", "no-referrer");
  frame.setAttribute("allow", "");
  frame.setAttribute("title", `Face of gadget ${f.gadget}: ${f.title}`);
  frame.dataset.gadget = f.gadget;
  const staged = el("ul", { class: "face-staged" });
  const said = el("p", { class: "face-status" });
  said.setAttribute("role", "status");
  const node = el("div", { class: "face" },
    el("h3", {}, ext(f.title, "gadget", "span"), el("span", { class: "hint", text: ` (gadget ${f.gadget})` })),
    frame, said, staged);
  openFaces.set(frame, { chat: chatName, gadget: f.gadget, frame, staged, said, queue: Promise.resolve(), waiting: 0 });
  return node;
}

function faceReply(frame, id, body) {
  if (!frame.contentWindow) return;
  // The frame is an opaque origin: "*" is the only target that reaches
  // it. What it gets is the answer to its own call.
  frame.contentWindow.postMessage(Object.assign({ jsonrpc: "2.0", id }, body), "*");
}

function showStaged(face, views) {
  for (const a of views) {
    const line = el("li", { class: "face-pending", dataset: { id: String(a.id) } },
      el("span", { class: "id", text: `Pending #${a.id}: ` }),
      summaryNode(a.card),
      " Nothing was sent. ",
      el("a", { href: `/#action-${a.id}`, text: `Decide #${a.id}` }));
    face.staged.append(line);
  }
  if (views.length > 0) announce(`${views.length} write${views.length === 1 ? "" : "s"} staged by the face; nothing was sent.`);
}

async function faceCall(face, id, params) {
  const raw = params && typeof params.name === "string" ? params.name : "";
  const prefix = face.gadget + ".";
  const name = raw.startsWith(prefix) ? raw.slice(prefix.length) : raw;
  const args = params && params.arguments && typeof params.arguments === "object" ? params.arguments : {};
  try {
    const path = "/api/chats/" + encodeURIComponent(face.chat) + "/faces/" + encodeURIComponent(face.gadget) + "/call";
    const r = await api("POST", path, { name, args });
    showStaged(face, r.staged);
    face.said.textContent = r.ok ? "" : r.error;
    const text = r.ok ? JSON.stringify(r.answer) : r.error;
    const result = { content: [{ type: "text", text }], isError: !r.ok };
    if (r.ok && r.answer !== null && typeof r.answer === "object" && !Array.isArray(r.answer)) result.structuredContent = r.answer;
    faceReply(face.frame, id, { result });
  } catch (e) {
    face.said.textContent = e.message;
    faceReply(face.frame, id, { result: { content: [{ type: "text", text: e.message }], isError: true } });
  }
}

window.addEventListener("message", (ev) => {
  let face = null;
  for (const f of openFaces.values()) if (f.frame.contentWindow === ev.source) face = f;
  if (!face) return;
  const m = ev.data;
  if (!m || typeof m !== "object" || m.jsonrpc !== "2.0" || typeof m.method !== "string") return;
  const id = m.id;
  const request = id !== undefined && id !== null;
  if (m.method === "ui/initialize" && request) {
    faceReply(face.frame, id, {
      result: {
        protocolVersion: "2026-01-26",
        hostInfo: { name: "gatehouse-inbox", version: "1" },
        hostCapabilities: { serverTools: {} },
        hostContext: {
          theme: "light",
          displayMode: "inline",
          platform: "web",
          toolInfo: { tool: { name: face.gadget + ".face", inputSchema: { type: "object" } } },
        },
      },
    });
  } else if (m.method === "tools/call" && request) {
    // One call of a face at a time, and a bounded queue: a page that
    // calls in a loop waits for itself, and past the bound is told so.
    if (face.waiting >= FACE_QUEUE) {
      faceReply(face.frame, id, { error: { code: -32000, message: `more than ${FACE_QUEUE} calls are waiting; call again when they are answered` } });
      return;
    }
    face.waiting += 1;
    face.queue = face.queue.then(() => faceCall(face, id, m.params)).finally(() => {
      face.waiting -= 1;
    });
  } else if (m.method === "ui/notifications/size-changed" && m.params) {
    const h = Number(m.params.height);
    if (Number.isFinite(h)) face.frame.style.height = `${Math.min(Math.max(Math.round(h), 120), 2000)}px`;
  } else if (m.method === "ping" && request) {
    faceReply(face.frame, id, { result: {} });
  } else if (request) {
    faceReply(face.frame, id, { error: { code: -32601, message: `${m.method} is not offered to a face here` } });
  }
});

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
  // The chats, in a menu of their own (there may be many).
  const menu = document.getElementById("chats");
  try {
    const chats = await api("GET", "/api/chats");
    const list = el("ul", { class: "chat-list" });
    for (const c of chats) {
      list.append(el("li", {}, el("a", { href: "/chats/" + encodeURIComponent(c.name), class: c.latched ? "latched" : "" },
        c.latched ? `${c.name} (locked down)` : c.name)));
    }
    if (chats.length === 0) list.append(el("li", { class: "empty", text: "No chats." }));
    clear(menu);
    menu.append(el("summary", { text: `Chats (${chats.length})` }), list);
    menu.hidden = false;
  } catch (e) {
    failed(e);
  }
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.getAttribute("href") === location.pathname) a.setAttribute("aria-current", "page");
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
