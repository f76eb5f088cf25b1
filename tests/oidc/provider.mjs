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
//     "subjects": ["alice-at-idp", ...],          (who may sign in)
//   and, all optional, for an OAuth 2.1 authorization server:
//     "registration": true,        open dynamic client registration
//     "refresh_tokens": true,      refresh tokens for authorization_code
//     "introspection": true,       the introspection endpoint
//     "resource_server": {"prefix": "http://127.0.0.1:", "scope": "mcp",
//                         "access_token_ttl": 10}
//                                  resource indicators: any resource
//                                  starting with the prefix gets opaque
//                                  access tokens with that scope and TTL
//     "test_controls": true        GET /__test/log (the token endpoint's
//                                  grants, by grant type, and the
//                                  refresh tokens issued, so a test can
//                                  look for them where they must not
//                                  be) and POST
//                                  /__test/revoke-grants (every grant so
//                                  far ended: its tokens stop working)
//   }
// A client may name "grant_types" (default ["authorization_code"], plus
// "refresh_token" with refresh_tokens); one with no redirect URIs (a
// resource server that only introspects) gets none.
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
const { default: Provider, errors } = await import(
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
  const rs = config.resource_server;
  const provider = new Provider(issuer, {
    clients: (config.clients || []).map((c) => {
      const grants = c.grant_types
        || (!c.redirect_uris?.length ? []
          : config.refresh_tokens ? ["authorization_code", "refresh_token"] : ["authorization_code"]);
      return {
        client_id: c.client_id,
        ...(c.client_secret ? { client_secret: c.client_secret } : {}),
        redirect_uris: c.redirect_uris || [],
        application_type: c.application_type || "native",
        grant_types: grants,
        response_types: grants.includes("authorization_code") ? ["code"] : [],
        token_endpoint_auth_method: c.client_secret ? "client_secret_basic" : "none",
      };
    }),
    ...(config.refresh_tokens
      ? { issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed("refresh_token") }
      : {}),
    jwks: { keys: [{ ...jwk, kid: "test-key", use: "sig", alg: "RS256" }] },
    cookies: { keys: [randomBytes(32).toString("hex")] },
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: !!config.registration },
      introspection: { enabled: !!config.introspection },
      resourceIndicators: {
        enabled: !!rs,
        // Tokens for the resource the client named, at the token
        // endpoint or, failing that, at authorization.
        useGrantedResource: async () => true,
        async getResourceServerInfo(_ctx, indicator) {
          if (!rs || !indicator.startsWith(rs.prefix)) throw new errors.InvalidTarget();
          return {
            scope: rs.scope || "",
            audience: indicator,
            accessTokenTTL: rs.access_token_ttl || 60,
            accessTokenFormat: "opaque",
          };
        },
      },
    },
    async findAccount(_ctx, sub) {
      if (!subjects.has(sub)) return undefined;
      return { accountId: sub, async claims() { return { sub }; } };
    },
  });
  const grants = [];
  const granted = new Set();
  const refreshTokens = [];
  for (const event of ["access_token.saved", "refresh_token.saved"]) {
    provider.on(event, (token) => token.grantId && granted.add(token.grantId));
  }
  // An opaque token's value is its id.
  provider.on("refresh_token.saved", (token) => refreshTokens.push(token.jti));
  provider.on("grant.success", (ctx) => grants.push({ grant_type: ctx.oidc.params.grant_type, ok: true }));
  provider.on("grant.error", (ctx, err) =>
    grants.push({ grant_type: ctx.oidc.params?.grant_type, ok: false, error: err.error }),
  );
  const callback = provider.callback();
  server.on("request", async (req, res) => {
    if (config.test_controls && req.url === "/__test/log") {
      res.setHeader("content-type", "application/json");
      return res.end(JSON.stringify({ grants, refresh_tokens: refreshTokens }));
    }
    if (config.test_controls && req.url === "/__test/revoke-grants" && req.method === "POST") {
      for (const id of granted) {
        const grant = await provider.Grant.find(id);
        if (grant) await grant.destroy();
      }
      res.setHeader("content-type", "application/json");
      return res.end(JSON.stringify({ revoked: granted.size }));
    }
    return callback(req, res);
  });
  process.stdout.write(JSON.stringify({ issuer }) + "\n");
});

process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
for (const s of ["SIGTERM", "SIGINT"]) process.on(s, () => process.exit(0));
