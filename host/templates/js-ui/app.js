// `{{name}}`: a Gatehouse gadget with a face. It greets, lists the services
// introduced to its chat with the tools each grants, and, when ISSUES is
// introduced, reads the issues (a read: answered at once).
//
// Its face is PAGE below, shown beside its chat (in the inbox of `gatehouse
// serve`, and in MCP hosts): the page calls `services` and `issues`, each
// call a turn of the person viewing the page, under the same rules as `run`.
//
// Build: `npm install && npm run build` (componentize-js, world
// gadget-with-face; see README.md). An imported function returning
// result<T, E> returns T or throws an error whose `payload` is E; throwing
// from `run` or `face.call` returns its `err` case.

import { env, open } from "gatehouse:os/kernel@0.3.0";

function describe(error) {
  const e = error && error.payload !== undefined ? error.payload : error;
  if (!e || typeof e.tag !== "string") return String(error);
  if (e.tag === "unknown-key") return `unknown key ${e.val.key}`;
  if (e.tag === "not-granted") return `${e.val.tool} is not granted`;
  return String(e.val);
}

export const run = {
  run(input) {
    const lines = [`Hello from {{name}}. You said: ${JSON.stringify(input.trim())}`];
    const keys = env();
    if (!keys.length) lines.push("Services introduced: none");
    try {
      for (const key of keys) {
        const tools = open(key).tools().map((t) => t.name);
        lines.push(`Service ${key}: ${tools.join(", ")}`);
      }
      if (keys.includes("ISSUES")) {
        const outcome = open("ISSUES").call("listIssues", "{}");
        lines.push(
          outcome.tag === "done"
            ? `ISSUES answered: ${outcome.val}`
            : `staged as #${outcome.val.actionId}`,
        );
      }
    } catch (e) {
      throw describe(e);
    }
    return lines.join("\n");
  },
};

// The page: one self-contained document (it can load nothing). The host
// puts the bridge that defines `gatehouse.call(name, args)` first in it.
const PAGE = `{{page}}`;

/** [{ key: "ISSUES", tools: ["listIssues", ...] }, ...] */
function services() {
  return env().map((key) => ({ key, tools: open(key).tools().map((t) => t.name) }));
}

/** What ISSUES' listIssues answers (JSON text: a read runs at once). */
function issues() {
  const outcome = open("ISSUES").call("listIssues", "{}");
  if (outcome.tag !== "done") {
    throw `listIssues was staged as #${outcome.val.actionId} instead of answered as a read`;
  }
  return outcome.val;
}

export const face = {
  // Asked for outside any turn: it may not call the kernel.
  show() {
    return { title: "{{name}}", html: PAGE, functions: ["services", "issues"] };
  },
  // `args` is a JSON object (text); the answer is JSON text, and a thrown
  // text is shown to the person.
  call(name, args) {
    try {
      if (name === "services") return JSON.stringify(services());
      if (name === "issues") return issues();
    } catch (e) {
      throw typeof e === "string" ? e : describe(e);
    }
    throw `{{name}}'s face has no function ${JSON.stringify(name)}`;
  },
};
