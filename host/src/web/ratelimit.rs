//! Rate limits on the sign-in endpoints, so that nobody can guess at
//! sign-ins from one address at machine speed: each client address
//! may try so many sign-ins (a link, a passkey, an OpenID Connect start or
//! callback) in a burst, then one more every so often; past that it is
//! answered 429 with `Retry-After`. The limiter is governor's (GCRA),
//! keyed by the client's address as [`super::exposure::Seen`] says (the
//! forwarded one only from the trusted proxy); an IPv6 client is keyed by
//! its /64, which one machine usually holds whole.
//!
//! Owns the limiter and its answer. May not: decide anything about the
//! sign-in itself.

use super::exposure::Seen;
use super::reply::ApiError;
use axum::http::{HeaderValue, Method, StatusCode, header};
use governor::clock::{Clock as _, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

/// How many sign-in attempts an address may make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigninRate {
    /// Attempts at once.
    pub burst: u32,
    /// One more attempt each this often.
    pub every: Duration,
}

impl Default for SigninRate {
    /// Thirty at once, then one every two seconds: far above what a person
    /// needs, far below what guessing or flooding the sign-in needs.
    fn default() -> Self {
        SigninRate {
            burst: 30,
            every: Duration::from_secs(2),
        }
    }
}

/// Addresses tracked before the idle ones are dropped.
const TRACKED: usize = 10_000;

/// The sign-in limiter.
#[derive(Clone)]
pub(crate) struct Limiter {
    limiter: Arc<DefaultKeyedRateLimiter<IpAddr>>,
}

impl Limiter {
    pub(crate) fn new(rate: SigninRate) -> Limiter {
        let burst = NonZeroU32::new(rate.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let quota = Quota::with_period(rate.every.max(Duration::from_millis(1)))
            .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
            .allow_burst(burst);
        Limiter {
            limiter: Arc::new(governor::RateLimiter::keyed(quota)),
        }
    }

    /// `Ok` if `client` may try now, else how long until it may.
    fn check(&self, client: IpAddr) -> Result<(), Duration> {
        if self.limiter.len() > TRACKED {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(&key(client))
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

/// The key an address is limited under.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => {
            let mut s = v6.segments();
            s[4..].fill(0);
            IpAddr::V6(s.into())
        }
        v4 => v4,
    }
}

/// The requests that try to sign someone in: spending a link, a passkey
/// sign-in's two steps, an OpenID Connect start and callback.
fn is_signin(method: &Method, path: &str) -> bool {
    matches!(
        (method, path),
        (&Method::POST, "/api/session")
            | (&Method::POST, "/api/passkeys/signin/start")
            | (&Method::POST, "/api/passkeys/signin/finish")
            | (&Method::GET, "/signin/oidc")
            | (&Method::GET, "/signin/oidc/callback")
    )
}

/// Let a request through, or, for a sign-in past its client's rate,
/// answer 429 with `Retry-After`.
pub(crate) async fn limit(
    axum::extract::State(state): axum::extract::State<super::AppState>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if !is_signin(req.method(), req.uri().path()) {
        return next.run(req).await;
    }
    let client = req
        .extensions()
        .get::<Seen>()
        .map(|s| s.client)
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    match state.signin_limit.check(client) {
        Ok(()) => next.run(req).await,
        Err(wait) => {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let secs = secs.max(1);
            let mut res = ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!("too many sign-in attempts from {client}; try again in {secs} s"),
            )
            .into_response_now();
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            res
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A burst passes, the next attempt waits, other addresses are not
    /// held, and an IPv6 /64 counts as one client.
    #[test]
    fn a_burst_passes_then_an_address_waits() {
        let l = Limiter::new(SigninRate {
            burst: 2,
            every: Duration::from_secs(60),
        });
        let a: IpAddr = "198.51.100.7".parse().expect("ip");
        assert!(l.check(a).is_ok());
        assert!(l.check(a).is_ok());
        let wait = l.check(a).expect_err("held");
        assert!(
            wait > Duration::from_secs(50) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        assert!(l.check("198.51.100.8".parse().expect("ip")).is_ok());
        let v6a: IpAddr = "2001:db8::1".parse().expect("ip");
        let v6b: IpAddr = "2001:db8::ffff:2".parse().expect("ip");
        assert!(l.check(v6a).is_ok());
        assert!(l.check(v6b).is_ok());
        assert!(l.check(v6a).is_err(), "one /64, one client");
    }
}
