//! Expiry (SPEC H3): how long an action may wait for a decision.
//!
//! Every chat has an expiry, 7 days unless its owner set another
//! (`gatehouse chat set CHAT --expire-after 2h`). A pending action older
//! than its chat's expiry is never sent: the claim transaction refuses it
//! and marks it `expired` (so every sender, manual or automatic, meets the
//! same check), and reads of pending work mark what is due as they look
//! (the inbox, the drain, the cap's count, `action-result`), so the gadget
//! sees `expired` and the action counts as closed for the 50-open cap.
//!
//! The time is the clock's: no environment variable or test hook moves it.
//! Tests use a short expiry (1 s) and wait for the condition.
//!
//! Owns the parsing and bounds of an expiry and the kernel's entry point
//! for setting one; the store holds the setting and does the marking.

use crate::capability::Person;
use std::time::Duration;

/// The shortest expiry a chat may have.
pub const MIN: Duration = Duration::from_secs(1);
/// The longest: a year. An action nobody decided in a year is not one to
/// send.
pub const MAX: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// The default, as [`crate::store::DEFAULT_EXPIRY_MS`] says.
pub fn default() -> Duration {
    Duration::from_millis(crate::store::DEFAULT_EXPIRY_MS as u64)
}

/// Parse an expiry such as `90s`, `45m`, `2h`, `7d` or `1h 30m`, within
/// [`MIN`] and [`MAX`]; the error says what to write instead.
pub fn parse(text: &str) -> anyhow::Result<Duration> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        anyhow::anyhow!(
            "--expire-after {:?} is not a duration ({e}); write it like 90s, 30m, 2h or 7d",
            crate::prompt::as_given(text)
        )
    })?;
    if d < MIN || d > MAX {
        anyhow::bail!(
            "--expire-after {} is out of range: an expiry is between 1s and 365d",
            describe(d)
        );
    }
    Ok(d)
}

/// A duration as people write it (`7days`, `1h 30m`), whole seconds.
pub fn describe(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

impl Person<'_> {
    /// How long actions of `chat` may wait for a decision, for someone who
    /// may see the chat.
    pub async fn expiry(&self, chat: &str) -> anyhow::Result<Duration> {
        let person = self.name;
        let (c, p) = (chat.to_owned(), person.to_owned());
        let ms = self
            .kernel
            .store()
            .run(move |s| {
                s.access(&c, &p)?
                    .require(crate::access::Need::See, &c, &p)?;
                s.expiry(&c)
            })
            .await?;
        Ok(Duration::from_millis(ms.max(0) as u64))
    }

    /// Set `chat`'s expiry as `person`: its owner only (the one rule). A
    /// pending action already older than the new expiry expires at once.
    pub async fn set_expiry(&self, chat: &str, after: Duration) -> anyhow::Result<()> {
        let person = self.name;
        if after < MIN || after > MAX {
            anyhow::bail!("an expiry is between 1s and 365d, not {}", describe(after));
        }
        let ms = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
        let (c, p) = (chat.to_owned(), person.to_owned());
        self.kernel
            .store()
            .run(move |s| s.set_expiry(&c, &p, ms))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_read_as_people_write_them() {
        assert_eq!(parse("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse("7d").unwrap(), Duration::from_secs(7 * 86400));
        assert_eq!(parse(" 1h 30m ").unwrap(), Duration::from_secs(5400));
        assert_eq!(default(), Duration::from_secs(7 * 86400));
        for bad in ["", "soon", "0s", "500ms", "400d", "-1h"] {
            let e = parse(bad).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{e}");
            assert!(e.contains("--expire-after"), "{e}");
        }
    }
}
