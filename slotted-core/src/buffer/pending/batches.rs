//! A batch's life after the cut: taken to be written, committed (its deltas leave memory), or
//! put back: as it is when its COMMIT is in doubt, else returned to its entries.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use super::{lock, Chunk, Core};

impl Core {
    /// The next chunk to write, taken out of the queue while it is written (one flush at a
    /// time: the faces hold a flush lock); its deltas stay visible as in flight.
    pub(crate) fn take_chunk(&self) -> Option<Chunk> {
        lock(&self.chunks).pop_front()
    }

    /// A chunk whose write failed (`in_doubt`: its COMMIT did). A chunk in doubt, now or
    /// before, goes back to the front as it is: it may be in the database under its id. Any
    /// other was rolled back, so its deltas return to their entries, as do those of every chunk
    /// queued behind it not in doubt: the next round writes each key's merged delta as one row.
    /// Retries never copy deltas into more rows, however many fail.
    pub(crate) fn put_back(&self, mut chunk: Chunk, in_doubt: bool) {
        chunk.in_doubt |= in_doubt;
        if in_doubt {
            self.tally.commits_in_doubt.fetch_add(1, Ordering::Relaxed);
        }
        let uncut: VecDeque<Chunk> = {
            let mut chunks = lock(&self.chunks);
            chunks.push_front(chunk);
            let all = std::mem::take(&mut *chunks);
            let (doubt, rest) = all.into_iter().partition(|c| c.in_doubt);
            *chunks = doubt;
            rest
        };
        for chunk in uncut {
            self.uncut(chunk);
        }
    }

    /// Returns a chunk's deltas (not in the database) to their entries, as pending.
    fn uncut(&self, chunk: Chunk) {
        let Chunk { id, spec, rows, .. } = chunk;
        let mut left = Vec::new();
        let mut merged = 0usize;
        for row in rows {
            let mut shard = lock(self.shard(&spec, &row.key));
            let index = shard.spec_index(&spec);
            let entry = shard.entries.get_mut(&(index, row.key.clone(), row.bucket));
            match entry.and_then(|e| Some((e.pending.checked_add(row.delta)?, e))) {
                Some((sum, entry)) => {
                    entry.pending = sum;
                    entry.pending_adds += row.adds;
                    entry.in_flight -= row.delta;
                    merged += 1;
                }
                // Keys pending so much the sum leaves i64: the row stays as it is.
                None => left.push(row),
            }
        }
        self.batched_rows.fetch_sub(merged, Ordering::AcqRel);
        if !left.is_empty() {
            let chunk = Chunk {
                id,
                spec,
                rows: left,
                in_doubt: false,
            };
            lock(&self.chunks).push_back(chunk);
        }
    }

    /// Adds held in chunks whose COMMIT is in doubt: they may be in the database.
    pub(crate) fn in_doubt_adds(&self) -> u64 {
        lock(&self.chunks)
            .iter()
            .filter(|c| c.in_doubt)
            .flat_map(|c| &c.rows)
            .map(|r| r.adds)
            .sum()
    }

    /// The chunk is in the database: its deltas leave memory.
    pub(crate) fn committed(&self, chunk: &Chunk) {
        let mut adds = 0;
        for row in &chunk.rows {
            adds += row.adds;
            let mut shard = lock(self.shard(&chunk.spec, &row.key));
            let index = shard.spec_index(&chunk.spec);
            let id = (index, row.key.clone(), row.bucket);
            let Some(entry) = shard.entries.get_mut(&id) else {
                continue;
            };
            entry.in_flight -= row.delta;
            if entry.in_flight == 0 && entry.pending_adds == 0 {
                shard.entries.remove(&id);
                self.keys.fetch_sub(1, Ordering::AcqRel);
            }
            shard.unflushed_adds -= row.adds;
        }
        self.done_adds(adds);
        self.batched_rows
            .fetch_sub(chunk.rows.len(), Ordering::AcqRel);
        self.tally.transactions.fetch_add(1, Ordering::Relaxed);
        self.tally
            .flushed_rows
            .fetch_add(chunk.rows.len() as u64, Ordering::Relaxed);
        self.tally
            .last_flush_rows
            .fetch_add(chunk.rows.len() as u64, Ordering::Relaxed);
    }
}
