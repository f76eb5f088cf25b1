//! One way to speak SQL to either engine: the seam the store's
//! statements are written against once, whichever database holds the
//! deployment.
//!
//! Owns the values handed to a statement ([`Arg`]), the values read back
//! ([`Cell`], [`Row`]), the [`Sql`] trait both engines implement, and the
//! one rewrite a statement needs between them ([`postgres_text`]). It may
//! not hold policy nor know any table: statements belong to the modules of
//! their concept (`claims`, …), which call only this.
//!
//! Why this shape: the store's functions are synchronous and run off the
//! async executor (SQLite is a library call; the PostgreSQL side bridges
//! to its async driver on a blocking thread), so one synchronous trait
//! serves both, and a statement written in the SQL both engines accept is
//! written once. The dialect rule for authors: `?N` placeholders, `IS ?N`
//! for a comparison that must match NULL (rewritten to `IS NOT DISTINCT
//! FROM` for PostgreSQL), integers for truth values (both schemas store
//! 0/1), `CAST(?N AS TEXT) IS NULL` (or `BIGINT`) for an optional
//! argument (PostgreSQL cannot type one only compared with NULL), and no
//! engine's own functions.

use anyhow::Context as _;

/// Which engine a [`Sql`] speaks to: for the few statements the two spell
/// differently (a row lock is `FOR UPDATE` on PostgreSQL; SQLite's writing
/// transactions already exclude each other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    Sqlite,
    Postgres,
}

/// A value handed to a statement.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
}

/// What may be handed to a statement.
pub(crate) trait ToArg {
    fn arg(&self) -> Arg<'_>;
}

impl ToArg for i64 {
    fn arg(&self) -> Arg<'_> {
        Arg::Int(*self)
    }
}

/// Truth values are stored as 0 and 1 by both schemas.
impl ToArg for bool {
    fn arg(&self) -> Arg<'_> {
        Arg::Int(i64::from(*self))
    }
}

impl ToArg for str {
    fn arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for String {
    fn arg(&self) -> Arg<'_> {
        Arg::Text(self)
    }
}

impl ToArg for [u8] {
    fn arg(&self) -> Arg<'_> {
        Arg::Bytes(self)
    }
}

impl<T: ToArg + ?Sized> ToArg for &T {
    fn arg(&self) -> Arg<'_> {
        (**self).arg()
    }
}

impl<T: ToArg> ToArg for Option<T> {
    fn arg(&self) -> Arg<'_> {
        self.as_ref().map_or(Arg::Null, ToArg::arg)
    }
}

/// The arguments of a statement, in placeholder order: `args![id, owner]`.
macro_rules! args {
    () => { &[] as &[&dyn $crate::store::sql::ToArg] };
    ($($a:expr),+ $(,)?) => { &[$(&$a as &dyn $crate::store::sql::ToArg),+] };
}
pub(crate) use args;

/// A value read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cell {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

/// What a [`Cell`] may be read as.
pub(crate) trait FromCell: Sized {
    /// What the caller expected, for the error when the cell is not that.
    const WHAT: &'static str;
    fn from_cell(cell: &Cell) -> Option<Self>;
}

impl FromCell for i64 {
    const WHAT: &'static str = "an integer";
    fn from_cell(cell: &Cell) -> Option<i64> {
        match cell {
            Cell::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl FromCell for bool {
    const WHAT: &'static str = "a truth value (0 or 1)";
    fn from_cell(cell: &Cell) -> Option<bool> {
        match cell {
            Cell::Int(0) => Some(false),
            Cell::Int(1) => Some(true),
            _ => None,
        }
    }
}

impl FromCell for String {
    const WHAT: &'static str = "text";
    fn from_cell(cell: &Cell) -> Option<String> {
        match cell {
            Cell::Text(t) => Some(t.clone()),
            _ => None,
        }
    }
}

impl FromCell for Vec<u8> {
    const WHAT: &'static str = "bytes";
    fn from_cell(cell: &Cell) -> Option<Vec<u8>> {
        match cell {
            Cell::Bytes(b) => Some(b.clone()),
            _ => None,
        }
    }
}

impl<T: FromCell> FromCell for Option<T> {
    const WHAT: &'static str = T::WHAT;
    fn from_cell(cell: &Cell) -> Option<Option<T>> {
        match cell {
            Cell::Null => Some(None),
            other => T::from_cell(other).map(Some),
        }
    }
}

/// One row of a result.
#[derive(Clone, Debug)]
pub(crate) struct Row(Vec<Cell>);

impl Row {
    /// Column `i`, read as `T`; an error that names the column and what it
    /// held when it is not a `T` (a schema and a statement disagreeing).
    pub fn get<T: FromCell>(&self, i: usize) -> anyhow::Result<T> {
        let cell = self
            .0
            .get(i)
            .with_context(|| format!("the statement returned no column {i}"))?;
        T::from_cell(cell)
            .with_context(|| format!("column {i} held {cell:?} where {} was expected", T::WHAT))
    }
}

/// A connection or transaction of either engine. Each call runs one
/// statement, prepared once per connection and kept.
pub(crate) trait Sql {
    fn engine(&self) -> Engine;
    /// Run a statement that returns no rows; the number of rows changed.
    fn exec(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<u64>;
    /// Run a query; every row.
    fn rows(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<Vec<Row>>;
    /// Run a query; its first row, if any.
    fn row(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<Option<Row>> {
        Ok(self.rows(sql, args)?.into_iter().next())
    }
    /// Run an `INSERT` of one row into a table whose key is `id`; the new
    /// row's id. (`RETURNING id` on PostgreSQL; on SQLite the connection's
    /// last row id, which spares the read path a row to read back.)
    fn insert(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<i64> {
        self.row(&format!("{sql} RETURNING id"), args)?
            .ok_or_else(|| anyhow::anyhow!("an insert returned no id"))?
            .get(0)
    }
}

// ---------------------------------------------------------------- SQLite

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
        }
    )*};
}
sql_by_deref!(
    rusqlite::Transaction<'_>,
    rusqlite::Savepoint<'_>,
    std::sync::MutexGuard<'_, rusqlite::Connection>
);

// ------------------------------------------------------------ PostgreSQL

/// `sql` as PostgreSQL spells it: `?N` becomes `$N`, and `IS ?N` / `IS
/// NOT ?N` (SQLite's comparisons that match NULL) become `IS NOT DISTINCT
/// FROM $N` / `IS DISTINCT FROM $N`. Quoted text and names are left alone.
pub(crate) fn postgres_text(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            out.push(c);
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' => {
                quote = Some(c);
                out.push(c);
            }
            '?' if chars.peek().is_some_and(char::is_ascii_digit) => {
                let kept = out.trim_end().len();
                let tail = out[..kept].to_ascii_uppercase();
                if tail.ends_with(" IS NOT") {
                    out.truncate(kept - "IS NOT".len());
                    out.push_str("IS DISTINCT FROM ");
                } else if tail.ends_with(" IS") {
                    out.truncate(kept - "IS".len());
                    out.push_str("IS NOT DISTINCT FROM ");
                }
                out.push('$');
                while let Some(d) = chars.next_if(char::is_ascii_digit) {
                    out.push(d);
                }
            }
            c => out.push(c),
        }
    }
    out
}

impl tokio_postgres::types::ToSql for Arg<'_> {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use tokio_postgres::types::{IsNull, Type};
        match *self {
            Arg::Null => Ok(IsNull::Yes),
            Arg::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
                Type::BOOL => (i != 0).to_sql(ty, out),
                _ => Err(format!("an integer was given where the statement takes {ty}").into()),
            },
            Arg::Text(t) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    t.to_sql(ty, out)
                }
                _ => Err(format!("text was given where the statement takes {ty}").into()),
            },
            Arg::Bytes(b) => match *ty {
                Type::BYTEA => b.to_sql(ty, out),
                _ => Err(format!("bytes were given where the statement takes {ty}").into()),
            },
        }
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        // Each value checks the statement's own type in `to_sql`.
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A PostgreSQL connection or transaction, driven from a blocking thread:
/// each call waits on the runtime `rt` for the async driver. Never used on
/// the executor itself (the store's callers move there first).
pub(crate) struct Postgres<'a, C> {
    pub client: &'a C,
    pub rt: &'a tokio::runtime::Handle,
}

impl<C: deadpool_postgres::GenericClient> Postgres<'_, C> {
    fn run<T>(
        &self,
        sql: &str,
        args: &[&dyn ToArg],
        go: impl AsyncFnOnce(
            &C,
            &tokio_postgres::Statement,
            &[&(dyn tokio_postgres::types::ToSql + Sync)],
        ) -> Result<T, tokio_postgres::Error>,
    ) -> anyhow::Result<T> {
        let text = postgres_text(sql);
        let values: Vec<Arg<'_>> = args.iter().map(|a| a.arg()).collect();
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
            .iter()
            .map(|v| v as &(dyn tokio_postgres::types::ToSql + Sync))
            .collect();
        self.rt
            .block_on(async {
                let st = self.client.prepare_cached(&text).await?;
                go(self.client, &st, &refs).await
            })
            .map_err(|e| anyhow::anyhow!("{} (in: {text})", reason(&e)))
    }
}

impl<C: deadpool_postgres::GenericClient> Sql for Postgres<'_, C> {
    fn engine(&self) -> Engine {
        Engine::Postgres
    }

    fn exec(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<u64> {
        self.run(sql, args, async |c, st, a| c.execute(st, a).await)
    }

    fn rows(&self, sql: &str, args: &[&dyn ToArg]) -> anyhow::Result<Vec<Row>> {
        let rows = self.run(sql, args, async |c, st, a| c.query(st, a).await)?;
        rows.iter().map(postgres_row).collect()
    }
}

fn postgres_row(r: &tokio_postgres::Row) -> anyhow::Result<Row> {
    use tokio_postgres::types::Type;
    let mut cells = Vec::with_capacity(r.len());
    for (i, col) in r.columns().iter().enumerate() {
        let int = |v: Option<i64>| v.map_or(Cell::Null, Cell::Int);
        cells.push(match *col.type_() {
            Type::INT8 => int(r.try_get(i)?),
            Type::INT4 => int(r.try_get::<_, Option<i32>>(i)?.map(i64::from)),
            Type::INT2 => int(r.try_get::<_, Option<i16>>(i)?.map(i64::from)),
            Type::BOOL => int(r.try_get::<_, Option<bool>>(i)?.map(i64::from)),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => r
                .try_get::<_, Option<String>>(i)?
                .map_or(Cell::Null, Cell::Text),
            Type::BYTEA => r
                .try_get::<_, Option<Vec<u8>>>(i)?
                .map_or(Cell::Null, Cell::Bytes),
            ref other => anyhow::bail!(
                "column {:?} is of type {other}, which the store does not read",
                col.name()
            ),
        });
    }
    Ok(Row(cells))
}

/// What the server said, on one line (tokio-postgres puts the server's
/// message in the error's source).
pub(crate) fn reason(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_owned(),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = format!("{text}: {s}");
                source = s.source();
            }
            text
        }
    }
}

#[cfg(test)]
mod tests {
    use super::postgres_text;

    #[test]
    fn placeholders_and_null_comparisons_are_spelt_for_postgres() {
        assert_eq!(
            postgres_text("UPDATE t SET a = ?2 WHERE id = ?1 AND o IS ?3 AND p IS NOT ?10"),
            "UPDATE t SET a = $2 WHERE id = $1 AND o IS NOT DISTINCT FROM $3 AND p IS DISTINCT FROM $10"
        );
        // Quoted text and names are not statements.
        assert_eq!(
            postgres_text("SELECT '?1 is ?2', \"?3\" FROM t WHERE x = ?1"),
            "SELECT '?1 is ?2', \"?3\" FROM t WHERE x = $1"
        );
        // `IS NULL` and a `?` that is not a placeholder stay.
        assert_eq!(
            postgres_text("WHERE a IS NULL AND b = ?"),
            "WHERE a IS NULL AND b = ?"
        );
    }
}
