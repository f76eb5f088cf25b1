//! The one door to durable state: which engine holds the deployment, and
//! the few verbs every store method reaches it through.
//!
//! Owns the choice between the embedded file ([`sqlite`](super::sqlite))
//! and the shared database ([`postgres`](super::postgres)): this is the
//! only place that tells them apart. The verbs: read ([`Store::with`],
//! [`Store::read_now`]), write with a durability ([`Store::write`],
//! [`Store::write_durable`]), stage ([`Store::stage`], [`Store::stage_now`],
//! [`Store::sync`]) and observe ([`Store::observe`]); claims are durable
//! writes. It may not hold a statement of its own nor decide policy: the
//! statements belong to the concept modules (`claims`, `stages`, ...),
//! written once against [`Sql`](super::sql::Sql).

use super::dispatch::Resolved;
use super::ledger::{NewObservation, observe_in, observe_tx};
use super::registry::{component_in, keep_component_in};
use super::sql::Sql;
use super::sqlite::group::stage_alone;
use super::sqlite::{Home, identity, open_error, resolve_in, system_error};
use super::stages::StagedAction;
use super::{
    Damaged, NewAction, Resolution, StageError, Store, actions, dispatch, postgres, with_overlay,
};
use std::sync::Arc;
use std::time::Duration;

/// Which database holds the deployment: every store method reaches it
/// through [`Store::with`] and [`Store::write`], which are the only places
/// that tell the two apart, but for the embedded file's own fast paths
/// (the group commit, the in-place read path), which are kept beside them.
#[derive(Clone)]
pub(super) enum Db {
    /// The embedded SQLite file in the home (the default).
    Home(Arc<Home>),
    /// A shared PostgreSQL database that several hosts serve from.
    Shared(postgres::Shared),
}

/// [`Store::resolve`] in a transaction on the shared database.
fn resolve_shared(
    db: &dyn Sql,
    resolutions: &dispatch::Resolutions,
    chat: &str,
    key: &str,
    person: &str,
) -> anyhow::Result<Resolution> {
    let resolved = resolutions.resolve_on(db, chat, key, person)?;
    with_overlay(db, chat, resolved)
}

impl Store {
    /// Open (creating if needed) the home's database file at `path`, whose
    /// secrets are sealed with `key` (the caller seals what an older
    /// Gatehouse left unsealed: [`Store::seal_at_rest`]).
    pub fn open(path: &std::path::Path, key: Arc<crate::seal::Key>) -> anyhow::Result<Store> {
        Ok(Store {
            db: Db::Home(Arc::new(Home::open(path)?)),
            resolutions: Arc::default(),
            key,
        })
    }

    /// The store of a deployment held in the shared database behind
    /// `shared` (migrated to this binary's schema: [`postgres::Shared::open`]
    /// refuses any other).
    pub(crate) fn on_shared(shared: postgres::Shared, key: Arc<crate::seal::Key>) -> Store {
        Store {
            db: Db::Shared(shared),
            resolutions: Arc::default(),
            key,
        }
    }

    /// The shared database's URL, when the deployment is held in one.
    pub(crate) fn shared_url(&self) -> Option<&postgres::DatabaseUrl> {
        match &self.db {
            Db::Home(_) => None,
            Db::Shared(shared) => Some(shared.url()),
        }
    }

    /// The embedded file, for what only it has (its integrity check, its
    /// group commit, its in-place read path); an error on a shared
    /// database, whose callers take another way before asking.
    pub(super) fn home(&self) -> anyhow::Result<&Home> {
        match &self.db {
            Db::Home(home) => Ok(home),
            Db::Shared(_) => anyhow::bail!(
                "this needs the home's embedded database, and this host serves from a shared one"
            ),
        }
    }

    /// Check every page of the database (`PRAGMA quick_check`); a
    /// [`Damaged`] error that says what to do when it is damaged. A shared
    /// database checks its own pages.
    pub fn check_integrity(&self) -> anyhow::Result<()> {
        let Db::Home(home) = &self.db else {
            return Ok(());
        };
        let conn = home.lock();
        let mut st = conn.prepare("PRAGMA quick_check(5)")?;
        let found = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| open_error(&home.path, e, system_error(&conn)))?;
        if found.iter().any(|f| f != "ok") {
            return Err(Damaged {
                path: home.path.clone(),
                findings: found,
            }
            .into());
        }
        Ok(())
    }

    /// The schema version the database is at (`PRAGMA user_version`, or
    /// the shared database's migration history).
    pub fn schema_version(&self) -> anyhow::Result<i64> {
        match &self.db {
            Db::Home(home) => Ok(home
                .lock()
                .query_row("PRAGMA user_version", [], |r| r.get(0))?),
            Db::Shared(_) => self.with(|db| {
                db.row(
                    "SELECT CAST(COALESCE(max(version), 0) AS BIGINT) FROM gatehouse_schema_history",
                    super::sql::args![],
                )?
                .map_or(Ok(0), |r| r.get(0))
            }),
        }
    }

    /// Whether the file this store opened is still the one at its path.
    /// A removed or replaced database keeps working for the process that
    /// opened it, writing into a file nobody will read again. A shared
    /// database has no file here.
    pub fn still_on_disk(&self) -> bool {
        match &self.db {
            Db::Home(home) => home.identity.is_some() && identity(&home.path) == home.identity,
            Db::Shared(_) => true,
        }
    }

    /// Returns once the database file was removed or replaced (checked
    /// every two seconds): a long-running process must stop then. Never,
    /// for a shared database.
    pub async fn vanished(&self) {
        if let Db::Shared(_) = self.db {
            return std::future::pending().await;
        }
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if !self.still_on_disk() {
                return;
            }
        }
    }

    /// Where the deployment's database is, to be shown: the home's file,
    /// or the shared database's URL without its password.
    pub fn location(&self) -> String {
        match &self.db {
            Db::Home(home) => home.path.display().to_string(),
            Db::Shared(shared) => shared.url().to_string(),
        }
    }

    /// Run the read-only `f` on a reader connection: in place when one is
    /// free, never waiting (a busy timeout of zero, as [`Store::run_now`]),
    /// else on a blocking thread that may wait. `f` sees what was committed
    /// before it began; it cannot write (the connection is opened
    /// read-only), so running it again after a busy attempt is harmless.
    /// On a shared database, `f` runs in a transaction of its own on a
    /// blocking thread.
    pub async fn read_now<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: Fn(&dyn Sql) -> anyhow::Result<T> + Send + Sync + 'static,
    {
        match self.db {
            Db::Home(_) => self.read_home(move |c| f(c)).await,
            Db::Shared(_) => self.run(move |s| s.with(|db| f(db))).await,
        }
    }

    /// Resolve `key` in `chat` for `person` (see [`dispatch::resolve`]),
    /// with the chat's pending actions at that gatekeeper when it
    /// simulates (its reads overlay them, SPEC V1): one trip, one reader.
    pub fn resolve(&self, chat: &str, key: &str, person: &str) -> anyhow::Result<Resolution> {
        match &self.db {
            Db::Home(_) => self.read(|c| resolve_in(c, self, chat, key, person)),
            Db::Shared(_) => {
                self.with(|db| resolve_shared(db, &self.resolutions, chat, key, person))
            }
        }
    }

    /// The resolution this process keeps for `person`'s calls of `key` in
    /// `chat`, with the policy epoch it was read under, *not checked*
    /// against the epoch now; `None` if none is kept. What it is for: a
    /// stage that passes every check on it carries that epoch in
    /// [`NewAction::resolved_at`], and its staging
    /// transaction refuses it ([`StageError::PolicyMoved`]) if the epoch
    /// moved, so the stage holds under the policy of its commit, and costs
    /// no read transaction of its own first (that read was a tenth of a
    /// stage's work). Anything else done on it (a refusal, a read, a
    /// simulation) would act on a policy that may be gone: the kernel
    /// resolves with [`Store::resolve_now`] for those. On a shared
    /// database the staging statement checks the epoch the same way
    /// (`gatehouse_stage`), so the turn's call costs no trip to read it.
    pub fn resolution_kept(
        &self,
        chat: &str,
        key: &str,
        person: &str,
    ) -> Option<(Arc<Resolved>, i64)> {
        self.resolutions.kept_unchecked(chat, key, person)
    }

    /// [`Store::resolve`] on the read path: in place when a reader is free
    /// (see [`Store::read_now`]).
    pub async fn resolve_now(
        &self,
        chat: &str,
        key: &str,
        person: &str,
    ) -> anyhow::Result<Resolution> {
        let (chat, key, person) = (chat.to_owned(), key.to_owned(), person.to_owned());
        if let Db::Shared(_) = self.db {
            return self.run(move |s| s.resolve(&chat, &key, &person)).await;
        }
        let store = self.clone();
        self.read_warm(move |c| resolve_in(c, &store, &chat, &key, &person))
            .await
    }

    /// Run `f` on the deployment's database, each statement its own
    /// commit, on either engine: for reads and one-statement writes (a
    /// conditional update decides by its changed-row count alone).
    ///
    /// Why this and [`Store::write`] and never the connection itself: a
    /// method written against [`Sql`] runs unchanged on the embedded file
    /// and on the shared PostgreSQL database, so a store method reaches its
    /// engine only through these doors. Like every store call, it runs on a
    /// thread that may block ([`Store::run`]).
    pub(crate) fn with<T>(
        &self,
        f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match &self.db {
            Db::Home(home) => f(&*home.lock()),
            Db::Shared(shared) => shared.each_here(f),
        }
    }

    /// Run `f` in one writing transaction, committed when it returns `Ok`
    /// and rolled back otherwise. On SQLite it begins `IMMEDIATE`, so what
    /// `f` reads stays true until it commits (no other writer
    /// interleaves); on PostgreSQL a statement that must hold a row while
    /// deciding locks it (`FOR UPDATE`, see [`sql::Engine`]).
    pub(crate) fn write<T>(
        &self,
        f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match &self.db {
            Db::Home(home) => {
                let mut conn = home.lock();
                let tx =
                    conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let out = f(&tx)?;
                tx.commit()?;
                Ok(out)
            }
            Db::Shared(shared) => shared.run_here(f),
        }
    }

    /// [`Store::write`] for a commit a promise rests on (a claim before its
    /// send, a stage a gadget was told of): on disk before it returns,
    /// across a power cut. SQLite raises `synchronous` to FULL for this
    /// commit only (a durable commit makes every earlier one in the log
    /// durable too); PostgreSQL's commits are durable already.
    pub(crate) fn write_durable<T, E: From<anyhow::Error>>(
        &self,
        f: impl FnOnce(&dyn Sql) -> Result<T, E>,
    ) -> Result<T, E> {
        let home = match &self.db {
            Db::Home(home) => home,
            Db::Shared(shared) => return shared.run_here(f),
        };
        let mut conn = home.lock_durable()?;
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(anyhow::Error::from)?;
        let out = f(&tx)?;
        tx.commit().map_err(anyhow::Error::from)?;
        Ok(out)
    }

    /// Stage and submit an action: either it is pending with an id, on
    /// disk so that a power cut cannot lose it (`synchronous=FULL`), or
    /// nothing was stored (SPEC A1, A3, A5).
    ///
    /// Durable and fast through group commit: a stage joins the queue,
    /// then whoever holds the connection next commits everything queued in
    /// one transaction and one fsync, each stage in its own savepoint so
    /// that one refusal never undoes another's row. The caps are checked
    /// inside that transaction, row by row, so a batch can never overfill
    /// a chat.
    ///
    /// On a shared database each stage is one statement, its own
    /// transaction ([`postgres::trips::stage`]): one round trip, where a
    /// transaction of the stage's statements took seven and a read ahead
    /// of it one more. The database's own group commit makes many at once
    /// cheap; two stagers of one chat take turns on its row, and a full or
    /// latched chat is refused before its row is locked, so that a gadget
    /// hammering a full chat holds up no stager of it.
    pub async fn stage(&self, a: NewAction) -> Result<StagedAction, StageError> {
        if let Db::Shared(shared) = &self.db {
            let shared = shared.clone();
            return self
                .run(move |_| shared.each_here(|db| Ok(postgres::trips::stage(db, &a))))
                .await?;
        }
        self.join_group(Some(a)).await?.ok_or_else(|| {
            StageError::Store(anyhow::anyhow!(
                "the staging commit answered a stage as a barrier; nothing was staged"
            ))
        })
    }

    /// Run a claim (`f`, the action store's `claim_with`) on this engine:
    /// the one commit that must survive a power cut before anything
    /// leaves. On the home's file, one durable IMMEDIATE transaction, the
    /// key resolved afresh in it. On a shared database each read is a
    /// statement of its own (under READ COMMITTED a transaction gives a
    /// run of reads nothing more, and its `BEGIN` and `COMMIT` were two
    /// round trips), the key's resolution is the one kept under the policy
    /// epoch read now (what resolving again would give, for one statement
    /// instead of six), and the take with its decision's record is one
    /// statement ([`postgres::trips::take`]), its own durable commit.
    pub(super) fn claiming<T>(
        &self,
        f: impl FnOnce(&dyn Sql, &actions::Claiming<'_>) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        match &self.db {
            Db::Home(_) => self.write_durable(|tx| f(tx, &actions::Claiming::in_transaction())),
            Db::Shared(shared) => shared.each_here(|db| {
                f(
                    db,
                    &actions::Claiming {
                        resolve: &|db, chat, key, person| {
                            self.resolutions.resolve_on(db, chat, key, person)
                        },
                        take: &postgres::trips::take,
                    },
                )
            }),
        }
    }

    /// Record how the claim of `id` ended: `applied` with the `result` to
    /// keep, or `failed` with its `failure` (the message, and whether it
    /// provably had no effect), and its decision's outcome, in one commit
    /// ([`actions::finish_in`]); then the result, and the chat's finished
    /// actions pruned, which never undo the state (P2: the state first,
    /// then the result). On a shared database all of it is one statement
    /// ([`postgres::trips::finish`]). Whether the ledger took this
    /// outcome: false when the claim was no longer `applying` (a recovery
    /// failed it meanwhile, P3).
    pub(super) fn finish_claim(
        &self,
        id: i64,
        failure: Option<(&str, bool)>,
        result: Option<&str>,
    ) -> anyhow::Result<bool> {
        match &self.db {
            Db::Home(_) => {
                let recorded = self.write(|db| actions::finish_in(db, id, failure))?;
                if let Some(result) = result {
                    self.with(|db| actions::keep_result(db, id, result))?;
                }
                self.prune_of_in(id)?;
                Ok(recorded)
            }
            Db::Shared(shared) => {
                shared.each_here(|db| postgres::trips::finish(db, id, failure, result))
            }
        }
    }

    /// Keep the newest finished actions of `id`'s chat; never prune open
    /// ones (SPEC P5). On a shared database in one statement.
    pub(super) fn prune_of(&self, id: i64) -> anyhow::Result<u64> {
        match &self.db {
            Db::Home(_) => self.prune_of_in(id),
            Db::Shared(shared) => shared.each_here(|db| postgres::trips::prune_of(db, id)),
        }
    }

    /// The statements this host has sent to its shared database since it
    /// opened, each a round trip; none on a home, whose file is reached by
    /// library calls. What the `hosts` benchmark and the tests count a
    /// turn's and an approval's cost in.
    pub(crate) fn round_trips(&self) -> Option<u64> {
        match &self.db {
            Db::Home(_) => None,
            Db::Shared(shared) => Some(shared.trips()),
        }
    }

    /// Make every commit made before this call durable: join the next
    /// group commit, whose fsync covers everything before it in the log.
    /// What a turn staged in place ([`Store::stage_now`]) is durable once
    /// this returns.
    pub async fn sync(&self) -> anyhow::Result<()> {
        if let Db::Shared(_) = self.db {
            // Every commit of a shared database is durable when it returns.
            return Ok(());
        }
        self.join_group(None).await.map(drop).map_err(|e| match e {
            StageError::Store(e) => e,
            other => anyhow::anyhow!(other),
        })
    }

    /// Stage `a` in place, without waiting for an fsync: committed (every
    /// other connection sees it, and a killed process keeps it), but
    /// durable across a power cut only at the next durable commit. For a
    /// gadget's turn, which the kernel makes durable ([`Store::sync`])
    /// before anything leaves the turn or it ends (docs/operations.md);
    /// every other caller stages with [`Store::stage`]. The same caps, in
    /// the same transaction, admitted the same way ([`stage_alone`]) as a
    /// group commit of one stage.
    pub async fn stage_now(
        &self,
        a: NewAction,
    ) -> anyhow::Result<Result<StagedAction, StageError>> {
        if let Db::Shared(_) = self.db {
            // No in-place stage on a shared database: each is durable.
            return match self.stage(a).await {
                Ok(staged) => Ok(Ok(staged)),
                Err(StageError::Store(e)) => Err(e),
                Err(refused) => Ok(Err(refused)),
            };
        }
        self.run_now(move |conn| stage_alone(conn, &a)).await
    }

    /// Record an observation. The caller hands the data over only if this
    /// returns `Ok` (SPEC O1).
    pub fn observe(&self, o: &NewObservation) -> anyhow::Result<super::Observed> {
        match &self.db {
            Db::Home(home) => observe_in(&mut home.lock(), o),
            Db::Shared(_) => self.write(|db| observe_tx(db, o)),
        }
    }

    /// [`Store::observe`] on the read path: on the home's connection right
    /// here when it is free (see [`Store::run_now`]), the read's one commit.
    pub async fn observe_now(&self, o: NewObservation) -> anyhow::Result<super::Observed> {
        match self.db {
            Db::Home(_) => self.run_now(move |c| observe_in(c, &o)).await,
            Db::Shared(_) => self.run(move |s| s.observe(&o)).await,
        }
    }

    /// Keep an installed component's bytes where every host can load them,
    /// so any host serves any chat: in a shared database's `components`,
    /// content-addressed, so installing the same bytes again changes
    /// nothing. A home keeps them as files in its component cache (the
    /// runtime wrote them), so nothing is written there.
    pub fn keep_component(&self, digest: &str, bytes: &[u8]) -> anyhow::Result<()> {
        match &self.db {
            Db::Home(_) => Ok(()),
            Db::Shared(shared) => shared.each_here(|db| keep_component_in(db, digest, bytes)),
        }
    }

    /// The bytes of the component `digest` kept in a shared database, for
    /// a host whose cache does not have them yet; `None` on a home, or
    /// when no host kept them. The runtime checks them against the digest.
    pub fn component(&self, digest: &str) -> anyhow::Result<Option<Vec<u8>>> {
        match &self.db {
            Db::Home(_) => Ok(None),
            Db::Shared(shared) => shared.each_here(|db| component_in(db, digest)),
        }
    }

    /// [`Store::write`] for a commit that replaces secrets, whose old
    /// values must not stay readable in the file: SQLite overwrites what
    /// the commit frees (`secure_delete`, for this commit only) and, when
    /// `wrote` says it changed anything, truncates the log that held the
    /// old pages. A shared database's dead row versions are PostgreSQL's
    /// to reclaim (`gatehouse db migrate` vacuums the tables).
    pub(crate) fn write_erasing<T>(
        &self,
        f: impl FnOnce(&dyn Sql) -> anyhow::Result<T>,
        wrote: impl FnOnce(&T) -> bool,
    ) -> anyhow::Result<T> {
        let Db::Home(home) = &self.db else {
            return self.write(f);
        };
        let was: i64 = home
            .lock()
            .query_row("PRAGMA secure_delete", [], |r| r.get(0))?;
        home.lock().pragma_update(None, "secure_delete", 1)?;
        let done = self.write(f);
        let conn = home.lock();
        conn.pragma_update(None, "secure_delete", was)?;
        if done.as_ref().is_ok_and(wrote) {
            // Best effort: a reader of another process may hold the log.
            let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
        done
    }
}
