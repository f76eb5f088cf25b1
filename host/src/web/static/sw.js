// The inbox's service worker: shows a push from Gatehouse and,
// when the notification is clicked, focuses the inbox or opens it. Nothing
// else: no fetch handler, no cache. A push says only a count and chat
// names, and is shown as text.
"use strict";

self.addEventListener("push", (event) => {
  let m = {};
  try {
    m = event.data ? event.data.json() : {};
  } catch (_) {
    m = {};
  }
  const title = typeof m.title === "string" ? m.title : "Gatehouse";
  const body = typeof m.body === "string" ? m.body : "Something waits for your decision.";
  event.waitUntil(self.registration.showNotification(title, { body, tag: "gatehouse", renotify: true }));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const inbox = new URL("/", self.location.origin).href;
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((windows) => {
      for (const w of windows) {
        if (new URL(w.url).origin === self.location.origin && "focus" in w) return w.focus();
      }
      return self.clients.openWindow(inbox);
    }),
  );
});
