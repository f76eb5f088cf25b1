// The Gatehouse sign-in page (/signin) and a person's passkeys and
// accounts at services (/account).
// Served from the binary as a separate file (the Content-Security-Policy
// allows no inline script). Text reaches the page only through text nodes
// (`textContent`), never as HTML.
//
// WebAuthn's options and answers cross the API as JSON with every binary
// field in base64url (as webauthn-rs writes and reads them); this file
// turns them into the ArrayBuffers `navigator.credentials` takes and back.
"use strict";

function byId(id) {
  return document.getElementById(id);
}

function showError(msg) {
  const e = byId("error");
  e.textContent = msg;
  e.hidden = !msg;
}

let csrf = "";

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  if (r.status === 204) return null;
  let data = null;
  try {
    data = await r.json();
  } catch (_) {
    data = null;
  }
  if (!r.ok) {
    const msg = data && typeof data.error === "string" ? data.error : `HTTP ${r.status}`;
    const e = new Error(msg);
    e.status = r.status;
    throw e;
  }
  return data;
}

// ----- base64url <-> bytes -----

function fromB64url(s) {
  let b = s.replace(/-/g, "+").replace(/_/g, "/");
  while (b.length % 4) b += "=";
  const bin = atob(b);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out.buffer;
}

function toB64url(buf) {
  const bytes = new Uint8Array(buf);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function withIds(list) {
  return (list || []).map((c) => Object.assign({}, c, { id: fromB64url(c.id) }));
}

// The server's creation options as `navigator.credentials.create` takes
// them. The credential is asked to be discoverable (kept by the
// authenticator with the person's handle): a passkey, so that signing in
// later names nobody.
function creationOptions(o) {
  const pk = Object.assign({}, o.publicKey);
  pk.challenge = fromB64url(pk.challenge);
  pk.user = Object.assign({}, pk.user, { id: fromB64url(pk.user.id) });
  pk.excludeCredentials = withIds(pk.excludeCredentials);
  pk.authenticatorSelection = Object.assign({}, pk.authenticatorSelection, {
    residentKey: "required",
    requireResidentKey: true,
    userVerification: "required",
  });
  return { publicKey: pk };
}

// The server's request options as `navigator.credentials.get` takes them.
// The server marks them for conditional mediation (autofill); a button
// asks at once instead, so the mediation is left out.
function requestOptions(o) {
  const pk = Object.assign({}, o.publicKey);
  pk.challenge = fromB64url(pk.challenge);
  pk.allowCredentials = withIds(pk.allowCredentials);
  return { publicKey: pk };
}

function registrationJSON(cred) {
  return {
    id: cred.id,
    rawId: toB64url(cred.rawId),
    type: cred.type,
    response: {
      attestationObject: toB64url(cred.response.attestationObject),
      clientDataJSON: toB64url(cred.response.clientDataJSON),
    },
    extensions: cred.getClientExtensionResults(),
  };
}

function assertionJSON(cred) {
  const r = cred.response;
  return {
    id: cred.id,
    rawId: toB64url(cred.rawId),
    type: cred.type,
    response: {
      authenticatorData: toB64url(r.authenticatorData),
      clientDataJSON: toB64url(r.clientDataJSON),
      signature: toB64url(r.signature),
      userHandle: r.userHandle ? toB64url(r.userHandle) : null,
    },
    extensions: cred.getClientExtensionResults(),
  };
}

// ----- /signin -----

async function passkeySignin(button) {
  button.disabled = true;
  showError("");
  try {
    const started = await api("POST", "/api/passkeys/signin/start");
    const cred = await navigator.credentials.get(requestOptions(started.options));
    if (!cred) throw new Error("no passkey was chosen");
    await api("POST", "/api/passkeys/signin/finish", {
      ceremony: started.ceremony,
      credential: assertionJSON(cred),
    });
    location.assign("/");
  } catch (e) {
    showError(e.message || String(e));
    button.disabled = false;
  }
}

async function signinPage() {
  const params = new URLSearchParams(location.search);
  const token = params.get("token") || "";
  // The token leaves the address bar at once (and never the page: no-referrer).
  history.replaceState(null, "", "/signin");
  if (token) {
    byId("by-link").hidden = false;
    const button = byId("signin");
    button.addEventListener("click", async () => {
      button.disabled = true;
      try {
        await api("POST", "/api/session", { token });
        location.assign("/");
      } catch (e) {
        showError(e.message);
      }
    });
  }
  let methods = null;
  try {
    methods = await api("GET", "/api/signin");
  } catch (e) {
    showError(e.message);
    return;
  }
  const pk = byId("passkey-signin");
  if (methods.passkeys && window.PublicKeyCredential) {
    pk.hidden = false;
    pk.addEventListener("click", () => passkeySignin(pk));
  } else {
    const hint = byId("passkey-hint");
    hint.textContent = methods.passkey_hint || "This browser cannot use passkeys here.";
    hint.hidden = false;
  }
  if (methods.oidc_issuer) {
    let name = methods.oidc_issuer;
    try {
      name = new URL(methods.oidc_issuer).host;
    } catch (_) {
      // shown as given
    }
    byId("oidc-signin").textContent = `Sign in with ${name}`;
    byId("by-oidc").hidden = false;
  }
}

// ----- /account -----

function passkeyItem(p) {
  const li = document.createElement("li");
  li.className = "action passkey";
  const label = document.createElement("strong");
  label.className = "label";
  label.textContent = p.label;
  const when = document.createElement("span");
  when.className = "hint";
  const used = p.used_at ? `, last used ${new Date(p.used_at).toLocaleString()}` : ", not used yet";
  when.textContent = ` added ${new Date(p.created_at).toLocaleString()}${used} `;
  const remove = document.createElement("button");
  remove.type = "button";
  remove.className = "remove";
  remove.textContent = "Remove";
  remove.addEventListener("click", async () => {
    remove.disabled = true;
    try {
      await api("DELETE", "/api/passkeys/" + encodeURIComponent(p.credential));
      await listPasskeys();
    } catch (e) {
      showError(e.message);
      remove.disabled = false;
    }
  });
  li.append(label, when, remove);
  return li;
}

async function listPasskeys() {
  const list = byId("passkeys");
  const keys = await api("GET", "/api/passkeys");
  while (list.firstChild) list.removeChild(list.firstChild);
  for (const p of keys) list.append(passkeyItem(p));
  byId("passkeys-empty").hidden = keys.length > 0;
}

async function addPasskey(button) {
  button.disabled = true;
  showError("");
  const status = byId("passkey-status");
  status.textContent = "";
  try {
    const started = await api("POST", "/api/passkeys/register/start");
    const cred = await navigator.credentials.create(creationOptions(started.options));
    if (!cred) throw new Error("no passkey was made");
    const added = await api("POST", "/api/passkeys/register/finish", {
      ceremony: started.ceremony,
      credential: registrationJSON(cred),
      label: byId("passkey-label").value,
    });
    status.textContent = `Added passkey ${added.label}.`;
    await listPasskeys();
  } catch (e) {
    showError(e.message || String(e));
  }
  button.disabled = false;
}

// A person's accounts at gatekeepers' services (labels, never
// credentials), and a Connect button for each gatekeeper whose service a
// URL names: the kernel discovers its authorization server and answers
// the URL the browser goes to; the server sends the browser back to
// /oauth/callback, which lands here again.
async function listAccounts() {
  const r = await api("GET", "/api/accounts");
  const list = byId("accounts");
  while (list.firstChild) list.removeChild(list.firstChild);
  for (const a of r.accounts) {
    const li = document.createElement("li");
    li.textContent = `${a.label} at ${a.gatekeeper}${a.is_default ? " (default)" : ""}`;
    list.append(li);
  }
  byId("accounts-empty").hidden = r.accounts.length > 0;
  const connect = byId("connect-accounts");
  while (connect.firstChild) connect.removeChild(connect.firstChild);
  for (const g of r.connectable) {
    const form = document.createElement("form");
    form.className = "oauth-connect";
    form.dataset.gatekeeper = g;
    const label = document.createElement("label");
    label.textContent = `Label for ${g} `;
    const input = document.createElement("input");
    input.type = "text";
    input.name = "label";
    input.maxLength = 64;
    label.append(input);
    const button = document.createElement("button");
    button.type = "submit";
    button.textContent = `Connect ${g} by OAuth`;
    form.append(label, button);
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      button.disabled = true;
      try {
        const body = { gatekeeper: g };
        if (input.value.trim()) body.label = input.value.trim();
        const started = await api("POST", "/api/accounts/oauth", body);
        location.assign(started.url);
      } catch (e) {
        showError(e.message);
        button.disabled = false;
      }
    });
    connect.append(form);
  }
}

async function accountPage() {
  try {
    const s = await api("GET", "/api/session");
    csrf = s.csrf;
    byId("who").textContent = `Signed in as ${s.user}`;
    await listPasskeys();
    await listAccounts();
  } catch (e) {
    showError(e.message);
    byId("add-passkey").hidden = true;
    return;
  }
  const methods = await api("GET", "/api/signin").catch(() => null);
  const add = byId("passkey-add");
  if (methods && methods.passkeys && window.PublicKeyCredential) {
    add.addEventListener("click", () => addPasskey(add));
  } else {
    add.disabled = true;
    const hint = byId("passkey-hint");
    hint.textContent = (methods && methods.passkey_hint) || "This browser cannot use passkeys here.";
    hint.hidden = false;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  if (location.pathname === "/account") accountPage();
  else signinPage();
});
