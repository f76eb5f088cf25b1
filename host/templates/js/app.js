// `{{name}}`: a Gatehouse gadget. It greets, lists the services introduced
// to its chat with the tools each grants, and, when ISSUES is introduced,
// reads the issues (a read: answered at once).
//
// Build: `npm install && npm run build` (componentize-js; see README.md).
// An imported function returning result<T, E> returns T or throws an error
// whose `payload` is E; throwing from `run` returns its `err` case.

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
