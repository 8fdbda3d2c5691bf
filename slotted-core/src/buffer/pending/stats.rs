//! The buffer's figures: the [`Tally`] kept as flushes happen, and [`Core::stats`], which adds
//! the shards' own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::{lock, Core};
use crate::buffer::BufferStats;
use crate::error::Error;

/// Statistics kept as they happen; [`Core::stats`] adds the shards' figures.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) flushed_adds: AtomicU64,
    pub(super) flushes: AtomicU64,
    pub(super) flushed_rows: AtomicU64,
    pub(super) transactions: AtomicU64,
    pub(super) last_flush_rows: AtomicU64,
    pub(super) last_latency_us: AtomicU64,
    pub(super) max_latency_us: AtomicU64,
    pub(super) total_latency_us: AtomicU64,
    pub(super) failed_flushes: AtomicU64,
    pub(super) commits_in_doubt: AtomicU64,
    pub(super) refusals: AtomicU64,
    pub(super) last_error: Mutex<Option<String>>,
}

impl Core {
    pub(crate) fn note_error(&self, e: &Error) {
        *lock(&self.tally.last_error) = Some(e.to_string());
    }

    pub(crate) fn stats(&self) -> BufferStats {
        let (mut adds, mut unflushed) = (0, 0);
        for shard in &self.shards {
            let shard = lock(shard);
            adds += shard.adds;
            unflushed += shard.unflushed_adds;
        }
        let t = &self.tally;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BufferStats {
            pending_keys: self.keys.load(Ordering::Acquire),
            batched_rows: self.batched_rows.load(Ordering::Acquire),
            unflushed_adds: unflushed,
            adds,
            flushed_adds: get(&t.flushed_adds),
            flushes: get(&t.flushes),
            flushed_rows: get(&t.flushed_rows),
            transactions: get(&t.transactions),
            last_flush_rows: get(&t.last_flush_rows),
            last_flush_latency: Duration::from_micros(get(&t.last_latency_us)),
            max_flush_latency: Duration::from_micros(get(&t.max_latency_us)),
            total_flush_time: Duration::from_micros(get(&t.total_latency_us)),
            failed_flushes: get(&t.failed_flushes),
            commits_in_doubt: get(&t.commits_in_doubt),
            refusals: get(&t.refusals),
            last_error: lock(&t.last_error).clone(),
        }
    }
}
