// The web server of the test's MCP App host: serves host.html (next to
// this file) and host.bundle.js (from the directory given as the one
// argument, where tests/mcp-apps/setup.sh bundled it), and forwards /mcp to
// `gatehouse mcp serve --http` at $MCP_URL with $MCP_TOKEN.
//
// Why a forwarder: that server refuses any request with an Origin (no
// browser page may talk to it) and wants the bearer token, which a page
// must not hold. A real host's backend stands in the same place.
//
// Listens on 127.0.0.1, a free port; prints its URL as the first line.
import { readFile } from "node:fs/promises";
import http from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const bundleDir = process.argv[2];
const upstream = new URL(process.env.MCP_URL || "");
const token = process.env.MCP_TOKEN || "";
if (!bundleDir || upstream.protocol !== "http:" || !token) {
  console.error("usage: MCP_URL=http://127.0.0.1:PORT/mcp MCP_TOKEN=... node server.mjs BUNDLE_DIR");
  process.exit(2);
}

const files = {
  "/": [path.join(here, "host.html"), "text/html; charset=utf-8"],
  "/host.bundle.js": [path.join(bundleDir, "host.bundle.js"), "text/javascript; charset=utf-8"],
};

// What a Streamable HTTP exchange needs, both ways; nothing else crosses
// (no Origin, Referer or cookies go up).
const REQUEST_HEADERS = ["accept", "content-type", "mcp-session-id", "mcp-protocol-version", "last-event-id"];
const RESPONSE_HEADERS = ["content-type", "cache-control", "mcp-session-id", "mcp-protocol-version", "www-authenticate"];

const pick = (headers, names) => {
  const out = {};
  for (const n of names) if (headers[n] !== undefined) out[n] = headers[n];
  return out;
};

function forward(req, res) {
  const headers = pick(req.headers, REQUEST_HEADERS);
  headers.authorization = `Bearer ${token}`;
  const up = http.request(
    { host: upstream.hostname, port: upstream.port, path: upstream.pathname, method: req.method, headers },
    (upRes) => {
      res.writeHead(upRes.statusCode || 502, pick(upRes.headers, RESPONSE_HEADERS));
      // Piped as it arrives: an SSE answer is a stream, not one body.
      upRes.pipe(res);
    },
  );
  up.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
    res.end(`the MCP server is unreachable: ${e.message}\n`);
  });
  // The page went away (or closed its event stream): so does the request.
  res.on("close", () => up.destroy());
  req.pipe(up);
}

// `127.0.0.1:PORT`, known once listening.
let own = "";

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url || "/", "http://localhost");
  // Only this server's own name, so no other site reaches /mcp through a
  // rebound DNS name (the page's own requests always match).
  if (req.headers.host !== own) {
    res.writeHead(421, { "content-type": "text/plain" }).end("misdirected\n");
    return;
  }
  if (url.pathname === "/mcp") {
    if (req.headers.origin !== undefined && req.headers.origin !== `http://${own}`) {
      res.writeHead(403, { "content-type": "text/plain" }).end("another site's page\n");
      return;
    }
    forward(req, res);
    return;
  }
  const file = files[url.pathname];
  if (!file || req.method !== "GET") {
    res.writeHead(404, { "content-type": "text/plain" }).end("not found\n");
    return;
  }
  try {
    const body = await readFile(file[0]);
    res.writeHead(200, { "content-type": file[1], "cache-control": "no-store" }).end(body);
  } catch (e) {
    res.writeHead(500, { "content-type": "text/plain" }).end(`${e.message}\n`);
  }
});

server.listen(0, "127.0.0.1", () => {
  own = `127.0.0.1:${server.address().port}`;
  process.stdout.write(`http://${own}/\n`);
});
