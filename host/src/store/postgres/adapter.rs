//! The PostgreSQL side of the [`Sql`] seam: the one rewrite a statement
//! needs ([`postgres_text`]), values as the driver takes them, and rows
//! read back. It may not hold policy nor know any table.

use crate::store::sql::{Arg, Cell, Engine, Hold, Row, Sql, ToArg};

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
    /// The pool's count of round trips, one more per statement.
    pub trips: &'a std::sync::atomic::AtomicU64,
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
        self.trips
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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

    fn rows_held(&self, select: &str, args: &[&dyn ToArg], how: Hold) -> anyhow::Result<Vec<Row>> {
        let lock = match how {
            Hold::Update => "FOR UPDATE",
            Hold::Share => "FOR SHARE",
        };
        self.rows(&format!("{select} {lock}"), args)
    }

    fn hold(&self, select: &str, args: &[&dyn ToArg]) -> anyhow::Result<()> {
        self.rows_held(select, args, Hold::Update).map(drop)
    }

    fn tell_hosts(&self, notify: &str, args: &[&dyn ToArg]) -> anyhow::Result<()> {
        self.exec(notify, args).map(drop)
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
