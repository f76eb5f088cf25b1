// `triage-js`: the Rust `triage` gadget, in JavaScript.
//
// It reads the issues of the service introduced as `ISSUES`, files a triage
// report and labels the first untriaged issue (both actions are staged for a
// decision), and with `poll ID...` reports where its actions stand. It makes
// the same kernel calls as the Rust gadget, so the service sees the same
// requests.
//
// Bindings follow componentize-js: an imported function that returns
// `result<T, E>` returns T or throws an error whose `payload` is E; an
// exported one returns T or throws (the thrown value becomes E). `u64` is a
// BigInt; variants are `{ tag, val }`.

import { env, open, actionResult } from "gatehouse:os/kernel@0.3.0";

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
