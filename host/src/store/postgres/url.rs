//! A PostgreSQL connection URL, which may carry a password: read once, with
//! the driver's own parser, into what connecting needs and what may be
//! shown.
//!
//! Owns the URL's reading, its masked form (the one way a URL is ever
//! printed) and the TLS settings libpq names and the driver does not parse
//! (`sslmode=verify-ca|verify-full`, `sslrootcert=FILE`). It may not
//! connect (`store::postgres` does, through `store::postgres::tls`).
//!
//! The safe sides chosen here (docs/security-model.md, "The database
//! URL"):
//! - What is shown is rebuilt from the driver's reading (user, hosts,
//!   ports, database name, and the TLS settings), never cut out of the
//!   text: a password, in the user part or as `?password=`, plain or
//!   percent-encoded, has no way into it. A password is shown as `***`.
//! - A URL the driver would read differently from how it reads to a
//!   person is refused, never guessed at: more than one `@`, or an `@`
//!   after the query began (the driver takes everything before the first
//!   `@` as the user part, so a password's tail would be read as the
//!   host). The refusal says to percent-encode it.
//! - An error never echoes the URL, nor the driver's words about it
//!   unless they name one of its fixed option names.

use anyhow::bail;
use std::path::PathBuf;

/// How a connection uses TLS: libpq's `sslmode` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TlsMode {
    /// Never.
    Disable,
    /// If the server offers it, without checking its certificate; else
    /// without (libpq's default).
    Prefer,
    /// Always, encrypted; the certificate's chain is checked only when
    /// `sslrootcert` names the authority to check it against (as libpq).
    Require,
    /// Always; the certificate must chain to the authority.
    VerifyCa,
    /// Always; the certificate must chain to the authority and be for
    /// the host connected to.
    VerifyFull,
}

impl TlsMode {
    fn parse(value: &str) -> anyhow::Result<TlsMode> {
        Ok(match value {
            "disable" => TlsMode::Disable,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            "allow" => bail!(
                "the database URL's sslmode=allow is not supported (it tries without TLS first); use prefer, require, verify-ca or verify-full"
            ),
            _ => bail!(
                "the database URL's sslmode is not one of disable, prefer, require, verify-ca, verify-full; fix it"
            ),
        })
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }

    /// What the driver is told: whether TLS is off, tried, or required.
    fn driver(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode;
        match self {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull => SslMode::Require,
        }
    }
}

/// Where the authority a server's certificate is checked against comes
/// from (`sslrootcert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// None named.
    Unset,
    /// `sslrootcert=system`: the public authorities Mozilla trusts.
    System,
    /// A PEM file of one or more authorities.
    File(PathBuf),
}

/// A PostgreSQL connection URL, read by the driver's parser: connected
/// with as written, shown only masked ([`std::fmt::Display`]).
#[derive(Clone)]
pub struct DatabaseUrl {
    /// The URL handed to the driver: as written, less the options only
    /// this module reads.
    driver: String,
    /// The masked form, made once.
    shown: String,
    tls: TlsMode,
    root: RootCert,
}

/// Characters percent-encoded in a shown part.
const SHOWN: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn shown(part: &str) -> String {
    percent_encoding::utf8_percent_encode(part, SHOWN).to_string()
}

fn decoded(part: &str) -> anyhow::Result<String> {
    percent_encoding::percent_decode_str(part)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| {
            anyhow::anyhow!(
                "the database URL holds a percent-encoded value that is not UTF-8; fix it"
            )
        })
}

impl DatabaseUrl {
    /// Read `url`: a `postgres://` or `postgresql://` URL as the driver
    /// reads it, with libpq's `sslmode` and `sslrootcert`. Refusals say
    /// what is wrong without repeating the URL.
    pub fn parse(url: &str) -> anyhow::Result<DatabaseUrl> {
        let url = url.trim();
        let Some(rest) = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|p| url.strip_prefix(p))
        else {
            bail!(
                "the database URL must start with postgres:// or postgresql://; give a PostgreSQL connection URL (postgres://USER:PASSWORD@HOST:PORT/DATABASE)"
            );
        };
        let scheme = &url[..url.len() - rest.len()];
        let encode_at = "percent-encode an '@' in a password as %40";
        if rest.matches('@').count() > 1 {
            bail!("the database URL holds more than one '@'; {encode_at}");
        }
        // The driver ends the user part at the first '@', wherever it is.
        let (creds, after) = match rest.split_once('@') {
            Some((creds, after)) => (Some(creds), after),
            None => (None, rest),
        };
        if let Some(creds) = creds {
            let user = creds.split(':').next().unwrap_or_default();
            let in_query = creds.contains('?') && creds.contains('=');
            if in_query || user.contains(['/', '?', '=', '&']) {
                bail!(
                    "the database URL holds an '@' the driver would read as the end of a user name (after a '/', '?' or '='); {encode_at}"
                );
            }
        }
        // Options after the first '?' that follows the user part, split
        // as the driver splits them; this module's own are taken out.
        let (head, query) = match after.split_once('?') {
            Some((h, q)) => (&url[..url.len() - after.len() + h.len()], Some(q)),
            None => (url, None),
        };
        let (mut mode, mut root) = (None, RootCert::Unset);
        let mut kept: Vec<&str> = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match decoded(k)?.as_str() {
                "sslmode" => mode = Some(TlsMode::parse(&decoded(v)?)?),
                "sslrootcert" => {
                    root = match decoded(v)?.as_str() {
                        "" => RootCert::Unset,
                        "system" => RootCert::System,
                        path => RootCert::File(PathBuf::from(path)),
                    }
                }
                _ => kept.push(pair),
            }
        }
        let driver = if kept.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", kept.join("&"))
        };
        let config: tokio_postgres::Config = driver.parse().map_err(|e| {
            let named = std::error::Error::source(&e)
                .map(|s| s.to_string())
                .filter(|s| s.starts_with("invalid value for option `"));
            match named {
                Some(what) => anyhow::anyhow!("the database URL is not valid: {what}; fix it"),
                None => anyhow::anyhow!(
                    "the database URL is not a valid PostgreSQL URL (an unknown option, or a value out of place); check it against postgres://USER:PASSWORD@HOST:PORT/DATABASE?sslmode=verify-full&sslrootcert=FILE"
                ),
            }
        })?;
        let tls = mode.unwrap_or(TlsMode::Prefer);
        // A chain checked against the public authorities without the name
        // would take any certificate any of them signed for any name (libpq
        // refuses the same with sslrootcert=system).
        let public = matches!(root, RootCert::System | RootCert::Unset);
        let weak = match tls {
            TlsMode::VerifyCa => public,
            TlsMode::Require => root == RootCert::System,
            _ => false,
        };
        if weak {
            bail!(
                "the database URL's sslmode={} would check the server's certificate against the public authorities without its host name, taking any certificate one of them signed for any name; use sslmode=verify-full, or name your own authority in sslrootcert=FILE",
                tls.as_str()
            );
        }
        let shown = mask(scheme, &config, mode, &root);
        Ok(DatabaseUrl {
            driver,
            shown,
            tls,
            root,
        })
    }

    /// How connections to it use TLS.
    pub(crate) fn tls(&self) -> TlsMode {
        self.tls
    }

    /// Which authority a server's certificate is checked against.
    pub(crate) fn root_cert(&self) -> &RootCert {
        &self.root
    }

    /// The driver's configuration for this URL, with its TLS mode and
    /// `timeout` unless the URL names its own.
    pub(crate) fn config(
        &self,
        timeout: std::time::Duration,
    ) -> anyhow::Result<tokio_postgres::Config> {
        let mut config: tokio_postgres::Config = self
            .driver
            .parse()
            .map_err(|_| anyhow::anyhow!("the database URL {self} is not valid"))?;
        config.ssl_mode(self.tls.driver());
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout);
        }
        Ok(config)
    }
}

/// The one masked form of a URL: the driver's reading of its user,
/// hosts, ports and database name, a password as `***`, and the TLS
/// settings; nothing else of the text.
fn mask(
    scheme: &str,
    config: &tokio_postgres::Config,
    mode: Option<TlsMode>,
    root: &RootCert,
) -> String {
    use tokio_postgres::config::Host;
    let mut out = scheme.to_owned();
    let password = config.get_password().is_some();
    match (config.get_user(), password) {
        (Some(user), true) => out.push_str(&format!("{}:***@", shown(user))),
        (Some(user), false) => out.push_str(&format!("{}@", shown(user))),
        (None, true) => out.push_str(":***@"),
        (None, false) => {}
    }
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                Host::Tcp(name) if name.contains(':') => format!("[{}]", shown(name)),
                Host::Tcp(name) => shown(name),
                #[cfg(unix)]
                Host::Unix(path) => shown(&path.to_string_lossy()),
            };
            match ports.get(i).or(ports.first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    out.push_str(&hosts.join(","));
    if let Some(db) = config.get_dbname() {
        out.push('/');
        out.push_str(&shown(db));
    }
    let mut options = Vec::new();
    if let Some(mode) = mode {
        options.push(format!("sslmode={}", mode.as_str()));
    }
    match root {
        RootCert::Unset => {}
        RootCert::System => options.push("sslrootcert=system".to_owned()),
        RootCert::File(path) => {
            options.push(format!("sslrootcert={}", shown(&path.to_string_lossy())))
        }
    }
    if !options.is_empty() {
        out.push('?');
        out.push_str(&options.join("&"));
    }
    out
}

impl std::fmt::Display for DatabaseUrl {
    /// The masked form: printed in errors, reports and status lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DatabaseUrl({})", self.shown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_mask_shows_where_and_who_never_a_password() {
        let url = DatabaseUrl::parse("postgres://alice:s3cret@db.example:5432/gh?sslmode=disable")
            .expect("a postgres URL");
        assert_eq!(
            url.to_string(),
            "postgres://alice:***@db.example:5432/gh?sslmode=disable"
        );
        let bare = DatabaseUrl::parse("postgresql://db/gh").expect("a postgres URL");
        assert_eq!(bare.to_string(), "postgresql://db:5432/gh");
        let tls = DatabaseUrl::parse(
            "postgres://alice@h1:5433,h2/gh?password=s3cret&sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=3",
        )
        .expect("a postgres URL");
        assert_eq!(
            tls.to_string(),
            "postgres://alice:***@h1:5433,h2:5432/gh?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
        );
        assert_eq!(tls.tls(), TlsMode::VerifyFull);
        assert_eq!(tls.root_cert(), &RootCert::File("/etc/ca.pem".into()));
        for refused in [
            "mysql://root:s3cret@db/x",
            "host=db password=s3cret",
            "postgres://alice:s3@cret@db/gh",
            "postgres://db/gh?password=s3@cret",
            "postgres://db:5432/gh?password=a/s3@cret",
            "postgres://alice:s3cret@db/gh?nonsense=1",
            "postgres://alice:s3cret@db/gh?sslmode=allow",
            "postgres://alice:s3cret@db/gh?sslmode=verify-ca&sslrootcert=system",
            "postgres://alice:s3cret@db/gh?sslmode=verify-ca",
            "postgres://alice:s3cret@db/gh?sslmode=require&sslrootcert=system",
        ] {
            let e = DatabaseUrl::parse(refused).expect_err(refused);
            assert!(!format!("{e:#}").contains("s3"), "{refused}: {e:#}");
        }
    }

    /// A password of the characters that broke the old mask.
    fn password() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9/?@:#% &=+;,'\"\\\\$!*()\\[\\]-]{1,16}".prop_map(|p| format!("Pw9{p}"))
    }

    fn encode(p: &str) -> String {
        percent_encoding::utf8_percent_encode(p, percent_encoding::NON_ALPHANUMERIC).to_string()
    }

    proptest! {
        /// Whatever the password holds and wherever it is written (the user
        /// part or `?password=`, raw or percent-encoded), neither the mask,
        /// nor `Debug`, nor a refusal contains it.
        #[test]
        fn no_form_of_a_url_shows_its_password(
            pw in password(),
            form in 0usize..6,
            scheme in prop::sample::select(vec!["postgres://", "postgresql://"]),
        ) {
            let enc = encode(&pw);
            let url = match form {
                0 => format!("{scheme}alice:{pw}@db.example:5432/gh"),
                1 => format!("{scheme}alice:{enc}@db.example:5432/gh?sslmode=require"),
                2 => format!("{scheme}alice@db.example/gh?password={pw}"),
                3 => format!("{scheme}alice@db.example/gh?sslmode=prefer&password={enc}"),
                4 => format!("{scheme}db.example:5432/gh?password={pw}&sslmode=disable"),
                _ => format!("{scheme}alice:{pw}@db.example/gh?password={enc}"),
            };
            let printed = match DatabaseUrl::parse(&url) {
                Ok(u) => format!("{u} {u:?}"),
                Err(e) => format!("{e:#} {e:?}"),
            };
            let decoded = percent_encoding::percent_decode_str(&pw).decode_utf8_lossy().into_owned();
            for secret in [&pw, &enc, &decoded] {
                prop_assert!(!printed.contains(secret.as_str()), "{url} printed {printed}");
            }
        }
    }
}
