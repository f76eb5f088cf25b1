//! People, their accounts, collaborators, share links and observers, as
//! stored (SPEC S, O3). Every check that must hold against a concurrent
//! writer (the latch against a share, a share against a restricted read)
//! runs inside one writing transaction here (SQLite's IMMEDIATE; on
//! PostgreSQL the chat's row is locked first, see [`lock_chat`]); the
//! decisions about *whether* an observer is admitted are the kernel's
//! (`crate::sharing`). Its statements are written once for both engines
//! (`store::sql`).

use super::sealed;
use super::sql::{Row, Sql, args};
use super::{Store, now_ms};
use crate::access::{Access, Standing};
use crate::seal::{Key, Place, Sealed};
use serde::Serialize;

/// One of a person's accounts at a gatekeeper's service (never its secret).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Account {
    /// The person whose account it is.
    pub user: String,
    /// The gatekeeper instance whose service it is an account at.
    pub gatekeeper: String,
    /// The person's name for it (several accounts per service may coexist).
    pub label: String,
    /// Used when the person chooses none for this gatekeeper.
    pub is_default: bool,
}

impl Account {
    /// How the account is named in the ledger and in refusals: `user/label`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.user, self.label)
    }
}

/// A person a chat is shared with (SPEC S).
#[derive(Clone, Debug, Serialize)]
pub struct Collaborator {
    /// The chat.
    pub chat: String,
    /// The collaborator.
    pub user: String,
    /// Who shared it with them: the owner, or `link from OWNER` when they
    /// came in through a share link.
    pub added_by: String,
    /// When, in ms since the epoch.
    pub added_at: i64,
    /// When they last passed re-verification (SPEC S2); `None`: they see
    /// nothing of the chat until they do (W2).
    pub verified_at: Option<i64>,
    /// The owner granted them the right to decide.
    pub may_decide: bool,
}

/// A collaborator's binding at one gatekeeper of a chat (SPEC S2, S3).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Observer {
    /// The chat.
    pub chat: String,
    /// The collaborator.
    pub user: String,
    /// The gatekeeper instance their account was checked at.
    pub gatekeeper: String,
    /// `user/label`, or `None` when the collaborator has no account there.
    pub account: Option<String>,
    /// Every source id the account may see, if the gatekeeper listed them.
    pub scope: Option<Vec<String>>,
}

/// Why a sharing change was refused; each says what to do.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ShareRefusal {
    /// No chat has this name.
    #[error("no chat named {0:?}")]
    NoChat(String),
    /// The person named is not known here.
    #[error("no person named {0:?}; add them with `gatehouse user add {0}`")]
    NoUser(String),
    /// A locked-down chat gains no collaborators and no links (O3).
    #[error(
        "chat {0:?} is locked down (it read owner-only data): it cannot gain collaborators or share links"
    )]
    Latched(String),
    /// A locked-down chat is opened by its owner only (O3).
    #[error("chat {0:?} is locked down (it read owner-only data): only its owner may open it")]
    LatchedOpen(String),
    /// The chat's owner was named as a collaborator of it.
    #[error("{user:?} owns chat {chat:?}; a chat is not shared with its owner")]
    Owner {
        /// The chat.
        chat: String,
        /// Its owner.
        user: String,
    },
    /// The person opening (or being removed) is not a collaborator and
    /// brings no valid link.
    #[error(
        "{user:?} is not a collaborator of chat {chat:?}; its owner can `gatehouse share {chat} --with {user}`"
    )]
    NotCollaborator {
        /// The chat.
        chat: String,
        /// The person.
        user: String,
    },
    /// The link's token is unknown for this chat, or was revoked.
    #[error("that share link is not valid for chat {0:?} (it may have been revoked)")]
    BadLink(String),
}

/// What happened to an observation handed to `Store::observe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Recorded (and the chat latched if a source was restricted).
    Recorded(i64),
    /// Refused: restricted data in a shared chat (SPEC O3). Nothing written.
    RestrictedInSharedChat,
}

fn account_from(r: &Row) -> anyhow::Result<Account> {
    Ok(Account {
        user: r.get(0)?,
        gatekeeper: r.get(1)?,
        label: r.get(2)?,
        is_default: r.get(3)?,
    })
}

fn observer_from(r: &Row) -> anyhow::Result<Observer> {
    let scope: Option<String> = r.get(4)?;
    Ok(Observer {
        chat: r.get(0)?,
        user: r.get(1)?,
        gatekeeper: r.get(2)?,
        account: r.get(3)?,
        scope: scope.and_then(|s| serde_json::from_str(&s).ok()),
    })
}

/// The account `label` of `user` at `gatekeeper` (the default if `None`)
/// and its credential. (`label = NULL` is NULL, so COALESCE falls back to
/// the default: a test of `?3 IS NULL` would leave PostgreSQL unable to
/// tell the parameter's type.)
pub(crate) fn account_credential_in(
    db: &dyn Sql,
    user: &str,
    gatekeeper: &str,
    label: Option<&str>,
) -> anyhow::Result<Option<(Account, Sealed)>> {
    db.row(
        "SELECT a.\"user\", a.gatekeeper, a.label, a.is_default, s.value, s.name
         FROM accounts a JOIN secrets s ON s.name = a.secret
         WHERE a.\"user\" = ?1 AND a.gatekeeper = ?2
           AND COALESCE(a.label = ?3, a.is_default = 1)",
        args![user, gatekeeper, label],
    )?
    .map(|r| {
        let name: String = r.get(5)?;
        Ok((
            account_from(&r)?,
            Sealed::kept(sealed::SECRETS, &name, r.get(4)?),
        ))
    })
    .transpose()
}

/// On PostgreSQL, hold `chat`'s row until the transaction ends. The share,
/// the link, the open and the latch's check ([`is_shared`]) each take it
/// before they read the chat, so of two concurrent ones the second waits
/// and then reads what the first committed (READ COMMITTED: each statement
/// sees what was committed before it began). SQLite's writing
/// transactions (IMMEDIATE) already exclude each other.
pub(super) fn lock_chat(db: &dyn Sql, chat: &str) -> anyhow::Result<()> {
    db.hold("SELECT 1 FROM chats WHERE name = ?1", args![chat])
}

/// Whether `chat` has collaborators or live share links (SPEC O3's
/// "shared"). Called in the transaction that would latch the chat, so it
/// holds the chat's row first ([`lock_chat`]): a concurrent share either
/// sees the latch or makes the restricted read refused.
pub(super) fn is_shared(db: &dyn Sql, chat: &str) -> anyhow::Result<bool> {
    lock_chat(db, chat)?;
    Ok(db
        .row(
            "SELECT 1 FROM collaborators WHERE chat = ?1 LIMIT 1",
            args![chat],
        )?
        .is_some()
        || db
            .row(
                "SELECT 1 FROM share_links WHERE chat = ?1 LIMIT 1",
                args![chat],
            )?
            .is_some())
}

/// What the one authorization rule (`crate::access`) is applied to: a
/// person's standing in a chat and the chat's latch. A chat that does not
/// exist gives [`Access::none`], the same as a chat the person is a
/// stranger to.
pub(crate) fn access(db: &dyn Sql, chat: &str, person: &str) -> anyhow::Result<Access> {
    let Some((owner, latched)) = chat_state(db, chat)? else {
        return Ok(Access::none());
    };
    if owner == person {
        return Ok(Access::of(Standing::Owner, latched));
    }
    let row: Option<(Option<i64>, bool)> = db
        .row(
            "SELECT verified_at, may_decide FROM collaborators WHERE chat = ?1 AND \"user\" = ?2",
            args![chat, person],
        )?
        .map(|r| Ok::<_, anyhow::Error>((r.get(0)?, r.get(1)?)))
        .transpose()?;
    let standing = match row {
        Some((verified, may_decide)) => Standing::Collaborator {
            verified: verified.is_some(),
            may_decide,
        },
        None => {
            let approver = db
                .row(
                    "SELECT count(*) FROM approvers WHERE chat = ?1 AND person = ?2",
                    args![chat, person],
                )?
                .map_or(Ok(0), |r| r.get::<i64>(0))?
                > 0;
            if approver {
                Standing::Approver
            } else {
                Standing::Stranger
            }
        }
    };
    Ok(Access::of(standing, latched))
}

pub(super) fn chat_state(db: &dyn Sql, chat: &str) -> anyhow::Result<Option<(String, bool)>> {
    db.row(
        "SELECT owner, latched FROM chats WHERE name = ?1",
        args![chat],
    )?
    .map(|r| Ok((r.get(0)?, r.get(1)?)))
    .transpose()
}

/// The observers of `chat`.
pub(crate) fn observers_in(db: &dyn Sql, chat: &str) -> anyhow::Result<Vec<Observer>> {
    db.rows(
        "SELECT chat, \"user\", gatekeeper, account, scope FROM observers
         WHERE chat = ?1 ORDER BY \"user\", gatekeeper",
        args![chat],
    )?
    .iter()
    .map(observer_from)
    .collect()
}

fn user_exists_in(db: &dyn Sql, user: &str) -> anyhow::Result<bool> {
    Ok(db
        .row("SELECT 1 FROM users WHERE name = ?1", args![user])?
        .is_some())
}

impl Store {
    /// Add a person; adding one who exists is not an error.
    pub fn add_user(&self, name: &str) -> anyhow::Result<bool> {
        self.with(|db| add_user_in(db, name, now_ms()))
    }

    pub fn user_exists(&self, name: &str) -> anyhow::Result<bool> {
        self.with(|db| user_exists_in(db, name))
    }

    pub fn users(&self) -> anyhow::Result<Vec<String>> {
        self.with(users_in)
    }

    /// Connect (or replace) one of `user`'s accounts at `gatekeeper`, its
    /// credential stored in the secret store. The first account a person
    /// connects at a gatekeeper, or one connected with `make_default`,
    /// becomes their default there.
    pub fn connect_account(
        &self,
        user: &str,
        gatekeeper: &str,
        label: &str,
        credential: &str,
        make_default: bool,
    ) -> anyhow::Result<Account> {
        self.write(|db| {
            connect_account_in(
                db,
                &self.key,
                user,
                gatekeeper,
                label,
                credential,
                make_default,
                now_ms(),
            )
        })
    }

    /// A person's accounts (all people's if `None`), by gatekeeper.
    pub fn accounts(&self, user: Option<&str>) -> anyhow::Result<Vec<Account>> {
        self.with(|db| accounts_in(db, user))
    }

    /// The account `label` of `user` at `gatekeeper` (the default if `None`)
    /// and its credential.
    pub fn account_credential(
        &self,
        user: &str,
        gatekeeper: &str,
        label: Option<&str>,
    ) -> anyhow::Result<Option<(Account, String)>> {
        self.with(|db| account_credential_in(db, user, gatekeeper, label))?
            .map(|(a, secret)| Ok((a, secret.open(&self.key)?.to_string())))
            .transpose()
    }

    /// Share `chat` with `user`, unless the chat is latched (SPEC O3). The
    /// collaborator sees nothing until their first successful open (W2).
    /// Sharing again with someone already a collaborator only changes
    /// whether they may decide.
    pub fn share(
        &self,
        chat: &str,
        user: &str,
        by: &str,
        may_decide: bool,
    ) -> anyhow::Result<Result<bool, ShareRefusal>> {
        self.write(|db| share_in(db, chat, user, by, may_decide, now_ms()))
    }

    /// Create a share link (its token's digest), unless the chat is latched.
    pub fn create_link(
        &self,
        chat: &str,
        digest: &str,
        by: &str,
    ) -> anyhow::Result<Result<(), ShareRefusal>> {
        self.write(|db| create_link_in(db, chat, digest, by, now_ms()))
    }

    /// Revoke every share link of `chat`; returns how many there were.
    pub fn revoke_links(&self, chat: &str) -> anyhow::Result<usize> {
        self.with(|db| revoke_links_in(db, chat))
    }

    /// Remove a collaborator and, with them, their observers (SPEC S5).
    pub fn unshare(&self, chat: &str, user: &str) -> anyhow::Result<bool> {
        self.write(|db| unshare_in(db, chat, user))
    }

    pub fn collaborators(&self, chat: &str) -> anyhow::Result<Vec<Collaborator>> {
        self.with(|db| collaborators_in(db, chat))
    }

    /// Whether the share link with this digest opens `chat`.
    pub fn link_opens(&self, chat: &str, digest: &str) -> anyhow::Result<bool> {
        self.with(|db| link_opens_in(db, chat, digest))
    }

    /// Name `person` an approver of the workflow run whose chat is `chat`.
    pub fn add_approver(&self, chat: &str, person: &str, by: &str) -> anyhow::Result<()> {
        self.write(|db| add_approver_in(db, chat, person, by, now_ms()))
    }

    /// What `person` may do in `chat` (SPEC W1), by the one rule.
    pub fn access(&self, chat: &str, person: &str) -> anyhow::Result<Access> {
        self.with(|db| access(db, chat, person))
    }

    /// Whether `user` is a collaborator of `chat` (verified or not).
    pub fn is_collaborator(&self, chat: &str, user: &str) -> anyhow::Result<bool> {
        self.with(|db| is_collaborator_in(db, chat, user))
    }

    /// A re-verification of `user` failed (SPEC S2, W2): they see nothing
    /// of `chat` until an open succeeds again. Their observers go too.
    pub fn unverify(&self, chat: &str, user: &str) -> anyhow::Result<()> {
        self.write(|db| unverify_in(db, chat, user))
    }

    pub fn observers(&self, chat: &str) -> anyhow::Result<Vec<Observer>> {
        self.with(|db| observers_in(db, chat))
    }

    /// The sources `chat` has observed (SPEC S1), per gatekeeper: the JSON
    /// arrays of every observation, oldest first.
    pub fn observed_sources(&self, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
        self.with(|db| observed_sources_in(db, chat))
    }

    /// Admit `user` to `chat` with these observers, replacing any they had
    /// (SPEC S2): all in one transaction, so a refused open writes nothing.
    /// A share link (its digest) makes the opener a collaborator.
    pub fn admit(
        &self,
        chat: &str,
        user: &str,
        link: Option<&str>,
        observers: &[Observer],
    ) -> anyhow::Result<Result<(), ShareRefusal>> {
        self.write(|db| admit_in(db, chat, user, link, observers, now_ms()))
    }
}

// The statements, written once for both engines (`store::sql`).

fn add_user_in(db: &dyn Sql, name: &str, now: i64) -> anyhow::Result<bool> {
    let n = db.exec(
        "INSERT INTO users (name, created_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
        args![name, now],
    )?;
    Ok(n == 1)
}

fn users_in(db: &dyn Sql) -> anyhow::Result<Vec<String>> {
    db.rows("SELECT name FROM users ORDER BY name", args![])?
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// [`Store::connect_account`] in the caller's writing transaction. On
/// PostgreSQL the person's row is held first, so two accounts connected at
/// once cannot both find no default and both become it. The credential is
/// sealed with `key` for its row as it is written.
#[allow(clippy::too_many_arguments)]
fn connect_account_in(
    db: &dyn Sql,
    key: &Key,
    user: &str,
    gatekeeper: &str,
    label: &str,
    credential: &str,
    make_default: bool,
    now: i64,
) -> anyhow::Result<Account> {
    let secret = format!("account/{user}/{gatekeeper}/{label}");
    db.hold("SELECT 1 FROM users WHERE name = ?1", args![user])?;
    sealed::check_key_in(db, key)?;
    db.exec(
        "INSERT INTO secrets (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        args![
            secret,
            key.seal_text(Place::new(sealed::SECRETS, &secret), credential)?
        ],
    )?;
    let has_default = db
        .row(
            "SELECT 1 FROM accounts WHERE \"user\" = ?1 AND gatekeeper = ?2
               AND is_default = 1 AND label <> ?3",
            args![user, gatekeeper, label],
        )?
        .is_some();
    let default = make_default || !has_default;
    if default {
        db.exec(
            "UPDATE accounts SET is_default = 0 WHERE \"user\" = ?1 AND gatekeeper = ?2",
            args![user, gatekeeper],
        )?;
    }
    db.exec(
        "INSERT INTO accounts (\"user\", gatekeeper, label, secret, is_default, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (\"user\", gatekeeper, label) DO UPDATE SET secret = excluded.secret,
           is_default = excluded.is_default",
        args![user, gatekeeper, label, secret, default, now],
    )?;
    Ok(Account {
        user: user.to_owned(),
        gatekeeper: gatekeeper.to_owned(),
        label: label.to_owned(),
        is_default: default,
    })
}

/// Accounts, never their credentials. Two statements rather than a test
/// of `?1 IS NULL`, whose type PostgreSQL could not tell.
fn accounts_in(db: &dyn Sql, user: Option<&str>) -> anyhow::Result<Vec<Account>> {
    let rows = match user {
        Some(user) => db.rows(
            "SELECT \"user\", gatekeeper, label, is_default FROM accounts
             WHERE \"user\" = ?1 ORDER BY \"user\", gatekeeper, is_default DESC, label",
            args![user],
        )?,
        None => db.rows(
            "SELECT \"user\", gatekeeper, label, is_default FROM accounts
             ORDER BY \"user\", gatekeeper, is_default DESC, label",
            args![],
        )?,
    };
    rows.iter().map(account_from).collect()
}

/// [`Store::share`] in the caller's writing transaction, the chat's row
/// held first ([`lock_chat`]) so that the latch it checks stays as read.
fn share_in(
    db: &dyn Sql,
    chat: &str,
    user: &str,
    by: &str,
    may_decide: bool,
    now: i64,
) -> anyhow::Result<Result<bool, ShareRefusal>> {
    lock_chat(db, chat)?;
    let Some((owner, latched)) = chat_state(db, chat)? else {
        return Ok(Err(ShareRefusal::NoChat(chat.to_owned())));
    };
    if !user_exists_in(db, user)? {
        return Ok(Err(ShareRefusal::NoUser(user.to_owned())));
    }
    if owner == user {
        return Ok(Err(ShareRefusal::Owner {
            chat: chat.to_owned(),
            user: user.to_owned(),
        }));
    }
    if latched {
        return Ok(Err(ShareRefusal::Latched(chat.to_owned())));
    }
    let existed = is_collaborator_in(db, chat, user)?;
    db.exec(
        "INSERT INTO collaborators (chat, \"user\", added_by, added_at, may_decide)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (chat, \"user\") DO UPDATE SET may_decide = excluded.may_decide",
        args![chat, user, by, now, may_decide],
    )?;
    Ok(Ok(!existed))
}

/// [`Store::create_link`] in the caller's writing transaction, the chat's
/// row held first, as for a share.
fn create_link_in(
    db: &dyn Sql,
    chat: &str,
    digest: &str,
    by: &str,
    now: i64,
) -> anyhow::Result<Result<(), ShareRefusal>> {
    lock_chat(db, chat)?;
    let Some((_, latched)) = chat_state(db, chat)? else {
        return Ok(Err(ShareRefusal::NoChat(chat.to_owned())));
    };
    if latched {
        return Ok(Err(ShareRefusal::Latched(chat.to_owned())));
    }
    db.exec(
        "INSERT INTO share_links (digest, chat, created_by, created_at) VALUES (?1, ?2, ?3, ?4)",
        args![digest, chat, by, now],
    )?;
    Ok(Ok(()))
}

fn revoke_links_in(db: &dyn Sql, chat: &str) -> anyhow::Result<usize> {
    Ok(usize::try_from(db.exec(
        "DELETE FROM share_links WHERE chat = ?1",
        args![chat],
    )?)?)
}

/// Remove a collaborator; the schema's cascade removes their observers
/// with them (on both engines).
fn unshare_in(db: &dyn Sql, chat: &str, user: &str) -> anyhow::Result<bool> {
    let n = db.exec(
        "DELETE FROM collaborators WHERE chat = ?1 AND \"user\" = ?2",
        args![chat, user],
    )?;
    Ok(n == 1)
}

fn collaborators_in(db: &dyn Sql, chat: &str) -> anyhow::Result<Vec<Collaborator>> {
    db.rows(
        "SELECT chat, \"user\", added_by, added_at, verified_at, may_decide FROM collaborators
         WHERE chat = ?1 ORDER BY added_at, \"user\"",
        args![chat],
    )?
    .iter()
    .map(|r| {
        Ok(Collaborator {
            chat: r.get(0)?,
            user: r.get(1)?,
            added_by: r.get(2)?,
            added_at: r.get(3)?,
            verified_at: r.get(4)?,
            may_decide: r.get(5)?,
        })
    })
    .collect()
}

fn link_opens_in(db: &dyn Sql, chat: &str, digest: &str) -> anyhow::Result<bool> {
    Ok(db
        .row(
            "SELECT 1 FROM share_links WHERE digest = ?1 AND chat = ?2",
            args![digest, chat],
        )?
        .is_some())
}

fn add_approver_in(
    db: &dyn Sql,
    chat: &str,
    person: &str,
    by: &str,
    now: i64,
) -> anyhow::Result<()> {
    if !user_exists_in(db, person)? {
        anyhow::bail!(ShareRefusal::NoUser(person.to_owned()));
    }
    db.exec(
        "INSERT INTO approvers (chat, person, added_by, added_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (chat, person) DO NOTHING",
        args![chat, person, by, now],
    )?;
    Ok(())
}

fn is_collaborator_in(db: &dyn Sql, chat: &str, user: &str) -> anyhow::Result<bool> {
    Ok(db
        .row(
            "SELECT 1 FROM collaborators WHERE chat = ?1 AND \"user\" = ?2",
            args![chat, user],
        )?
        .is_some())
}

fn unverify_in(db: &dyn Sql, chat: &str, user: &str) -> anyhow::Result<()> {
    db.exec(
        "UPDATE collaborators SET verified_at = NULL WHERE chat = ?1 AND \"user\" = ?2",
        args![chat, user],
    )?;
    db.exec(
        "DELETE FROM observers WHERE chat = ?1 AND \"user\" = ?2",
        args![chat, user],
    )?;
    Ok(())
}

fn observed_sources_in(db: &dyn Sql, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
    db.rows(
        "SELECT gatekeeper, sources FROM ledger
         WHERE chat = ?1 AND kind = 'observation' AND gatekeeper IS NOT NULL
           AND sources IS NOT NULL ORDER BY id",
        args![chat],
    )?
    .iter()
    .map(|r| Ok((r.get(0)?, r.get(1)?)))
    .collect()
}

/// [`Store::admit`] in the caller's writing transaction, the chat's row
/// held first, as for a share. Every refusal comes before anything is
/// written.
fn admit_in(
    db: &dyn Sql,
    chat: &str,
    user: &str,
    link: Option<&str>,
    observers: &[Observer],
    now: i64,
) -> anyhow::Result<Result<(), ShareRefusal>> {
    lock_chat(db, chat)?;
    let Some((owner, latched)) = chat_state(db, chat)? else {
        return Ok(Err(ShareRefusal::NoChat(chat.to_owned())));
    };
    if owner == user {
        return Ok(Ok(()));
    }
    if latched {
        return Ok(Err(ShareRefusal::LatchedOpen(chat.to_owned())));
    }
    if let Some(digest) = link {
        let by: Option<String> = db
            .row(
                "SELECT created_by FROM share_links WHERE digest = ?1 AND chat = ?2",
                args![digest, chat],
            )?
            .map(|r| r.get(0))
            .transpose()?;
        let Some(by) = by else {
            return Ok(Err(ShareRefusal::BadLink(chat.to_owned())));
        };
        if !user_exists_in(db, user)? {
            return Ok(Err(ShareRefusal::NoUser(user.to_owned())));
        }
        db.exec(
            "INSERT INTO collaborators (chat, \"user\", added_by, added_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (chat, \"user\") DO NOTHING",
            args![chat, user, format!("link from {by}"), now],
        )?;
    }
    if !is_collaborator_in(db, chat, user)? {
        return Ok(Err(ShareRefusal::NotCollaborator {
            chat: chat.to_owned(),
            user: user.to_owned(),
        }));
    }
    db.exec(
        "DELETE FROM observers WHERE chat = ?1 AND \"user\" = ?2",
        args![chat, user],
    )?;
    db.exec(
        "UPDATE collaborators SET verified_at = ?3 WHERE chat = ?1 AND \"user\" = ?2",
        args![chat, user, now],
    )?;
    for o in observers {
        let scope = o.scope.as_ref().map(serde_json::to_string).transpose()?;
        db.exec(
            "INSERT INTO observers (chat, \"user\", gatekeeper, account, scope, added_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            args![chat, user, o.gatekeeper, o.account, scope, now],
        )?;
    }
    Ok(Ok(()))
}

/// Sharing as stored, written once and run on both engines (an SQLite
/// file and a real PostgreSQL): a share, an open, an unshare and the latch
/// change who may see and decide through the one rule (`access`); a
/// collaborator's accounts and observers are theirs; no listing carries a
/// credential; and a share racing the latch never leaves a locked-down
/// chat shared.
#[cfg(test)]
mod on_both_engines {
    use super::*;
    use crate::access::{Need, Refusal};
    use crate::store::suite::{Backend, runtime};
    use std::time::Duration;

    /// People `ann`, `bob` and `cy`; gatekeeper `g`; chats `c` and `d` of
    /// `ann`.
    fn people(db: &dyn Sql) -> anyhow::Result<()> {
        for user in ["ann", "bob", "cy"] {
            assert!(add_user_in(db, user, 0)?);
        }
        assert!(!add_user_in(db, "ann", 1)?, "added once");
        db.exec(
            "INSERT INTO gatekeepers (name, digest, trust, hosts, secret, settings, manifest, added_at)
             VALUES ('g', ?1, 'byo', '[]', NULL, '{}', '{\"tools\":[]}', 0)",
            args!["0".repeat(64)],
        )?;
        for chat in ["c", "d"] {
            db.exec(
                "INSERT INTO chats (name, owner, created_at) VALUES (?1, 'ann', 0)",
                args![chat],
            )?;
        }
        Ok(())
    }

    fn observer(user: &str, scope: Option<Vec<String>>) -> Observer {
        Observer {
            chat: "c".into(),
            user: user.into(),
            gatekeeper: "g".into(),
            account: Some(format!("{user}/work")),
            scope,
        }
    }

    #[test]
    fn sharing_opening_and_unsharing_change_who_may_see_and_decide() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(people).await.expect("the fixture");
                let of = |who: &'static str| {
                    let b = b.clone();
                    async move { b.run(move |db| access(db, "c", who)).await.expect("access") }
                };
                assert_eq!(
                    b.run(users_in).await.expect("users"),
                    ["ann", "bob", "cy"],
                    "{e}"
                );

                // Shared: bob sees nothing until he opens (W2).
                let shared = b.run(|db| share_in(db, "c", "bob", "ann", false, 1)).await;
                assert_eq!(shared.expect("share"), Ok(true), "{e}");
                assert!(
                    b.run(|db| is_collaborator_in(db, "c", "bob"))
                        .await
                        .expect("read"),
                    "{e}"
                );
                assert!(!of("bob").await.may_see(), "{e}");
                assert_eq!(
                    of("bob").await.require(Need::See, "c", "bob"),
                    Err(Refusal::NoSuchChat("c".into())),
                    "{e}"
                );
                let scope = Some(vec!["s1".to_owned(), "s2".to_owned()]);
                let seen = vec![observer("bob", scope.clone())];
                let opened = b
                    .run(move |db| admit_in(db, "c", "bob", None, &seen, 2))
                    .await;
                assert_eq!(opened.expect("open"), Ok(()), "{e}");
                assert!(of("bob").await.may_see(), "{e}");
                assert!(!of("bob").await.may_decide(), "{e}");
                let observers = b.run(|db| observers_in(db, "c")).await.expect("read");
                assert_eq!(observers, [observer("bob", scope.clone())], "{e}");

                // Shared again: only whether he may decide changes.
                let again = b.run(|db| share_in(db, "c", "bob", "ann", true, 3)).await;
                assert_eq!(again.expect("share"), Ok(false), "{e}");
                assert!(of("bob").await.may_decide(), "{e}");
                assert_eq!(
                    of("bob").await.require(Need::Share, "c", "bob"),
                    Err(Refusal::OwnerOnly {
                        chat: "c".into(),
                        person: "bob".into()
                    }),
                    "{e}: sharing stays the owner's"
                );
                let collaborators = b.run(|db| collaborators_in(db, "c")).await.expect("read");
                let listed: Vec<_> = collaborators
                    .iter()
                    .map(|c| {
                        (
                            c.user.as_str(),
                            c.added_by.as_str(),
                            c.added_at,
                            c.verified_at,
                            c.may_decide,
                        )
                    })
                    .collect();
                assert_eq!(listed, [("bob", "ann", 1, Some(2), true)], "{e}");

                // A failed re-verification takes his sight and observers.
                b.run(|db| unverify_in(db, "c", "bob"))
                    .await
                    .expect("unverified");
                assert!(!of("bob").await.may_see(), "{e}");
                assert!(!of("bob").await.may_decide(), "{e}");
                assert!(
                    b.run(|db| observers_in(db, "c"))
                        .await
                        .expect("read")
                        .is_empty(),
                    "{e}"
                );
                let seen = vec![observer("bob", None)];
                let reopened = b
                    .run(move |db| admit_in(db, "c", "bob", None, &seen, 4))
                    .await;
                assert_eq!(reopened.expect("open"), Ok(()), "{e}");

                // Unshared: a stranger again, his observers gone with him.
                assert!(
                    b.run(|db| unshare_in(db, "c", "bob"))
                        .await
                        .expect("unshare"),
                    "{e}"
                );
                assert_eq!(
                    of("bob").await.require(Need::See, "c", "bob"),
                    Err(Refusal::NoSuchChat("c".into())),
                    "{e}"
                );
                assert!(
                    b.run(|db| observers_in(db, "c"))
                        .await
                        .expect("read")
                        .is_empty(),
                    "{e}: an unshared collaborator keeps no observer"
                );
                assert!(
                    !b.run(|db| unshare_in(db, "c", "bob"))
                        .await
                        .expect("unshare"),
                    "{e}: once"
                );
                let refused = b.run(|db| admit_in(db, "c", "bob", None, &[], 5)).await;
                assert_eq!(
                    refused.expect("open"),
                    Err(ShareRefusal::NotCollaborator {
                        chat: "c".into(),
                        user: "bob".into()
                    }),
                    "{e}"
                );

                // Refusals, each before anything is written.
                for (chat, user, refusal) in [
                    ("nowhere", "bob", ShareRefusal::NoChat("nowhere".into())),
                    ("c", "zed", ShareRefusal::NoUser("zed".into())),
                    (
                        "c",
                        "ann",
                        ShareRefusal::Owner {
                            chat: "c".into(),
                            user: "ann".into(),
                        },
                    ),
                ] {
                    let got = b
                        .run(move |db| share_in(db, chat, user, "ann", false, 6))
                        .await;
                    assert_eq!(got.expect("share"), Err(refusal), "{e}");
                }
                let zed = b.run(|db| add_approver_in(db, "d", "zed", "ann", 6)).await;
                assert_eq!(
                    zed.expect_err("no such person").to_string(),
                    ShareRefusal::NoUser("zed".into()).to_string(),
                    "{e}"
                );

                // A link makes its opener a collaborator, until revoked.
                let (link, other) = ("1".repeat(64), "2".repeat(64));
                let l = link.clone();
                let created = b.run(move |db| create_link_in(db, "c", &l, "ann", 7)).await;
                assert_eq!(created.expect("link"), Ok(()), "{e}");
                let (l, o) = (link.clone(), other.clone());
                let opens = b
                    .run(move |db| Ok((link_opens_in(db, "c", &l)?, link_opens_in(db, "c", &o)?)))
                    .await;
                assert_eq!(opens.expect("read"), (true, false), "{e}");
                let o = other.clone();
                let bad = b
                    .run(move |db| admit_in(db, "c", "cy", Some(&o), &[], 8))
                    .await;
                assert_eq!(
                    bad.expect("open"),
                    Err(ShareRefusal::BadLink("c".into())),
                    "{e}"
                );
                let l = link.clone();
                let by_link = b
                    .run(move |db| admit_in(db, "c", "cy", Some(&l), &[], 8))
                    .await;
                assert_eq!(by_link.expect("open"), Ok(()), "{e}");
                let collaborators = b.run(|db| collaborators_in(db, "c")).await.expect("read");
                let listed: Vec<_> = collaborators
                    .iter()
                    .map(|c| {
                        (
                            c.user.as_str(),
                            c.added_by.as_str(),
                            c.verified_at,
                            c.may_decide,
                        )
                    })
                    .collect();
                assert_eq!(listed, [("cy", "link from ann", Some(8), false)], "{e}");
                assert!(of("cy").await.may_see(), "{e}");
                assert_eq!(
                    b.run(|db| revoke_links_in(db, "c")).await.expect("revoked"),
                    1,
                    "{e}"
                );
                let l = link.clone();
                assert!(
                    !b.run(move |db| link_opens_in(db, "c", &l))
                        .await
                        .expect("read"),
                    "{e}"
                );

                // Locked down (O3): nobody joins, only the owner opens.
                b.run(|db| db.exec("UPDATE chats SET latched = 1 WHERE name = 'c'", args![]))
                    .await
                    .expect("latched");
                let share = b.run(|db| share_in(db, "c", "bob", "ann", false, 9)).await;
                assert_eq!(
                    share.expect("share"),
                    Err(ShareRefusal::Latched("c".into())),
                    "{e}"
                );
                let l = link.clone();
                let link = b.run(move |db| create_link_in(db, "c", &l, "ann", 9)).await;
                assert_eq!(
                    link.expect("link"),
                    Err(ShareRefusal::Latched("c".into())),
                    "{e}"
                );
                let open = b.run(|db| admit_in(db, "c", "cy", None, &[], 9)).await;
                assert_eq!(
                    open.expect("open"),
                    Err(ShareRefusal::LatchedOpen("c".into())),
                    "{e}"
                );
                let owner = b.run(|db| admit_in(db, "c", "ann", None, &[], 9)).await;
                assert_eq!(owner.expect("open"), Ok(()), "{e}");
                assert!(!of("cy").await.may_see(), "{e}");
                assert!(of("ann").await.may_decide(), "{e}");

                // An approver decides a run's requests and sees nothing else.
                b.run(|db| add_approver_in(db, "d", "bob", "ann", 10))
                    .await
                    .expect("approver");
                let approver = b.run(|db| access(db, "d", "bob")).await.expect("access");
                assert!(approver.may_decide_requests(), "{e}");
                assert!(!approver.may_see(), "{e}");
            }
        });
    }

    #[test]
    fn accounts_keep_one_default_and_no_listing_carries_a_credential() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(people).await.expect("the fixture");
                let connect = |user: &'static str, label: String, default: bool| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| {
                            let credential = format!("credential-of-{user}-{label}");
                            connect_account_in(
                                db,
                                &crate::seal::test_key(),
                                user,
                                "g",
                                &label,
                                &credential,
                                default,
                                1,
                            )
                        })
                        .await
                        .expect("connected")
                    }
                };
                assert!(
                    connect("bob", "work".into(), false).await.is_default,
                    "{e}: the first"
                );
                assert!(
                    !connect("bob", "home".into(), false).await.is_default,
                    "{e}"
                );
                let chosen = |label: Option<&'static str>| {
                    let b = b.clone();
                    async move {
                        b.run(move |db| account_credential_in(db, "bob", "g", label))
                            .await
                            .expect("read")
                            .map(|(a, credential)| {
                                let key = crate::seal::test_key();
                                let opened = credential.open(&key).expect("opens");
                                (a.label, opened.to_string())
                            })
                    }
                };
                assert_eq!(
                    chosen(None).await,
                    Some(("work".into(), "credential-of-bob-work".into())),
                    "{e}"
                );
                assert_eq!(
                    chosen(Some("home")).await,
                    Some(("home".into(), "credential-of-bob-home".into())),
                    "{e}"
                );
                assert_eq!(chosen(Some("none")).await, None, "{e}");
                assert!(connect("bob", "home".into(), true).await.is_default, "{e}");
                assert_eq!(chosen(None).await.map(|c| c.0), Some("home".into()), "{e}");
                connect("ann", "main".into(), false).await;

                let mine = b
                    .run(|db| accounts_in(db, Some("bob")))
                    .await
                    .expect("read");
                let listed: Vec<_> = mine.iter().map(|a| (a.id(), a.is_default)).collect();
                assert_eq!(
                    listed,
                    [
                        ("bob/home".to_owned(), true),
                        ("bob/work".to_owned(), false)
                    ],
                    "{e}: the default first"
                );
                let all = b.run(|db| accounts_in(db, None)).await.expect("read");
                let ids: Vec<_> = all.iter().map(Account::id).collect();
                assert_eq!(ids, ["ann/main", "bob/home", "bob/work"], "{e}");
                let shown = serde_json::to_string(&all).expect("json");
                assert!(!shown.contains("credential-of"), "{e}: {shown}");

                // Connected at once, each holding its transaction open a
                // while: one of them becomes the default.
                let racers: Vec<_> = (0..4)
                    .map(|n| {
                        let b = b.clone();
                        tokio::spawn(async move {
                            b.run(move |db| {
                                let label = format!("l{n}");
                                let a = connect_account_in(
                                    db,
                                    &crate::seal::test_key(),
                                    "cy",
                                    "g",
                                    &label,
                                    "c",
                                    false,
                                    1,
                                )?;
                                std::thread::sleep(Duration::from_millis(200));
                                Ok(a)
                            })
                            .await
                        })
                    })
                    .collect();
                let mut defaults = 0;
                for r in racers {
                    let a = r.await.expect("joined").expect("connected");
                    defaults += usize::from(a.is_default);
                }
                let stored = b.run(|db| accounts_in(db, Some("cy"))).await.expect("read");
                let stored = stored.iter().filter(|a| a.is_default).count();
                assert_eq!((defaults, stored), (1, 1), "{e}: one default");
            }
        });
    }

    /// The latch's check (`is_shared`, then the latch in the same
    /// transaction) and a share, at once, in either order: a locked-down
    /// chat never ends shared (SPEC O3). Each holds its transaction open a
    /// while so the other runs meanwhile.
    #[test]
    fn a_share_and_the_latch_at_once_never_leave_a_locked_down_chat_shared() {
        runtime().block_on(async {
            for b in Backend::both().await {
                let e = b.name();
                b.run(people).await.expect("the fixture");
                for (chat, latch_first) in [("c", true), ("d", false)] {
                    let hold = |first: bool| Duration::from_millis(if first { 400 } else { 0 });
                    let latcher = {
                        let b = b.clone();
                        async move {
                            b.run(move |db| {
                                let shared = is_shared(db, chat)?;
                                std::thread::sleep(hold(latch_first));
                                if !shared {
                                    db.exec(
                                        "UPDATE chats SET latched = 1 WHERE name = ?1",
                                        args![chat],
                                    )?;
                                }
                                Ok(!shared)
                            })
                            .await
                            .expect("the latch")
                        }
                    };
                    let sharer = {
                        let b = b.clone();
                        async move {
                            b.run(move |db| {
                                let shared = share_in(db, chat, "bob", "ann", false, 1)?;
                                std::thread::sleep(hold(!latch_first));
                                Ok(shared)
                            })
                            .await
                            .expect("the share")
                        }
                    };
                    let (latched, shared) = if latch_first {
                        let l = tokio::spawn(latcher);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let s = tokio::spawn(sharer);
                        (l.await.expect("joined"), s.await.expect("joined"))
                    } else {
                        let s = tokio::spawn(sharer);
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let l = tokio::spawn(latcher);
                        (l.await.expect("joined"), s.await.expect("joined"))
                    };
                    let state = b
                        .run(move |db| {
                            Ok((chat_state(db, chat)?, is_collaborator_in(db, chat, "bob")?))
                        })
                        .await
                        .expect("read");
                    let (stored_latch, stored_share) = (state.0.is_some_and(|s| s.1), state.1);
                    assert!(
                        !(stored_latch && stored_share),
                        "{e}: chat {chat} (latch first: {latch_first}) is locked down and shared"
                    );
                    assert_eq!(
                        (latched, shared == Ok(true)),
                        (stored_latch, stored_share),
                        "{e}: chat {chat}: what each was told is what was stored"
                    );
                    assert!(
                        latched != (shared == Ok(true)),
                        "{e}: chat {chat}: one of them"
                    );
                }
            }
        });
    }
}
