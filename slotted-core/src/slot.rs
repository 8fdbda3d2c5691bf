//! How a write picks its slot.

use std::collections::BTreeSet;
use std::sync::{Mutex, OnceLock};

/// How a write picks the slot it adds to. Set with `#[slotted(…, strategy = thread)]`.
///
/// Whatever the strategy, the slot is drawn in Rust and bound, and the total is exact: the
/// strategy only decides which writers share a row lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SlotStrategy {
    /// A slot of its own per thread: each live thread of the process holds a
    /// distinct index (the smallest free one, reused when a thread ends), and writes to slot
    /// `(index + offset) % slots`, where `offset` is drawn once per process. While a process
    /// never has more writing threads alive at once than slots, no two of them share a slot;
    /// several processes start at different offsets. With a connection pool each thread writes through one connection at
    /// a time, so this keeps concurrent transactions on different rows. It does not hold under
    /// async runtimes, where thousands of tasks share two worker threads: measured with 32
    /// tasks on a 2-worker tokio runtime, it reached only 1.4–2.1× the single-row counter.
    Thread,
    /// A slot drawn at random for every write, as in the articles the pattern comes from. Two
    /// of `w` concurrent writers over `n` slots collide with probability about `w²/2n`.
    Random,
    /// A slot per server session, chosen by the server: each session that writes holds a
    /// *writer index*, the smallest one no other live session of the database holds, from its
    /// first write until it ends, and writes to slot `index % slots`. So the writers alive at
    /// one time hold distinct slots whenever there are no more of them than slots, however
    /// their connections were opened (other connections in between, a pool that replaced some
    /// of its connections, several processes, either driver); with more writers than slots each
    /// slot gets an even share of them (never worse than a random draw). It follows the
    /// connection, not the thread: it holds whether writers are threads with an r2d2 pool or
    /// tasks sharing two runtime threads with a bb8 or deadpool pool. Behind a
    /// transaction-mode pooler the index is the server session's, which is the writer that
    /// contends there.
    ///
    /// The index is a session-level lock that the server releases when the session ends
    /// (PostgreSQL: an advisory lock on `(1936486260, index)`; MySQL and MariaDB: `GET_LOCK`
    /// on `slotted.<index>.<database>`), kept in a session variable (`slotted.writer`,
    /// `@slotted_writer`), so a write after the first reads a variable: no extra round trip,
    /// no extra lock. On a MariaDB Galera cluster the slot is node-aware: node `k` of `n`
    /// (Galera's `auto_increment_offset` and `auto_increment_increment`) takes slots `k - 1`,
    /// `k - 1 + n`, …, and writers on different nodes never share a slot (give it at least
    /// nodes × writers per node slots). The statement's text is fixed by the counter (its
    /// slot count is written in it). On MySQL the first write's statement takes a named lock,
    /// which binary logs in `STATEMENT` format call unsafe (`MIXED` and `ROW`, the defaults, log it by row). SQLite
    /// has no server session and lets one writer in at a time: there it writes like
    /// [`SlotStrategy::Thread`].
    ///
    /// The default: distinct slots for every live writer in the spread benchmark's deployments
    /// (`cargo run --example spread`), and 0.956–0.984× the private-row ceiling in the
    /// contention benchmark with a deployed pool (other connections opened before it, half of it
    /// replaced), sync threads and async tasks, PostgreSQL and MariaDB: as fast as a bound slot
    /// on the same table.
    #[default]
    Connection,
}

impl SlotStrategy {
    /// The slot for the next write, in `0..slots` (`slots` is taken as at least 1), as chosen
    /// in Rust. [`SlotStrategy::Connection`] is chosen by the server; here it gives the
    /// thread's slot, as on SQLite.
    pub fn choose(self, slots: u16) -> u16 {
        let slots = slots.clamp(1, crate::MAX_SLOTS);
        match self {
            SlotStrategy::Random => rand::random_range(0..slots),
            SlotStrategy::Thread | SlotStrategy::Connection => {
                let offset = *PROCESS_OFFSET
                    .get_or_init(|| rand::random_range(0..u32::from(crate::MAX_SLOTS)));
                // During thread teardown the index may be gone already: fall back to random.
                THREAD_INDEX
                    .try_with(|index| (index.0.wrapping_add(offset) % u32::from(slots)) as u16)
                    .unwrap_or_else(|_| rand::random_range(0..slots))
            }
        }
    }
    /// The slot of a write, as a statement binds or computes it.
    pub(crate) fn slot_value(self, slots: u16, dialect: crate::Dialect) -> SlotValue {
        match (self, dialect) {
            (SlotStrategy::Connection, crate::Dialect::Postgres | crate::Dialect::Mysql) => {
                SlotValue::Connection(slots.clamp(1, crate::MAX_SLOTS))
            }
            _ => SlotValue::Bound(self.choose(slots) as i16),
        }
    }
}

static PROCESS_OFFSET: OnceLock<u32> = OnceLock::new();

static INDICES: Mutex<IndexPool> = Mutex::new(IndexPool::new());

/// Indices for live threads: always the smallest free one, so the live indices stay below the
/// most threads ever alive at once, and are distinct modulo any slot count at least that large.
#[derive(Debug)]
struct IndexPool {
    next: u32,
    free: BTreeSet<u32>,
}

impl IndexPool {
    const fn new() -> Self {
        IndexPool {
            next: 0,
            free: BTreeSet::new(),
        }
    }

    fn acquire(&mut self) -> u32 {
        self.free.pop_first().unwrap_or_else(|| {
            self.next += 1;
            self.next - 1
        })
    }

    fn release(&mut self, index: u32) {
        self.free.insert(index);
    }
}

fn indices() -> std::sync::MutexGuard<'static, IndexPool> {
    // The pool's state is valid after any panic elsewhere: nothing to repair.
    INDICES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// This thread's index, returned to the pool when the thread ends.
struct ThreadIndex(u32);

impl Drop for ThreadIndex {
    fn drop(&mut self) {
        indices().release(self.0);
    }
}

thread_local! {
    static THREAD_INDEX: ThreadIndex = ThreadIndex(indices().acquire());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_hands_out_the_smallest_free_index() {
        let mut pool = IndexPool::new();
        assert_eq!([pool.acquire(), pool.acquire(), pool.acquire()], [0, 1, 2]);
        pool.release(1);
        pool.release(0);
        assert_eq!([pool.acquire(), pool.acquire(), pool.acquire()], [0, 1, 3]);
    }

    #[test]
    fn live_threads_hold_distinct_stable_slots() {
        let barrier = std::sync::Barrier::new(16);
        let slots: Vec<(u32, u16)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    s.spawn(|| {
                        let slot = SlotStrategy::Thread.choose(1024);
                        assert_eq!(
                            slot,
                            SlotStrategy::Thread.choose(1024),
                            "stable within a thread"
                        );
                        barrier.wait(); // all 16 alive at once
                        (THREAD_INDEX.with(|i| i.0), slot)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let indices: BTreeSet<u32> = slots.iter().map(|s| s.0).collect();
        let distinct: BTreeSet<u16> = slots.iter().map(|s| s.1).collect();
        assert_eq!(indices.len(), 16, "{slots:?}");
        assert_eq!(
            distinct.len(),
            16,
            "16 live threads, 1,024 slots: no sharing: {slots:?}"
        );
    }

    #[test]
    fn random_stays_in_range_and_zero_slots_is_one() {
        assert!((0..1000).all(|_| SlotStrategy::Random.choose(7) < 7));
        assert_eq!(SlotStrategy::Random.choose(0), 0);
        assert_eq!(SlotStrategy::Thread.choose(1), 0);
    }
}

/// Where a write's slot comes from: the value a statement binds, or the server's expression for
/// it (written by `sql`, which knows each dialect's SQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SlotValue {
    /// Chosen in Rust and bound.
    Bound(i16),
    /// The session's writer index, modulo this many slots, as the server keeps it
    /// (`sql::slot`; SQLite has no server session: the caller binds a slot instead). The count
    /// is written into the statement's text, which a counter fixes: no bind per write.
    Connection(u16),
}
