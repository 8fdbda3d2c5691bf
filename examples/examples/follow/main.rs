//! Counters that follow a child table (issue 40), measured: a forum cut from Lemmy's schema, 32
//! writers each posting a comment on one of 5 hot posts in a transaction that holds 2 ms more,
//! counted four ways in one run, rounds rotated:
//!
//! - `follow`: the library's counters, `#[derive(SlottedCounter)]` with `follow =
//!   comments(post_id)` (the post), `follow = comments(author_id)` (the author), `follow =
//!   comments(post_id), through = posts(community_id)` (the community) and `follow = comments,
//!   record = 1` (the site), 32 slots each, migrated with `CounterMigrations`: the triggers are
//!   the library's own;
//! - `hot-row`: Lemmy's shape, a hand-written row trigger that runs `UPDATE post_aggregates SET
//!   comments = comments + 1 …` and the same on the author's, the community's and the site's
//!   aggregate row;
//! - `private`: a hand-written row trigger upserting rows private to each client (keyed by
//!   `pg_backend_pid()` / `CONNECTION_ID()`): the ceiling of counting in a trigger;
//! - `none`: no trigger (and, on PostgreSQL when `pgbench` is installed, the same `none`
//!   transaction run by pgbench: the raw client's anchor).
//!
//! Every counting mode counts the same four things per comment: its author, its post, its
//! post's community (the three while the comment is neither `deleted` nor `removed`) and the
//! site (while it is `local`), as the measurement did. The library counts the community
//! `through = posts(community_id)`, and so reads the post under a share lock (a post moved
//! meanwhile would otherwise take its comments' count wrong): on PostgreSQL the lock of the
//! comment's foreign key check, which the migration found; on MariaDB one the trigger takes. The
//! anchors read the post's community plainly, as Lemmy's trigger does, and handle no move.
//!
//! Between modes the triggers are dropped and created (each mode's DDL in its own function:
//! `install`, `remove_all`) and the tables emptied. After every run the counts must be exact, or
//! the program fails: `follow`'s totals per post, per author and of the site equal `COUNT(*)` over
//! `comments`; the anchors' own rows sum to the same; every mode's `COUNT(*)` equals the
//! transactions the writers committed.
//!
//! Then a bulk `INSERT … SELECT` of `--bulk-rows` comments (one statement, one session) with
//! `follow`, `hot-row` and `none`: seconds each, checked the same way. Then the follow counters
//! installed on a table of `--install-rows` comments while writers post, with the locked and the
//! online backfill (`install.rs`).
//!
//!     cargo run --release --example follow --features postgres,mysql -- --backend postgres
//!     cargo run --release --example follow --features postgres,mysql -- --backend mysql
//!     cargo run --example follow --features postgres,mysql -- --smoke
//!
//! Options: `--backend postgres|mysql` (default: both), `--seconds 12` (per run), `--rounds 3`,
//! `--writers 32`, `--bulk-rows 100000`, `--bulk-rounds 1`, `--bulk-timeout 300` (seconds; a
//! statement that takes longer is cancelled and reported as such), `--install-rows 1000000`,
//! `--install-writers 8`, `--parts throughput,bulk,install` (which parts to run), `--no-out`
//! (print only), `--smoke` (0.3 s per run, 1 round, 1,000 bulk rows, 2,000 install rows,
//! nothing saved: for CI). Results go to `docs/bench/follow-<backend>.txt` (a run of some parts
//! only: `follow-<parts>-<backend>.txt`). Uses `PG_DATABASE_URL` / `MYSQL_DATABASE_URL`, in a
//! database of its own (`slotted_bench_follow`, or `…_smoke`) that it creates and drops.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

use slotted_core::{CounterMigrations, SlottedCounter};
use slotted_examples::{with_database, BoxError};

mod exact;
mod install;
mod load;
mod server;

use exact::check;
use load::{pgbench, raw_mariadb, writers, writers_until};
use server::Server;

diesel::table! {
    sites (id) {
        id -> Integer,
    }
}

diesel::table! {
    users (id) {
        id -> Integer,
    }
}

diesel::table! {
    posts (id) {
        id -> Integer,
        community_id -> Integer,
    }
}

diesel::table! {
    communities (id) {
        id -> Integer,
    }
}

diesel::table! {
    comments (id) {
        id -> BigInt,
        post_id -> Integer,
        author_id -> Integer,
        deleted -> Bool,
        removed -> Bool,
        local -> Bool,
    }
}

/// A post: its comments that are neither deleted nor removed (Lemmy's `post_aggregates.comments`).
#[derive(SlottedCounter)]
#[diesel(table_name = posts)]
#[slotted(counter = comments, slots = 32, follow = comments(post_id), filter(not(deleted), not(removed)))]
pub struct Post {
    #[allow(dead_code)] // the key the derive reads; this program counts by key alone
    pub id: i32,
}

/// An author: the same comments, by author (`person_aggregates.comment_count`).
#[derive(SlottedCounter)]
#[diesel(table_name = users)]
#[slotted(counter = comments, slots = 32, follow = comments(author_id), filter(not(deleted), not(removed)))]
pub struct User {
    #[allow(dead_code)]
    pub id: i32,
}

/// A community: the comments of its posts (`community_aggregates.comments`), through the post.
#[derive(SlottedCounter)]
#[diesel(table_name = communities)]
#[slotted(counter = comments, slots = 32, follow = comments(post_id), through = posts(community_id), filter(not(deleted), not(removed)))]
pub struct Community {
    #[allow(dead_code)]
    pub id: i32,
}

/// The site: one record, 1, that every local comment counts for (`site_aggregates.comments`).
#[derive(SlottedCounter)]
#[diesel(table_name = sites)]
#[slotted(counter = comments, slots = 32, follow = comments, record = 1, filter(local))]
pub struct Site {
    #[allow(dead_code)]
    pub id: i32,
}

fn migrations() -> CounterMigrations {
    CounterMigrations::of::<Post>()
        .and::<User>()
        .and::<Community>()
        .and::<Site>()
}

const HOT_POSTS: i32 = 5;
const POSTS: i32 = 1_000;
const USERS: i32 = 1_000;
const COMMUNITIES: i32 = 10;
const HOLD: Duration = Duration::from_millis(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Follow,
    HotRow,
    Private,
    None,
    /// `none`, run by pgbench (PostgreSQL only).
    PgbenchNone,
    /// `none`, run by a raw libmariadb client, a thread per connection (MariaDB only).
    RawNone,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Follow => "follow",
            Mode::HotRow => "hot-row",
            Mode::Private => "private",
            Mode::None => "none",
            Mode::PgbenchNone => "none (pgbench)",
            Mode::RawNone => "none (libmariadb)",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Each mode's DDL.

/// Drops every mode's triggers: the library's (by reverting its migrations, which also drops the
/// counter tables) and the anchors'.
fn remove_all<C: Server>(conn: &mut C) -> Result<(), BoxError> {
    conn.revert_all_migrations(migrations())?;
    conn.batch_execute(C::ANCHORS_DOWN)?;
    Ok(())
}

/// Creates `mode`'s triggers, on an empty `comments`.
fn install<C: Server>(conn: &mut C, mode: Mode) -> Result<(), BoxError> {
    match mode {
        Mode::Follow => {
            conn.run_pending_migrations(migrations())?;
        }
        Mode::HotRow => conn.batch_execute(C::HOT_ROW_UP)?,
        Mode::Private => conn.batch_execute(C::PRIVATE_UP)?,
        Mode::None | Mode::PgbenchNone | Mode::RawNone => {}
    }
    Ok(())
}

fn prepare_mode<C: Server>(conn: &mut C, mode: Mode) -> Result<(), BoxError> {
    remove_all(conn)?;
    conn.batch_execute(C::RESET)?;
    if !C::AFTER_RESET.is_empty() {
        conn.batch_execute(C::AFTER_RESET)?;
    }
    install(conn, mode)
}

// ---------------------------------------------------------------------------------------------
// Options, the run, the report.

struct Options {
    backends: Vec<String>,
    seconds: f64,
    rounds: usize,
    writers: usize,
    bulk_rows: u64,
    bulk_rounds: usize,
    bulk_timeout: u64,
    install_rows: u64,
    install_writers: usize,
    /// The parts to run: `throughput`, `bulk`, `install`.
    parts: Vec<String>,
    smoke: bool,
    save: bool,
    command: String,
}

fn options() -> Result<Options, BoxError> {
    let mut o = Options {
        backends: vec!["postgres".into(), "mysql".into()],
        seconds: 12.0,
        rounds: 3,
        writers: 32,
        bulk_rows: 100_000,
        bulk_rounds: 1,
        bulk_timeout: 300,
        install_rows: 1_000_000,
        install_writers: 8,
        parts: PARTS.iter().map(|p| (*p).to_owned()).collect(),
        smoke: false,
        save: true,
        command: String::new(),
    };
    let given: Vec<String> = std::env::args().skip(1).collect();
    let mut args = given.iter();
    let (mut seconds, mut rounds, mut bulk_rows, mut install_rows) = (None, None, None, None);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--backend" => o.backends = vec![value()?],
            "--seconds" => seconds = Some(value()?.parse()?),
            "--rounds" => rounds = Some(value()?.parse()?),
            "--writers" => o.writers = value()?.parse()?,
            "--bulk-rows" => bulk_rows = Some(value()?.parse()?),
            "--bulk-rounds" => o.bulk_rounds = value()?.parse()?,
            "--bulk-timeout" => o.bulk_timeout = value()?.parse()?,
            "--install-rows" => install_rows = Some(value()?.parse()?),
            "--install-writers" => o.install_writers = value()?.parse()?,
            "--parts" => o.parts = value()?.split(',').map(str::to_owned).collect(),
            "--smoke" => o.smoke = true,
            "--no-out" => o.save = false,
            other => return Err(format!("unknown argument `{other}`").into()),
        }
    }
    if o.smoke {
        (o.seconds, o.rounds, o.bulk_rows, o.save) = (0.3, 1, 1_000, false);
        o.install_rows = 2_000;
    }
    o.seconds = seconds.unwrap_or(o.seconds);
    o.rounds = rounds.unwrap_or(o.rounds);
    o.bulk_rows = bulk_rows.unwrap_or(o.bulk_rows);
    o.install_rows = install_rows.unwrap_or(o.install_rows);
    for part in &o.parts {
        if !PARTS.contains(&part.as_str()) {
            return Err(format!("--parts takes {}, not `{part}`", PARTS.join(",")).into());
        }
    }
    for backend in &o.backends {
        if backend != "postgres" && backend != "mysql" {
            return Err(format!("--backend postgres or --backend mysql, not `{backend}`").into());
        }
    }
    o.command = format!(
        "cargo run{} --example follow --features postgres,mysql -- {}",
        if cfg!(debug_assertions) {
            ""
        } else {
            " --release"
        },
        given.join(" ")
    );
    Ok(o)
}

/// The parts of a run, in their order.
const PARTS: [&str; 3] = ["throughput", "bulk", "install"];

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// Creates (afresh) the benchmark's own database beside the one `url` names; its URL.
fn create_database<C: Server>(url: &str, name: &str) -> Result<String, BoxError> {
    let mut admin = C::establish(url)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))?;
    admin.batch_execute(&format!("CREATE DATABASE {name}"))?;
    Ok(with_database(url, name))
}

fn drop_database<C: Server>(url: &str, name: &str) -> Result<(), BoxError> {
    let mut admin = C::establish(url)?;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))?;
    Ok(())
}

fn bench<C: Server>(o: &Options) -> Result<(), BoxError> {
    let base = std::env::var(C::URL_VARIABLE).map_err(|_| {
        format!(
            "{} is not set: the {} part needs it",
            C::URL_VARIABLE,
            C::NAME
        )
    })?;
    let name = if o.smoke {
        "slotted_bench_follow_smoke"
    } else {
        "slotted_bench_follow"
    };
    let url = create_database::<C>(&base, name)?;
    let result = measure::<C>(o, &url);
    // The database goes whatever happened; the connections to it are closed by now.
    let dropped = drop_database::<C>(&base, name);
    result?;
    dropped
}

fn measure<C: Server>(o: &Options, url: &str) -> Result<(), BoxError> {
    let mut conn = C::establish(url)?;
    conn.batch_execute(C::SCHEMA)?;
    let version = conn.words(C::VERSION)?;
    let started = slotted_examples::now_utc();
    let duration = Duration::from_secs_f64(o.seconds);

    let mut modes = vec![Mode::Follow, Mode::HotRow, Mode::Private, Mode::None];
    let mut pgbench_note = String::new();
    if C::NAME == "postgres" {
        // Is pgbench there? One probe run of the anchor itself would cost a run; ask for its version.
        match Command::new("pgbench").arg("--version").output() {
            Ok(out) if out.status.success() => {
                modes.push(Mode::PgbenchNone);
                pgbench_note = format!(
                    "`none (pgbench)`: the `none` transaction run by {} (-n -M prepared -c {} -j 2, \\sleep 2000 us): the raw client's anchor\n",
                    String::from_utf8_lossy(&out.stdout).trim(),
                    o.writers
                );
            }
            _ => pgbench_note = "pgbench not installed: no raw-client anchor\n".into(),
        }
    }
    if C::NAME == "mysql" {
        modes.push(Mode::RawNone);
        pgbench_note = format!(
            "`none (libmariadb)`: the `none` transaction run by libmariadb's C API (the client \
             under Diesel's MysqlConnection), a thread per connection, {} connections, text \
             protocol, the hold a thread sleep: the raw client's anchor\n",
            o.writers
        );
    }

    let mut out = String::new();
    writeln!(
        out,
        "# follow counters (issue 40), {}: {} writers, a comment on one of {HOT_POSTS} hot posts per \
         transaction held {} ms more; {} rounds x {} s, modes rotated",
        C::TITLE,
        o.writers,
        HOLD.as_millis(),
        o.rounds,
        o.seconds
    )?;
    writeln!(out, "# {version}")?;
    writeln!(out, "# {started}; 2 cores, a shared machine")?;
    writeln!(out, "# {}", o.command)?;
    writeln!(out)?;
    writeln!(
        out,
        "Counted per comment in follow, hot-row and private: its author, its post and its post's \
         community (while neither deleted nor removed) and the site (while local): 4 counts; none \
         counts nothing. follow reads the post's community under a share lock (through = \
         posts(community_id) keeps the count right when a post moves: on PostgreSQL the lock of \
         the comment's foreign key check, on MariaDB one the trigger takes); the anchors read it \
         plainly and handle no move.\n\
         follow: the library's counters (follow = comments(post_id), comments(author_id), \
         comments(post_id) through posts(community_id), comments + record = 1; 32 slots each; \
         CounterMigrations' triggers); hot-row: a hand-written row trigger updating the post's, \
         author's, community's and site's aggregate rows (Lemmy's shape); private: \
         a hand-written row trigger upserting rows private to each connection (pg_backend_pid() / \
         CONNECTION_ID()), the ceiling; none: no trigger. Writers: sync Diesel connections, one \
         thread each, conn.transaction."
    )?;
    out.push_str(&pgbench_note);
    writeln!(out)?;
    print!("{out}");

    let part = |name: &str| o.parts.iter().any(|p| p == name);
    if part("throughput") {
        // Throughput.
        let mut rates: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        let mut per_round: Vec<BTreeMap<&str, f64>> = Vec::new();
        let mut notes = String::new();
        let pg_url = url;
        for round in 0..o.rounds {
            let mut this = BTreeMap::new();
            for i in 0..modes.len() {
                let mode = modes[(i + round) % modes.len()];
                prepare_mode(&mut conn, mode)?;
                let run = match mode {
                    Mode::PgbenchNone => match pgbench(pg_url, o.writers, duration)? {
                        Some(run) => run,
                        None => continue,
                    },
                    Mode::RawNone => raw_mariadb(url, o.writers, duration)?,
                    _ => writers::<C>(url, o.writers, duration)?,
                };
                let committed = if mode == Mode::PgbenchNone {
                    // pgbench's count leaves out the transactions in flight when its time ran out.
                    (run.committed, run.committed + o.writers as u64)
                } else {
                    (run.committed, run.committed)
                };
                let line = check(&mut conn, mode, Some(committed))?;
                let errors = match (&run.first_error, run.errors) {
                    (_, 0) => String::new(),
                    (Some(e), n) => format!("; {n} failed transactions, the first: {e}"),
                    (None, n) => format!("; {n} failed transactions"),
                };
                let note = format!(
                    "round {} {:<17} {:>8.0} tx/s  {line}{errors}\n",
                    round + 1,
                    mode.name(),
                    run.rate()
                );
                print!("{note}");
                notes += &note;
                rates.entry(mode.name()).or_default().push(run.rate());
                this.insert(mode.name(), run.rate());
            }
            per_round.push(this);
        }

        let names: Vec<&str> = modes.iter().map(|m| m.name()).collect();
        let mut table = String::from("| round |");
        for name in &names {
            write!(table, " {name} |")?;
        }
        table += " follow/private | follow/hot-row |\n|---|";
        table += &"---|".repeat(names.len() + 2);
        table += "\n";
        let ratio = |row: &BTreeMap<&str, f64>, a: &str, b: &str| -> f64 {
            row.get(a).copied().unwrap_or(f64::NAN) / row.get(b).copied().unwrap_or(f64::NAN)
        };
        for (round, row) in per_round.iter().enumerate() {
            write!(table, "| {} |", round + 1)?;
            for name in &names {
                write!(
                    table,
                    " {:.0} |",
                    row.get(name).copied().unwrap_or(f64::NAN)
                )?;
            }
            writeln!(
                table,
                " {:.3} | {:.1}x |",
                ratio(row, "follow", "private"),
                ratio(row, "follow", "hot-row")
            )?;
        }
        let medians: BTreeMap<&str, f64> = names
            .iter()
            .map(|n| (*n, median(rates.get(n).cloned().unwrap_or_default())))
            .collect();
        write!(table, "| median |")?;
        for name in &names {
            write!(table, " {:.0} |", medians[name])?;
        }
        let to_private = ratio(&medians, "follow", "private");
        let to_hot = ratio(&medians, "follow", "hot-row");
        writeln!(table, " {to_private:.3} | {to_hot:.1}x |")?;

        let mut section = format!(
            "## Throughput, tx/s (committed transactions per second of the run)\n\n{table}\n\
         Medians: follow / private = {to_private:.3} (target >= 0.95: {}); follow / hot-row = \
         {to_hot:.1}x (target >= 10x: {}).\n",
            verdict(to_private >= 0.95),
            verdict(to_hot >= 10.0)
        );
        if let (Some(f), Some(p)) = (medians.get("none"), medians.get("none (pgbench)")) {
            writeln!(
                section,
                "none through Diesel / none by pgbench = {:.3}; follow / none = {:.3}.",
                f / p,
                medians["follow"] / f
            )?;
        } else if let Some(f) = medians.get("none") {
            writeln!(section, "follow / none = {:.3}.", medians["follow"] / f)?;
        }
        writeln!(
        section,
        "\nEvery run, after it (the counts checked against COUNT(*) over comments, every mode's \
         rows against the transactions committed):\n\n{notes}"
    )?;
        print!("\n{section}");
        out += &section;
    }
    if part("bulk") {
        // Bulk.
        let bulk_modes = [Mode::None, Mode::Follow, Mode::HotRow];
        let mut bulk: BTreeMap<&str, Vec<Option<f64>>> = BTreeMap::new();
        let mut bulk_notes = String::new();
        for round in 0..o.bulk_rounds {
            for i in 0..bulk_modes.len() {
                let mode = bulk_modes[(i + round) % bulk_modes.len()];
                prepare_mode(&mut conn, mode)?;
                conn.statement_timeout(o.bulk_timeout)?;
                let sql = C::bulk_sql(o.bulk_rows);
                let t0 = Instant::now();
                let done = conn.batch_execute(&sql);
                let seconds = t0.elapsed().as_secs_f64();
                conn.statement_timeout(0)?;
                let (time, line) = match done {
                    Ok(()) => (
                        Some(seconds),
                        check(&mut conn, mode, Some((o.bulk_rows, o.bulk_rows)))?,
                    ),
                    Err(e) if C::is_timeout(&e) => (
                        None,
                        format!("cancelled after {} s (--bulk-timeout)", o.bulk_timeout),
                    ),
                    Err(e) => return Err(format!("{}, bulk {}: {e}", C::NAME, mode.name()).into()),
                };
                let note = format!(
                    "bulk round {} {:<8} {}  {line}\n",
                    round + 1,
                    mode.name(),
                    time.map_or(format!("> {} s", o.bulk_timeout), |t| format!("{t:.2} s"))
                );
                print!("{note}");
                bulk_notes += &note;
                bulk.entry(mode.name()).or_default().push(time);
            }
        }
        remove_all(&mut conn)?;
        let shown =
            |t: &Option<f64>| t.map_or(format!("> {}", o.bulk_timeout), |t| format!("{t:.2}"));
        let mut section = format!(
        "\n## Bulk: one INSERT … SELECT of {} comments on the {HOT_POSTS} hot posts (one session), seconds\n\n\
         | round | none | follow | hot-row | follow/hot-row |\n|---|---|---|---|---|\n",
        o.bulk_rows
    );
        let rows = bulk["none"]
            .iter()
            .zip(&bulk["follow"])
            .zip(&bulk["hot-row"]);
        for (round, ((none, follow), hot)) in rows.enumerate() {
            let r = match (follow, hot) {
                (Some(f), Some(h)) => format!("{:.3}x", f / h),
                (Some(f), None) => format!("< {:.3}x", f / o.bulk_timeout as f64),
                _ => "-".into(),
            };
            writeln!(
                section,
                "| {} | {} | {} | {} | {r} |",
                round + 1,
                shown(none),
                shown(follow),
                shown(hot)
            )?;
        }
        let med = |name: &str| -> Option<f64> {
            let v: Vec<f64> = bulk[name].iter().flatten().copied().collect();
            (v.len() == bulk[name].len()).then(|| median(v))
        };
        let bulk_line = match (med("follow"), med("hot-row")) {
            (Some(f), Some(h)) => format!(
                "Median follow / hot-row = {:.3}x (target <= 1.5x: {}).",
                f / h,
                verdict(f / h <= 1.5)
            ),
            (Some(f), None) => format!(
                "hot-row was cancelled at {} s: follow / hot-row < {:.3}x (target <= 1.5x: met).",
                o.bulk_timeout,
                f / o.bulk_timeout as f64
            ),
            _ => "follow was cancelled: target <= 1.5x not shown.".into(),
        };
        writeln!(section, "\n{bulk_line}\n\n{bulk_notes}")?;
        print!("{section}");
        out += &section;
    }
    if part("install") {
        out += &install::measure::<C>(o, &mut conn, url)?;
    }

    if o.save {
        // A run of some parts only goes to a file of its own: `follow-install-postgres.txt`.
        let path = if o.parts.len() == PARTS.len() {
            format!("docs/bench/follow-{}.txt", C::NAME)
        } else {
            format!("docs/bench/follow-{}-{}.txt", o.parts.join("-"), C::NAME)
        };
        std::fs::write(&path, &out)?;
        println!("saved {path}");
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let o = options()?;
    for backend in o.backends.clone() {
        match backend.as_str() {
            #[cfg(feature = "postgres")]
            "postgres" => bench::<diesel::PgConnection>(&o)?,
            #[cfg(feature = "mysql")]
            "mysql" => bench::<diesel::MysqlConnection>(&o)?,
            other => return Err(format!("{other}: this build lacks its feature").into()),
        }
    }
    Ok(())
}
