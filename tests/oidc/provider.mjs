// A small OpenID Connect provider for Gatehouse's end-to-end tests: panva's
// oidc-provider (pinned in package.json, installed by setup.sh), on an
// ephemeral loopback port, with the clients and people its configuration
// names. tests/src/oidc.rs starts it; it stays general, so that other
// tests (of OAuth accounts, say) can use it too.
//
// Input, in the environment:
//   OIDC_PROVIDER_MODULES  the node_modules directory setup.sh installed
//   OIDC_TEST_CONFIG       JSON: {
//     "host": "localhost",                       (the name in the issuer)
//     "clients": [{"client_id", "client_secret"?, "redirect_uris": [...],
//                  "application_type"?: "native" | "web"}],
//     "subjects": ["alice-at-idp", ...]           (who may sign in)
//   }
// Native clients' loopback redirect URIs match any port (RFC 8252 7.3),
// so a client can be registered before the server it redirects to has a
// port. The login form is the library's development form: its "login"
// field is the subject, the password is not checked.
//
// Output: one line on stdout once it listens: {"issuer": "http://HOST:PORT"}.
// It stops when its stdin closes (the test that started it ended) or on a
// signal.
import { createServer } from "node:http";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.OIDC_PROVIDER_MODULES;
if (!modules) {
  console.error("OIDC_PROVIDER_MODULES is not set (run tests/oidc/setup.sh)");
  process.exit(2);
}
const { default: Provider } = await import(
  pathToFileURL(join(modules, "oidc-provider", "lib", "index.js")).href
);

// Stdout carries the one line above and nothing else: the library's
// notices (console.log and console.info) go to stderr, and a reader that
// stopped reading never stops the provider.
for (const name of ["log", "info", "debug"]) {
  console[name] = (...args) => process.stderr.write(args.join(" ") + "\n");
}
process.stdout.on("error", () => {});

const config = JSON.parse(process.env.OIDC_TEST_CONFIG || "{}");
const host = config.host || "localhost";
const subjects = new Set(config.subjects || []);

const server = createServer();
server.listen(0, host === "localhost" ? "127.0.0.1" : host, () => {
  const { port } = server.address();
  const issuer = `http://${host}:${port}`;
  const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const jwk = privateKey.export({ format: "jwk" });
  const provider = new Provider(issuer, {
    clients: (config.clients || []).map((c) => ({
      client_id: c.client_id,
      ...(c.client_secret ? { client_secret: c.client_secret } : {}),
      redirect_uris: c.redirect_uris,
      application_type: c.application_type || "native",
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: c.client_secret ? "client_secret_basic" : "none",
    })),
    jwks: { keys: [{ ...jwk, kid: "test-key", use: "sig", alg: "RS256" }] },
    cookies: { keys: [randomBytes(32).toString("hex")] },
    pkce: { required: () => true },
    features: { devInteractions: { enabled: true } },
    async findAccount(_ctx, sub) {
      if (!subjects.has(sub)) return undefined;
      return { accountId: sub, async claims() { return { sub }; } };
    },
  });
  server.on("request", provider.callback());
  process.stdout.write(JSON.stringify({ issuer }) + "\n");
});

process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => process.exit(0));
