//! The database's commands: `db migrate` (the schema), `db copy` (a home
//! moved into PostgreSQL) and `db status` (where a database stands). Words only: what a move carries and when
//! it is refused is `moving`'s, and every statement is the store's.

use super::print_record;
use crate::kernel::Kernel;
use crate::store::postgres::DatabaseUrl;
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub(super) enum DbCmd {
    /// Bring the database to this gatehouse's schema: the PostgreSQL
    /// database named by --database (or GATEHOUSE_DATABASE_URL), else the
    /// home's embedded SQLite file. A database written by a newer
    /// gatehouse is refused.
    Migrate {
        #[arg(long)]
        json: bool,
    },
    /// Show the database's schema and the actions being sent right now,
    /// each with the host that claimed it and whether that host is still
    /// present (a claim whose host is gone is failed by the next start,
    /// never sent again). The PostgreSQL database named by --database (or
    /// GATEHOUSE_DATABASE_URL), else the home's. Reads only.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Copy this home's whole state (ledger ids, pending actions,
    /// observation sets, shared chats, workflows, installed components)
    /// into an empty PostgreSQL database, migrating it first. The home is
    /// left as it was. Stop other gatehouse processes on the home first.
    Copy {
        /// The PostgreSQL database to copy into (postgres://...).
        #[arg(long, value_name = "URL")]
        to: String,
        #[arg(long)]
        json: bool,
    },
}

/// `db migrate` of a PostgreSQL database: no home, no kernel.
pub(super) async fn migrate_shared(
    url: &str,
    key: Option<crate::seal::Key>,
    json: bool,
) -> anyhow::Result<bool> {
    let url = DatabaseUrl::parse(url)?;
    let done = crate::moving::migrate_database(&url, key).await?;
    print_record(&done, json, |d| {
        if d.before == d.now {
            outln!("{} is at schema {}; nothing to do", d.database, d.now);
        } else {
            outln!(
                "{} migrated from schema {} to {}",
                d.database,
                d.before,
                d.now
            );
        }
        if d.sealed > 0 {
            outln!(
                "sealed {} secret(s) an older gatehouse had kept unsealed",
                d.sealed
            );
        }
    })?;
    Ok(true)
}

/// `db status` of a PostgreSQL database: no home, no kernel.
pub(super) async fn status_shared(url: &str, json: bool) -> anyhow::Result<bool> {
    let url = DatabaseUrl::parse(url)?;
    print_status(&crate::moving::database_status(&url).await?, json)?;
    Ok(true)
}

fn print_status(status: &crate::moving::Status, json: bool) -> anyhow::Result<()> {
    print_record(status, json, |s| {
        outln!("{} is at schema {}", s.database, s.schema);
        if s.in_flight.is_empty() {
            outln!("no action is being sent");
        }
        for c in &s.in_flight {
            outln!(
                "action {} is being sent by {} ({})",
                c.action,
                c.host.as_deref().unwrap_or("no host"),
                if c.present {
                    "present"
                } else {
                    "gone: the next start fails it, and it is never sent again"
                }
            );
        }
    })
}

/// `db migrate` and `db status` of the home (the kernel migrated it on
/// open) and `db copy`.
pub(super) async fn execute(kernel: &Kernel, cmd: DbCmd) -> anyhow::Result<bool> {
    match cmd {
        DbCmd::Migrate { json } => {
            let schema = kernel.state_schema().await?;
            let record = serde_json::json!({
                "database": kernel.state_location(),
                "now": schema,
            });
            print_record(&record, json, |_| {
                outln!(
                    "the state database {} is at schema {schema}",
                    kernel.state_location()
                );
            })?;
        }
        DbCmd::Status { json } => print_status(&kernel.operator().database_status().await?, json)?,
        DbCmd::Copy { to, json } => {
            let url = DatabaseUrl::parse(&to)?;
            let copied = kernel.operator().copy_to_database(&url).await?;
            let key = kernel.operator().sealing_key();
            print_record(&copied, json, |c| {
                let rows: u64 = c.tables.iter().map(|t| t.1).sum();
                outln!(
                    "copied {rows} rows in {} tables and {} components into {url}; its ledger continues at id {}",
                    c.tables.len(),
                    c.components,
                    c.next_ledger_id
                );
                outln!(
                    "its secrets are sealed with key {} ({}): give every host of the database that key with GATEHOUSE_KEY_FILE",
                    key.id,
                    key.origin
                );
            })?;
        }
    }
    Ok(true)
}
