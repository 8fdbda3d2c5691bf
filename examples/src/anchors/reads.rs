//! The reads benchmark's raw anchors: its queries, the SQL text Diesel sends, run by a raw client
//! on the same tables in the same run, so that a ratio against them is the database's work and
//! not our own client's.
//!
//! - PostgreSQL: `pgbench -n -M prepared -c 1 -t …`, one script per query (pgbench picks one at
//!   random for each transaction), every transaction's latency read from its log (`-l`);
//! - MariaDB: libmariadb's C API, one connection, each query prepared once (`mysql_stmt_prepare`,
//!   the binary protocol Diesel's `MysqlConnection` uses), then for each run: execute, store the
//!   result, fetch every row; the queries alternated.
//!
//! A statement run once (the hand-written `UPDATE`) goes as Diesel's `batch_execute` sends it
//! (the simple query protocol, the text protocol), two ways: on a raw connection kept open
//! ([`RawConnection`]: libpq's `PQexec`, libmariadb's `mysql_real_query`), and on a fresh
//! connection each time (`pgbench -M simple -t 1 -r`, [`libmariadb_statement`]), after a warm-up
//! statement, so that the connection's first statement (which fills its caches of the tables)
//! is not the one timed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::BoxError;

/// A query parameter, drawn afresh for each run.
#[derive(Debug, Clone, Copy)]
pub enum Param {
    /// A uniform random `INTEGER` (`i32`) in `low..=high`.
    Uniform { low: i32, high: i32 },
    /// A `BIGINT` (`i64`) constant, such as a `LIMIT`.
    Constant(i64),
}

/// A query as the benchmark's own client sends it: its SQL with the backend's placeholders
/// (`$1`, `$2` on PostgreSQL, `?` on MySQL), and its parameters in order.
#[derive(Debug, Clone)]
pub struct RawQuery {
    /// What the query is, for the report.
    pub name: String,
    pub sql: String,
    pub params: Vec<Param>,
}

impl RawQuery {
    /// The pgbench script: a `\set` for each parameter, then the SQL with `$n` as `:pn` (which
    /// `-M prepared` sends as the parameter `$n` again).
    pub fn pgbench_script(&self) -> String {
        let mut script = String::new();
        let mut sql = self.sql.clone();
        // The highest number first, so that `$1` does not match inside `$10`.
        for (i, param) in self.params.iter().enumerate().rev() {
            let n = i + 1;
            script = match param {
                Param::Uniform { low, high } => format!("\\set p{n} random({low}, {high})\n"),
                Param::Constant(value) => format!("\\set p{n} {value}\n"),
            } + &script;
            sql = sql.replace(&format!("${n}"), &format!(":p{n}"));
        }
        format!("{script}{sql};\n")
    }
}

/// What a raw client measured.
#[derive(Debug, Default)]
pub struct RawReads {
    /// Every timed run's latency, for each query (each pgbench script), in the order given.
    pub latencies: Vec<Vec<Duration>>,
    /// pgbench's own report: transactions per second (without the initial connection).
    pub tps: Option<f64>,
    /// pgbench's own report of each statement's average latency (`-r`), when asked for.
    pub statements: Vec<Duration>,
}

/// `url` with its password, if any, replaced by `***`, for a printed command line.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((auth, host)) if auth.contains(':') => {
            let user = auth.split_once(':').map_or(auth, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

/// A pgbench run, one client: its scripts, written in a fresh directory under the system's
/// temporary one (removed on drop), and its command line.
pub struct Pgbench {
    protocol: &'static str,
    transactions: u64,
    report_statements: bool,
    dir: PathBuf,
    scripts: Vec<PathBuf>,
    url: String,
}

impl Pgbench {
    /// `queries`, one script each, `-M prepared`, `transactions` transactions a run (pgbench
    /// picks a script at random for each).
    pub fn reads(url: &str, queries: &[RawQuery], transactions: u64) -> Result<Pgbench, BoxError> {
        let scripts: Vec<(String, String)> = queries
            .iter()
            .map(|q| (q.name.replace(' ', "-"), q.pgbench_script()))
            .collect();
        Pgbench::new("prepared", false, url, &scripts, transactions)
    }

    /// `sql` once, as Diesel's `batch_execute` sends it (`-M simple`), after `warm_up` on the
    /// same fresh connection: one transaction of one script, each statement's latency reported
    /// (`-r`), so that the connection's first statement (its catalog caches filled) is not the
    /// one timed.
    pub fn statement(url: &str, warm_up: &str, sql: &str) -> Result<Pgbench, BoxError> {
        let script = format!("{warm_up};\n{sql};\n");
        Pgbench::new("simple", true, url, &[("statement".into(), script)], 1)
    }

    fn new(
        protocol: &'static str,
        report_statements: bool,
        url: &str,
        scripts: &[(String, String)],
        transactions: u64,
    ) -> Result<Pgbench, BoxError> {
        let dir = std::env::temp_dir().join(format!(
            "slotted-reads-pgbench-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        let mut paths = Vec::new();
        for (i, (name, script)) in scripts.iter().enumerate() {
            let path = dir.join(format!("{}-{name}.sql", i + 1));
            std::fs::write(&path, script)?;
            paths.push(path);
        }
        Ok(Pgbench {
            protocol,
            transactions,
            report_statements,
            dir,
            scripts: paths,
            url: url.to_owned(),
        })
    }

    fn log_prefix(&self) -> PathBuf {
        self.dir.join("log")
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = ["-n", "-M", self.protocol, "-c", "1", "-t"]
            .map(str::to_owned)
            .into();
        args.push(self.transactions.to_string());
        if self.report_statements {
            args.push("-r".into());
        }
        args.push("-l".into());
        args.push(format!("--log-prefix={}", self.log_prefix().display()));
        for script in &self.scripts {
            args.push("-f".into());
            args.push(script.display().to_string());
        }
        args
    }

    /// `pgbench --version`'s line, if pgbench runs.
    pub fn version() -> Option<String> {
        let output = Command::new("pgbench").arg("--version").output().ok()?;
        let version = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        (output.status.success() && !version.is_empty()).then_some(version)
    }

    /// The command line, as it is run (the password, if any, left out).
    pub fn command(&self) -> String {
        format!("pgbench {} {}", self.args().join(" "), redacted(&self.url))
    }

    /// Runs pgbench once: every transaction's latency, by script, from its log.
    pub fn run(&self) -> Result<RawReads, BoxError> {
        let output = Command::new("pgbench")
            .args(self.args())
            .arg(&self.url)
            .output()
            .map_err(|e| format!("pgbench: {e} (is it installed?)"))?;
        let run = super::pgbench_run(&output)?;
        if run.failed > 0 {
            return Err(format!("pgbench: {} failed transactions", run.failed).into());
        }
        let mut latencies = vec![Vec::new(); self.scripts.len()];
        // With `-M prepared`, the first transaction of each script also prepares its statement:
        // left out, as the bench's own client's warm-up is.
        let mut first = vec![self.protocol == "prepared"; self.scripts.len()];
        let mut logged = 0;
        for log in logs(&self.dir)? {
            let text = std::fs::read_to_string(&log)?;
            std::fs::remove_file(&log)?;
            // `client_id transaction_no time_us script_no time_epoch time_us` per transaction.
            for line in text.lines() {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let (Some(us), Some(script)) = (fields.get(2), fields.get(3)) else {
                    return Err(format!("pgbench's log: unexpected line `{line}`").into());
                };
                let (us, script): (u64, usize) = (us.parse()?, script.parse()?);
                logged += 1;
                let skip = first
                    .get_mut(script)
                    .ok_or_else(|| format!("pgbench's log: no script {script}"))?;
                if std::mem::take(skip) {
                    continue;
                }
                latencies[script].push(Duration::from_micros(us));
            }
        }
        if logged != run.committed {
            return Err("pgbench's log does not hold every transaction".into());
        }
        // `-r`: after "statement latencies in milliseconds…", one line per command of the
        // script: its average latency, (since 15) its failures, its text.
        let stdout = String::from_utf8_lossy(&output.stdout);
        let statements = stdout
            .lines()
            .skip_while(|line| !line.starts_with("statement latencies in milliseconds"))
            .skip(1)
            .map_while(|line| line.split_whitespace().next()?.parse::<f64>().ok())
            .map(|ms| Duration::from_secs_f64(ms / 1e3))
            .collect();
        Ok(RawReads {
            latencies,
            tps: Some(run.committed as f64 / run.seconds),
            statements,
        })
    }

    /// The scripts, each under its file name, for the report; a line longer than `width`
    /// shortened (with `…`).
    pub fn scripts(&self, width: usize) -> Result<String, BoxError> {
        let mut out = String::new();
        for path in &self.scripts {
            let name = path
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            out += &format!("{name}:\n");
            for line in std::fs::read_to_string(path)?.lines() {
                match line.char_indices().nth(width) {
                    Some((cut, _)) => out += &format!("{}…\n", &line[..cut]),
                    None => out += &format!("{line}\n"),
                }
            }
        }
        Ok(out)
    }
}

impl Drop for Pgbench {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// pgbench's log files in `dir` (`log.<pid>`, one per thread).
fn logs(dir: &Path) -> Result<Vec<PathBuf>, BoxError> {
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("log."))
        {
            logs.push(path);
        }
    }
    Ok(logs)
}

#[cfg(feature = "mysql")]
mod prepared {
    //! libmariadb's prepared statements: `mysql_stmt_*`, integer parameters and columns.

    use std::ffi::CStr;
    use std::time::{Duration, Instant};

    use mysqlclient_sys as ffi;

    use super::super::raw_mysql::Raw;
    use super::super::MysqlUrl;
    use super::{Param, RawQuery, RawReads};
    use crate::BoxError;

    /// A prepared statement with its parameter and result buffers, bound once: each run draws
    /// the parameters into the buffers, executes, stores the result and fetches every row.
    struct Prepared {
        stmt: *mut ffi::MYSQL_STMT,
        params: Vec<Param>,
        // The buffers the binds point into: never resized after binding.
        int4: Vec<i32>,
        int8: Vec<i64>,
        columns: Vec<i64>,
        nulls: Vec<ffi::my_bool>,
        errors: Vec<ffi::my_bool>,
        lengths: Vec<std::ffi::c_ulong>,
        param_binds: Vec<ffi::MYSQL_BIND>,
        column_binds: Vec<ffi::MYSQL_BIND>,
    }

    impl Prepared {
        fn new(raw: &Raw, query: &RawQuery) -> Result<Box<Prepared>, BoxError> {
            // SAFETY: the handle is connected; NULL means out of memory.
            let stmt = unsafe { ffi::mysql_stmt_init(raw.0) };
            if stmt.is_null() {
                return Err("mysql_stmt_init: out of memory".into());
            }
            let mut p = Box::new(Prepared {
                stmt,
                params: query.params.clone(),
                int4: vec![0; query.params.len()],
                int8: vec![0; query.params.len()],
                columns: Vec::new(),
                nulls: Vec::new(),
                errors: Vec::new(),
                lengths: Vec::new(),
                param_binds: Vec::new(),
                column_binds: Vec::new(),
            });
            // SAFETY: `stmt` is valid; the SQL outlives the call.
            let rc = unsafe {
                ffi::mysql_stmt_prepare(
                    stmt,
                    query.sql.as_ptr().cast(),
                    query.sql.len() as std::ffi::c_ulong,
                )
            };
            if rc != 0 {
                return Err(format!("{}: {}", query.sql, p.error()).into());
            }
            // SAFETY: `stmt` is prepared.
            let (params, fields) = unsafe {
                (
                    ffi::mysql_stmt_param_count(stmt) as usize,
                    ffi::mysql_stmt_field_count(stmt) as usize,
                )
            };
            if params != p.params.len() {
                return Err(format!(
                    "{}: {params} placeholders for {} parameters",
                    query.sql,
                    p.params.len()
                )
                .into());
            }
            (p.columns, p.nulls, p.errors, p.lengths) = (
                vec![0; fields],
                vec![ffi::FALSE; fields],
                vec![ffi::FALSE; fields],
                vec![0; fields],
            );
            // The binds point into the buffers above, which stay where they are (the `Vec`s'
            // heap storage; the `Box` keeps the struct itself in place too).
            for i in 0..params {
                // SAFETY: an all-zero MYSQL_BIND is its documented initial state.
                let mut bind: ffi::MYSQL_BIND = unsafe { std::mem::zeroed() };
                match p.params[i] {
                    Param::Uniform { .. } => {
                        bind.buffer_type = ffi::enum_field_types::MYSQL_TYPE_LONG;
                        bind.buffer = (&mut p.int4[i] as *mut i32).cast();
                    }
                    Param::Constant(_) => {
                        bind.buffer_type = ffi::enum_field_types::MYSQL_TYPE_LONGLONG;
                        bind.buffer = (&mut p.int8[i] as *mut i64).cast();
                    }
                }
                p.param_binds.push(bind);
            }
            for i in 0..fields {
                // SAFETY: as above.
                let mut bind: ffi::MYSQL_BIND = unsafe { std::mem::zeroed() };
                bind.buffer_type = ffi::enum_field_types::MYSQL_TYPE_LONGLONG;
                bind.buffer = (&mut p.columns[i] as *mut i64).cast();
                bind.buffer_length = 8;
                bind.is_null = &mut p.nulls[i];
                bind.error = &mut p.errors[i];
                bind.length = &mut p.lengths[i];
                p.column_binds.push(bind);
            }
            // SAFETY: the binds and the buffers they point to live as long as the statement.
            let failed = unsafe {
                (params > 0 && ffi::mysql_stmt_bind_param(stmt, p.param_binds.as_mut_ptr()) != 0)
                    || (fields > 0
                        && ffi::mysql_stmt_bind_result(stmt, p.column_binds.as_mut_ptr()) != 0)
            };
            if failed {
                return Err(format!("{}: {}", query.sql, p.error()).into());
            }
            Ok(p)
        }

        fn error(&self) -> String {
            // SAFETY: mysql_stmt_error returns a NUL-terminated string owned by the statement.
            unsafe { CStr::from_ptr(ffi::mysql_stmt_error(self.stmt)) }
                .to_string_lossy()
                .into_owned()
        }

        /// One run: the rows it read.
        fn run(&mut self) -> Result<u64, String> {
            for (i, param) in self.params.iter().enumerate() {
                match *param {
                    Param::Uniform { low, high } => self.int4[i] = rand::random_range(low..=high),
                    Param::Constant(value) => self.int8[i] = value,
                }
            }
            // SAFETY: the statement is prepared and bound to buffers that outlive it.
            unsafe {
                if ffi::mysql_stmt_execute(self.stmt) != 0
                    || ffi::mysql_stmt_store_result(self.stmt) != 0
                {
                    return Err(self.error());
                }
                let mut rows = 0;
                let fetched = loop {
                    match ffi::mysql_stmt_fetch(self.stmt) {
                        0 => rows += 1,
                        rc if rc as u32 == ffi::MYSQL_NO_DATA => break Ok(rows),
                        rc if rc as u32 == ffi::MYSQL_DATA_TRUNCATED => {
                            break Err("a column is not an integer".to_owned())
                        }
                        _ => break Err(self.error()),
                    }
                };
                ffi::mysql_stmt_free_result(self.stmt);
                fetched
            }
        }
    }

    impl Drop for Prepared {
        fn drop(&mut self) {
            // SAFETY: the statement came from mysql_stmt_init and is closed once, before its
            // connection (which the caller drops after it).
            unsafe { ffi::mysql_stmt_close(self.stmt) };
        }
    }

    /// One libmariadb connection to `url`: each of `queries` prepared, run once untimed, then
    /// `runs` timed runs of each, alternated. A run that reads no row is an error.
    pub fn libmariadb_reads(
        url: &str,
        queries: &[RawQuery],
        runs: usize,
    ) -> Result<RawReads, BoxError> {
        let raw = Raw::connect(&MysqlUrl::parse(url)?)?;
        let mut prepared = queries
            .iter()
            .map(|q| Prepared::new(&raw, q))
            .collect::<Result<Vec<_>, _>>()?;
        let mut latencies = vec![Vec::with_capacity(runs); queries.len()];
        for round in 0..=runs {
            for (i, p) in prepared.iter_mut().enumerate() {
                let started = Instant::now();
                let rows = p.run().map_err(|e| format!("{}: {e}", queries[i].sql))?;
                let took = started.elapsed();
                if rows == 0 {
                    return Err(format!("{}: read no row", queries[i].sql).into());
                }
                if round > 0 {
                    latencies[i].push(took);
                }
            }
        }
        // The statements before their connection.
        drop(prepared);
        drop(raw);
        Ok(RawReads {
            latencies,
            ..RawReads::default()
        })
    }

    /// `sql` run once on a fresh libmariadb connection to `url`, by the text protocol (as
    /// Diesel's `batch_execute` sends it), after `warm_up` on the same connection: how long
    /// `sql` took.
    pub fn libmariadb_statement(url: &str, warm_up: &str, sql: &str) -> Result<Duration, BoxError> {
        let mut raw = Raw::connect(&MysqlUrl::parse(url)?)?;
        raw.run(warm_up)?;
        let started = Instant::now();
        raw.run(sql)?;
        Ok(started.elapsed())
    }
}

#[cfg(feature = "mysql")]
pub use prepared::{libmariadb_reads, libmariadb_statement};

/// A raw connection kept open, that runs statements as Diesel's `batch_execute` does: libpq's
/// `PQexec` (the simple query protocol), libmariadb's `mysql_real_query` (the text protocol).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub struct RawConnection(Session);

#[cfg(any(feature = "postgres", feature = "mysql"))]
enum Session {
    #[cfg(feature = "postgres")]
    Pq(super::raw_pq::Raw),
    #[cfg(feature = "mysql")]
    Mariadb(super::raw_mysql::Raw),
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl RawConnection {
    /// A connection to `url` (`postgres://…` or `mysql://…`).
    pub fn connect(url: &str) -> Result<RawConnection, BoxError> {
        #[cfg(feature = "postgres")]
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(RawConnection(Session::Pq(super::raw_pq::Raw::connect(
                url,
            )?)));
        }
        #[cfg(feature = "mysql")]
        if url.starts_with("mysql://") {
            let url = super::MysqlUrl::parse(url)?;
            return Ok(RawConnection(Session::Mariadb(
                super::raw_mysql::Raw::connect(&url)?,
            )));
        }
        Err(format!("no raw client for {}", redacted(url)).into())
    }

    /// Runs `sql`, a statement without rows: how long it took.
    pub fn time(&mut self, sql: &str) -> Result<Duration, BoxError> {
        let started = std::time::Instant::now();
        match &mut self.0 {
            #[cfg(feature = "postgres")]
            Session::Pq(raw) => {
                let sql = std::ffi::CString::new(sql)?;
                // SAFETY: the handle is connected; `sql` outlives the call; `done` clears the
                // result.
                let result = unsafe { pq_sys::PQexec(raw.0, sql.as_ptr()) };
                raw.done(result)?;
            }
            #[cfg(feature = "mysql")]
            Session::Mariadb(raw) => raw.run(sql)?,
        }
        Ok(started.elapsed())
    }
}
