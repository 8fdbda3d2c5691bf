//! libmariadb's C API, text protocol: the least a thread-per-connection client can do.

use std::ffi::{CStr, CString};
use std::time::Duration;

use mysqlclient_sys as ffi;

#[cfg(feature = "async")]
use super::{counter_sql, event_sql, Target};
use super::{Load, MysqlUrl, RawThread};
use crate::BoxError;

/// One connection. `MYSQL*` is owned here and closed on drop.
pub(super) struct Raw(pub(super) *mut ffi::MYSQL);

// SAFETY: a MYSQL handle may move between threads; it is used by one thread at a time.
unsafe impl Send for Raw {}

impl Raw {
    pub(super) fn connect(url: &MysqlUrl) -> Result<Raw, BoxError> {
        let c = |s: &str| CString::new(s).map_err(|e| e.to_string());
        let (host, user, password, db) = (
            c(&url.host)?,
            c(&url.user)?,
            c(&url.password)?,
            c(&url.database)?,
        );
        let socket = url.socket.as_deref().map(c).transpose()?;
        // SAFETY: mysql_init(NULL) allocates a handle or returns NULL; every pointer passed
        // to mysql_real_connect outlives the call.
        unsafe {
            let handle = ffi::mysql_init(std::ptr::null_mut());
            if handle.is_null() {
                return Err("mysql_init: out of memory".into());
            }
            let raw = Raw(handle);
            let connected = ffi::mysql_real_connect(
                handle,
                host.as_ptr(),
                user.as_ptr(),
                password.as_ptr(),
                db.as_ptr(),
                u32::from(url.port),
                socket.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
                0,
            );
            if connected.is_null() {
                return Err(raw.error().into());
            }
            Ok(raw)
        }
    }

    fn error(&self) -> String {
        // SAFETY: mysql_error returns a NUL-terminated string owned by the handle.
        unsafe { CStr::from_ptr(ffi::mysql_error(self.0)) }
            .to_string_lossy()
            .into_owned()
    }

    /// Runs a statement that returns no rows.
    pub(super) fn run(&mut self, sql: &str) -> Result<(), String> {
        // SAFETY: the handle is connected; `sql` outlives the call.
        let rc = unsafe {
            ffi::mysql_real_query(self.0, sql.as_ptr().cast(), sql.len() as std::ffi::c_ulong)
        };
        if rc != 0 {
            return Err(self.error());
        }
        // SAFETY: as above; a statement without rows gives NULL, freed or not.
        unsafe {
            let result = ffi::mysql_store_result(self.0);
            if !result.is_null() {
                ffi::mysql_free_result(result);
            }
        }
        Ok(())
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        // SAFETY: the handle came from mysql_init and is closed once.
        unsafe { ffi::mysql_close(self.0) }
    }
}

/// A writer's connection with its statements, the writer's number written in.
#[cfg(feature = "async")]
struct Writer {
    raw: Raw,
    event: String,
    counter: String,
}

#[cfg(feature = "async")]
impl RawThread for Writer {
    fn bare(&mut self) -> Result<(), String> {
        self.raw.run(&self.counter)
    }

    fn business(&mut self, hold: Duration) -> Result<(), String> {
        self.raw.run("BEGIN")?;
        self.raw.run(&self.event)?;
        self.raw.run(&self.counter)?;
        std::thread::sleep(hold);
        self.raw.run("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.raw.run("ROLLBACK");
    }
}

/// A writer's connection that runs the statements `script` gives it, in turn: a transaction
/// of its own (`BEGIN`, the statement, the hold, `COMMIT`) each.
struct Scripted {
    raw: Raw,
    writer: u32,
    next: u64,
    script: fn(u32, u64) -> String,
}

impl RawThread for Scripted {
    fn bare(&mut self) -> Result<(), String> {
        self.next += 1;
        self.raw.run(&(self.script)(self.writer, self.next))
    }

    fn business(&mut self, hold: Duration) -> Result<(), String> {
        self.next += 1;
        self.raw.run("BEGIN")?;
        self.raw.run(&(self.script)(self.writer, self.next))?;
        std::thread::sleep(hold);
        self.raw.run("COMMIT")
    }

    fn rollback(&mut self) {
        let _ = self.raw.run("ROLLBACK");
    }
}

/// `writers` threads, one libmariadb connection each, for `seconds`, each running
/// `script(writer, n)`, its n-th statement, in a transaction held `hold` more (or alone,
/// without `hold`): another benchmark's transaction, run by the raw client.
pub fn scripted(
    url: &str,
    script: fn(u32, u64) -> String,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    let url = MysqlUrl::parse(url)?;
    let conns = (0..writers)
        .map(|writer| {
            Ok(Scripted {
                raw: Raw::connect(&url)?,
                writer,
                next: 0,
                script,
            })
        })
        .collect::<Result<Vec<_>, BoxError>>()?;
    super::run_threads(conns, hold, seconds)
}

/// `writers` threads, one libmariadb connection each, for `seconds`.
#[cfg(feature = "async")]
pub fn threads(
    url: &str,
    target: Target,
    hold: Option<Duration>,
    writers: u32,
    seconds: f64,
) -> Result<Load, BoxError> {
    let url = MysqlUrl::parse(url)?;
    let conns = (0..writers)
        .map(|w| {
            Ok(Writer {
                raw: Raw::connect(&url)?,
                event: event_sql(&w.to_string()),
                counter: counter_sql(target, true, &w.to_string()),
            })
        })
        .collect::<Result<Vec<_>, BoxError>>()?;
    super::run_threads(conns, hold, seconds)
}
