//! Hooks (SPEC H1, C5, L1, O3): a gatekeeper's trigger bound to a gadget
//! in a chat, so that a service event (a webhook delivery) or a schedule
//! starts a turn without a person at a terminal.
//!
//! Owns: binding a trigger (`hook add`), enabling and disabling through the
//! one authorization rule (`crate::access`, need `Hooks`), verifying a
//! delivery (the URL token by digest, HMAC-SHA256 of the raw body with the
//! hook's secret, compared in constant time, a replayed body refused), the
//! firing record, and the turn itself, which runs under
//! `Principal::Hook { hook, chat, person }` for the person who enabled it.
//!
//! May not: send anything or decide anything a turn does. A hook's turn is
//! an ordinary turn: its reads pass the kernel's egress checks (so a
//! latched chat makes no outbound call) and its writes are staged and wait
//! for a decision like any other. The HTTP side (the route, the body cap,
//! how many turns run at once) is `crate::web`; the schedule's clock runs
//! in `serve`, which calls [`Kernel::fire_due_schedules`].

use crate::access::Need;
use crate::capability::Person;
use crate::classify::TriggerKind;
use crate::kernel::{Kernel, Turn, check_name, random_hex};
use crate::principal::Principal;
use crate::store::{FiringOutcome, FiringRefusal, Hook, HookKind, NewHook, secret_digest};
use anyhow::{Context as _, bail};
use hmac::{Hmac, Mac as _};
use serde::Serialize;
use sha2::Sha256;

/// The largest delivery body a hook accepts (it becomes the gadget's
/// input, inside the event envelope).
pub const MAX_DELIVERY_BYTES: usize = 64 * 1024;

/// The header a delivery's signature comes in: `sha256=HEX`, the
/// HMAC-SHA256 of the raw body keyed with the hook's secret (its text).
pub const SIGNATURE_HEADER: &str = "x-gatehouse-signature";

/// The shortest and longest schedule period, in seconds.
pub(crate) const MIN_EVERY_SECS: u32 = 1;
/// A year: a longer period is more likely a mistake than a schedule.
pub(crate) const MAX_EVERY_SECS: u32 = 365 * 24 * 60 * 60;

/// What `hook add` made: the hook, and for a webhook its URL path and
/// signing secret, which are shown this once and never again (only the
/// token's digest is stored).
#[derive(Clone, Debug, Serialize)]
pub struct AddedHook {
    /// The hook as stored: disabled until a person who may decide enables it.
    pub hook: Hook,
    /// `/hooks/TOKEN` on `serve`'s address.
    pub path: Option<String>,
    /// The webhook's signing secret (see [`SIGNATURE_HEADER`]); `None` for a
    /// schedule.
    pub secret: Option<String>,
}

/// A hook as a person sees it before enabling it: the prompt (SPEC R1) and
/// what its firings did.
#[derive(Clone, Debug, Serialize)]
pub struct ShownHook {
    /// The hook as stored.
    pub hook: Hook,
    /// The SHA-256 of the component installed under the hook's gadget name
    /// now: what enabling the hook lets its turns run (the prompt shows it;
    /// `None`: the gadget is not installed).
    pub code: Option<String>,
    /// The hook's prompt: what enabling it lets its turns do, and for whom,
    /// through the same sanitiser as an action's prompt.
    pub prompt: String,
    /// Its firings so far, oldest first, with how each ended.
    pub firings: Vec<crate::store::Firing>,
}

/// Why a delivery ran nothing. Each says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeliveryRefusal {
    /// The URL's token matches no hook (or the hook was removed).
    #[error("no hook has this URL; `gatehouse hooks` lists hooks, and `hook add` prints a new URL")]
    NoSuchHook,
    /// The signature header is absent or is not the body's HMAC under the
    /// hook's secret.
    #[error(
        "the delivery's signature is missing or wrong: send X-Gatehouse-Signature: sha256=HEX, the HMAC-SHA256 of the raw body keyed with the hook's secret; nothing ran"
    )]
    BadSignature,
    /// The body is over [`MAX_DELIVERY_BYTES`].
    #[error("the delivery is over {MAX_DELIVERY_BYTES} bytes; nothing ran")]
    TooLarge,
    /// The hook (its id) exists but nobody has enabled it, or it was disabled.
    #[error(
        "hook {0} is disabled; a person who may decide in its chat enables it (`gatehouse hook enable {0}`); nothing ran"
    )]
    Disabled(i64),
    /// The same body reached this hook before: a delivery fires once.
    #[error("this exact delivery was received before; a delivery starts one turn; nothing ran")]
    Replayed,
    /// The hook may no longer run as enabled: the person who enabled it lost
    /// the right to decide (the hook is then disabled), or its gatekeeper no
    /// longer declares the trigger. The refusal is recorded as a firing.
    #[error("hook {hook} ran nothing: {reason}")]
    Refused {
        /// The hook's id.
        hook: i64,
        /// What changed since it was enabled.
        reason: String,
    },
}

/// A firing recorded and ready to run: [`Kernel::run_firing`] runs its turn.
#[derive(Clone, Debug)]
pub struct Firing {
    /// The hook that fired.
    pub hook: Hook,
    /// The firing's id in the hook's firing record.
    pub firing: i64,
    person: String,
    input: String,
    /// The component its turn runs, and no other (the hook's pinned digest).
    code: String,
}

/// How a hook's turn ended.
#[derive(Clone, Debug, Serialize)]
pub struct FiringReport {
    /// The hook's id.
    pub hook: i64,
    /// The firing's id.
    pub firing: i64,
    /// `done` or `failed`.
    pub outcome: FiringOutcome,
}

/// Whether `signature` (`sha256=HEX`) is the HMAC-SHA256 of `body` under
/// `secret`. The comparison is constant-time (`Mac::verify_slice`).
pub fn signature_ok(secret: &str, body: &[u8], signature: Option<&str>) -> bool {
    let Some(hex_sig) = signature.and_then(|s| s.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig.trim()) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&sig).is_ok()
}

/// The signature header's value for `body` under `secret`: what a service
/// sends (the demo tracker does).
pub fn sign(secret: &str, body: &[u8]) -> String {
    // An HMAC takes a key of any length.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret.as_bytes()) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl Kernel {
    /// A webhook delivery to `/hooks/{token}` (SPEC H1): found by the
    /// token's digest, verified (HMAC-SHA256 of the raw `body`), refused
    /// when the hook is disabled or the body was delivered before, and
    /// recorded as a firing. Nothing runs until the caller passes the
    /// answer to [`Kernel::run_firing`].
    pub async fn receive_delivery(
        &self,
        token: &str,
        body: Vec<u8>,
        signature: Option<String>,
    ) -> anyhow::Result<Result<Firing, DeliveryRefusal>> {
        if body.len() > MAX_DELIVERY_BYTES {
            return Ok(Err(DeliveryRefusal::TooLarge));
        }
        let digest = secret_digest(token);
        let found = self
            .store()
            .run(move |s| s.webhook_by_token(&digest))
            .await?;
        let Some((hook, secret)) = found else {
            return Ok(Err(DeliveryRefusal::NoSuchHook));
        };
        if !signature_ok(&secret, &body, signature.as_deref()) {
            return Ok(Err(DeliveryRefusal::BadSignature));
        }
        let event = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) => v,
            Err(_) => serde_json::Value::String(String::from_utf8_lossy(&body).into_owned()),
        };
        let body_digest = hex::encode(<Sha256 as sha2::Digest>::digest(&body));
        self.begin(hook, HookKind::Webhook, event, Some(body_digest))
            .await
    }

    /// Fire every schedule that is due now, one turn each (SPEC H1: a
    /// schedule runs in `serve`). Returns how each ended; a refused one is
    /// recorded with why.
    pub async fn fire_due_schedules(&self) -> anyhow::Result<Vec<FiringReport>> {
        let now = crate::store::now_ms();
        let due = self
            .store()
            .run(move |s| s.claim_due_schedules(now))
            .await?;
        let mut out = Vec::new();
        for hook in due {
            let event = serde_json::json!({ "scheduled_at": now });
            if let Ok(firing) = self.begin(hook, HookKind::Schedule, event, None).await? {
                out.push(self.run_firing(firing).await?);
            }
        }
        Ok(out)
    }

    /// Checks before a firing, then its record: the hook is enabled, the
    /// person who enabled it may still decide in its chat (else the hook
    /// is disabled, and the firing refused), its gatekeeper still declares
    /// the trigger, and its gadget's name still holds the component the
    /// hook was enabled for (else the hook is disabled, and the firing
    /// refused: new code under an old name runs only once a person shown
    /// its digest enables the hook again).
    async fn begin(
        &self,
        hook: Hook,
        cause: HookKind,
        event: serde_json::Value,
        body_digest: Option<String>,
    ) -> anyhow::Result<Result<Firing, DeliveryRefusal>> {
        let id = hook.id;
        let (true, Some(person)) = (hook.enabled, hook.enabled_by.clone()) else {
            return Ok(Err(DeliveryRefusal::Disabled(id)));
        };
        let (h, p) = (hook.clone(), person.clone());
        let problem = self
            .store()
            .run(move |s| {
                if !s.access(&h.chat, &p)?.may_manage_hooks() {
                    return Ok(Some((
                        format!(
                            "{p}, who enabled it, may no longer decide in chat {:?}; it was disabled (a person who may decide there can enable it again)",
                            h.chat
                        ),
                        true,
                    )));
                }
                let declared = s.gatekeeper(&h.gatekeeper)?.is_some_and(|g| {
                    g.manifest
                        .triggers
                        .iter()
                        .any(|t| t.name == h.trigger && matches!(
                            (t.kind, h.kind),
                            (TriggerKind::Webhook, HookKind::Webhook) | (TriggerKind::Schedule { .. }, HookKind::Schedule)
                        ))
                });
                if !declared {
                    return Ok(Some((
                        format!(
                            "gatekeeper {:?} no longer declares the trigger {:?} as it was bound",
                            h.gatekeeper,
                            crate::prompt::as_given(&h.trigger)
                        ),
                        false,
                    )));
                }
                let now = s.gadget(&h.gadget)?.map(|g| g.digest);
                match (&h.gadget_digest, now) {
                    (Some(pinned), Some(now)) if *pinned == now => Ok(None),
                    (_, None) => Ok(Some((
                        format!(
                            "gadget {:?} is no longer installed; the hook was disabled (install it, then a person who may decide there enables the hook again)",
                            h.gadget
                        ),
                        true,
                    ))),
                    (pinned, Some(now)) => Ok(Some((
                        format!(
                            "gadget {:?} was re-installed since the hook was enabled (it was enabled to run sha256 {}; the name now holds sha256 {now}); the new code did not run and the hook was disabled: `gatehouse hook show {}` shows it, and `gatehouse hook enable {}` lets it run",
                            h.gadget,
                            pinned.as_deref().unwrap_or("(none recorded)"),
                            h.id,
                            h.id
                        ),
                        true,
                    ))),
                }
            })
            .await?;
        if let Some((reason, disable)) = problem {
            let (r, p) = (reason.clone(), person.clone());
            self.store()
                .run(move |s| {
                    if disable {
                        s.disable_hook(id)?;
                    }
                    s.refused_firing(id, cause, &p, &r)
                })
                .await?;
            return Ok(Err(DeliveryRefusal::Refused { hook: id, reason }));
        }
        let (p, owner) = (person.clone(), self.owner().to_owned());
        let begun = self
            .store()
            .run(move |s| s.begin_firing(id, cause, &p, body_digest.as_deref(), &owner))
            .await?;
        let firing = match begun {
            Ok(f) => f,
            Err(FiringRefusal::Disabled) => return Ok(Err(DeliveryRefusal::Disabled(id))),
            Err(FiringRefusal::Replayed) => return Ok(Err(DeliveryRefusal::Replayed)),
        };
        let input = serde_json::json!({
            "hook": id,
            "firing": firing,
            "chat": hook.chat,
            "gatekeeper": hook.gatekeeper,
            "trigger": hook.trigger,
            "cause": cause,
            "event": event,
        })
        .to_string();
        // Checked above: the hook's pinned digest is what its name holds.
        let code = hook.gadget_digest.clone().unwrap_or_default();
        Ok(Ok(Firing {
            hook,
            firing,
            person,
            input,
            code,
        }))
    }

    /// Run a recorded firing's turn under "hook N in CHAT" for the person
    /// who enabled it, and record how it ended. A collaborator is
    /// re-verified first, as on every run (SPEC S2). The turn is ordinary:
    /// its reads pass every egress check, its writes are staged and wait.
    pub async fn run_firing(&self, f: Firing) -> anyhow::Result<FiringReport> {
        let (id, firing) = (f.hook.id, f.firing);
        let ran = async {
            self.verify_runner(&f.hook.chat, &f.person).await?;
            let principal = Principal::Hook {
                hook: id,
                chat: f.hook.chat.clone(),
                person: f.person.clone(),
            };
            let mut turn = Turn::new(&f.hook.gadget, &f.hook.chat, principal);
            // Exactly the component the hook was enabled for: were the name
            // re-installed since the check above, nothing runs.
            turn.pinned = Some(f.code.clone());
            self.run_turn(turn, &f.input).await
        }
        .await;
        let (outcome, note) = match ran {
            Ok(report) => match report.output {
                Ok(o) => (FiringOutcome::Done, crate::prompt::excerpt(&o, 2000)),
                Err(e) => (FiringOutcome::Failed, crate::prompt::excerpt(&e, 2000)),
            },
            Err(e) => (
                FiringOutcome::Failed,
                crate::prompt::excerpt(&format!("{e:#}"), 2000),
            ),
        };
        self.store()
            .run(move |s| s.finish_firing(firing, outcome, Some(&note)))
            .await?;
        Ok(FiringReport {
            hook: id,
            firing,
            outcome,
        })
    }
}

impl Person<'_> {
    /// Bind `trigger` of `gatekeeper` to `gadget` in `chat`, as `by` (SPEC
    /// H1). The hook is recorded in the chat's ledger and stays disabled
    /// until a person who may decide there enables it. The gatekeeper must
    /// be introduced into the chat. `every` overrides a schedule's period.
    pub async fn add_hook(
        &self,
        chat: &str,
        gatekeeper: &str,
        trigger: &str,
        gadget: &str,
        every: Option<u32>,
    ) -> anyhow::Result<AddedHook> {
        let by = self.name;
        self.kernel.require(chat, by, Need::Hooks)?;
        check_name(gadget, "gadget")?;
        let (c, g, gd) = (chat.to_owned(), gatekeeper.to_owned(), gadget.to_owned());
        let (record, introduced, installed) = self
            .kernel
            .store()
            .run(move |s| {
                Ok((
                    s.gatekeeper(&g)?,
                    s.introductions(&c)?.iter().any(|i| i.gatekeeper == g),
                    s.gadget(&gd)?,
                ))
            })
            .await?;
        let Some(record) = record else {
            bail!("no gatekeeper named {gatekeeper:?}; `gatehouse gatekeepers` lists them");
        };
        if !introduced {
            bail!(
                "gatekeeper {gatekeeper:?} is not introduced into chat {chat:?}; a hook binds a trigger of a service the chat has (`gatehouse introduce {chat} {gatekeeper} --key KEY`)"
            );
        }
        let Some(installed) = installed else {
            bail!("no gadget named {gadget:?}; install it with `gatehouse install FILE.wasm`");
        };
        let Some(t) = record.manifest.triggers.iter().find(|t| t.name == trigger) else {
            let names: Vec<String> = record
                .manifest
                .triggers
                .iter()
                .map(|t| crate::prompt::as_given(&t.name))
                .collect();
            bail!(
                "gatekeeper {gatekeeper:?} declares no trigger {:?}; it declares: {}",
                crate::prompt::as_given(trigger),
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            );
        };
        let (every_secs, webhook, token) = match t.kind {
            TriggerKind::Webhook => {
                if every.is_some() {
                    bail!(
                        "trigger {trigger:?} is a webhook (the service delivers events); --every is only for schedules"
                    );
                }
                let token = random_hex(32)?;
                let secret = random_hex(32)?;
                (None, Some((secret_digest(&token), secret)), Some(token))
            }
            TriggerKind::Schedule { seconds } => {
                let every = every.unwrap_or(seconds);
                if !(MIN_EVERY_SECS..=MAX_EVERY_SECS).contains(&every) {
                    bail!(
                        "--every {every} is out of range: a schedule runs every {MIN_EVERY_SECS} to {MAX_EVERY_SECS} seconds"
                    );
                }
                (Some(i64::from(every)), None, None)
            }
        };
        let secret = webhook.as_ref().map(|(_, s)| s.clone());
        let new = NewHook {
            chat: chat.to_owned(),
            gatekeeper: gatekeeper.to_owned(),
            trigger: trigger.to_owned(),
            gadget: gadget.to_owned(),
            gadget_digest: installed.digest,
            every_secs,
            webhook,
            by: by.to_owned(),
        };
        let hook = self
            .kernel
            .store()
            .run(move |s| {
                let id = s.add_hook(&new)?;
                s.hook(id)?
                    .context("the hook vanished right after it was added")
            })
            .await?;
        Ok(AddedHook {
            hook,
            path: token.map(|t| format!("/hooks/{t}")),
            secret,
        })
    }

    /// The hooks `person` may see (of one chat, or of every chat they may
    /// see), oldest first.
    pub async fn hooks(&self, chat: Option<&str>) -> anyhow::Result<Vec<Hook>> {
        let person = self.name;
        if let Some(c) = chat {
            self.kernel.require(c, person, Need::See)?;
        }
        let (p, c) = (person.to_owned(), chat.map(str::to_owned));
        self.kernel
            .store()
            .run(move |s| {
                let mut out = Vec::new();
                for h in s.hooks(c.as_deref())? {
                    if s.access(&h.chat, &p)?.may_see() {
                        out.push(h);
                    }
                }
                Ok(out)
            })
            .await
    }

    /// One hook with its prompt and firings, if `person` may see its chat;
    /// `None` also for a hook that does not exist.
    pub async fn hook_shown(&self, id: i64) -> anyhow::Result<Option<ShownHook>> {
        let person = self.name;
        let p = person.to_owned();
        self.kernel
            .store()
            .run(move |s| {
                let Some(hook) = s.hook(id)? else {
                    return Ok(None);
                };
                if !s.access(&hook.chat, &p)?.may_see() {
                    return Ok(None);
                }
                let description = s.gatekeeper(&hook.gatekeeper)?.and_then(|g| {
                    g.manifest
                        .triggers
                        .iter()
                        .find(|t| t.name == hook.trigger)
                        .map(|t| t.description.clone())
                });
                let code = s.gadget(&hook.gadget)?.map(|g| g.digest);
                let prompt =
                    crate::prompt::render_hook(&hook, description.as_deref(), code.as_deref());
                let firings = s.firings(id)?;
                Ok(Some(ShownHook {
                    hook,
                    code,
                    prompt,
                    firings,
                }))
            })
            .await
    }

    /// Enable (or disable) hook `id` as `person`, who must be allowed to
    /// decide in its chat. Enabling makes them the person its turns act
    /// for, and pins the code they run: the component installed under the
    /// hook's gadget name now, which must be `shown` (the digest its
    /// prompt showed them, [`ShownHook::code`]) when given. A hook
    /// `person` may not see is "no such hook".
    pub async fn set_hook_enabled(
        &self,
        id: i64,
        enabled: bool,
        shown: Option<&str>,
    ) -> anyhow::Result<Hook> {
        let person = self.name;
        let (p, shown) = (person.to_owned(), shown.map(str::to_owned));
        match self
            .kernel
            .store()
            .run(move |s| s.set_hook_enabled(id, &p, enabled, shown.as_deref()))
            .await?
        {
            None => bail!("no hook {id} that you may see; `gatehouse hooks` lists them"),
            Some(Err(refusal)) => Err(refusal.into()),
            Some(Ok(h)) => Ok(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_right_signature_passes() {
        let body = br#"{"event":"issueOpened"}"#;
        let good = sign("s3cret", body);
        assert!(signature_ok("s3cret", body, Some(&good)));
        assert!(!signature_ok("other", body, Some(&good)));
        assert!(!signature_ok("s3cret", b"{}", Some(&good)));
        assert!(!signature_ok("s3cret", body, None));
        assert!(!signature_ok("s3cret", body, Some("sha256=zz")));
        assert!(!signature_ok("s3cret", body, Some(&good[7..])));
        assert!(!signature_ok("s3cret", body, Some("sha256=")));
    }
}
