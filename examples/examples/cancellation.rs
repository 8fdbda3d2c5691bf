//! Issue 22's probe: the axum_likes service under a storm of clients cut off after 2 to 40 ms,
//! and without cut-offs, for each way of meeting cancellation, side by side in one run.
//!
//!     cargo run --release --example cancellation --features async,postgres,mysql -- postgres
//!     # or mysql, or sqlite; `--rounds N` (default 3)
//!
//! Per pattern (`slotted_examples::web::Pattern`): the storm's wrong answers (500, 404 for a
//! post that exists, another post's total) and the requests that failed after it, then the
//! rate of requests without cut-offs. Each round runs every pattern on a fresh database, in
//! turn, starting each round with the next pattern, so the machine's noise falls on all of them
//! alike.

#[path = "../tests/storm/mod.rs"]
mod storm;

use std::time::Duration;

use slotted_examples::web::{self, Database, Pattern};
use slotted_examples::BoxError;
use slotted_tests::asynch::AsyncTestConnection;

const PATTERNS: [(&str, Pattern); 4] = [
    ("unguarded (before)", Pattern::UNGUARDED),
    ("guard", Pattern::GUARD),
    ("spawn", Pattern::SPAWN),
    ("spawn + guard", Pattern::SPAWN_AND_GUARD),
];
const POSTS: [i32; 3] = [1, 2, 3];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "postgres".into());
    let mut rounds = 3;
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds needs a value")?.parse()?,
            _ => return Err(format!("unknown flag {flag}").into()),
        }
    }
    match backend.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" => probe::<diesel_async::AsyncPgConnection>(rounds).await,
        #[cfg(feature = "mysql")]
        "mysql" => probe::<diesel_async::AsyncMysqlConnection>(rounds).await,
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            probe::<
                diesel_async::sync_connection_wrapper::SyncConnectionWrapper<
                    diesel::SqliteConnection,
                >,
            >(rounds)
            .await
        }
        other => Err(format!("{other}: postgres, mysql or sqlite (with its feature)").into()),
    }
}

#[derive(Default)]
struct Tally {
    storm_failures: usize,
    storm_404: usize,
    storm_500: usize,
    storm_wrong: usize,
    after_failures: usize,
    bounds_broken: usize,
    rates: Vec<f64>,
    storm_rates: Vec<f64>,
}

async fn probe<A: Database + AsyncTestConnection>(rounds: usize) -> Result<(), BoxError>
where
    A::DeadpoolConn: slotted_core::PooledAsyncConnection,
    for<'a> A::Bb8Conn<'a>: slotted_core::PooledAsyncConnection,
{
    let backend = <A::Sync as slotted_tests::TestConnection>::NAME;
    let storm = storm::Storm {
        clients: 32,
        requests: 40,
        cut_every: 4,
        cut_after_ms: (2, 40),
        posts: POSTS.to_vec(),
    };
    let steady = storm::Storm {
        clients: 32,
        requests: 100,
        cut_every: 0,
        ..storm.clone()
    };
    println!(
        "# cargo run --release --example cancellation --features async,postgres,mysql -- {backend} --rounds {rounds}"
    );
    println!(
        "# storm: {} clients x {} requests, 1 in {} cut off after {}-{} ms; steady: {} x {}, none cut off; pool of 8",
        storm.clients,
        storm.requests,
        storm.cut_every,
        storm.cut_after_ms.0,
        storm.cut_after_ms.1,
        steady.clients,
        steady.requests
    );
    let mut tallies: Vec<Tally> = PATTERNS.iter().map(|_| Tally::default()).collect();
    for round in 0..rounds {
        // Each round starts with another pattern, so that none always runs first or last.
        for k in 0..PATTERNS.len() {
            let i = (round + k) % PATTERNS.len();
            let ((_, pattern), tally) = (&PATTERNS[i], &mut tallies[i]);
            let test = format!("probe_{i}_{round}");
            let Some(db) = slotted_tests::TestDb::new::<A::Sync>(&test) else {
                return Err(format!("{backend}: no database URL").into());
            };
            let pool = web::connect::<A>(&db.url, 8, Duration::from_secs(10)).await?;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let base = format!("http://{}", listener.local_addr()?);
            let server = tokio::spawn({
                let app = web::router_with::<A>(pool, *pattern);
                async move { axum::serve(listener, app).await }
            });
            let http = reqwest::Client::new();
            for id in POSTS {
                http.put(format!("{base}/posts/{id}"))
                    .json(&serde_json::json!({ "title": "probe" }))
                    .send()
                    .await?
                    .error_for_status()?;
            }
            let report = storm::run(&base, &storm).await;
            tally.storm_failures += report.failures();
            tally.storm_404 += report.statuses.get(&404).copied().unwrap_or(0);
            tally.storm_500 += report.statuses.get(&500).copied().unwrap_or(0);
            tally.storm_wrong += report.wrong_count;
            tally.storm_rates.push(report.rate());
            tally.after_failures += storm::fresh_requests(&base, &POSTS, 24).await.len();
            for post in POSTS {
                let Some(total) = storm::settled_total(&base, post).await else {
                    tally.bounds_broken += 1;
                    continue;
                };
                let acked = report.acknowledged.get(&post).copied().unwrap_or(0);
                let cut = report.cut_off_likes.get(&post).copied().unwrap_or(0);
                if total < acked || total > acked + cut {
                    tally.bounds_broken += 1;
                }
            }
            let steady_report = storm::run(&base, &steady).await;
            tally.after_failures += steady_report.failures();

            tally.rates.push(steady_report.rate());
            server.abort();
        }
    }
    println!(
        "{:<20} {:>9} {:>6} {:>6} {:>7} {:>8} {:>8} {:>12} {:>12} {:>7}",
        "pattern",
        "storm bad",
        "404",
        "500",
        "wrong",
        "after",
        "bounds",
        "storm req/s",
        "steady req/s",
        "ratio"
    );
    let base_rate = median(&tallies[1].rates);
    for ((name, _), t) in PATTERNS.iter().zip(&tallies) {
        println!(
            "{:<20} {:>9} {:>6} {:>6} {:>7} {:>8} {:>8} {:>12.0} {:>12.0} {:>7.2}",
            name,
            t.storm_failures,
            t.storm_404,
            t.storm_500,
            t.storm_wrong,
            t.after_failures,
            t.bounds_broken,
            median(&t.storm_rates),
            median(&t.rates),
            median(&t.rates) / base_rate
        );
    }
    println!(
        "# storm bad: answers not 200-and-right during the storms ({rounds} rounds summed); 404, 500, \
         wrong: of them; after: failed requests after the storms (24 each) and in the steady runs; \
         bounds: totals outside acknowledged..acknowledged+cut-off; req/s: medians of the rounds; \
         ratio: steady req/s against the guard's"
    );
    throughput::<A>(&steady, rounds * 4).await?;
    pools::<A>(rounds).await
}

/// Requests/s without cut-offs, each pattern on a server of its own started once, the
/// patterns taking turns `runs` times (each turn starting with the next pattern): the
/// throughput comparison with the least noise this machine allows.
async fn throughput<A: Database + AsyncTestConnection>(
    steady: &storm::Storm,
    runs: usize,
) -> Result<(), BoxError> {
    let mut servers = Vec::new();
    for (i, (_, pattern)) in PATTERNS.iter().enumerate() {
        let db = slotted_tests::TestDb::new::<A::Sync>(&format!("probe_rate_{i}"))
            .ok_or("no database URL")?;
        let pool = web::connect::<A>(&db.url, 8, Duration::from_secs(10)).await?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let app = web::router_with::<A>(pool, *pattern);
        let task = tokio::spawn(async move { axum::serve(listener, app).await });
        let http = reqwest::Client::new();
        for id in POSTS {
            http.put(format!("{base}/posts/{id}"))
                .json(&serde_json::json!({ "title": "probe" }))
                .send()
                .await?
                .error_for_status()?;
        }
        servers.push((db, base, task));
    }
    let mut rates = vec![Vec::new(); PATTERNS.len()];
    let mut failures = vec![0; PATTERNS.len()];
    for run in 0..runs {
        for k in 0..PATTERNS.len() {
            let i = (run + k) % PATTERNS.len();
            let report = storm::run(&servers[i].1, steady).await;
            failures[i] += report.failures();
            rates[i].push(report.rate());
        }
    }
    println!();
    println!(
        "{:<20} {:>12} {:>9} {:>9}",
        "pattern", "req/s", "vs guard", "failures"
    );
    let guard = median(&rates[1]);
    for (((name, _), rates), failures) in PATTERNS.iter().zip(&rates).zip(&failures) {
        println!(
            "{name:<20} {:>12.0} {:>9.2} {failures:>9}",
            median(rates),
            median(rates) / guard
        );
    }
    println!(
        "# {runs} runs of {} clients x {} requests per pattern, none cut off, the patterns taking \
         turns; req/s: median",
        steady.clients, steady.requests
    );
    for (_, _, task) in servers {
        task.abort();
    }
    Ok(())
}

/// bb8 against deadpool, each with and without the guard, no HTTP: 32 tasks of 150 calls (a
/// like, then its post's total) on a pool of 8, one call in four cut off after 0.2 to 5 ms
/// (the pool's `get` included). "bb8 unpinged": `test_on_check_out(false)`.
async fn pools<A: Database + AsyncTestConnection>(rounds: usize) -> Result<(), BoxError>
where
    A::DeadpoolConn: slotted_core::PooledAsyncConnection,
    for<'a> A::Bb8Conn<'a>: slotted_core::PooledAsyncConnection,
{
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    println!();
    println!(
        "{:<22} {:>10} {:>10} {:>10}",
        "pool", "failures", "cut off", "calls/s"
    );
    let mut figures: Vec<(String, usize, usize, Vec<f64>)> = Vec::new();
    for round in 0..rounds {
        for (i, (pool_name, guard)) in [
            ("bb8", false),
            ("bb8", true),
            ("bb8 unpinged", true),
            ("deadpool", false),
            ("deadpool", true),
        ]
        .into_iter()
        .enumerate()
        {
            let db = slotted_tests::TestDb::new::<A::Sync>(&format!("probe_pools_{i}_{round}"))
                .ok_or("no database URL")?;
            web::connect::<A>(&db.url, 1, Duration::from_secs(10)).await?;
            let (failures, cut_off) =
                (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
            let started = std::time::Instant::now();
            let bb8 = if pool_name == "bb8" {
                A::bb8(&db.url, 8).await
            } else {
                A::bb8_without_check_out_test(&db.url, 8).await
            };
            let deadpool = A::deadpool(&db.url, 8);
            let tasks: Vec<_> = (0..32_u64)
                .map(|t| {
                    let (bb8, deadpool) = (bb8.clone(), deadpool.clone());
                    let (failures, cut_off) = (failures.clone(), cut_off.clone());
                    tokio::spawn(async move {
                        for c in 0..150_u64 {
                            let n = t * 150 + c;
                            let post = web::Post {
                                id: (n % 3) as i32 + 1,
                                title: String::new(),
                            };
                            let likes = post.likes();
                            let work = async {
                                let total = if pool_name.starts_with("bb8") {
                                    like_and_total(A::bb8_get(&bb8).await, guard, &likes).await?
                                } else {
                                    like_and_total(A::deadpool_get(&deadpool).await, guard, &likes)
                                        .await?
                                };
                                Ok::<_, slotted_core::Error>(total)
                            };
                            let result = if n % 4 == 0 {
                                let limit = Duration::from_micros(200 + (n * 7919) % 4800);
                                match tokio::time::timeout(limit, work).await {
                                    Ok(r) => r,
                                    Err(_) => {
                                        cut_off.fetch_add(1, Ordering::Relaxed);
                                        continue;
                                    }
                                }
                            } else {
                                work.await
                            };
                            if !matches!(result, Ok(total) if total >= 1) {
                                failures.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    })
                })
                .collect();
            for task in tasks {
                // A task that panicked (a pool's get failed) counts as failures.
                if task.await.is_err() {
                    failures.fetch_add(150, Ordering::Relaxed);
                }
            }
            let rate = 32.0 * 150.0 / started.elapsed().as_secs_f64();
            let name = format!("{pool_name}{}", if guard { " + guard" } else { "" });
            match figures.iter_mut().find(|f| f.0 == name) {
                Some(f) => {
                    f.1 += failures.load(Ordering::Relaxed);
                    f.2 += cut_off.load(Ordering::Relaxed);
                    f.3.push(rate);
                }
                None => figures.push((
                    name,
                    failures.load(Ordering::Relaxed),
                    cut_off.load(Ordering::Relaxed),
                    vec![rate],
                )),
            }
        }
    }
    for (name, failures, cut_off, rates) in &figures {
        println!(
            "{name:<22} {failures:>10} {cut_off:>10} {:>10.0}",
            median(rates)
        );
    }
    println!(
        "# failures: calls that ran to their end and failed or read a total below 1 ({rounds} \
         rounds summed); calls/s: medians of the rounds, cut-off calls included"
    );
    Ok(())
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// A like and the post's total on `conn`, a connection of either pool, through a `CancelGuard`
/// or not.
async fn like_and_total<P: slotted_core::PooledAsyncConnection>(
    conn: P,
    guard: bool,
    likes: &slotted_core::Counter<'_, web::posts_likes_slots::table>,
) -> Result<i64, slotted_core::Error> {
    if guard {
        let mut conn = slotted_core::CancelGuard::new(conn);
        conn.run(|c| likes.increment_async(c)).await?;
        conn.run(|c| likes.total_async(c)).await
    } else {
        let mut conn = conn;
        likes.increment_async(&mut conn).await?;
        likes.total_async(&mut conn).await
    }
}
