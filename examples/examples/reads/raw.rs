//! The raw client of the reads benchmark: the same queries as Diesel's, by pgbench on
//! PostgreSQL and by libmariadb on MariaDB, in the same run.

use super::*;

/// The raw client of `C`'s backend: pgbench on PostgreSQL, libmariadb on MariaDB.
pub(crate) struct RawClient {
    url: String,
    queries: Vec<RawQuery>,
    runs: usize,
    pgbench: Option<Pgbench>,
}

impl RawClient {
    /// The timed loop's four queries of `C` at `n` records (the two anchors and slotted's two
    /// reads, so that the raw anchors run in the same mix as Diesel's), `runs` runs of each a
    /// round.
    pub(crate) fn new<C: TestConnection + Reads>(
        url: &str,
        n: usize,
        runs: usize,
    ) -> Result<RawClient, BoxError> {
        let top = vec![Param::Constant(20)];
        let page = vec![
            Param::Uniform {
                low: 1,
                high: last_page(n),
            },
            Param::Constant(20),
        ];
        let names = ["top", "top-exact-counts", "page", "page-exact"];
        let params = [top.clone(), top, page.clone(), page];
        let queries = C::read_sql()?
            .into_iter()
            .zip(names.into_iter().zip(params))
            .map(|(sql, (name, params))| RawQuery {
                name: name.into(),
                sql,
                params,
            })
            .collect::<Vec<_>>();
        let pgbench = match C::NAME {
            "postgres" => Some(Pgbench::reads(
                url,
                &queries,
                (runs * queries.len()) as u64,
            )?),
            _ => None,
        };
        Ok(RawClient {
            url: url.to_owned(),
            queries,
            runs,
            pgbench,
        })
    }

    pub(crate) fn name<C: TestConnection>() -> &'static str {
        match C::NAME {
            "postgres" => "pgbench",
            _ => "libmariadb",
        }
    }

    /// The raw client that runs the hand-written UPDATE on a connection kept open.
    pub(crate) fn kept_name<C: TestConnection>() -> &'static str {
        match C::NAME {
            "postgres" => "libpq",
            _ => "libmariadb",
        }
    }

    /// What it calls: what Diesel's `batch_execute` calls.
    pub(crate) fn kept_call<C: TestConnection>() -> &'static str {
        match C::NAME {
            "postgres" => "PQexec (the simple query protocol)",
            _ => "mysql_real_query (the text protocol), mysql_store_result",
        }
    }

    /// The raw client that runs it on a fresh connection each time.
    pub(crate) fn fresh_name<C: TestConnection>() -> &'static str {
        match C::NAME {
            "postgres" => "pgbench, a fresh connection each time",
            _ => "libmariadb, a fresh connection each time",
        }
    }

    /// One round of the four queries.
    pub(crate) fn reads(&self) -> Result<RawReads, BoxError> {
        match &self.pgbench {
            Some(pgbench) => pgbench.run(),
            None => slotted_examples::anchors::reads::libmariadb_reads(
                &self.url,
                &self.queries,
                self.runs,
            ),
        }
    }

    /// `sql` once, as Diesel's `batch_execute` sends it, on a fresh connection after `warm_up`:
    /// its latency, and how it was run.
    pub(crate) fn statement(
        &self,
        warm_up: &str,
        sql: &str,
    ) -> Result<(Duration, String), BoxError> {
        if self.pgbench.is_none() {
            let took =
                slotted_examples::anchors::reads::libmariadb_statement(&self.url, warm_up, sql)?;
            return Ok((
                took,
                format!(
                    "libmariadb_statement: a fresh connection; untimed, `{warm_up}`; timed, the \
                     UPDATE: mysql_real_query (the text protocol), mysql_store_result\n"
                ),
            ));
        }
        let pgbench = Pgbench::statement(&self.url, warm_up, sql)?;
        let run = pgbench.run()?;
        let took = run.statements.get(1).copied();
        Ok((
            took.ok_or("pgbench reported no latency of the UPDATE")?,
            format!(
                "{}\n(the second statement's latency, from -r)\n{}",
                pgbench.command(),
                pgbench.scripts(160)?
            ),
        ))
    }

    /// How the reads were run, for the report.
    pub(crate) fn describe(&self) -> Result<String, BoxError> {
        Ok(match &self.pgbench {
            Some(pgbench) => format!(
                "{}\n{}\n(each run's first transaction of each script, which prepares its \
                 statement, left out)\n{}",
                Pgbench::version().unwrap_or_default(),
                pgbench.command(),
                pgbench.scripts(200)?
            ),
            None => {
                let mut out = format!(
                    "libmariadb_reads: one connection to {}, each query prepared once \
                     (mysql_stmt_prepare), run once untimed, then {} runs of each, alternated: \
                     mysql_stmt_execute, mysql_stmt_store_result, mysql_stmt_fetch of every row\n",
                    slotted_examples::anchors::reads::redacted(&self.url),
                    self.runs
                );
                for q in &self.queries {
                    out += &format!("{}: {}  -- {:?}\n", q.name, q.sql, q.params);
                }
                out
            }
        })
    }
}
