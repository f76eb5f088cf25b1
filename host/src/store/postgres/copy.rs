//! Moving an embedded home's state into a shared database (`gatehouse db
//! copy`): every table as one consistent snapshot, in one transaction.
//!
//! Owns the list of a deployment's tables and the copy. It may not read
//! the home's files: what a copy carries besides the tables is handed in
//! by the kernel.

use super::{DatabaseUrl, reason};
use crate::store::Store;
use crate::store::now_ms;
use crate::store::sql::Cell;
use anyhow::{Context as _, bail};
use rusqlite::types::ValueRef;
use tokio_postgres::Client;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

/// The tables of a deployment in the order a copy fills them: a table
/// after every table its foreign keys name. A table of the home missing
/// here stops the copy (nothing is silently left behind), and a test
/// checks the list against both schemas.
pub const TABLES: &[&str] = &[
    "users",
    "secrets",
    "gadgets",
    "gatekeepers",
    "chats",
    "introductions",
    "accounts",
    "collaborators",
    "observers",
    "share_links",
    "approvers",
    "ledger",
    "hooks",
    "hook_firings",
    "decisions",
    "rules",
    "agent_runs",
    "workflows",
    "workflow_runs",
    "run_steps",
    "approval_requests",
    "certificates",
    "invocations",
    "web_signin_tokens",
    "web_sessions",
    "web_csrf",
    "web_passkeys",
    "identity_bindings",
    "deployment_secrets",
    "notify_targets",
    "notices",
    "request_notices",
    "push_subscriptions",
    "push_notices",
    "gadget_storage",
    "durability_mark",
    "policy_epoch",
];

/// Tables whose one row the schema itself writes (a counter): a copy
/// replaces it, and it does not make a database "in use".
const SEEDED: &[&str] = &["durability_mark", "policy_epoch"];

/// What a copy streams from the SQLite snapshot to PostgreSQL.
enum Part {
    /// The rows that follow belong to this table and these columns.
    Table(&'static str, Vec<String>),
    Row(Vec<Cell>),
    /// The highest id each sequenced table ever handed out: an
    /// AUTOINCREMENT table's `sqlite_sequence`, and the ledger's newest
    /// entry, which is never deleted (schema 7). Ids are never reused
    /// (SPEC L1), so the copy's sequences start above it, not above the
    /// highest id left.
    Sequences(Vec<(String, i64)>),
}

/// What a copy carried, table by table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Copied {
    /// Each table copied, with its row count, in the order copied.
    pub tables: Vec<(String, u64)>,
    /// The id the ledger hands out next in the database.
    pub next_ledger_id: i64,
    /// Installed components whose bytes were copied.
    pub components: usize,
}

/// What besides the tables an embedded home keeps as files, read by the
/// kernel: component bytes by digest. (Secrets are rows, sealed: a copy
/// carries them as they are, so the database's hosts need the home's key.)
pub struct Files {
    /// Component bytes, by their SHA-256 digest.
    pub components: Vec<(String, Vec<u8>)>,
}

impl Store {
    /// Copy every table of this store, as one consistent snapshot, into
    /// the database behind `client` (migrated to the newest schema, and
    /// holding no deployment yet), with `files`, in one transaction: ids,
    /// states and observation sets arrive as they are, and the database's
    /// id sequences continue above every id the home ever handed out.
    pub async fn copy_to(
        &self,
        client: &mut Client,
        url: &DatabaseUrl,
        files: Files,
    ) -> anyhow::Result<Copied> {
        let tx = client.transaction().await?;
        for table in TABLES.iter().filter(|t| !SEEDED.contains(t)) {
            let used: bool = tx
                .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[])
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot read table {table} of {url} ({})", reason(&e))
                })?
                .get(0);
            if used {
                bail!(
                    "the database {url} already holds a Gatehouse deployment (its table {table} has rows); copy into an empty database"
                );
            }
        }
        // The snapshot is read on a blocking thread inside one read
        // transaction and streamed here a row at a time, so a large home
        // is never held in memory whole.
        let (send, mut parts) = tokio::sync::mpsc::channel::<Part>(1024);
        let store = self.clone();
        let reader = tokio::task::spawn_blocking(move || store.read(|c| snapshot(c, &send)));
        let mut tables = Vec::new();
        let mut sequences = Vec::new();
        let mut copying: Option<TableCopy> = None;
        while let Some(part) = parts.recv().await {
            match part {
                Part::Table(table, columns) => {
                    if let Some(done) = copying.take() {
                        tables.push(done.finish().await?);
                    }
                    copying = Some(TableCopy::start(&tx, table, &columns).await?);
                }
                Part::Row(cells) => match copying.as_mut() {
                    Some(c) => c.write(cells).await?,
                    None => bail!("a row arrived before its table"),
                },
                Part::Sequences(s) => sequences = s,
            }
        }
        if let Some(done) = copying.take() {
            tables.push(done.finish().await?);
        }
        reader
            .await
            .context("reading the home's state panicked")??;
        for (table, highest) in sequences {
            if highest > 0 {
                tx.execute(
                    "SELECT setval(pg_get_serial_sequence($1, 'id'), $2)",
                    &[&table, &highest],
                )
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot continue the ids of {table} ({})", reason(&e))
                })?;
            }
        }
        let now = now_ms();
        let components = files.components.len();
        for (digest, bytes) in files.components {
            tx.execute(
                "INSERT INTO components (digest, bytes, added_at) VALUES ($1, $2, $3)",
                &[&digest, &bytes, &now],
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot copy component {digest} ({})", reason(&e)))?;
        }
        let next_ledger_id: i64 = tx
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END FROM ledger_id_seq",
                &[],
            )
            .await?
            .get(0);
        tx.commit()
            .await
            .map_err(|e| anyhow::anyhow!("cannot commit the copy into {url} ({})", reason(&e)))?;
        Ok(Copied {
            tables,
            next_ledger_id,
            components,
        })
    }
}

/// One table's rows on their way in, by binary `COPY`.
struct TableCopy {
    table: &'static str,
    types: Vec<Type>,
    writer: std::pin::Pin<Box<BinaryCopyInWriter>>,
    rows: u64,
}

impl TableCopy {
    /// Begin copying `columns` of `table`, typed as the database's own
    /// columns are. A table the schema seeds (a counter) is emptied first.
    async fn start(
        tx: &tokio_postgres::Transaction<'_>,
        table: &'static str,
        columns: &[String],
    ) -> anyhow::Result<TableCopy> {
        let names = columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let probe = tx
            .prepare(&format!("SELECT {names} FROM {table} LIMIT 0"))
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "the database's table {table} does not match the home's ({}); run `gatehouse db migrate` with this binary on both",
                    reason(&e)
                )
            })?;
        let types: Vec<Type> = probe.columns().iter().map(|c| c.type_().clone()).collect();
        if SEEDED.contains(&table) {
            tx.execute(&format!("DELETE FROM {table}"), &[]).await?;
        }
        let sink = tx
            .copy_in(&format!("COPY {table} ({names}) FROM STDIN BINARY"))
            .await?;
        Ok(TableCopy {
            table,
            writer: Box::pin(BinaryCopyInWriter::new(sink, &types)),
            types,
            rows: 0,
        })
    }

    async fn write(&mut self, cells: Vec<Cell>) -> anyhow::Result<()> {
        let values = row_values(self.table, &self.types, cells)?;
        let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v.as_ref() as _).collect();
        self.writer.as_mut().write(&refs).await.map_err(|e| {
            anyhow::anyhow!(
                "cannot copy a row of {} ({}); nothing was copied",
                self.table,
                reason(&e)
            )
        })?;
        self.rows += 1;
        Ok(())
    }

    /// End the COPY: the table and its row count.
    async fn finish(mut self) -> anyhow::Result<(String, u64)> {
        self.writer.as_mut().finish().await.map_err(|e| {
            anyhow::anyhow!(
                "cannot copy table {} ({}); nothing was copied",
                self.table,
                reason(&e)
            )
        })?;
        Ok((self.table.to_owned(), self.rows))
    }
}

/// A row's cells as values of the columns' PostgreSQL types. SQLite's
/// tables are STRICT, so a cell of another kind means the two schemas
/// disagree: the copy stops.
fn row_values(
    table: &str,
    types: &[Type],
    cells: Vec<Cell>,
) -> anyhow::Result<Vec<Box<dyn ToSql + Sync + Send>>> {
    cells
        .into_iter()
        .zip(types)
        .map(|(cell, ty)| -> anyhow::Result<Box<dyn ToSql + Sync + Send>> {
            Ok(match (cell, ty) {
                (Cell::Int(i), &Type::INT8) => Box::new(i),
                (Cell::Null, &Type::INT8) => Box::new(None::<i64>),
                (Cell::Text(s), &Type::TEXT) => Box::new(s),
                (Cell::Null, &Type::TEXT) => Box::new(None::<String>),
                (Cell::Bytes(b), &Type::BYTEA) => Box::new(b),
                (Cell::Null, &Type::BYTEA) => Box::new(None::<Vec<u8>>),
                (_, ty) => bail!(
                    "a value in table {table} does not fit its column's type {ty} in the database; run `gatehouse db migrate` with this binary on both"
                ),
            })
        })
        .collect()
}

/// Stream every table in [`TABLES`] order, then the id sequences, from
/// one read transaction (one snapshot of the whole home).
fn snapshot(
    conn: &rusqlite::Connection,
    send: &tokio::sync::mpsc::Sender<Part>,
) -> anyhow::Result<()> {
    let tx = conn.unchecked_transaction()?;
    let present: Vec<String> = tx
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if let Some(unknown) = present.iter().find(|t| !TABLES.contains(&t.as_str())) {
        bail!(
            "the home's table {unknown} is not known to this Gatehouse's copy; use the gatehouse that wrote the home"
        );
    }
    let gone = || anyhow::anyhow!("the copy stopped before the whole home was read");
    for table in TABLES.iter().filter(|t| present.iter().any(|p| p == *t)) {
        let columns: Vec<String> = tx
            .prepare(&format!(
                "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
            ))?
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        let list = columns
            .iter()
            .map(|c| format!("\"{c}\""))
            .collect::<Vec<_>>()
            .join(", ");
        send.blocking_send(Part::Table(table, columns.clone()))
            .map_err(|_| gone())?;
        let mut st = tx.prepare(&format!("SELECT {list} FROM {table}"))?;
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let mut cells = Vec::with_capacity(columns.len());
            for i in 0..columns.len() {
                cells.push(match row.get_ref(i)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Text(t) => Cell::Text(
                        std::str::from_utf8(t)
                            .with_context(|| format!("a text in table {table} is not UTF-8"))?
                            .to_owned(),
                    ),
                    ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
                    ValueRef::Real(_) => {
                        bail!("table {table} holds a real number, which no Gatehouse column has")
                    }
                });
            }
            send.blocking_send(Part::Row(cells)).map_err(|_| gone())?;
        }
    }
    let mut sequences: Vec<(String, i64)> = tx
        .prepare(
            "SELECT m.name, MAX(COALESCE((SELECT seq FROM sqlite_sequence s WHERE s.name = m.name), 0), 0)
             FROM sqlite_master m
             WHERE m.type = 'table' AND (m.sql LIKE '%AUTOINCREMENT%' OR m.name = 'ledger')",
        )?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    for (table, highest) in sequences.iter_mut() {
        let top: i64 = tx.query_row(
            &format!("SELECT COALESCE(max(id), 0) FROM {table}"),
            [],
            |r| r.get(0),
        )?;
        *highest = (*highest).max(top);
    }
    send.blocking_send(Part::Sequences(sequences))
        .map_err(|_| gone())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table of the embedded schema is copied, in an order that
    /// fills a table after those its foreign keys name.
    #[test]
    fn the_copy_knows_every_table_in_foreign_key_order() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = Store::open(&dir.path().join("gatehouse.db"), crate::seal::test_key())
            .expect("the store opens");
        let conn = store.home().expect("the home").lock();
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
            .expect("the tables");
        let mut known: Vec<&str> = TABLES.to_vec();
        known.sort_unstable();
        assert_eq!(tables, known, "TABLES must list every table of the schema");
        for (i, table) in TABLES.iter().enumerate() {
            let parents: Vec<String> = conn
                .prepare(&format!(
                    "SELECT \"table\" FROM pragma_foreign_key_list('{table}')"
                ))
                .and_then(|mut st| st.query_map([], |r| r.get(0))?.collect())
                .expect("the foreign keys");
            for parent in parents {
                let at = TABLES.iter().position(|t| *t == parent);
                assert!(
                    at.is_some_and(|at| at < i),
                    "{table} names {parent}, which must come before it"
                );
            }
        }
    }
}
