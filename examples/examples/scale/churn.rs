//! Steady churn at one size: writers increment records chosen by the same Zipf-like skew for a
//! while, `compact_all` runs on a schedule beside them, and the table's size, slot rows and dead
//! rows are sampled, to tell whether the table keeps growing. The sum of every count is checked
//! against the writes at the end.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use slotted_core::maintenance::MAINTENANCE_BATCH;
use slotted_core::CounterMaintenance;
use slotted_examples::BoxError;

use crate::server::Server;
use crate::{scale_items_hits_slots, Item};

pub struct Churn {
    pub records: u32,
    pub seconds: u64,
    pub writers: usize,
    /// The pause between two `compact_all` passes.
    pub compact_every: Duration,
    /// Whether each pass is followed by `Server::reclaim` (PostgreSQL: `VACUUM` of the slot
    /// table), as autovacuum would do on a server where it is on.
    pub vacuum: bool,
    pub samples: u32,
}

struct Sample {
    at: Duration,
    writes: u64,
    slot_rows: i64,
    bytes: i64,
    dead: (i64, i64),
    passes: u64,
}

/// Runs the churn on the tables `crate::create` and `crate::fill` made (compacted once), and
/// returns the report.
pub fn run<C: Server + Send>(
    url: &str,
    conn: &mut C,
    churn: &Churn,
    writes: &[u64],
    sum_before: i64,
) -> Result<String, BoxError> {
    // Zipf-like choice: the cumulative weights of the fill's writes per record.
    let cumulative: Vec<u64> = writes
        .iter()
        .scan(0, |acc, &w| {
            *acc += w;
            Some(*acc)
        })
        .collect();
    let weight = *cumulative.last().ok_or("no records")?;
    let (stop, written, passes) = (AtomicBool::new(false), AtomicU64::new(0), AtomicU64::new(0));
    let table = "scale_items_hits_slots";
    let started = Instant::now();
    let mut samples = Vec::new();
    let result: Result<(), BoxError> = std::thread::scope(|s| {
        let mut threads = Vec::new();
        for writer in 0..churn.writers {
            let (stop, written, cumulative) = (&stop, &written, &cumulative);
            threads.push(s.spawn(move || -> Result<(), BoxError> {
                let mut conn = C::establish(url)?;
                let mut rng = rand::rngs::StdRng::seed_from_u64(1000 + writer as u64);
                while !stop.load(Ordering::Relaxed) {
                    let pick = rng.random_range(0..weight);
                    let id = cumulative.partition_point(|&c| c <= pick) as i32 + 1;
                    Item::hits_of(id).increment(&mut conn)?;
                    written.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }));
        }
        let (stop_ref, passes_ref) = (&stop, &passes);
        threads.push(s.spawn(move || -> Result<(), BoxError> {
            let mut conn = C::establish(url)?;
            let mut next = Instant::now() + churn.compact_every;
            while !stop_ref.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    scale_items_hits_slots::table.compact_all(MAINTENANCE_BATCH, &mut conn)?;
                    if churn.vacuum {
                        conn.reclaim(table)?;
                    }
                    passes_ref.fetch_add(1, Ordering::Relaxed);
                    next = Instant::now() + churn.compact_every;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(())
        }));
        let every = Duration::from_secs(churn.seconds) / churn.samples.max(1);
        let sampled = (|| -> Result<(), BoxError> {
            for n in 1..=churn.samples {
                let due = every * n;
                if let Some(wait) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(wait);
                }
                samples.push(Sample {
                    at: started.elapsed(),
                    writes: written.load(Ordering::Relaxed),
                    slot_rows: conn.rows(table)?,
                    bytes: conn.bytes(table)?,
                    dead: conn.dead(table)?,
                    passes: passes.load(Ordering::Relaxed),
                });
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            thread.join().map_err(|_| "a churn thread panicked")??;
        }
        sampled
    });
    result?;
    let writes_done = written.load(Ordering::Relaxed) as i64;
    let sum_after = conn.sum(table)?;
    if sum_after != sum_before + writes_done {
        return Err(format!(
            "the counts add up to {sum_after}, not {sum_before} + {writes_done} acknowledged writes"
        )
        .into());
    }
    Ok(report::<C>(churn, &samples, writes_done))
}

fn report<C: Server>(churn: &Churn, samples: &[Sample], writes: i64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n## steady churn: {} records, {} writers, `compact_all`{} every {:?}, {} s\n",
        churn.records,
        churn.writers,
        if churn.vacuum { " and `VACUUM`" } else { "" },
        churn.compact_every,
        churn.seconds
    );
    let (dead, runs) = C::DEAD_COLUMNS;
    let _ = writeln!(
        out,
        "| s | increments/s | slot rows | bytes per record | {dead} | {runs} | compaction passes |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|");
    let mut last = (Duration::ZERO, 0);
    for s in samples {
        let rate = (s.writes - last.1) as f64 / (s.at - last.0).as_secs_f64();
        last = (s.at, s.writes);
        let _ = writeln!(
            out,
            "| {:.0} | {rate:.0} | {} | {:.1} | {} | {} | {} |",
            s.at.as_secs_f64(),
            s.slot_rows,
            s.bytes as f64 / f64::from(churn.records),
            s.dead.0,
            s.dead.1,
            s.passes
        );
    }
    let _ = writeln!(
        out,
        "\n{writes} increments, every one in the sum of the counts at the end."
    );
    out
}
