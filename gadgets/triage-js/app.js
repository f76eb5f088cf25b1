// `triage-js`: the Rust `triage` gadget, in JavaScript.
//
// It reads the issues of the service introduced as `ISSUES`, files a triage
// report and labels the first untriaged issue (both actions are staged for a
// decision), and with `poll ID...` reports where its actions stand. It makes
// the same kernel calls as the Rust gadget, so the service sees the same
// requests.
//
// Its face is the triage board, as the Rust gadget's: `board` answers the
// issues with a proposed label each and the writes the board staged with
// where each stands; `label` stages `addLabel` (answered `pending`, nothing
// sent until a person approves it). Built for the world `gadget-with-face`.
//
// Bindings follow componentize-js: an imported function that returns
// `result<T, E>` returns T or throws an error whose `payload` is E; an
// exported one returns T or throws (the thrown value becomes E). `u64` is a
// BigInt; variants are `{ tag, val }`.

import {
  env,
  open,
  actionResult,
  storeGet,
  storePut,
} from "gatehouse:os/kernel@0.3.0";

const KEY = "ISSUES";

const oneLine = (text) => String(text).split(/\s+/).filter(Boolean).join(" ");

/** One readable line for a refused or failed call. */
function describe(error) {
  const e = error && error.payload !== undefined ? error.payload : error;
  if (!e || typeof e.tag !== "string") {
    return oneLine(`kernel error: ${error}`);
  }
  const list = (items) => (items.length ? items.join(", ") : "(none)");
  switch (e.tag) {
    case "unknown-key":
      return oneLine(`unknown key ${e.val.key}; introduced keys: ${list(e.val.known)}`);
    case "not-granted":
      return oneLine(
        `tool ${e.val.tool} is not granted for ${e.val.key}; allowed: ${list(e.val.allowed)}`,
      );
    case "invalid-args":
      return oneLine(`invalid arguments: ${e.val}`);
    case "refused":
      return oneLine(`refused: ${e.val}`);
    default:
      return oneLine(`service error: ${e.val}`);
  }
}

/** JSON with sorted keys and no spaces: the same bytes serde_json writes. */
function dumps(value) {
  if (Array.isArray(value)) {
    return `[${value.map(dumps).join(",")}]`;
  }
  if (value && typeof value === "object") {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${dumps(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** JSON on one line (text that is not JSON is flattened instead). */
function compact(text) {
  try {
    return dumps(JSON.parse(text));
  } catch {
    return oneLine(text);
  }
}

function issueId(issue) {
  const id = issue && typeof issue === "object" ? issue.id : undefined;
  return Number.isInteger(id) && id >= 0 ? id : undefined;
}

function labels(issue) {
  const value = issue && typeof issue === "object" ? issue.labels : undefined;
  return Array.isArray(value) ? value.filter((l) => typeof l === "string") : [];
}

/** Calls an action and describes its outcome in one line. */
function action(service, tool, args) {
  let outcome;
  try {
    outcome = service.call(tool, dumps(args));
  } catch (e) {
    return `err: ${describe(e)}`;
  }
  if (outcome.tag === "pending") {
    return `#${outcome.val.actionId} pending: ${oneLine(outcome.val.message)}`;
  }
  return `done: ${compact(outcome.val)}`;
}

function triage() {
  const keys = env();
  if (!keys.includes(KEY)) {
    const known = keys.length ? keys.join(", ") : "none";
    throw `no ${KEY} service is introduced to this chat (introduced: ${known}); run \`introduce CHAT GATEKEEPER --as ${KEY}\` first`;
  }
  let service;
  try {
    service = open(KEY);
  } catch (e) {
    throw describe(e);
  }
  let outcome;
  try {
    outcome = service.call("listIssues", "{}");
  } catch (e) {
    throw `listIssues failed: ${describe(e)}`;
  }
  if (outcome.tag === "pending") {
    throw `listIssues was staged as action #${outcome.val.actionId} instead of answered as a read: ${oneLine(outcome.val.message)}`;
  }
  let issues;
  try {
    issues = JSON.parse(outcome.val);
  } catch (e) {
    throw `listIssues answered invalid JSON: ${e.message}`;
  }
  if (!Array.isArray(issues)) {
    throw "listIssues did not answer a JSON list";
  }

  const report = [`Read ${issues.length} issue${issues.length === 1 ? "" : "s"} from ${KEY}.`];
  const body = issues
    .map((issue) => {
      const id = issueId(issue);
      const title = issue && typeof issue.title === "string" ? issue.title : "";
      const names = labels(issue);
      return `- #${id === undefined ? "?" : id} ${title}${names.length ? ` [${names.join(", ")}]` : ""}\n`;
    })
    .join("");
  const create = {
    title: `Triage report: ${issues.length} open issues`,
    body: body || "No open issues.\n",
  };
  report.push(`createIssue: ${action(service, "createIssue", create)}`);

  const target = issues.find((i) => !labels(i).includes("triaged")) ?? issues[0];
  if (target === undefined) {
    report.push("addLabel: skipped, there are no issues");
  } else if (issueId(target) === undefined) {
    report.push("addLabel: skipped, the issue has no numeric id");
  } else {
    const id = issueId(target);
    report.push(
      `addLabel triaged to #${id}: ${action(service, "addLabel", { id, label: "triaged" })}`,
    );
  }
  return report.join("\n");
}

function poll(rest) {
  const words = rest.split(/[\s,]+/).filter(Boolean);
  const ids = words.map((word) => {
    const digits = word.replace(/^#+/, "");
    if (!/^[0-9]+$/.test(digits)) {
      throw `not an action id: ${JSON.stringify(word)}; usage: poll ID [ID...]`;
    }
    return BigInt(digits);
  });
  if (!ids.length) {
    throw "usage: poll ID [ID...]";
  }
  return ids
    .map((id) => {
      let status;
      try {
        status = actionResult(id);
      } catch (e) {
        return `#${id} error: ${describe(e)}`;
      }
      switch (status.tag) {
        case "pending":
          return `#${id} pending`;
        case "rejected":
          return `#${id} rejected: ${oneLine(status.val)}`;
        case "expired":
          return `#${id} expired: ${oneLine(status.val)}`;
        case "failed":
          return `#${id} failed (${status.val.retryable ? "retryable" : "not retryable"}): ${oneLine(status.val.message)}`;
        default:
          return `#${id} applied: ${compact(status.val)}`;
      }
    })
    .join("\n");
}

export const run = {
  run(input) {
    const text = input.trim();
    return text.startsWith("poll") ? poll(text.slice(4)) : triage();
  },
};

// The face.

/** The storage key of the writes the board staged (a JSON list). */
const STAGED = "board-staged";
/** How many staged writes the board keeps track of. */
const KEEP = 50;


// The board: gadgets/triage/src/board.html, the Rust gadget's page, with
// its template literals written as concatenations to fit in this one.
const BOARD = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Triage board</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; margin: .6rem; color: #1c1e21; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .35rem .4rem; border-bottom: 1px solid #d6d9dc; }
  button { min-height: 2.5rem; padding: 0 .8rem; }
  .muted { color: #545b63; }
  #staged li { margin: .2rem 0; }
</style>
</head>
<body>
<h1>Triage board</h1>
<p id="status" class="muted" role="status">Loading the issues…</p>
<table>
  <thead><tr><th>#</th><th>Title</th><th>Labels</th><th>Proposed</th><th></th></tr></thead>
  <tbody id="issues"></tbody>
</table>
<h2>Writes this board staged</h2>
<ul id="staged"></ul>
<script>
"use strict";
// Text only: every value goes in through textContent.
const cell = (text) => { const td = document.createElement("td"); td.textContent = text; return td; };
const status = document.getElementById("status");

async function refresh() {
  try {
    const b = await gatehouse.call("board", {});
    const rows = document.getElementById("issues");
    rows.replaceChildren();
    for (const i of b.issues) {
      const tr = document.createElement("tr");
      tr.dataset.id = String(i.id);
      const button = document.createElement("button");
      button.type = "button";
      button.className = "apply";
      button.dataset.id = String(i.id);
      button.textContent = "Label " + i.proposed;
      button.addEventListener("click", () => label(i.id, i.proposed, button));
      const act = document.createElement("td");
      act.append(button);
      tr.append(cell("#" + i.id), cell(i.title), cell(i.labels.join(", ")), cell(i.proposed), act);
      rows.append(tr);
    }
    const staged = document.getElementById("staged");
    staged.replaceChildren();
    for (const w of b.staged) {
      const li = document.createElement("li");
      li.dataset.action = String(w.action);
      li.textContent = "#" + w.action + ": label " + w.label + " on issue #" + w.issue + " (" + w.status + ")";
      staged.append(li);
    }
    status.textContent = b.issues.length + " issues.";
  } catch (e) {
    status.textContent = "The board could not load: " + e.message;
  }
}

async function label(id, name, button) {
  button.disabled = true;
  let said;
  try {
    const r = await gatehouse.call("label", { id, label: name });
    said = r.pending !== undefined
      ? "Staged as #" + r.pending + ": nothing is sent until someone approves it."
      : "Done.";
  } catch (e) {
    said = "Not staged: " + e.message;
  }
  await refresh();
  button.disabled = false;
  status.textContent = said;
}

refresh();
</script>
</body>
</html>
`;


/** A label for an issue, from words of its title. */
function propose(title) {
  const t = title.toLowerCase();
  const has = (words) => words.some((w) => t.includes(w));
  if (has(["crash", "error", "fail", "broken", "bug", "wrong", "blank", "drops"])) return "bug";
  if (has(["doc", "readme", "typo"])) return "docs";
  if (has(["add", "support", "feature", "allow", "could"])) return "enhancement";
  return "triaged";
}

/** The writes the board staged, as stored (none when nothing is stored or
 * the viewer may not read it). */
function remembered() {
  let stored;
  try {
    stored = storeGet(STAGED);
  } catch (e) {
    throw describe(e);
  }
  if (typeof stored !== "string") return [];
  try {
    const v = JSON.parse(stored);
    return Array.isArray(v) ? v : [];
  } catch {
    return [];
  }
}

function statusOf(id) {
  let s;
  try {
    s = actionResult(BigInt(id));
  } catch (e) {
    return `unknown: ${describe(e)}`;
  }
  switch (s.tag) {
    case "pending":
    case "applied":
    case "rejected":
    case "expired":
      return s.tag;
    case "failed":
      return `failed: ${oneLine(s.val.message)}`;
    default:
      return `unknown: ${s.tag}`;
  }
}

function board() {
  let service;
  try {
    service = open(KEY);
  } catch (e) {
    throw describe(e);
  }
  let outcome;
  try {
    outcome = service.call("listIssues", "{}");
  } catch (e) {
    throw `listIssues failed: ${describe(e)}`;
  }
  if (outcome.tag === "pending") {
    throw `listIssues was staged as #${outcome.val.actionId} instead of answered as a read`;
  }
  let listed;
  try {
    listed = JSON.parse(outcome.val);
  } catch {
    listed = null;
  }
  const issues = (Array.isArray(listed) ? listed : []).map((issue) => {
    const title = issue && typeof issue.title === "string" ? issue.title : "";
    return {
      id: issueId(issue) ?? null,
      title,
      labels: labels(issue),
      proposed: propose(title),
    };
  });
  const staged = remembered().map((w) => {
    const action = Number.isInteger(w && w.action) && w.action >= 0 ? w.action : 0;
    return {
      action,
      issue: w && w.issue !== undefined ? w.issue : null,
      label: w && w.label !== undefined ? w.label : null,
      status: statusOf(action),
    };
  });
  return { issues, staged };
}

/** The length of `text` in UTF-8 bytes, the measure the Rust board uses. */
function utf8Length(text) {
  let n = 0;
  for (const ch of text) {
    const c = ch.codePointAt(0);
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}

function label(args) {
  const id = args && args.id;
  if (!Number.isInteger(id) || id < 0) throw "label needs the issue's numeric id";
  const name = args.label;
  if (typeof name !== "string" || name.length === 0 || utf8Length(name) > 50) {
    throw "label needs a label of 1 to 50 characters";
  }
  let outcome;
  try {
    outcome = open(KEY).call("addLabel", dumps({ id, label: name }));
  } catch (e) {
    throw describe(e);
  }
  if (outcome.tag !== "pending") {
    return { done: JSON.parse(outcome.val) };
  }
  // A u64 id is a BigInt; ids fit a JSON number, as the Rust board writes.
  const action = Number(outcome.val.actionId);
  const kept = remembered();
  kept.push({ action, issue: id, label: name });
  try {
    storePut(STAGED, dumps(kept.slice(-KEEP)));
  } catch (e) {
    throw describe(e);
  }
  return { pending: action, message: oneLine(outcome.val.message) };
}

export const face = {
  show() {
    return { title: "Triage board", html: BOARD, functions: ["board", "label"] };
  },
  call(name, args) {
    let parsed;
    try {
      parsed = JSON.parse(args);
    } catch (e) {
      throw `the arguments of ${JSON.stringify(name)} are not JSON: ${e.message}`;
    }
    switch (name) {
      case "board":
        return dumps(board());
      case "label":
        return dumps(label(parsed));
      default:
        throw `the board has no function ${JSON.stringify(name)}`;
    }
  },
};
