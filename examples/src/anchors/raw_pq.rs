//! libpq (the library under Diesel's `PgConnection`), every statement prepared once per
//! connection, as `pgbench -M prepared` does, one OS thread per connection.

use std::ffi::{CStr, CString};
use std::time::Duration;

use pq_sys as ffi;

use super::{counter_sql, event_sql, Load, RawThread, Target};
use crate::BoxError;

/// One connection. `PGconn*` is owned here and finished on drop.
pub(super) struct Raw(pub(super) *mut ffi::PGconn);

// SAFETY: a PGconn may move between threads; it is used by one thread at a time.
unsafe impl Send for Raw {}

impl Raw {
    pub(super) fn connect(url: &str) -> Result<Raw, BoxError> {
        let url = CString::new(url)?;
        // SAFETY: PQconnectdb copies what it needs of `url` and returns a handle (NULL
        // only when out of memory), which `Raw` then owns.
        let raw = Raw(unsafe { ffi::PQconnectdb(url.as_ptr()) });
        if raw.0.is_null() {
            return Err("PQconnectdb: out of memory".into());
        }
        // SAFETY: the handle is valid.
        if unsafe { ffi::PQstatus(raw.0) } != ffi::ConnStatusType::CONNECTION_OK {
            return Err(raw.error().into());
        }
        Ok(raw)
    }

    fn error(&self) -> String {
        // SAFETY: PQerrorMessage returns a NUL-terminated string owned by the handle.
        unsafe { CStr::from_ptr(ffi::PQerrorMessage(self.0)) }
            .to_string_lossy()
            .into_owned()
    }

    /// Takes a command's result: `Ok` when it completed.
    pub(super) fn done(&self, result: *mut ffi::PGresult) -> Result<(), String> {
        // SAFETY: `result` came from this handle (NULL when out of memory) and is cleared
        // once.
        unsafe {
            let ok = !result.is_null()
                && ffi::PQresultStatus(result) == ffi::ExecStatusType::PGRES_COMMAND_OK;
            ffi::PQclear(result);
            if ok {
                Ok(())
            } else {
                Err(self.error())
            }
        }
    }

    /// Prepares `sql` as statement `name`, the parameters' types left to the server.
    fn prepare(&mut self, name: &CStr, sql: &str, params: i32) -> Result<(), String> {
        let sql = CString::new(sql).map_err(|e| e.to_string())?;
        // SAFETY: the handle is connected; the strings outlive the call.
        let result = unsafe {
            ffi::PQprepare(
                self.0,
                name.as_ptr(),
                sql.as_ptr(),
                params,
                std::ptr::null(),
            )
        };
        self.done(result)
    }

    /// Runs prepared statement `name` with `params` in text format.
    fn exec(&mut self, name: &CStr, params: &[&CStr]) -> Result<(), String> {
        let values: Vec<*const std::ffi::c_char> = params.iter().map(|p| p.as_ptr()).collect();
        // SAFETY: the handle is connected; `values` and what it points to outlive the
        // call; NULL lengths and formats mean text parameters.
        let result = unsafe {
            ffi::PQexecPrepared(
                self.0,
                name.as_ptr(),
                values.len() as i32,
                values.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            )
        };
        self.done(result)
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the handle came from PQconnectdb and is finished once.
        unsafe { ffi::PQfinish(self.0) }
    }
}

const BEGIN: &CStr = c"begin";
const EVENT: &CStr = c"event";
const COUNTER: &CStr = c"counter";
const COMMIT: &CStr = c"commit";

/// A writer's connection, its statements prepared, and its number as a text parameter.
struct Writer {
    raw: Raw,
    writer: CString,
    target: Target,
}

impl Writer {
    fn counter(&mut self) -> Result<(), String> {
        match self.target {
            Target::SingleRow => self.raw.exec(COUNTER, &[]),
            Target::PrivateRow => self.raw.exec(COUNTER, &[&self.writer]),
        }
    }
}

impl RawThread for Writer {
    fn bare(&mut self) -> Result<(), String> {
        self.counter()
    }

    fn business(&mut self, hold: Duration) -> Result<(), String> {
        self.raw.exec(BEGIN, &[])?;
        self.raw.exec(EVENT, &[&self.writer])?;
        self.counter()?;
        std::thread::sleep(hold);
        self.raw.exec(COMMIT, &[])
    }

    fn rollback(&mut self) {
        let rollback = c"ROLLBACK";
        // SAFETY: the handle is connected; the result is cleared by `done`.
        let result = unsafe { ffi::PQexec(self.raw.0, rollback.as_ptr()) };
        let _ = self.raw.done(result);
    }
}

/// `writers` threads, one libpq connection each, prepared statements, for `seconds`.
pub fn threads(
    url: &str,
    target: Target,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    let counter = counter_sql(target, false, "$1");
    let counter_params = match target {
        Target::SingleRow => 0,
        Target::PrivateRow => 1,
    };
    let conns = (0..writers)
        .map(|w| {
            let mut raw = Raw::connect(url)?;
            raw.prepare(BEGIN, "BEGIN", 0)?;
            raw.prepare(EVENT, &event_sql("$1"), 1)?;
            raw.prepare(COUNTER, &counter, counter_params)?;
            raw.prepare(COMMIT, "COMMIT", 0)?;
            Ok(Writer {
                raw,
                writer: CString::new(w.to_string())?,
                target,
            })
        })
        .collect::<Result<Vec<_>, BoxError>>()?;
    super::run_threads(conns, hold, seconds)
}
