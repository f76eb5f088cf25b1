// `probe-js`: a test gadget that tries the ways out a JavaScript program
// might have. The sandbox test runs it to prove that a JavaScript gadget
// gets no more authority than a Rust one. It answers one JSON object, one
// field per attempt; a failed attempt is "error: ...". The input may name
// HOST:PORT to fetch from (a real listening server, so a success would be
// visible there). `fetch HOST:PORT` only fetches: built without HTTP (as
// every JavaScript gadget is), calling fetch traps, ending the turn.

function attempt(fn) {
  try {
    return fn();
  } catch (e) {
    return `error: ${e && e.name ? e.name : "thrown"}: ${e && e.message ? e.message : e}`;
  }
}

export const run = {
  run(input) {
    const words = input.trim().split(/\s+/);
    if (words[0] === "fetch") {
      fetch(`http://${words[1]}/issues`);
      return "a request was started";
    }
    const target = words[0] || "127.0.0.1:80";
    const found = {
      fetch: attempt(() => {
        if (typeof fetch !== "function") {
          throw new TypeError("fetch is not available");
        }
        return `fetch exists (it would reach ${target})`;
      }),
      env: attempt(() => {
        if (typeof process === "undefined" || !process.env) {
          throw new TypeError("there is no process.env");
        }
        return JSON.stringify(process.env);
      }),
      require: attempt(() => {
        if (typeof require !== "function") {
          throw new TypeError("there is no require");
        }
        return String(require("fs").readFileSync("/etc/passwd"));
      }),
      globals: Object.getOwnPropertyNames(globalThis)
        .filter((n) => /^(process|Deno|Bun|require|XMLHttpRequest|WebSocket)$/.test(n))
        .sort(),
    };
    return JSON.stringify(found);
  },
};
