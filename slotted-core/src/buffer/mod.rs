//! The write-behind buffer: counts that need not be in the caller's transaction (views,
//! downloads, impressions) merged in memory per (counter, key) and flushed in batches.
//!
//! [`CounterBuffer`] (an r2d2 pool, flushed by a thread; feature `r2d2`) and
//! `AsyncCounterBuffer` (a bb8 or deadpool pool, flushed by a tokio task; features `async` with
//! `bb8` or `deadpool`) share one merging core and one flush job. Configure them with
//! [`BufferConfig`]; watch them with [`BufferStats`]. The guarantees, the cap and what an outage
//! does: `docs/guide/buffer.md`.
//
// The code: `pending` is the merging core (no I/O; its batches in `pending/batches.rs`),
// `signal` wakes the flusher, `flush` is the flush job and loop written once over `Exec`, `sync`
// and `asynch` are the two faces.

#[cfg(feature = "async")]
pub(crate) mod asynch;
mod flush;
mod pending;
mod signal;
pub(crate) mod sync;

use std::time::Duration;

#[cfg(feature = "async")]
pub use asynch::{AsyncConnectionPool, AsyncCounterBuffer};
pub use sync::{ConnectionPool, CounterBuffer};

use crate::count::check_key_in;
use crate::error::Result;
use crate::handle::Counter;
use crate::key::RawKey;
use crate::table::{CounterSpec, CounterTable};

/// What an add does when the buffer holds as much as it may
/// ([`BufferConfig::max_pending_keys`], [`BufferConfig::max_unflushed_adds`]): the database has
/// been failing for a while, or adds outpace flushes. Either way the refusal is counted in
/// [`BufferStats::refusals`]; nothing is ever dropped silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Return [`Error::BufferFull`](crate::Error::BufferFull) at once (the default): the
    /// caller decides (count it transactionally, log it, drop it knowingly).
    #[default]
    Refuse,
    /// Wait up to this long for a flush to make room, then refuse as [`WhenFull::Refuse`]
    /// does. The sync calls block their thread; on an [`AsyncCounterBuffer`], only
    /// `add_buffered_async` waits (the sync `add_buffered` refuses at once).
    Block(Duration),
}

/// How a buffer flushes and how much it holds. `BufferConfig { interval: …, ..Default::default() }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferConfig {
    /// How often the flusher writes what is pending. Default 1 s: totals read from the
    /// database lag by about this much, and a SIGKILL loses about this much.
    pub interval: Duration,
    /// Flush early when this many (counter, key, bucket) entries are pending. Default 10,000.
    pub flush_at_keys: usize,
    /// The most entries held (pending or being flushed); an add of a new key past it is
    /// refused or waits ([`WhenFull`]). Adds to a key already held are always taken. Default
    /// 100,000 (about 10 MB; see the README for the measured bytes per key).
    pub max_pending_keys: usize,
    /// The most adds held that are not yet in the database: bounds the loss on a SIGKILL.
    /// Default `None` (bounded by time, one interval, not by count).
    pub max_unflushed_adds: Option<u64>,
    /// When full: refuse or wait.
    pub when_full: WhenFull,
    /// The first pause after a failed flush; it doubles up to `max_retry_delay`. Default 100 ms.
    pub retry_delay: Duration,
    /// The longest pause between retries. Default 10 s.
    pub max_retry_delay: Duration,
    /// How long `shutdown` keeps retrying before it gives up and reports what is left.
    /// Default 30 s.
    pub shutdown_timeout: Duration,
    /// How long a flush id stays in `slotted_flushes`. A chunk whose COMMIT outcome stays
    /// unknown (the database unreachable) for longer than this could be counted twice once
    /// the database is back. Default 7 days.
    pub flush_log_retention: Duration,
    /// How often a buffer deletes flush ids older than the retention. Default 10 min.
    pub prune_every: Duration,
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            interval: Duration::from_secs(1),
            flush_at_keys: 10_000,
            max_pending_keys: 100_000,
            max_unflushed_adds: None,
            when_full: WhenFull::Refuse,
            retry_delay: Duration::from_millis(100),
            max_retry_delay: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(30),
            flush_log_retention: Duration::from_secs(7 * 86_400),
            prune_every: Duration::from_secs(600),
        }
    }
}

/// What a buffer has done, read with `stats()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferStats {
    /// Entries (counter, key, bucket) held: pending, or written by a flush not yet committed.
    pub pending_keys: usize,
    /// Rows cut into batches for a flush and not yet committed. However many flushes fail,
    /// at most one per entry held, plus the rows of one batch whose COMMIT is in doubt
    /// (at most 4,096): retries write the entries' merged deltas, never copies of them.
    pub batched_rows: usize,
    /// Adds taken and not yet known to be in the database: what a SIGKILL now would lose.
    pub unflushed_adds: u64,
    /// Adds taken, ever.
    pub adds: u64,
    /// Adds known to be in the database (or cancelled out by others of the same key).
    pub flushed_adds: u64,
    /// Flush rounds that wrote everything they took.
    pub flushes: u64,
    /// Slot rows upserted, over all flushes.
    pub flushed_rows: u64,
    /// Transactions committed (one per chunk of up to 4,096 rows of one counter).
    pub transactions: u64,
    /// Rows the last round wrote.
    pub last_flush_rows: u64,
    /// How long the last successful round took.
    pub last_flush_latency: Duration,
    /// The longest successful round.
    pub max_flush_latency: Duration,
    /// The time all successful rounds took (`/ flushes`: the mean latency).
    pub total_flush_time: Duration,
    /// Rounds that failed; the flusher retried each after a backoff, the deltas kept.
    pub failed_flushes: u64,
    /// COMMITs whose outcome was unknown (connection lost); each was resolved through the
    /// flush log, never counted twice.
    pub commits_in_doubt: u64,
    /// Adds refused because the buffer was full.
    pub refusals: u64,
    /// The last flush error, if any.
    pub last_error: Option<String>,
}

mod sealed {
    use crate::error::Result;
    use crate::key::RawKey;
    use crate::table::CounterSpec;

    pub trait Sealed {
        fn core(&self) -> &super::pending::Core;
        /// Adds, applying the policy as this face can (the sync face may block).
        fn add_raw(&self, spec: &CounterSpec, key: RawKey, bucket: i64, delta: i64) -> Result<()>;
    }
}

/// A write-behind buffer, sync ([`CounterBuffer`]) or async ([`AsyncCounterBuffer`]): what
/// [`Counter::add_buffered`] and [`Counter::pending`] take. Sealed.
pub trait Buffer: sealed::Sealed {}

impl<'k, T: CounterTable> Counter<'k, T> {
    fn buffered_entry(&self, buffer: &impl Buffer) -> Result<(RawKey, i64)> {
        let spec: &CounterSpec = &T::SPEC;
        let key = check_key_in(buffer.core().dialect, spec, self.key())?.to_raw();
        let bucket = spec.bucket.map_or(0, |width| width.start_of(self.now()));
        Ok((key, bucket))
    }

    /// Adds `delta` to the record's count through a write-behind buffer: merged in memory, no
    /// I/O, written by the buffer's next flush (within about one
    /// [`interval`](BufferConfig::interval)), outside any transaction of yours.
    ///
    /// Errors: [`Error::BufferFull`](crate::Error::BufferFull) when the buffer is full
    /// ([`WhenFull`]), [`Error::BufferClosed`](crate::Error::BufferClosed) after
    /// `shutdown`, [`Error::Overflow`](crate::Error::Overflow) when the key's pending delta
    /// would leave `i64`, [`Error::InvalidKey`](crate::Error::InvalidKey) as for `add`. Adding 0
    /// does nothing.
    pub fn add_buffered(&self, delta: i64, buffer: &impl Buffer) -> Result<()> {
        let (key, bucket) = self.buffered_entry(buffer)?;
        buffer.add_raw(&T::SPEC, key, bucket, delta)
    }

    /// Adds 1 through a buffer. See [`Counter::add_buffered`].
    pub fn increment_buffered(&self, buffer: &impl Buffer) -> Result<()> {
        self.add_buffered(1, buffer)
    }

    /// [`add_buffered`](Self::add_buffered) that, when the buffer is full and its policy is
    /// [`WhenFull::Block`], waits for room without blocking the runtime's thread.
    #[cfg(feature = "async")]
    #[cfg_attr(docsrs, doc(cfg(feature = "async")))]
    pub async fn add_buffered_async(&self, delta: i64, buffer: &AsyncCounterBuffer) -> Result<()> {
        let (key, bucket) = self.buffered_entry(buffer)?;
        buffer.add_waiting(&T::SPEC, key, bucket, delta).await
    }

    /// The record's delta still held by `buffer` (pending, or being flushed), of every bucket:
    /// `total(conn)? + pending(&buffer)` reads this process's own writes. 0 for a key the
    /// buffer does not hold (or that cannot be stored).
    pub fn pending(&self, buffer: &impl Buffer) -> i64 {
        match self.buffered_entry(buffer) {
            Ok((key, _)) => buffer.core().pending(&T::SPEC, &key),
            Err(_) => 0,
        }
    }
}
