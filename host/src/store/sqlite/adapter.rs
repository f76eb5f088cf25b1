//! The SQLite side of the [`Sql`] seam: a connection (or a transaction
//! on it) runs the store's statements as library calls, each prepared once
//! and kept. It may not hold policy nor know any table.

use crate::store::sql::{Arg, Cell, Engine, Hold, Row, Sql, ToArg};
use anyhow::Context as _;

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match *self {
            Arg::Null => ValueRef::Null,
            Arg::Int(i) => ValueRef::Integer(i),
            Arg::Text(t) => ValueRef::Text(t.as_bytes()),
            Arg::Bytes(b) => ValueRef::Blob(b),
        }))
    }
}

fn sqlite_args<'a>(args: &'a [&'a dyn ToArg]) -> impl rusqlite::Params + 'a {
    rusqlite::params_from_iter(args.iter().map(|a| a.arg()))
}

/// A transaction derefs to its connection, so this serves both.
impl Sql for rusqlite::Connection {
    fn engine(&self) -> Engine {
        Engine::Sqlite
    }

    fn exec(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<u64> {
        let mut st = self.prepare_cached(sql)?;
        Ok(st.execute(sqlite_args(args))? as u64)
    }

    fn insert(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<i64> {
        let mut st = self.prepare_cached(sql)?;
        st.execute(sqlite_args(args))?;
        Ok(self.last_insert_rowid())
    }

    /// A writing transaction (`BEGIN IMMEDIATE`) already holds the whole
    /// database against other writers.
    fn rows_held(&self, select: &str, args: &[&dyn ToArg], _: Hold) -> anyhow::Result<Vec<Row>> {
        self.rows(select, args)
    }

    fn hold(&self, _: &str, _: &[&dyn ToArg]) -> anyhow::Result<()> {
        Ok(())
    }

    fn tell_hosts(&self, _: &str, _: &[&dyn ToArg]) -> anyhow::Result<()> {
        Ok(())
    }

    fn rows(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<Vec<Row>> {
        use rusqlite::types::ValueRef;
        let mut st = self.prepare_cached(sql)?;
        let width = st.column_count();
        let mut rows = st.query(sqlite_args(args))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut cells = Vec::with_capacity(width);
            for i in 0..width {
                cells.push(match r.get_ref(i)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(n) => Cell::Int(n),
                    ValueRef::Text(t) => Cell::Text(
                        std::str::from_utf8(t)
                            .context("the database held text that is not UTF-8")?
                            .to_owned(),
                    ),
                    ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
                    ValueRef::Real(_) => {
                        anyhow::bail!("column {i} held a real number, which no statement reads")
                    }
                });
            }
            out.push(Row(cells));
        }
        Ok(out)
    }
}

/// A transaction or savepoint is its connection's [`Sql`].
macro_rules! sql_by_deref {
    ($($t:ty),*) => {$(
        impl Sql for $t {
            fn engine(&self) -> Engine {
                Engine::Sqlite
            }
            fn exec(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<u64> {
                (**self).exec(sql, args)
            }
            fn rows(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<Vec<Row>> {
                (**self).rows(sql, args)
            }
            fn insert(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<i64> {
                (**self).insert(sql, args)
            }
            fn rows_held(&self, sql: &str, args: &[&dyn ToArg], how: Hold) -> anyhow::Result<Vec<Row>> {
                (**self).rows_held(sql, args, how)
            }
            fn hold(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<()> {
                (**self).hold(sql, args)
            }
            fn tell_hosts(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<()> {
                (**self).tell_hosts(sql, args)
            }
        }
    )*};
}
sql_by_deref!(
    rusqlite::Transaction<'_>,
    rusqlite::Savepoint<'_>,
    std::sync::MutexGuard<'_, rusqlite::Connection>
);
