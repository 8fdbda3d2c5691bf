//! The merging core of the write-behind buffer, shared by the sync and the async face: the
//! pending deltas, cut into key-ordered chunks, and the accounting that keeps every delta either
//! in memory or in the database. No I/O, no runtime.
//!
//! A delta lives in an [`Entry`] of its (counter, key, bucket): `pending` until a flush cuts it
//! into a [`Chunk`], then `in_flight` until that chunk's transaction is known to have committed,
//! when it leaves memory. Reads of [`Core::pending`] see both, so a process reads its own writes.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub(crate) use super::signal::Signal;
use stats::Tally;

mod batches;
mod stats;
use super::BufferConfig;
use crate::dialect::Dialect;
use crate::error::{Error, Result};
use crate::key::RawKey;
use crate::table::{CounterSpec, Storage};

/// Shards of the pending map: adders of different keys rarely wait for one another.
const SHARDS: usize = 16;

/// Rows per chunk, one transaction each: at most 5 binds a row, under every backend's bind
/// limit (SQLite 32,766; PostgreSQL and MySQL 65,535).
pub(crate) const ROWS_PER_CHUNK: usize = 4096;

/// Locks a mutex whose data stays valid after a panic elsewhere (counters and maps updated in
/// single steps): a panicking adder must not stop the flusher.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Which counter: its table, and for the shared table its `record_type`.
fn counter_id(spec: &CounterSpec) -> (&'static str, &'static str) {
    match spec.storage {
        Storage::Table => (spec.table, ""),
        Storage::Shared { record_type } => (spec.table, record_type),
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    pending: i64,
    pending_adds: u64,
    in_flight: i64,
}

#[derive(Default)]
struct Shard {
    specs: Vec<CounterSpec>,
    entries: HashMap<(u16, RawKey, i64), Entry>,
    /// Adds acknowledged, ever.
    adds: u64,
    /// Adds acknowledged and not yet known committed.
    unflushed_adds: u64,
}

impl Shard {
    fn spec_index(&mut self, spec: &CounterSpec) -> u16 {
        let id = counter_id(spec);
        match self.specs.iter().position(|s| counter_id(s) == id) {
            Some(i) => i as u16,
            None => {
                self.specs.push(*spec);
                (self.specs.len() - 1) as u16
            }
        }
    }
}

/// One row of a chunk: a merged delta.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub key: RawKey,
    pub bucket: i64,
    pub delta: i64,
    /// The adds merged into it.
    pub adds: u64,
}

/// The rows of one counter that one transaction writes, with the id it logs.
#[derive(Debug, Clone)]
pub(crate) struct Chunk {
    pub id: i64,
    pub spec: CounterSpec,
    pub rows: Vec<Row>,
    /// A COMMIT of it failed: it may be in the database already.
    pub in_doubt: bool,
}

/// Failure injection for the tests (hidden API).
#[derive(Default)]
pub(crate) struct Faults {
    /// Report this many successful COMMITs as lost connections.
    pub lose_commits: AtomicU64,
    /// Skip the flush-log lookup before retrying a chunk in doubt.
    pub skip_lookup: AtomicBool,
}

#[cfg(feature = "test-hooks")]
impl Faults {
    /// Reports the next `n` successful COMMITs as lost connections.
    pub(crate) fn lose_commit_outcomes(&self, n: u64) {
        self.lose_commits.store(n, Ordering::SeqCst);
    }

    /// Retries chunks in doubt without looking their id up first.
    pub(crate) fn skip_flush_lookup(&self, skip: bool) {
        self.skip_lookup.store(skip, Ordering::SeqCst);
    }
}

/// Why an add was not taken.
pub(crate) enum Refused {
    /// The bound is reached: wait for a flush, or refuse.
    Full,
    /// Definitive: a closed buffer, an overflowing delta.
    Error(Error),
}

/// The buffer's state, shared by its handles and its flusher. (`pub` in a private module: the
/// sealed `Buffer` trait names it, no user can.)
pub struct Core {
    pub(crate) config: BufferConfig,
    pub(crate) dialect: Dialect,
    /// The slot a flush writes to on SQLite (which has no connection identity).
    pub(crate) sqlite_slot: u16,
    shards: Vec<Mutex<Shard>>,
    hasher: RandomState,
    /// Distinct (counter, key, bucket) entries held, pending or in flight.
    keys: AtomicUsize,
    /// Adds not yet flushed, kept only when `max_unflushed_adds` is set.
    unflushed: AtomicU64,
    /// Chunks cut and not yet committed, in key order.
    chunks: Mutex<VecDeque<Chunk>>,
    /// Rows in chunks cut and not yet committed (queued, or being written).
    batched_rows: AtomicUsize,
    tally: Tally,
    /// No more adds: the buffer is shutting down.
    closed: AtomicBool,
    pub(crate) wake: Signal,
    /// Raised after each flush, for adders waiting for room.
    room: (Mutex<u64>, Condvar),
    #[cfg(feature = "async")]
    pub(crate) room_notify: tokio::sync::Notify,
    pub(crate) faults: Faults,
    last_prune: Mutex<Option<Instant>>,
    /// Set by `close`: when the shutdown gives up.
    deadline: Mutex<Option<Instant>>,
}

impl Core {
    pub(crate) fn new(config: BufferConfig, dialect: Dialect) -> Self {
        Core {
            config,
            dialect,
            sqlite_slot: rand::random_range(0..crate::MAX_SLOTS),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            hasher: RandomState::new(),
            keys: AtomicUsize::new(0),
            unflushed: AtomicU64::new(0),
            chunks: Mutex::default(),
            batched_rows: AtomicUsize::new(0),
            tally: Tally::default(),
            closed: AtomicBool::new(false),
            wake: Signal::default(),
            room: (Mutex::new(0), Condvar::new()),
            #[cfg(feature = "async")]
            room_notify: tokio::sync::Notify::new(),
            faults: Faults::default(),
            last_prune: Mutex::new(None),
            deadline: Mutex::new(None),
        }
    }

    fn shard(&self, spec: &CounterSpec, key: &RawKey) -> &Mutex<Shard> {
        let hash = self.hasher.hash_one((counter_id(spec), key));
        &self.shards[(hash as usize) % SHARDS]
    }

    /// Merges `delta` into the entry of (counter, key, bucket). Refuses without merging
    /// anything when the buffer is closed, when the entry would leave `i64`, or when a bound is
    /// reached ([`Refused::Full`]: the caller applies the policy).
    pub(crate) fn try_add(
        &self,
        spec: &CounterSpec,
        key: RawKey,
        bucket: i64,
        delta: i64,
    ) -> Result<(), Refused> {
        if delta == 0 {
            return Ok(());
        }
        let mut shard = lock(self.shard(spec, &key));
        // Under the shard lock: a shutdown's last cut, which takes this lock after setting
        // `closed`, sees every add that got past this check.
        if self.closed.load(Ordering::SeqCst) {
            return Err(Refused::Error(Error::BufferClosed));
        }
        let reserve = |counter: &AtomicU64, max: Option<u64>| match max {
            None => true,
            Some(max) => counter
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .is_ok(),
        };
        if !reserve(&self.unflushed, self.config.max_unflushed_adds) {
            self.wake.raise();
            return Err(Refused::Full);
        }
        let index = shard.spec_index(spec);
        let overflow = || {
            Refused::Error(Error::Overflow {
                counter: spec.qualified_name(),
                table: spec.table,
                key: format!("{key:?}"),
                delta,
            })
        };
        let unreserve = || {
            if self.config.max_unflushed_adds.is_some() {
                self.unflushed.fetch_sub(1, Ordering::AcqRel);
            }
        };
        match shard.entries.get_mut(&(index, key.clone(), bucket)) {
            Some(entry) => {
                let Some(sum) = entry.pending.checked_add(delta) else {
                    unreserve();
                    return Err(overflow());
                };
                entry.pending = sum;
                entry.pending_adds += 1;
            }
            None => {
                let max = self.config.max_pending_keys;
                let taken = self
                    .keys
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                        (n < max).then_some(n + 1)
                    });
                match taken {
                    Err(_) => {
                        unreserve();
                        self.wake.raise();
                        return Err(Refused::Full);
                    }
                    Ok(before) if before + 1 == self.config.flush_at_keys => self.wake.raise(),
                    Ok(_) => {}
                }
                let entry = Entry {
                    pending: delta,
                    pending_adds: 1,
                    in_flight: 0,
                };
                shard.entries.insert((index, key, bucket), entry);
            }
        }
        shard.adds += 1;
        shard.unflushed_adds += 1;
        Ok(())
    }

    /// Counts a refusal and turns it into the error the caller gets.
    pub(crate) fn refuse(&self, refused: Refused) -> Error {
        match refused {
            Refused::Error(e) => e,
            Refused::Full => {
                self.tally.refusals.fetch_add(1, Ordering::Relaxed);
                Error::BufferFull {
                    pending_keys: self.keys.load(Ordering::Acquire),
                    max_pending_keys: self.config.max_pending_keys,
                    unflushed_adds: self.unflushed_adds(),
                    max_unflushed_adds: self.config.max_unflushed_adds,
                }
            }
        }
    }

    /// The delta of (counter, key) held in memory, pending or in flight, over every bucket.
    pub(crate) fn pending(&self, spec: &CounterSpec, key: &RawKey) -> i64 {
        let shard = lock(self.shard(spec, key));
        let id = counter_id(spec);
        let Some(index) = shard.specs.iter().position(|s| counter_id(s) == id) else {
            return 0;
        };
        let held = |e: &Entry| e.pending.saturating_add(e.in_flight);
        if spec.bucket.is_none() {
            return shard
                .entries
                .get(&(index as u16, key.clone(), 0))
                .map_or(0, held);
        }
        shard
            .entries
            .iter()
            .filter(|((i, k, _), _)| usize::from(*i) == index && k == key)
            .fold(0i64, |sum, (_, e)| sum.saturating_add(held(e)))
    }

    /// Stops adds; the last cut after this sees every add that was taken. The shutdown's
    /// deadline runs from the first call.
    pub(crate) fn close(&self) {
        lock(&self.deadline).get_or_insert_with(|| Instant::now() + self.config.shutdown_timeout);
        self.closed.store(true, Ordering::SeqCst);
    }

    /// When a shutdown gives up, once `close` was called.
    pub(crate) fn shutdown_deadline(&self) -> Option<Instant> {
        *lock(&self.deadline)
    }

    /// How long a flush may wait for a pooled connection: one interval, so that a database
    /// that cannot be reached shows in the stats within about one; never past the shutdown
    /// timeout, nor, once shutting down, past its deadline.
    pub(crate) fn checkout_wait(&self) -> Duration {
        let wait = self.config.interval.min(self.config.shutdown_timeout);
        match self.shutdown_deadline() {
            Some(deadline) => wait.min(deadline.saturating_duration_since(Instant::now())),
            None => wait,
        }
    }

    /// Moves every pending delta into chunks, sorted by counter then key, behind the chunks
    /// still waiting. Entries whose deltas cancel out are done at once.
    pub(crate) fn cut(&self) {
        // Rows name their counter by an index into `counters`: a spec per row would double
        // the memory a cut of many keys takes.
        let mut counters: Vec<CounterSpec> = Vec::new();
        let mut rows: Vec<(u16, Row)> = Vec::new();
        let mut cancelled = 0u64;
        for shard in &self.shards {
            let mut shard = lock(shard);
            let Shard {
                specs,
                entries,
                unflushed_adds,
                ..
            } = &mut *shard;
            let mut emptied = 0usize;
            entries.retain(|(index, key, bucket), entry| {
                if entry.pending_adds == 0 {
                    return true;
                }
                if entry.pending == 0 {
                    cancelled += entry.pending_adds;
                    *unflushed_adds -= entry.pending_adds;
                } else {
                    let row = Row {
                        key: key.clone(),
                        bucket: *bucket,
                        delta: entry.pending,
                        adds: entry.pending_adds,
                    };
                    let spec = &specs[usize::from(*index)];
                    let counter = match counters
                        .iter()
                        .position(|s| counter_id(s) == counter_id(spec))
                    {
                        Some(i) => i,
                        None => {
                            counters.push(*spec);
                            counters.len() - 1
                        }
                    };
                    rows.push((counter as u16, row));
                    entry.in_flight += entry.pending;
                }
                entry.pending = 0;
                entry.pending_adds = 0;
                let keep = entry.in_flight != 0;
                emptied += usize::from(!keep);
                keep
            });
            self.keys.fetch_sub(emptied, Ordering::AcqRel);
        }
        if cancelled > 0 {
            self.done_adds(cancelled);
        }
        if rows.is_empty() {
            return;
        }
        // By counter, then key and bucket. The counters' names are compared only between rows of
        // two counters: compared for every pair, they took 45% of the flusher's time in a flush
        // of 10^6 keys (perf; `examples/buffered --pending 1000000`).
        rows.sort_by(|(a, x), (b, y)| {
            let by_counter = if a == b {
                std::cmp::Ordering::Equal
            } else {
                let (a, b) = (&counters[usize::from(*a)], &counters[usize::from(*b)]);
                counter_id(a).cmp(&counter_id(b))
            };
            by_counter.then_with(|| (&x.key, x.bucket).cmp(&(&y.key, y.bucket)))
        });
        let mut chunks = lock(&self.chunks);
        self.batched_rows.fetch_add(rows.len(), Ordering::AcqRel);
        let mut rows = rows.into_iter().peekable();
        while let Some((counter, first)) = rows.next() {
            let mut chunk = vec![first];
            while chunk.len() < ROWS_PER_CHUNK {
                match rows.next_if(|(c, _)| *c == counter) {
                    Some((_, row)) => chunk.push(row),
                    None => break,
                }
            }
            let spec = counters[usize::from(counter)];
            chunks.push_back(Chunk {
                id: rand::random(),
                spec,
                rows: chunk,
                in_doubt: false,
            });
        }
    }

    fn done_adds(&self, adds: u64) {
        self.tally.flushed_adds.fetch_add(adds, Ordering::Relaxed);
        if self.config.max_unflushed_adds.is_some() {
            self.unflushed.fetch_sub(adds, Ordering::AcqRel);
        }
    }

    /// Whether nothing is held: no pending delta, no chunk waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.load(Ordering::Acquire) == 0 && lock(&self.chunks).is_empty()
    }

    pub(crate) fn start_round(&self) -> Instant {
        self.tally.last_flush_rows.store(0, Ordering::Relaxed);
        Instant::now()
    }

    /// After a round, whatever its outcome: figures, and room for waiting adders.
    pub(crate) fn end_round(&self, started: Instant, outcome: &Result<()>) {
        match outcome {
            Ok(()) => {
                let us = started.elapsed().as_micros() as u64;
                self.tally.flushes.fetch_add(1, Ordering::Relaxed);
                self.tally.last_latency_us.store(us, Ordering::Relaxed);
                self.tally.max_latency_us.fetch_max(us, Ordering::Relaxed);
                self.tally.total_latency_us.fetch_add(us, Ordering::Relaxed);
            }
            Err(e) => {
                self.tally.failed_flushes.fetch_add(1, Ordering::Relaxed);
                *lock(&self.tally.last_error) = Some(e.to_string());
            }
        }
        *lock(&self.room.0) += 1;
        self.room.1.notify_all();
        #[cfg(feature = "async")]
        self.room_notify.notify_waiters();
    }

    /// Waits (blocking the thread) for the next flush to end, or `deadline`.
    pub(crate) fn wait_for_room(&self, deadline: Instant) -> bool {
        let round = lock(&self.room.0);
        let seen = *round;
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        let (round, _) = self
            .room
            .1
            .wait_timeout_while(round, deadline - now, |r| *r == seen)
            .unwrap_or_else(|p| p.into_inner());
        *round != seen
    }

    /// Whether the flush log is due for pruning (at most every `prune_every`).
    pub(crate) fn prune_due(&self) -> bool {
        let mut last = lock(&self.last_prune);
        let due = last.is_none_or(|t| t.elapsed() >= self.config.prune_every);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    fn unflushed_adds(&self) -> u64 {
        self.shards.iter().map(|s| lock(s).unflushed_adds).sum()
    }
}
