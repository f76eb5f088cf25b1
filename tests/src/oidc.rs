//! A real OpenID Connect provider for the tests: panva's `oidc-provider`
//! (pinned in `tests/oidc/package.json`, installed by `tests/oidc/setup.sh`,
//! which `.ci/run` runs) started with `node` on an ephemeral loopback port,
//! configured with the clients and subjects a test names. The web
//! inbox's sign-in tests sign in with it.
//!
//! Hermetic: node starts from an empty environment (plus `PATH`), and the
//! provider stops when the returned [`Provider`] is dropped (its stdin
//! closes, and it is killed).

use crate::langs::{repo_root, tools_dir};
use serde_json::{Value, json};
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};

/// A client registered at the provider.
#[derive(Clone, Debug)]
pub struct OidcClient {
    pub id: String,
    /// None for a public client (PKCE only).
    pub secret: Option<String>,
    /// Its redirect URIs. A loopback one (`http://127.0.0.1/path`)
    /// matches any port, as RFC 8252 says for native clients.
    pub redirect_uris: Vec<String>,
}

/// What the provider is started with.
#[derive(Clone, Debug)]
pub struct ProviderConfig {
    /// The name in the issuer URL (`localhost` unless a test needs
    /// another loopback name).
    pub host: String,
    pub clients: Vec<OidcClient>,
    /// The subjects who may sign in (the login form's "login" field).
    pub subjects: Vec<String>,
}

impl ProviderConfig {
    /// One confidential client with a loopback redirect URI at `path`
    /// (any port), and the subjects given.
    pub fn one_client(id: &str, secret: &str, path: &str, subjects: &[&str]) -> ProviderConfig {
        ProviderConfig {
            host: "localhost".into(),
            clients: vec![OidcClient {
                id: id.into(),
                secret: Some(secret.into()),
                redirect_uris: vec![format!("http://127.0.0.1{path}")],
            }],
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A running provider, stopped when dropped.
pub struct Provider {
    child: Child,
    /// Its stdout, kept open: the provider writes nothing more there, but
    /// a closed pipe must not be what stops it.
    _out: BufReader<std::process::ChildStdout>,
    /// Its issuer URL (`http://localhost:PORT`), where discovery starts.
    pub issuer: String,
    /// Its clients, as configured.
    pub clients: Vec<OidcClient>,
}

const INSTALL: &str = "the tests' OpenID Connect provider is not installed: run `tests/oidc/setup.sh` (needs node and npm; .ci/run does this)";

impl Provider {
    /// Start the provider and wait for it to say its issuer URL.
    pub fn start(config: ProviderConfig) -> Provider {
        Provider::start_with(config, json!({}))
    }

    /// Start the provider with `extra` configuration keys besides the
    /// config's (see tests/oidc/provider.mjs: registration, refresh
    /// tokens, introspection, a resource server, test controls).
    pub fn start_with(config: ProviderConfig, extra: Value) -> Provider {
        let modules = tools_dir().join("oidc").join("node_modules");
        if !modules.join("oidc-provider").is_dir() {
            panic!("{INSTALL} (looked in {})", modules.display());
        }
        let clients: Vec<Value> = config
            .clients
            .iter()
            .map(|c| {
                json!({
                    "client_id": c.id,
                    "client_secret": c.secret,
                    "redirect_uris": c.redirect_uris,
                    "application_type": "native",
                })
            })
            .collect();
        let mut settings = json!({
            "host": config.host,
            "clients": clients,
            "subjects": config.subjects,
        });
        if let (Some(s), Some(extra)) = (settings.as_object_mut(), extra.as_object()) {
            s.extend(extra.clone());
        }
        let mut child = Command::new("node")
            .arg(repo_root().join("tests/oidc/provider.mjs"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("OIDC_PROVIDER_MODULES", &modules)
            .env("OIDC_TEST_CONFIG", settings.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("node does not start ({e}); {INSTALL}"));
        let out = child.stdout.take().expect("the provider's stdout");
        let mut out = BufReader::new(out);
        let mut first = String::new();
        let read = out.read_line(&mut first);
        let issuer = read
            .ok()
            .and_then(|_| serde_json::from_str::<Value>(&first).ok())
            .and_then(|v| v["issuer"].as_str().map(str::to_owned));
        let Some(issuer) = issuer else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the OpenID Connect provider did not start (said {first:?}); {INSTALL}");
        };
        Provider {
            child,
            _out: out,
            issuer,
            clients: config.clients,
        }
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
