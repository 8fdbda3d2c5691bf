//! Installing the follow counters on a `comments` table that already holds `--install-rows`
//! comments (over every post and user), while `--install-writers` writers go on posting: the
//! follow migrations with [`Backfill::Locked`] (the migration counts the rows, the writers wait)
//! and with [`Backfill::Online`] (the migration makes the triggers only; `repair_follow_all` of
//! each counter then counts the rows, beside the writers). For each: how long the migration and
//! the repair took, the writers' throughput and their longest transaction over the whole
//! install, and the counts checked exactly against the table afterwards.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use slotted_core::{Backfill, CounterMaintenance};
use slotted_examples::BoxError;

use super::{
    check, communities_comments_slots, migrations, posts_comments_slots, remove_all,
    sites_comments_slots, users_comments_slots, writers_until, Mode, Options, Server,
};

/// Records per page of the repair.
const REPAIR_BATCH: usize = 1_000;
/// How long the writers run before the install starts, and after it ends.
const AROUND: Duration = Duration::from_secs(1);

/// One install: its times, the writers' figures, the exactness line.
struct Install {
    migration: Duration,
    repair: Option<Duration>,
    repaired: u64,
    rate: f64,
    longest: Duration,
    line: String,
}

/// The install section of the report.
pub(super) fn measure<C: Server>(o: &Options, conn: &mut C, url: &str) -> Result<String, BoxError> {
    let mut section = format!(
        "\n## Installing on {} comments while {} writers post\n\n\
         The follow migrations run on a table of {} comments over {} posts and {} users, while \
         {} writers post as above (a comment on a hot post, held {} ms); each install starts \
         {} s into their run and they stop {} s after it. Locked: the migration counts the rows \
         there (Backfill::Locked, the default). Online: the migration makes the triggers only \
         (Backfill::Online), then repair_follow_all of each of the 4 counters counts the rows \
         there, in pages of {REPAIR_BATCH} records. Longest: the writers' longest transaction \
         over the whole run.\n\n\
         | install | migration s | repair s | records repaired | writers tx/s | longest writer tx ms |\n\
         |---|---|---|---|---|---|\n",
        o.install_rows,
        o.install_writers,
        o.install_rows,
        super::POSTS,
        super::USERS,
        o.install_writers,
        super::HOLD.as_millis(),
        AROUND.as_secs(),
        AROUND.as_secs(),
    );
    let mut notes = String::new();
    for backfill in [Backfill::Locked, Backfill::Online] {
        let name = match backfill {
            Backfill::Online => "online",
            _ => "locked",
        };
        let done = install::<C>(o, conn, url, backfill)?;
        writeln!(
            section,
            "| {name} | {:.2} | {} | {} | {:.0} | {:.0} |",
            done.migration.as_secs_f64(),
            done.repair
                .map_or("-".to_owned(), |r| format!("{:.2}", r.as_secs_f64())),
            done.repaired,
            done.rate,
            done.longest.as_secs_f64() * 1e3,
        )?;
        let note = format!("install {name:<7} {}\n", done.line);
        print!("{note}");
        notes += &note;
    }
    remove_all(conn)?;
    writeln!(section, "\n{notes}")?;
    print!("{section}");
    Ok(section)
}

fn install<C: Server>(
    o: &Options,
    conn: &mut C,
    url: &str,
    backfill: Backfill,
) -> Result<Install, BoxError> {
    remove_all(conn)?;
    conn.batch_execute(C::RESET)?;
    let before = o.install_rows;
    conn.batch_execute(&C::spread_sql(before))?;
    if !C::AFTER_RESET.is_empty() {
        conn.batch_execute(C::AFTER_RESET)?;
    }
    let stop = AtomicBool::new(false);
    let (run, timed) = std::thread::scope(|scope| {
        let writers = scope.spawn(|| {
            writers_until::<C>(
                url,
                o.install_writers,
                Duration::from_secs(3_600),
                Some(&stop),
            )
        });
        let timed = (|| -> Result<_, BoxError> {
            std::thread::sleep(AROUND);
            let t0 = Instant::now();
            conn.run_pending_migrations(migrations().backfill(backfill))?;
            let migration = t0.elapsed();
            let mut repair = None;
            let mut repaired = 0;
            if backfill == Backfill::Online {
                let t1 = Instant::now();
                for report in [
                    posts_comments_slots::table.repair_follow_all(REPAIR_BATCH, conn)?,
                    users_comments_slots::table.repair_follow_all(REPAIR_BATCH, conn)?,
                    communities_comments_slots::table.repair_follow_all(REPAIR_BATCH, conn)?,
                    sites_comments_slots::table.repair_follow_all(REPAIR_BATCH, conn)?,
                ] {
                    repaired += report.repaired;
                }
                repair = Some(t1.elapsed());
            }
            std::thread::sleep(AROUND);
            Ok((migration, repair, repaired))
        })();
        stop.store(true, Ordering::SeqCst);
        (writers.join().expect("the writers do not panic"), timed)
    });
    let run = run?;
    let (migration, repair, repaired) = timed?;
    if let Some(e) = &run.first_error {
        return Err(format!("{}, install: a writer failed: {e}", C::NAME).into());
    }
    let rows = before + run.committed;
    let line = check(conn, Mode::Follow, Some((rows, rows)))?;
    Ok(Install {
        migration,
        repair,
        repaired,
        rate: run.rate(),
        longest: run.longest,
        line,
    })
}
