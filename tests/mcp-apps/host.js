// An MCP App host, as a chat client that shows MCP Apps would be: the
// official SDKs' MCP client reaches the server (same-origin /mcp, which
// server.mjs forwards to `gatehouse mcp serve --http`), and the ext-apps
// SDK's AppBridge speaks the Apps protocol to the page in the iframe and
// forwards its tools/call and resources/read to that client. Nothing of
// the protocol is written here: if a Gatehouse face works in this page, it
// works because it speaks MCP Apps as the reference host understands it.
// Bundled for the browser by tests/mcp-apps/setup.sh (esbuild).
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  AppBridge,
  PostMessageTransport,
  RESOURCE_MIME_TYPE,
  getToolUiResourceUri,
  isToolVisibilityAppOnly,
} from "@modelcontextprotocol/ext-apps/app-bridge";

const HOST = { name: "gatehouse-test-host", version: "1.0.0" };
const status = document.getElementById("host-status");
const say = (text) => {
  status.textContent = text;
};

async function open() {
  say("connecting");
  const client = new Client(HOST);
  await client.connect(new StreamableHTTPClientTransport(new URL("/mcp", window.location.href)));

  // The tool that opens the app: one with a UI resource that the model
  // may call (the ones visible to the app alone are what the page calls).
  const { tools } = await client.listTools();
  const opener = tools.find((t) => getToolUiResourceUri(t) !== undefined && !isToolVisibilityAppOnly(t));
  if (!opener) throw new Error(`no tool opens an app among ${tools.map((t) => t.name).join(", ")}`);
  const uri = getToolUiResourceUri(opener);

  const { contents } = await client.readResource({ uri });
  if (contents.length !== 1) throw new Error(`${uri} has ${contents.length} contents, not 1`);
  const [page] = contents;
  if (page.mimeType !== RESOURCE_MIME_TYPE || typeof page.text !== "string") {
    throw new Error(`${uri} is ${page.mimeType}, not an app page (${RESOURCE_MIME_TYPE}) as text`);
  }

  // Scripts only: without allow-same-origin the page has an opaque origin,
  // so it can reach neither this page nor /mcp; postMessage to the bridge
  // is its only way out.
  const frame = document.createElement("iframe");
  frame.setAttribute("sandbox", "allow-scripts");
  frame.title = opener.title || opener.name;
  if (page._meta?.ui?.prefersBorder) frame.classList.add("bordered");
  document.getElementById("app").append(frame);

  const caps = client.getServerCapabilities() || {};
  const bridge = new AppBridge(
    client,
    HOST,
    { serverTools: caps.tools ? {} : undefined, serverResources: caps.resources ? {} : undefined, logging: {} },
    {
      hostContext: {
        // Without `id`: the client does not reveal the JSON-RPC id of its
        // tools/call, and the field is optional.
        toolInfo: { tool: opener },
        theme: "light",
        displayMode: "inline",
        availableDisplayModes: ["inline"],
        platform: "web",
        locale: "en-US",
      },
    },
  );
  bridge.addEventListener("sizechange", ({ height }) => {
    if (height !== undefined) frame.style.height = `${height}px`;
  });
  const initialized = new Promise((resolve) => bridge.addEventListener("initialized", resolve));

  // Listen before the page exists: its first script sends ui/initialize
  // as it loads. The frame's window object stays the same across the
  // srcdoc navigation, so the transport keeps matching its messages.
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  frame.srcdoc = page.text;
  say("waiting for the app");

  // What the model would do: call the opener, then show the app its input
  // and result.
  const input = {};
  const result = client.callTool({ name: opener.name, arguments: input });
  await initialized;
  await bridge.sendToolInput({ arguments: input });
  await bridge.sendToolResult(await result);
  say(`connected: ${opener.name} shows ${uri}`);
}

open().catch((e) => {
  say(`error: ${e && e.message ? e.message : String(e)}`);
});
