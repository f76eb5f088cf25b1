//! People, their accounts, collaborators, share links and observers, as
//! stored (SPEC S, O3). Every check that must hold against a concurrent
//! writer (the latch against a share, a share against a restricted read)
//! runs inside one IMMEDIATE transaction here; the decisions about *whether*
//! an observer is admitted are the kernel's (`crate::sharing`).

use super::sql::{Sql, args};
use super::{Store, now_ms};
use crate::access::{Access, Standing};
use rusqlite::{OptionalExtension as _, params};
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

fn account_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Account> {
    Ok(Account {
        user: r.get(0)?,
        gatekeeper: r.get(1)?,
        label: r.get(2)?,
        is_default: r.get::<_, i64>(3)? == 1,
    })
}

fn observer_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Observer> {
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
) -> anyhow::Result<Option<(Account, String)>> {
    db.row(
        "SELECT a.\"user\", a.gatekeeper, a.label, a.is_default, s.value
         FROM accounts a JOIN secrets s ON s.name = a.secret
         WHERE a.\"user\" = ?1 AND a.gatekeeper = ?2
           AND COALESCE(a.label = ?3, a.is_default = 1)",
        args![user, gatekeeper, label],
    )?
    .map(|r| {
        let account = Account {
            user: r.get(0)?,
            gatekeeper: r.get(1)?,
            label: r.get(2)?,
            is_default: r.get(3)?,
        };
        Ok((account, r.get(4)?))
    })
    .transpose()
}

/// Whether `chat` has collaborators or live share links (SPEC O3's "shared").
pub(super) fn is_shared(conn: &rusqlite::Connection, chat: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM collaborators WHERE chat = ?1)
             OR EXISTS (SELECT 1 FROM share_links WHERE chat = ?1)",
    )?
    .query_row([chat], |r| r.get(0))
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

/// The observers of `chat`, on a connection the caller holds.
pub(crate) fn observers_in(
    conn: &rusqlite::Connection,
    chat: &str,
) -> rusqlite::Result<Vec<Observer>> {
    let mut st = conn.prepare_cached(
        "SELECT chat, user, gatekeeper, account, scope FROM observers
         WHERE chat = ?1 ORDER BY user, gatekeeper",
    )?;
    let rows = st.query_map([chat], observer_from_row)?;
    rows.collect()
}

fn user_exists(conn: &rusqlite::Connection, user: &str) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM users WHERE name = ?1)",
        [user],
        |r| r.get(0),
    )
}

impl Store {
    /// Add a person; adding one who exists is not an error.
    pub fn add_user(&self, name: &str) -> anyhow::Result<bool> {
        let n = self.lock().execute(
            "INSERT INTO users (name, created_at) VALUES (?1, ?2) ON CONFLICT (name) DO NOTHING",
            params![name, now_ms()],
        )?;
        Ok(n == 1)
    }

    pub fn user_exists(&self, name: &str) -> anyhow::Result<bool> {
        Ok(user_exists(&self.lock(), name)?)
    }

    pub fn users(&self) -> anyhow::Result<Vec<String>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached("SELECT name FROM users ORDER BY name")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
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
        let secret = format!("account/{user}/{gatekeeper}/{label}");
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO secrets (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            params![secret, credential],
        )?;
        let has_default: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM accounts WHERE user = ?1 AND gatekeeper = ?2
                              AND is_default = 1 AND label <> ?3)",
            params![user, gatekeeper, label],
            |r| r.get(0),
        )?;
        let default = make_default || !has_default;
        if default {
            tx.execute(
                "UPDATE accounts SET is_default = 0 WHERE user = ?1 AND gatekeeper = ?2",
                params![user, gatekeeper],
            )?;
        }
        tx.execute(
            "INSERT INTO accounts (user, gatekeeper, label, secret, is_default, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (user, gatekeeper, label) DO UPDATE SET secret = excluded.secret,
               is_default = excluded.is_default",
            params![user, gatekeeper, label, secret, default as i64, now_ms()],
        )?;
        tx.commit()?;
        Ok(Account {
            user: user.to_owned(),
            gatekeeper: gatekeeper.to_owned(),
            label: label.to_owned(),
            is_default: default,
        })
    }

    /// A person's accounts (all people's if `None`), by gatekeeper.
    pub fn accounts(&self, user: Option<&str>) -> anyhow::Result<Vec<Account>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT user, gatekeeper, label, is_default FROM accounts
             WHERE (?1 IS NULL OR user = ?1) ORDER BY user, gatekeeper, is_default DESC, label",
        )?;
        let rows = st.query_map([user], account_from_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The account `label` of `user` at `gatekeeper` (the default if `None`)
    /// and its credential.
    pub fn account_credential(
        &self,
        user: &str,
        gatekeeper: &str,
        label: Option<&str>,
    ) -> anyhow::Result<Option<(Account, String)>> {
        account_credential_in(&self.lock(), user, gatekeeper, label)
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
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let Some((owner, latched)) = chat_state(&tx, chat)? else {
            return Ok(Err(ShareRefusal::NoChat(chat.to_owned())));
        };
        if !user_exists(&tx, user)? {
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
        let existed: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM collaborators WHERE chat = ?1 AND user = ?2)",
            params![chat, user],
            |r| r.get(0),
        )?;
        tx.execute(
            "INSERT INTO collaborators (chat, user, added_by, added_at, may_decide)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (chat, user) DO UPDATE SET may_decide = excluded.may_decide",
            params![chat, user, by, now_ms(), may_decide as i64],
        )?;
        tx.commit()?;
        Ok(Ok(!existed))
    }

    /// Create a share link (its token's digest), unless the chat is latched.
    pub fn create_link(
        &self,
        chat: &str,
        digest: &str,
        by: &str,
    ) -> anyhow::Result<Result<(), ShareRefusal>> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let Some((_, latched)) = chat_state(&tx, chat)? else {
            return Ok(Err(ShareRefusal::NoChat(chat.to_owned())));
        };
        if latched {
            return Ok(Err(ShareRefusal::Latched(chat.to_owned())));
        }
        tx.execute(
            "INSERT INTO share_links (digest, chat, created_by, created_at) VALUES (?1, ?2, ?3, ?4)",
            params![digest, chat, by, now_ms()],
        )?;
        tx.commit()?;
        Ok(Ok(()))
    }

    /// Revoke every share link of `chat`; returns how many there were.
    pub fn revoke_links(&self, chat: &str) -> anyhow::Result<usize> {
        Ok(self
            .lock()
            .execute("DELETE FROM share_links WHERE chat = ?1", [chat])?)
    }

    /// Remove a collaborator and, with them, their observers (SPEC S5).
    pub fn unshare(&self, chat: &str, user: &str) -> anyhow::Result<bool> {
        let n = self.lock().execute(
            "DELETE FROM collaborators WHERE chat = ?1 AND user = ?2",
            params![chat, user],
        )?;
        Ok(n == 1)
    }

    pub fn collaborators(&self, chat: &str) -> anyhow::Result<Vec<Collaborator>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT chat, user, added_by, added_at, verified_at, may_decide FROM collaborators
             WHERE chat = ?1 ORDER BY added_at, user",
        )?;
        let rows = st.query_map([chat], |r| {
            Ok(Collaborator {
                chat: r.get(0)?,
                user: r.get(1)?,
                added_by: r.get(2)?,
                added_at: r.get(3)?,
                verified_at: r.get(4)?,
                may_decide: r.get::<_, i64>(5)? == 1,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Whether the share link with this digest opens `chat`.
    pub fn link_opens(&self, chat: &str, digest: &str) -> anyhow::Result<bool> {
        Ok(self.lock().query_row(
            "SELECT EXISTS (SELECT 1 FROM share_links WHERE digest = ?1 AND chat = ?2)",
            params![digest, chat],
            |r| r.get(0),
        )?)
    }

    /// Name `person` an approver of the workflow run whose chat is `chat`.
    pub fn add_approver(&self, chat: &str, person: &str, by: &str) -> anyhow::Result<()> {
        let conn = self.lock();
        if !user_exists(&conn, person)? {
            anyhow::bail!(ShareRefusal::NoUser(person.to_owned()));
        }
        conn.execute(
            "INSERT INTO approvers (chat, person, added_by, added_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (chat, person) DO NOTHING",
            params![chat, person, by, now_ms()],
        )?;
        Ok(())
    }

    /// What `person` may do in `chat` (SPEC W1), by the one rule.
    pub fn access(&self, chat: &str, person: &str) -> anyhow::Result<Access> {
        access(&self.lock(), chat, person)
    }

    /// Whether `user` is a collaborator of `chat` (verified or not).
    pub fn is_collaborator(&self, chat: &str, user: &str) -> anyhow::Result<bool> {
        Ok(self.lock().query_row(
            "SELECT EXISTS (SELECT 1 FROM collaborators WHERE chat = ?1 AND user = ?2)",
            params![chat, user],
            |r| r.get(0),
        )?)
    }

    /// A re-verification of `user` failed (SPEC S2, W2): they see nothing
    /// of `chat` until an open succeeds again. Their observers go too.
    pub fn unverify(&self, chat: &str, user: &str) -> anyhow::Result<()> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute(
            "UPDATE collaborators SET verified_at = NULL WHERE chat = ?1 AND user = ?2",
            params![chat, user],
        )?;
        tx.execute(
            "DELETE FROM observers WHERE chat = ?1 AND user = ?2",
            params![chat, user],
        )?;
        tx.commit()?;
        Ok(())
    }

    pub fn observers(&self, chat: &str) -> anyhow::Result<Vec<Observer>> {
        Ok(observers_in(&self.lock(), chat)?)
    }

    /// The sources `chat` has observed (SPEC S1), per gatekeeper: the JSON
    /// arrays of every observation, oldest first.
    pub fn observed_sources(&self, chat: &str) -> anyhow::Result<Vec<(String, String)>> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT gatekeeper, sources FROM ledger
             WHERE chat = ?1 AND kind = 'observation' AND gatekeeper IS NOT NULL
               AND sources IS NOT NULL ORDER BY id",
        )?;
        let rows = st.query_map([chat], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
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
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let Some((owner, latched)) = chat_state(&tx, chat)? else {
            return Ok(Err(ShareRefusal::NoChat(chat.to_owned())));
        };
        if owner == user {
            return Ok(Ok(()));
        }
        if latched {
            return Ok(Err(ShareRefusal::LatchedOpen(chat.to_owned())));
        }
        if let Some(digest) = link {
            let by: Option<String> = tx
                .query_row(
                    "SELECT created_by FROM share_links WHERE digest = ?1 AND chat = ?2",
                    params![digest, chat],
                    |r| r.get(0),
                )
                .optional()?;
            let Some(by) = by else {
                return Ok(Err(ShareRefusal::BadLink(chat.to_owned())));
            };
            if !user_exists(&tx, user)? {
                return Ok(Err(ShareRefusal::NoUser(user.to_owned())));
            }
            tx.execute(
                "INSERT INTO collaborators (chat, user, added_by, added_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (chat, user) DO NOTHING",
                params![chat, user, format!("link from {by}"), now_ms()],
            )?;
        }
        let collaborator: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM collaborators WHERE chat = ?1 AND user = ?2)",
            params![chat, user],
            |r| r.get(0),
        )?;
        if !collaborator {
            return Ok(Err(ShareRefusal::NotCollaborator {
                chat: chat.to_owned(),
                user: user.to_owned(),
            }));
        }
        tx.execute(
            "DELETE FROM observers WHERE chat = ?1 AND user = ?2",
            params![chat, user],
        )?;
        tx.execute(
            "UPDATE collaborators SET verified_at = ?3 WHERE chat = ?1 AND user = ?2",
            params![chat, user, now_ms()],
        )?;
        for o in observers {
            let scope = o.scope.as_ref().map(serde_json::to_string).transpose()?;
            tx.execute(
                "INSERT INTO observers (chat, user, gatekeeper, account, scope, added_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![chat, user, o.gatekeeper, o.account, scope, now_ms()],
            )?;
        }
        tx.commit()?;
        Ok(Ok(()))
    }
}
