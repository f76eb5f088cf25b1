// Web Push: the inbox's "Notify me on this device" control.
// Served as a file of its own (the Content-Security-Policy allows no inline
// script); it renders into <span id="push"> and touches nothing else of the
// page.
//
// Rules of this file: the browser's permission is asked only when the
// person clicks; the subscription (endpoint and keys) goes only to this
// origin's API, with the session's CSRF token; text reaches the page only
// through `textContent` (no HTML strings, as in app.js).
"use strict";

(function () {
  const root = document.getElementById("push");
  if (!root) return;
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    return; // This browser cannot be notified: nothing is offered.
  }

  let status = null;
  let said = "";

  // One API call; a state-changing one carries a fresh CSRF token of this
  // session (GET /api/session mints one for this page).
  async function api(method, path, body) {
    const headers = {};
    if (method !== "GET") {
      const s = await fetch("/api/session", { credentials: "same-origin" });
      if (!s.ok) throw new Error("you are not signed in");
      headers["X-CSRF-Token"] = (await s.json()).csrf;
    }
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const r = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let data = null;
    if (r.status !== 204) {
      try {
        data = await r.json();
      } catch (_) {
        data = null;
      }
    }
    if (!r.ok) throw new Error(data && data.error ? data.error : "HTTP " + r.status);
    return data;
  }

  // The VAPID public key (base64url) as the bytes `subscribe` takes.
  function keyBytes(b64url) {
    const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/");
    const raw = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  function el(tag, text) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function render() {
    root.textContent = "";
    if (!status || !status.enabled) {
      root.hidden = true;
      return;
    }
    root.hidden = false;
    const button = el("button", "Notify me on this device");
    button.type = "button";
    button.id = "push-enable";
    button.addEventListener("click", () => {
      enable();
    });
    root.appendChild(button);
    if (status.devices.length > 0) {
      const details = el("details");
      details.id = "push-devices";
      details.appendChild(el("summary", "Notified devices (" + status.devices.length + ")"));
      const list = el("ul");
      for (const d of status.devices) {
        const item = el("li", d.service + ", since " + new Date(d.created_at).toLocaleString() + " ");
        const remove = el("button", "Remove");
        remove.type = "button";
        remove.addEventListener("click", () => {
          removeDevice(d.id);
        });
        item.appendChild(remove);
        list.appendChild(item);
      }
      details.appendChild(list);
      root.appendChild(details);
    }
    if (said) {
      const note = el("span", said);
      note.id = "push-note";
      note.setAttribute("role", "status");
      root.appendChild(note);
    }
  }

  async function load() {
    try {
      status = await api("GET", "/api/push");
    } catch (_) {
      status = null; // Not signed in (yet): nothing is offered.
    }
    render();
  }

  function say(text) {
    said = text;
    render();
  }

  // On the person's click only: ask the browser's permission, register the
  // service worker, subscribe with the server's key, hand the
  // subscription to the server.
  async function enable() {
    try {
      const permission = await Notification.requestPermission();
      if (permission !== "granted") {
        say("Notifications are blocked for this site; allow them in the browser's settings.");
        return;
      }
      const registration = await navigator.serviceWorker.register("/sw.js", { scope: "/" });
      await navigator.serviceWorker.ready;
      let subscription = await registration.pushManager.getSubscription();
      if (!subscription) {
        subscription = await registration.pushManager.subscribe({
          userVisibleOnly: true,
          applicationServerKey: keyBytes(status.key),
        });
      }
      await api("POST", "/api/push/subscriptions", subscription.toJSON());
      said = "This device will be told when something waits for you.";
      await load();
    } catch (e) {
      say("Could not turn on notifications: " + (e && e.message ? e.message : String(e)));
    }
  }

  async function removeDevice(id) {
    try {
      await api("DELETE", "/api/push/subscriptions/" + encodeURIComponent(id));
      said = "Removed.";
      await load();
    } catch (e) {
      say("Could not remove the device: " + (e && e.message ? e.message : String(e)));
    }
  }

  load();
})();
