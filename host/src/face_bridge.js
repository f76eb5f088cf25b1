// The page's side of a Gatehouse face, which the host puts first in every
// face's page (host/src/face.rs): the MCP Apps handshake over postMessage,
// then `gatehouse.call(name, args)`. The page has no network; this is its
// only way out, and each call is a turn the kernel gates.
(() => {
  "use strict";
  let next = 1;
  let prefix = "";
  const waiting = new Map();
  const send = (message) => window.parent.postMessage(message, "*");
  const request = (method, params) => {
    const id = next++;
    return new Promise((resolve, reject) => {
      waiting.set(id, { resolve, reject });
      send({ jsonrpc: "2.0", id, method, params });
    });
  };
  window.addEventListener("message", (ev) => {
    // Only the host that embeds the page speaks to it.
    if (ev.source !== window.parent) return;
    const m = ev.data;
    if (!m || m.jsonrpc !== "2.0") return;
    if (m.method === undefined && m.id !== undefined) {
      const w = waiting.get(m.id);
      if (!w) return;
      waiting.delete(m.id);
      if (m.error) w.reject(new Error(String(m.error.message || "the host refused the request")));
      else w.resolve(m.result);
      return;
    }
    if (m.method !== undefined && m.id !== undefined) {
      if (m.method === "ui/resource-teardown" || m.method === "ping") {
        send({ jsonrpc: "2.0", id: m.id, result: {} });
      } else {
        send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "not offered by this page" } });
      }
    }
  });
  const ready = request("ui/initialize", {
    protocolVersion: "2026-01-26",
    appInfo: { name: "gatehouse-face", version: "1" },
    appCapabilities: {},
  }).then((r) => {
    const info = r && r.hostContext && r.hostContext.toolInfo;
    const opener = (info && info.tool && info.tool.name) || "";
    const dot = opener.lastIndexOf(".");
    prefix = dot >= 0 ? opener.slice(0, dot + 1) : "";
    send({ jsonrpc: "2.0", method: "ui/notifications/initialized", params: {} });
    return r;
  });
  const call = async (name, args) => {
    await ready;
    const r = await request("tools/call", { name: prefix + name, arguments: args || {} });
    const text = r && Array.isArray(r.content) && r.content[0] ? r.content[0].text : undefined;
    if (!r || r.isError) throw new Error(text || "the call failed");
    if (r.structuredContent !== undefined) return r.structuredContent;
    try {
      return JSON.parse(text);
    } catch (_) {
      return text;
    }
  };
  window.gatehouse = Object.freeze({ call, ready });
})();
