//! Who can reach the inbox, by which name, and from where: the
//! address `serve` binds, the one public URL it answers to, the reverse
//! proxy whose forwarded headers it believes, and the checks every request
//! passes first (Host, Origin) and the header that pins HTTPS (HSTS).
//!
//! Owns: refusing an unsafe exposure before anything listens (one line
//! saying what to add), the origin(s) the server answers, the client's
//! address and scheme as the server may believe them, and the relying
//! party passkeys are made for. May not: authenticate anyone or decide
//! policy (sessions are `session`'s, everything else the kernel's).

use super::reply::ApiError;
use anyhow::bail;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

/// `Strict-Transport-Security` when the inbox is reached over HTTPS under
/// its public name: a year, this name only (other hosts under the same
/// domain are not the inbox's to pin). **Decision**: never for a loopback
/// name: browsers ignore it for addresses, and for `localhost` it would
/// pin every local port to HTTPS, this server's own plain-HTTP loopback
/// serving (where passkeys live) included.
pub const HSTS: &str = "max-age=31536000";

/// The one URL people reach the inbox at (`--public-url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicUrl {
    https: bool,
    /// Lower case; an IPv6 address in brackets.
    host: String,
    port: u16,
}

impl PublicUrl {
    /// `https://NAME[:PORT]` (or `http://` for a loopback name): a scheme
    /// and a host, nothing else (the inbox is served at the root of its
    /// name). Refused in one line otherwise.
    pub fn parse(text: &str) -> anyhow::Result<PublicUrl> {
        let url = url::Url::parse(text.trim()).map_err(|e| {
            anyhow::anyhow!(
                "--public-url {text:?} is not a URL ({e}); write it as https://NAME[:PORT]"
            )
        })?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            other => {
                bail!("--public-url {text:?} has scheme {other:?}; write it as https://NAME[:PORT]")
            }
        };
        if !url.username().is_empty() || url.password().is_some() {
            bail!(
                "--public-url {text:?} carries a user name or password; give only https://NAME[:PORT]"
            );
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            bail!(
                "--public-url {text:?} has a path, query or fragment; the inbox is served at the root of its name: give only https://NAME[:PORT]"
            );
        }
        let Some(host) = url.host_str() else {
            bail!("--public-url {text:?} names no host; write it as https://NAME[:PORT]");
        };
        let Some(port) = url.port_or_known_default() else {
            bail!("--public-url {text:?} has no port");
        };
        Ok(PublicUrl {
            https,
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    /// `https://name` or `https://name:port` (a default port left out), as
    /// browsers send it in `Origin`.
    pub fn origin(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        if self.port == default_port(self.https) {
            format!("{scheme}://{}", self.host)
        } else {
            format!("{scheme}://{}:{}", self.host, self.port)
        }
    }

    /// Whether people reach it over HTTPS.
    pub fn is_https(&self) -> bool {
        self.https
    }

    /// The host, as URLs carry it (an IPv6 address in brackets).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The `Host` header values that name it: `name:port`, and `name`
    /// alone when the port is the scheme's default.
    fn hosts(&self) -> Vec<String> {
        let mut out = vec![format!("{}:{}", self.host, self.port)];
        if self.port == default_port(self.https) {
            out.push(self.host.clone());
        }
        out
    }
}

impl std::fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.origin())
    }
}

fn default_port(https: bool) -> u16 {
    if https { 443 } else { 80 }
}

/// Certificate and key files for TLS served directly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM: the certificate, then its chain.
    pub cert: PathBuf,
    /// PEM: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// How the server is exposed (`serve --bind --tls-cert --tls-key
/// --trusted-proxy --public-url`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exposure {
    /// The address listened on (default 127.0.0.1).
    pub bind: IpAddr,
    /// TLS served directly.
    pub tls: Option<TlsFiles>,
    /// The reverse proxy whose `X-Forwarded-*` headers are believed: only
    /// on connections from it.
    pub trusted_proxy: Option<IpNet>,
    /// The one URL the server answers to.
    pub public_url: Option<PublicUrl>,
}

impl Default for Exposure {
    fn default() -> Self {
        Exposure {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            tls: None,
            trusted_proxy: None,
            public_url: None,
        }
    }
}

/// `--trusted-proxy IP` or `IP/PREFIX`.
pub fn parse_proxy(text: &str) -> anyhow::Result<IpNet> {
    let t = text.trim();
    t.parse::<IpNet>()
        .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            anyhow::anyhow!(
                "--trusted-proxy {text:?} is not an address or a network: write it as 10.0.0.5 or 10.0.0.0/24"
            )
        })
}

impl Exposure {
    /// Refuse, in one line saying what to add, an exposure that would
    /// serve people in clear text, answer any name, or believe anyone's
    /// forwarded headers.
    pub fn check(&self, port: u16) -> anyhow::Result<()> {
        let at = SocketAddr::new(self.bind, port);
        let loopback = self.bind.is_loopback();
        if !loopback && self.tls.is_none() && self.trusted_proxy.is_none() {
            bail!(
                "refusing to serve on {at} in clear text: add --tls-cert FILE --tls-key FILE, or --trusted-proxy ADDR naming the reverse proxy that serves TLS in front of it"
            );
        }
        if !loopback && self.public_url.is_none() {
            bail!(
                "refusing to serve on {at} without --public-url https://NAME[:PORT]: the Host and Origin checks answer only the one name people use"
            );
        }
        if let Some(u) = &self.public_url {
            if !u.https && !crate::signin::is_loopback_name(&u.host) {
                bail!(
                    "refusing --public-url {u}: plain http sends the session over the network in clear text (and browsers drop Secure cookies there); use https://"
                );
            }
            if u.https && self.tls.is_none() && self.trusted_proxy.is_none() {
                bail!(
                    "refusing --public-url {u} while serving plain HTTP with no proxy named: add --tls-cert FILE --tls-key FILE, or --trusted-proxy ADDR for the proxy that serves it"
                );
            }
            if !u.https && self.tls.is_some() {
                bail!("refusing --public-url {u} with TLS served: write it as https://");
            }
        }
        if let Some(p) = &self.trusted_proxy
            && p.prefix_len() == 0
        {
            bail!(
                "refusing --trusted-proxy {p}: it would believe forwarded headers from every address; name the proxy's own address"
            );
        }
        Ok(())
    }
}

/// What the server answers, fixed when it starts.
#[derive(Clone, Debug)]
pub(crate) struct Answering {
    /// `Host` values answered.
    hosts: Vec<String>,
    /// `Origin` values whose state changes are accepted.
    origins: Vec<String>,
    /// The origin named in refusals and sign-in links.
    primary: String,
    tls: bool,
    trusted_proxy: Option<IpNet>,
    hsts: bool,
    /// The public URL is https: a request that did not come over HTTPS
    /// (directly, or to the trusted proxy by its word) is sent there.
    https_only: bool,
    /// The public URL's host, or none on loopback.
    public_host: Option<String>,
    port: u16,
}

impl Answering {
    /// What a server exposed as `exposure` on `port` (the port bound)
    /// answers: the public URL alone, or the loopback names.
    pub(crate) fn new(exposure: &Exposure, port: u16) -> Answering {
        let tls = exposure.tls.is_some();
        match &exposure.public_url {
            Some(u) => Answering {
                hosts: u.hosts(),
                origins: vec![u.origin()],
                primary: u.origin(),
                tls,
                trusted_proxy: exposure.trusted_proxy,
                hsts: (tls || u.https) && !crate::signin::is_loopback_name(&u.host),
                https_only: u.https,
                public_host: Some(u.host.clone()),
                port,
            },
            None => {
                let scheme = if tls { "https" } else { "http" };
                let names = match exposure.bind {
                    IpAddr::V6(_) => vec!["[::1]".to_owned(), "localhost".to_owned()],
                    IpAddr::V4(_) => vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
                };
                Answering {
                    hosts: names.iter().map(|n| format!("{n}:{port}")).collect(),
                    origins: names
                        .iter()
                        .map(|n| format!("{scheme}://{n}:{port}"))
                        .collect(),
                    primary: format!("{scheme}://{}:{port}", names[0]),
                    tls,
                    trusted_proxy: exposure.trusted_proxy,
                    hsts: false,
                    https_only: false,
                    public_host: None,
                    port,
                }
            }
        }
    }

    /// The origin people use (links, refusals).
    pub(crate) fn primary(&self) -> &str {
        &self.primary
    }

    /// Whether the server pins HTTPS.
    #[cfg(test)]
    pub(crate) fn hsts(&self) -> bool {
        self.hsts
    }

    /// The origin a request that passed [`guard`] came to: the public URL,
    /// or the loopback name it used.
    pub(crate) fn origin_of(&self, seen: &Seen) -> String {
        if self.public_host.is_some() {
            return self.primary.clone();
        }
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", seen.host)
    }

    /// The relying party passkeys are made for, for a request that came
    /// to `seen`: the public name, or `localhost` on loopback. None where
    /// WebAuthn cannot work: an address (not a name) as the public URL, or
    /// a loopback request to an address (`127.0.0.1`), whose page must be
    /// opened as `localhost` instead.
    pub(crate) fn relying_party(
        &self,
        seen: &Seen,
    ) -> Option<crate::signin::passkey::RelyingParty> {
        let (id, origin) = match &self.public_host {
            Some(h) => (h.clone(), self.primary.clone()),
            None => {
                let name = seen.host.rsplit_once(':').map(|(h, _)| h).unwrap_or("");
                (name.to_owned(), self.origin_of(seen))
            }
        };
        if id.starts_with('[') || id.parse::<IpAddr>().is_ok() || id.is_empty() {
            return None;
        }
        let origin = url::Url::parse(&origin).ok()?;
        Some(crate::signin::passkey::RelyingParty { id, origin })
    }

    /// The relying party this server's passkeys are made for: its public
    /// name, or `localhost` (with this port) on loopback; none when the
    /// public URL names an address.
    pub(crate) fn server_relying_party(&self) -> Option<crate::signin::passkey::RelyingParty> {
        let host = match &self.public_host {
            Some(_) => self.hosts.first().cloned().unwrap_or_default(),
            None => format!("localhost:{}", self.port),
        };
        self.relying_party(&Seen {
            client: IpAddr::V4(Ipv4Addr::LOCALHOST),
            https: self.tls,
            host,
        })
    }

    /// Where passkeys work when this request's name cannot carry them.
    pub(crate) fn passkey_hint(&self) -> String {
        match &self.public_host {
            Some(h) => format!(
                "passkeys need a domain name, and this server's public URL names the address {h}"
            ),
            None => format!(
                "passkeys need a name, not an address: open http{}://localhost:{}/signin",
                if self.tls { "s" } else { "" },
                self.port
            ),
        }
    }

    /// What a request looks like once the trusted proxy's word is taken:
    /// its client's address, whether it came over HTTPS, and the host it
    /// named. Forwarded headers from anyone else are ignored.
    pub(crate) fn seen(&self, peer: Option<SocketAddr>, headers: &HeaderMap) -> Seen {
        let peer_ip = peer.map(|p| canonical(p.ip()));
        let host_header = header_text(headers, header::HOST.as_str());
        let from_proxy = match (self.trusted_proxy, peer_ip) {
            (Some(net), Some(ip)) => net.contains(&ip),
            _ => false,
        };
        if !from_proxy {
            return Seen {
                client: peer_ip.unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                https: self.tls,
                host: host_header.unwrap_or_default().to_ascii_lowercase(),
            };
        }
        // The proxy appends the address it received the request from: the
        // last entry is its own word; earlier ones are the client's.
        let client = last_value(headers, "x-forwarded-for")
            .and_then(|v| parse_forwarded_ip(&v))
            .or(peer_ip)
            .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        // A proxy that does not say is taken to serve the public URL's
        // scheme (it is the one the operator named for it).
        let https = match last_value(headers, "x-forwarded-proto") {
            Some(p) => p.eq_ignore_ascii_case("https"),
            None => self.tls || self.https_only,
        };
        let host = last_value(headers, "x-forwarded-host")
            .or(host_header)
            .unwrap_or_default()
            .to_ascii_lowercase();
        Seen {
            client: canonical(client),
            https,
            host,
        }
    }
}

/// A request as the server believes it (after [`Answering::seen`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    /// The client's address.
    pub client: IpAddr,
    /// Whether it came over HTTPS (directly, or to the trusted proxy).
    pub https: bool,
    /// The host it named (lower case, with its port if it gave one).
    pub host: String,
}

/// An IPv4 address mapped into IPv6 is the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|h| h.to_str().ok())
        .map(|s| s.trim().to_owned())
}

/// The last comma-separated value of the last `name` header.
fn last_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .rfind(|v| !v.is_empty())
        .map(str::to_owned)
}

/// An address as `X-Forwarded-For` writes it: bare, or with a port
/// (`1.2.3.4:5678`, `[::1]:5678`).
fn parse_forwarded_ip(v: &str) -> Option<IpAddr> {
    v.parse::<IpAddr>()
        .ok()
        .or_else(|| v.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            v.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .ok()
        })
}

fn safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The peer address of a connection, put on each of its requests by the
/// accept loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(pub SocketAddr);

/// Answer only requests addressed to this server's one name (a page on
/// another site that rebinds its DNS name to this server gets nothing),
/// accept state changes only from this server's own pages (`Origin`, when
/// the browser sends it), note what the request is seen as ([`Seen`]) for
/// the handlers, and pin HTTPS when served over it.
pub(crate) async fn guard(
    axum::extract::State(state): axum::extract::State<super::AppState>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let answering = &state.answering;
    let peer = req.extensions().get::<Peer>().map(|p| p.0);
    let seen = answering.seen(peer, req.headers());
    let mut res = if !answering.hosts.contains(&seen.host) {
        ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this server answers only {} (got Host {:?})",
                answering.primary, seen.host
            ),
        )
        .into_response_now()
    } else if answering.https_only && !seen.https {
        // Plain HTTP to a server whose public URL is https: straight to
        // the proxy's port, or the proxy says it came in clear text.
        let target = format!(
            "{}{}",
            answering.primary,
            req.uri()
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/")
        );
        if safe(req.method())
            && let Ok(location) = HeaderValue::from_str(&target)
        {
            let mut r = axum::response::Response::new(axum::body::Body::empty());
            *r.status_mut() = StatusCode::PERMANENT_REDIRECT;
            r.headers_mut().insert(header::LOCATION, location);
            r
        } else {
            ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                format!(
                    "this server answers only {} over HTTPS, through its proxy",
                    answering.primary
                ),
            )
            .into_response_now()
        }
    } else if let Some(origin) = header_text(req.headers(), header::ORIGIN.as_str())
        && !safe(req.method())
        && !answering
            .origins
            .iter()
            .any(|o| o.eq_ignore_ascii_case(&origin))
    {
        ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "this request came from another site ({origin:?}); the inbox accepts changes only from its own pages at {}",
                answering.primary
            ),
        )
        .into_response_now()
    } else {
        req.extensions_mut().insert(seen);
        next.run(req).await
    };
    if answering.hsts {
        res.headers_mut().insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static(HSTS),
        );
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposure(bind: &str) -> Exposure {
        Exposure {
            bind: bind.parse().expect("an address"),
            ..Exposure::default()
        }
    }

    fn tls() -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: "c.pem".into(),
            key: "k.pem".into(),
        })
    }

    /// A non-loopback bind needs TLS or a proxy, and a public URL; the
    /// refusal is one line naming what to add.
    #[test]
    fn unsafe_exposures_are_refused_in_one_line() {
        assert!(exposure("127.0.0.1").check(8337).is_ok());
        let e = exposure("0.0.0.0").check(8337).unwrap_err().to_string();
        assert!(
            e.contains("0.0.0.0:8337") && e.contains("--tls-cert") && e.contains("--trusted-proxy"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        let mut x = exposure("0.0.0.0");
        x.tls = tls();
        let e = x.check(8337).unwrap_err().to_string();
        assert!(e.contains("--public-url"), "{e}");
        x.public_url = Some(PublicUrl::parse("https://inbox.example.com").expect("a URL"));
        assert!(x.check(8337).is_ok());
        x.public_url = Some(PublicUrl::parse("http://inbox.example.com").expect("a URL"));
        assert!(
            x.check(8337)
                .unwrap_err()
                .to_string()
                .contains("clear text")
        );

        let mut p = exposure("10.1.2.3");
        p.trusted_proxy = Some(parse_proxy("10.1.2.1").expect("a proxy"));
        p.public_url = Some(PublicUrl::parse("https://inbox.example.com").expect("a URL"));
        assert!(p.check(8337).is_ok());
        p.trusted_proxy = Some(parse_proxy("0.0.0.0/0").expect("a network"));
        assert!(
            p.check(8337)
                .unwrap_err()
                .to_string()
                .contains("every address")
        );

        // Loopback with an https public URL but nothing serving TLS.
        let mut l = exposure("127.0.0.1");
        l.public_url = Some(PublicUrl::parse("https://inbox.example.com").expect("a URL"));
        assert!(l.check(8337).is_err());

        for bad in [
            "ftp://x",
            "https://x/inbox",
            "https://u:p@x",
            "https://x/?q",
            "nonsense",
        ] {
            assert!(PublicUrl::parse(bad).is_err(), "{bad}");
        }
        assert!(parse_proxy("not an address").is_err());
    }

    /// The public URL is the one name answered; its origin leaves out a
    /// default port.
    #[test]
    fn the_public_url_is_the_one_name_answered() {
        let u = PublicUrl::parse("https://Inbox.Example.com").expect("a URL");
        assert_eq!(u.origin(), "https://inbox.example.com");
        assert_eq!(
            u.hosts(),
            vec!["inbox.example.com:443", "inbox.example.com"]
        );
        let u = PublicUrl::parse("https://inbox.example.com:8443/").expect("a URL");
        assert_eq!(u.origin(), "https://inbox.example.com:8443");
        assert_eq!(u.hosts(), vec!["inbox.example.com:8443"]);

        let mut x = exposure("0.0.0.0");
        x.tls = tls();
        x.public_url = Some(u);
        let a = Answering::new(&x, 8443);
        assert!(a.hsts());
        let seen = Seen {
            client: "1.2.3.4".parse().expect("ip"),
            https: true,
            host: "inbox.example.com:8443".into(),
        };
        let rp = a.relying_party(&seen).expect("a relying party");
        assert_eq!(rp.id, "inbox.example.com");
        assert_eq!(rp.origin.as_str(), "https://inbox.example.com:8443/");

        let local = Answering::new(&Exposure::default(), 9000);
        assert!(!local.hsts());
        let local_tls = Exposure {
            tls: tls(),
            ..Exposure::default()
        };
        assert!(
            !Answering::new(&local_tls, 9000).hsts(),
            "never HSTS for localhost"
        );
        let at_address = Seen {
            host: "127.0.0.1:9000".into(),
            ..seen.clone()
        };
        assert!(
            local.relying_party(&at_address).is_none(),
            "no passkeys on an address"
        );
        let at_name = Seen {
            host: "localhost:9000".into(),
            ..seen
        };
        let rp = local
            .relying_party(&at_name)
            .expect("localhost carries passkeys");
        assert_eq!(
            (rp.id.as_str(), rp.origin.as_str()),
            ("localhost", "http://localhost:9000/")
        );
    }

    /// Forwarded headers are believed from the trusted proxy only; the
    /// proxy's own (last) entry is the client.
    #[test]
    fn forwarded_headers_are_believed_from_the_proxy_only() {
        let mut x = exposure("127.0.0.1");
        x.trusted_proxy = Some(parse_proxy("127.0.0.2").expect("a proxy"));
        let a = Answering::new(&x, 9000);
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("127.0.0.1:9000"));
        h.append(
            "x-forwarded-for",
            HeaderValue::from_static("6.6.6.6, 203.0.113.7"),
        );
        h.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        h.insert(
            "x-forwarded-host",
            HeaderValue::from_static("inbox.example.com"),
        );
        let stranger = a.seen(Some("127.0.0.9:5000".parse().expect("addr")), &h);
        assert_eq!(stranger.client, "127.0.0.9".parse::<IpAddr>().expect("ip"));
        assert!(!stranger.https);
        assert_eq!(stranger.host, "127.0.0.1:9000");
        let proxied = a.seen(Some("127.0.0.2:5000".parse().expect("addr")), &h);
        assert_eq!(proxied.client, "203.0.113.7".parse::<IpAddr>().expect("ip"));
        assert!(proxied.https);
        assert_eq!(proxied.host, "inbox.example.com");
        // The proxy says nothing of the scheme: the public URL's is taken.
        let mut x2 = x.clone();
        x2.public_url = Some(PublicUrl::parse("https://inbox.example.com").expect("a URL"));
        let a2 = Answering::new(&x2, 9000);
        let mut quiet = h.clone();
        quiet.remove("x-forwarded-proto");
        assert!(
            a2.seen(Some("127.0.0.2:5000".parse().expect("addr")), &quiet)
                .https
        );
        assert!(
            !a2.seen(Some("127.0.0.9:5000".parse().expect("addr")), &h)
                .https,
            "a stranger's word is not taken"
        );
        let mut bad = h.clone();
        bad.insert("x-forwarded-for", HeaderValue::from_static("garbage"));
        let fallback = a.seen(Some("127.0.0.2:5000".parse().expect("addr")), &bad);
        assert_eq!(
            fallback.client,
            "127.0.0.2".parse::<IpAddr>().expect("ip"),
            "the proxy itself"
        );
        assert_eq!(
            parse_forwarded_ip("[2001:db8::1]:443"),
            "2001:db8::1".parse().ok()
        );
        assert_eq!(
            parse_forwarded_ip("198.51.100.1:80"),
            "198.51.100.1".parse().ok()
        );
    }
}
