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
pub(crate) struct Row(pub(in crate::store) Vec<Cell>);

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
    /// Run the query `select` and hold the rows it read as `how` says until
    /// the transaction ends, so that what the caller read stays true while
    /// it decides. PostgreSQL locks them (`FOR UPDATE`, `FOR SHARE`);
    /// SQLite's writing transaction already excludes every other writer,
    /// so there it is a plain read.
    fn rows_held(&self, select: &str, args: &[&dyn ToArg], how: Hold) -> anyhow::Result<Vec<Row>>;
    /// [`Sql::rows_held`]'s first row, if any.
    fn row_held(
        &self,
        select: &str,
        args: &[&dyn ToArg],
        how: Hold,
    ) -> anyhow::Result<Option<Row>> {
        Ok(self.rows_held(select, args, how)?.into_iter().next())
    }
    /// Hold the rows of `select` for update until the transaction ends,
    /// reading nothing: before a read that must see what a concurrent
    /// writer of them committed. Nothing to do on SQLite (see
    /// [`Sql::rows_held`]), so nothing runs there.
    fn hold(&self, select: &str, args: &[&dyn ToArg]) -> anyhow::Result<()>;
    /// Tell the other hosts of a shared database, once this transaction
    /// commits (never if it rolls back): `notify` is a statement calling
    /// `pg_notify`. An embedded home has no other hosts (its processes
    /// watch the file itself), so nothing runs on SQLite.
    fn tell_hosts(&self, notify: &str, args: &[&dyn ToArg]) -> anyhow::Result<()>;
}

/// How [`Sql::rows_held`] holds the rows it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    /// No other transaction may change them or hold them (`FOR UPDATE`).
    Update,
    /// Others may read and share them, none may change them (`FOR SHARE`).
    Share,
}
