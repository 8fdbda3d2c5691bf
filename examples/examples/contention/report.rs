//! One run on one backend: every measurement in turn, printed as it comes, and the files of `--out`.

use super::*;

/// What every measurement of a run shares: the server, the options, the sync pool and (with
/// the `async` feature) the runtime and the async pool.
pub(crate) struct Bench<'a, C: BenchConnection> {
    pub(crate) url: &'a str,
    pub(crate) opts: &'a Options,
    pub(crate) pool: Pool<ConnectionManager<C>>,
    #[cfg(feature = "async")]
    pub(crate) side: asynch::AsyncSide<C::Async>,
}

impl<C: BenchConnection> Bench<'_, C> {
    /// A pool for one measurement's writers, closed after it: the server's connection limit
    /// (100 on PostgreSQL) would not hold every face's connections at once.
    pub(crate) fn writers_pool(&self, size: u32) -> Result<Pool<ConnectionManager<C>>, BoxError> {
        let mut builder = Pool::builder().max_size(size.max(1)).min_idle(Some(0));
        if C::NAME == "sqlite" {
            builder = builder.connection_customizer(Box::new(SqlitePragmas));
        }
        Ok(builder.build(ConnectionManager::<C>::new(self.url))?)
    }

    /// With `--deployed`, brings the pool `get` takes from into a deployed state (see
    /// `deploy`) and returns the other connections to keep open; else nothing.
    fn deployed<P>(
        &self,
        writers: u32,
        mode: &Mode<C>,
        get: impl FnMut() -> Result<P, BoxError>,
        write: impl FnMut(&mut P) -> Result<(), BoxError>,
    ) -> Result<Vec<C>, BoxError> {
        if !self.opts.deployed {
            return Ok(Vec::new());
        }
        let (others, conns) = deploy::<C, P>(self.url, writers, get, write, |conn| {
            Ok((mode.increment)(conn, 0)?)
        })?;
        eprintln!("  deployed: {others} other connections, half of {writers} replaced");
        Ok(conns)
    }

    /// Each of `modes` through the sync face, then (with `async`) through the async one.
    pub(crate) fn library<'b>(
        &'b self,
        modes: &[&'b Mode<C>],
        writers: u32,
        shape: Shape,
    ) -> Vec<Entry<'b>> {
        let mut entries: Vec<Entry<'b>> = Vec::new();
        for &mode in modes {
            entries.push(Box::new(move || {
                let writers_pool = self.writers_pool(writers)?;
                let _others = self.deployed(
                    writers,
                    mode,
                    || Ok(writers_pool.get()?),
                    |conn| Ok((mode.increment)(&mut **conn, 0)?),
                )?;
                measure(&self.pool, writers_pool, mode, writers, shape, self.opts)
            }));
        }
        #[cfg(feature = "async")]
        for &mode in modes.iter().filter(|m| !m.diesel_tx) {
            entries.push(Box::new(move || {
                let side = &self.side;
                let _others = self.deployed(
                    writers,
                    mode,
                    || {
                        side.runtime
                            .block_on(<C::Async as asynch::AsyncBench>::get(&side.pool))
                    },
                    |conn| {
                        Ok(side
                            .runtime
                            .block_on((mode.async_increment)(&mut **conn, 0))?)
                    },
                )?;
                self.side.measure(
                    &self.pool,
                    mode,
                    &mode.async_increment,
                    writers,
                    shape,
                    self.opts,
                )
            }));
        }
        entries
    }

    /// The raw anchors: pgbench, libpq threads and (with `async`) tokio-postgres tasks on
    /// PostgreSQL;
    /// libmariadb threads and mysql_async tasks on MariaDB (with `async`). `single` and `ceiling` reset and check their tables.
    pub(crate) fn anchors<'b>(
        &'b self,
        single: &'b Mode<C>,
        ceiling: &'b Mode<C>,
        writers: u32,
        shape: Shape,
    ) -> Vec<Entry<'b>> {
        let hold = (shape == Shape::Business).then_some(self.opts.hold);
        let seconds = self.opts.seconds;
        let mut entries: Vec<Entry<'b>> = Vec::new();
        let wanted =
            |mode: &Mode<C>| self.opts.modes.is_empty() || self.opts.modes.contains(&mode.name);
        for (target, mode) in [(Target::SingleRow, single), (Target::PrivateRow, ceiling)] {
            if !wanted(mode) {
                continue;
            }
            match C::NAME {
                "postgres" => {
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (pgbench -j 2)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            anchors::pgbench(self.url, target, hold, writers, seconds)
                        })
                    }));
                    #[cfg(feature = "postgres")]
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (libpq threads)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            anchors::libpq_threads(self.url, target, hold, writers, seconds)
                        })
                    }));
                    #[cfg(all(feature = "async", feature = "postgres"))]
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (tokio-postgres tasks)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            self.side.runtime.block_on(anchors::tokio_postgres_tasks(
                                self.url, target, hold, writers, seconds,
                            ))
                        })
                    }));
                }
                #[cfg(feature = "async")]
                "mysql" => {
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (libmariadb threads)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            anchors::libmariadb_threads(self.url, target, hold, writers, seconds)
                        })
                    }));
                    entries.push(Box::new(move || {
                        let name = format!("raw {} (mysql_async tasks)", target.name());
                        anchor_run(&self.pool, &name, mode, shape, writers, || {
                            self.side.runtime.block_on(anchors::mysql_async_tasks(
                                self.url, target, hold, writers, seconds,
                            ))
                        })
                    }));
                }
                _ => {}
            }
        }
        entries
    }
}

/// The raw private-row or single-row anchor a face is judged against: pgbench for both faces
/// on PostgreSQL; on MariaDB, libmariadb threads for the sync face, mysql_async tasks for the
/// async one.
pub(crate) fn anchor_name(backend: &str, face: &str, target: Target) -> String {
    let client = match (backend, face) {
        ("postgres", _) => "pgbench -j 2",
        ("mysql", "async") => "mysql_async tasks",
        _ => "libmariadb threads",
    };
    format!("raw {} ({client})", target.name())
}

/// The raw private-row anchor on the face's own client library and concurrency model, where the
/// benchmark runs one: libmariadb threads (sync, MariaDB), mysql_async tasks (async, MariaDB),
/// tokio-postgres tasks (async, PostgreSQL), which holds its transactions with the same timer as
/// the async face.
pub(crate) fn client_anchor_name(backend: &str, face: &str) -> Option<String> {
    let client = match (backend, face) {
        ("postgres", "async") => "tokio-postgres tasks",
        ("postgres", _) => "libpq threads",
        ("mysql", "async") => "mysql_async tasks",
        ("mysql", _) => "libmariadb threads",
        _ => return None,
    };
    Some(format!("raw {} ({client})", Target::PrivateRow.name()))
}

pub(crate) fn print_run(run: &Run) {
    let ms = |v: f64| {
        if v.is_nan() {
            "–".to_owned()
        } else {
            format!("{v:.2}")
        }
    };
    let us = |v: f64| {
        if v.is_nan() {
            "–".to_owned()
        } else {
            format!("{v:.0}")
        }
    };
    println!(
        "| {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} |",
        run.face,
        run.mode,
        run.writers,
        run.tps,
        ms(run.p50_ms),
        ms(run.p99_ms),
        run.errors,
        run.retries,
        us(run.client_cpu_us),
        us(run.machine_cpu_us)
    );
}

pub(crate) fn run<C: BenchConnection>(
    url: &str,
    opts: &Options,
    pragmas: bool,
) -> Result<(), BoxError> {
    let max_writers = opts
        .writers
        .iter()
        .copied()
        .chain([opts.sweep_writers])
        .max()
        .unwrap_or(1);
    let mut builder = Pool::builder().max_size(3).min_idle(Some(0));
    if pragmas {
        builder = builder.connection_customizer(Box::new(SqlitePragmas));
    }
    let bench = Bench {
        url,
        opts,
        pool: builder.build(ConnectionManager::<C>::new(url))?,
        #[cfg(feature = "async")]
        side: asynch::AsyncSide::<C::Async>::new(url, max_writers as usize + 1)?,
    };
    let pool = &bench.pool;
    setup(&mut *pool.get()?)?;
    let modes = modes::<C>(opts.slots, max_writers)?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    println!(
        "# {} — {} s per measurement, {} rounds (median), business transactions hold {:?}, \
         slotted modes {} slots; sync: a thread per writer, r2d2; async: a task per writer on \
         a 2-worker tokio runtime, deadpool; load average at start {}",
        C::NAME,
        opts.seconds,
        opts.rounds,
        opts.hold,
        opts.slots,
        load.join(" ")
    );
    // What a transaction's hold really lasts, per face: a thread's sleep (pgbench's `\sleep`
    // is a `ppoll` timeout, as precise), and the async face's timerfd; tokio's own timer, which
    // fires on millisecond ticks, for contrast.
    let thread_hold = median(
        (0..100)
            .map(|_| {
                let started = Instant::now();
                std::thread::sleep(opts.hold);
                started.elapsed().as_secs_f64() * 1e3
            })
            .collect(),
    );
    #[allow(unused_mut)] // extended with `async`
    let mut hold_note = format!(
        "std::thread::sleep({:?}) lasts {thread_hold:.3} ms",
        opts.hold
    );
    #[cfg(feature = "async")]
    {
        let (exact, tokio) = bench.side.hold_ms(opts.hold, 100)?;
        hold_note.push_str(&format!(
            "; the async face's and async anchors' timerfd hold lasts {exact:.3} ms \
             (tokio::time::sleep({:?}) would last {tokio:.3} ms)",
            opts.hold
        ));
    }
    println!("hold (median of 100): {hold_note}");

    let all: Vec<&Mode<C>> = modes
        .iter()
        .filter(|m| opts.modes.is_empty() || opts.modes.contains(&m.name))
        .collect();
    let single = &modes[0];
    let ceiling = modes
        .iter()
        .find(|m| m.name == "ceiling")
        .ok_or("no ceiling mode")?;
    let mut runs = Vec::new();
    for &shape in &opts.shapes {
        println!("\n## {} increments\n", shape.name());
        println!(
            "| face | mode | writers | tx/s | p50 ms | p99 ms | errors | retries | client CPU µs/tx \
             | machine CPU µs/tx |"
        );
        println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &writers in &opts.writers {
            let mut entries = bench.library(&all, writers, shape);
            entries.extend(bench.anchors(single, ceiling, writers, shape));
            for run in interleaved(&entries, opts)? {
                print_run(&run);
                runs.push(run);
            }
        }
    }

    // Ratios at the sweep's writer count, business shape: the targets.
    let w = opts.sweep_writers;
    let find = |face: &str, mode: &str| {
        runs.iter().find(|r| {
            r.face == face && r.mode == mode && r.writers == w && r.shape == Shape::Business
        })
    };
    println!("\n## {w} writers, business transactions: ratios\n");
    println!(
        "Each ratio pairs the two measurements of one round (they ran minutes apart at most), \
         then takes the median over the rounds; the range is the lowest and highest round.\n"
    );
    println!(
        "| face | mode | tx/s | × raw private-row | × raw single-row | × library ceiling | × raw \
         private-row, same client and runtime | × hand-written ceiling |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut ratios = Vec::new();
    for face in ["sync", "async"] {
        let raw_private = find("raw", &anchor_name(C::NAME, face, Target::PrivateRow));
        let raw_single = find("raw", &anchor_name(C::NAME, face, Target::SingleRow));
        let raw_client = client_anchor_name(C::NAME, face).and_then(|name| find("raw", &name));
        let ceiling = find(
            face,
            match face {
                "sync" => "ceiling",
                _ => "async ceiling",
            },
        );
        let hand = find(
            face,
            match face {
                "sync" => "hand-written ceiling",
                _ => "async hand-written ceiling",
            },
        );
        for mode in &modes {
            let name = match face {
                "sync" => mode.name.clone(),
                _ => format!("async {}", mode.name),
            };
            let Some(run) = find(face, &name) else {
                continue;
            };
            let of = |anchor: Option<&Run>| anchor.and_then(|a| PairedRatio::of(run, a));
            let (private, single, own, client, by_hand) = (
                of(raw_private),
                of(raw_single),
                of(ceiling),
                of(raw_client),
                of(hand),
            );
            let show =
                |r: Option<PairedRatio>, digits: usize| r.map_or("–".into(), |r| r.show(digits));
            println!(
                "| {face} | {name} | {:.0} | {} | {} | {} | {} | {} |",
                run.tps,
                show(private, 3),
                show(single, 1),
                show(own, 3),
                show(client, 3),
                show(by_hand, 3)
            );
            let json = |key: &str, r: Option<PairedRatio>| match r {
                Some(r) => format!(
                    "\"{key}\": {:.4}, \"{key}_range\": [{:.4}, {:.4}]",
                    r.median, r.low, r.high
                ),
                None => format!("\"{key}\": null"),
            };
            ratios.push(format!(
                "{{\"face\": \"{face}\", \"mode\": \"{name}\", \"tps\": {:.1}, {}, {}, {}, {}, {}}}",
                run.tps,
                json("x_raw_private_row", private),
                json("x_raw_single_row", single),
                json("x_library_ceiling", own),
                json("x_raw_client_private_row", client),
                json("x_hand_written_ceiling", by_hand),
            ));
        }
    }

    // The slot-count sweep: every strategy, sync and async.
    let sweeping = opts
        .sweep_slots
        .as_ref()
        .is_none_or(|slots| !slots.is_empty());
    if sweeping {
        println!("\n## slot-count sweep: {w} writers, business transactions (tx/s)\n");
    }
    let sweep_all = sweep_modes::<C>();
    let faces: &[&str] = if cfg!(feature = "async") {
        &["sync", "async"]
    } else {
        &["sync"]
    };
    let columns: Vec<String> = faces
        .iter()
        .flat_map(|face| {
            ["thread", "random", "connection"].map(|s| match *face {
                "sync" => s.to_owned(),
                _ => format!("async {s}"),
            })
        })
        .collect();
    if sweeping {
        println!("| slots | {} |", columns.join(" | "));
        println!("|---:|{}", "---:|".repeat(columns.len()));
    }
    let mut sweep: Vec<(u32, Vec<f64>)> = Vec::new();
    for (slots, strategies) in &sweep_all {
        if opts
            .sweep_slots
            .as_ref()
            .is_some_and(|wanted| !wanted.contains(slots))
        {
            continue;
        }
        let refs: Vec<&Mode<C>> = strategies.iter().collect();
        let entries = bench.library(&refs, w, Shape::Business);
        let measured: Vec<f64> = interleaved(&entries, opts)?.iter().map(|r| r.tps).collect();
        let cells: Vec<String> = measured.iter().map(|t| format!("{t:.0}")).collect();
        println!("| {slots} | {} |", cells.join(" | "));
        sweep.push((*slots, measured));
    }
    let smallest: Vec<u32> = (0..columns.len())
        .map(|i| {
            let best = sweep.iter().map(|s| s.1[i]).fold(0.0, f64::max);
            sweep
                .iter()
                .find(|s| s.1[i] >= 0.95 * best)
                .map_or(0, |s| s.0)
        })
        .collect();
    let within: Vec<String> = columns
        .iter()
        .zip(&smallest)
        .map(|(c, s)| format!("{c} {s}"))
        .collect();
    if sweeping {
        println!(
            "\nsmallest slot count within 5% of the best: {}",
            within.join(", ")
        );
    }

    // The read side and the library's own cost, single-threaded.
    let reads = opts.calls;
    {
        let conn = &mut *pool.get()?;
        conn.batch_execute("DELETE FROM bench_t16_hits_slots; DELETE FROM bench_t64_hits_slots")?;
        conn.batch_execute("DELETE FROM bench_single")?;
        conn.batch_execute("INSERT INTO bench_single (id, count) VALUES (1, 0)")?;
        for (table, slots) in [("bench_t16_hits_slots", 16), ("bench_t64_hits_slots", 64)] {
            let rows: Vec<String> = (0..slots).map(|s| format!("(1, {s}, 1)")).collect();
            conn.batch_execute(&format!(
                "INSERT INTO {table} (record_id, slot, count) VALUES {}",
                rows.join(", ")
            ))?;
        }
        let rows: Vec<String> = (2..=1000).map(|k| format!("({k}, 0, 1)")).collect();
        conn.batch_execute(&format!(
            "INSERT INTO bench_t16_hits_slots (record_id, slot, count) VALUES {}",
            rows.join(", ")
        ))?;
        if C::NAME == "postgres" {
            // The tables were written hard; read them as a settled table is read.
            for table in [
                "bench_single",
                "bench_t16_hits_slots",
                "bench_t64_hits_slots",
            ] {
                conn.batch_execute(&format!("VACUUM ANALYZE {table}"))?;
            }
        }
    }
    let keys: Vec<i32> = (1..=1000).collect();
    // Each face's reads run interleaved call by call, each call timed alone, and the median
    // call counts: on a shared machine, a batch of one read timed after a batch of another
    // meets another machine (wake-up latencies move by 3× between batches), so ratios of
    // batch averages said more about the moment than about the reads. The first 10% of calls
    // warm the statements and caches up and are dropped.
    let warm = reads / 10;
    #[allow(unused_mut)] // extended with `async`
    let mut read_us = {
        let conn = &mut *pool.get()?;
        let mut ops: [SyncOp<'_, C>; 3] = [
            &mut |c, _| Ok(c.read_single().map(drop)?),
            &mut |c, _| Ok(T16::hits_of(1).total(c).map(drop)?),
            &mut |c, _| Ok(T64::hits_of(1).total(c).map(drop)?),
        ];
        let mut us = interleaved_us(conn, warm, reads, &mut ops)?;
        us.extend(interleaved_us(
            conn,
            1,
            (reads / 20).max(5),
            &mut [&mut |c, _| {
                let totals = T16::hits_totals(&keys, c)?;
                match totals.values().sum::<i64>() {
                    1015 => Ok(()), // 16 slots of record 1, one of each other record
                    other => {
                        Err(format!("totals of 1,000 keys summed to {other}, not 1,015").into())
                    }
                }
            }],
        )?);
        us
    };
    #[cfg(feature = "async")]
    read_us.extend(bench.side.interleaved_us(
        warm,
        reads,
        &[
            &|c, _| {
                Box::pin(async move {
                    Ok(<C::Async as asynch::AsyncBench>::read_single(c)
                        .await
                        .map(drop)?)
                })
            },
            &|c, _| Box::pin(async move { Ok(T16::hits_of(1).total_async(c).await.map(drop)?) }),
            &|c, _| Box::pin(async move { Ok(T64::hits_of(1).total_async(c).await.map(drop)?) }),
        ],
    )?);
    let read_names = [
        "single-row column",
        "total, 16 slots",
        "total, 64 slots",
        "totals of 1,000 keys (one query)",
        "async single-row column",
        "async total, 16 slots",
        "async total, 64 slots",
    ];
    println!("\n## reads, single-threaded\n");
    println!("| read | µs per call (median) | per s | × single-row read |");
    println!("|---|---:|---:|---:|");
    for (i, (name, us)) in read_names.iter().zip(&read_us).enumerate() {
        let single = if i < 4 { read_us[0] } else { read_us[4] };
        println!(
            "| {name} | {us:.1} | {:.0} | {:.2} |",
            1e6 / us,
            us / single
        );
    }

    // The library's increment against the same upsert written by hand, two ways: a prepared
    // statement (the strict comparison: what the library adds is its own work) and Diesel's
    // query builder (what a user would write). Each round is one transaction, so that the
    // commit's fsync (the same for all) does not drown the statements' own cost, in which the
    // three alternate call by call, each call timed alone (see the reads); each touches every
    // record of its own key range once, as increments of a busy table do (the same row again
    // and again inside one transaction would measure the row's growing version chain
    // instead). Round 0 inserts the rows and warms the statements up; the median call of the
    // others times the update path. With `async`, the library's `increment_async` against the
    // hand-written prepared upsert on diesel-async, alternating the same way.
    let n: i32 = opts.calls;
    let rounds: i64 = 11;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); 5];
    let conn = &mut *pool.get()?;
    conn.batch_execute("DELETE FROM bench_t1_hits_slots")?;
    for round in 0..rounds {
        #[allow(unused_mut)]
        let mut measured = conn.transaction(|c| {
            interleaved_samples(
                c,
                n,
                &mut [
                    &mut |c, i| Ok(T1::hits_of(i).increment(c)?),
                    &mut |c, i| Ok(c.hand_written_upsert(n + i, 0).map(drop)?),
                    &mut |c, i| Ok(c.dsl_upsert(2 * n + i).map(drop)?),
                ],
            )
        })?;
        #[cfg(feature = "async")]
        measured.extend(bench.side.interleaved_samples(
            n,
            true,
            &[
                &|c, i| {
                    Box::pin(async move { Ok(T1::hits_of(3 * n + i).increment_async(c).await?) })
                },
                &|c, i| {
                    Box::pin(async move {
                        Ok(asynch::hand_written_upsert::<C, _>(c, 4 * n + i, 0)
                            .await
                            .map(drop)?)
                    })
                },
            ],
        )?);
        if round > 0 {
            for (all, new) in samples.iter_mut().zip(measured) {
                all.extend(new);
            }
        }
    }
    let us: Vec<f64> = samples
        .into_iter()
        .filter(|t| !t.is_empty())
        .map(median)
        .collect();
    let (library, hand, dsl) = (us[0], us[1], us[2]);
    println!(
        "\nincrement, single writer (median call): library {library:.1} µs, hand-written prepared \
         upsert {hand:.1} µs ({:.3}×), Diesel query-builder upsert {dsl:.1} µs ({:.3}×)",
        library / hand,
        library / dsl
    );
    let async_increment = (us.len() == 5).then(|| (us[3], us[4]));
    if let Some((library, hand)) = async_increment {
        println!(
            "async increment, single writer (median call): library {library:.1} µs, hand-written \
             prepared diesel-async upsert {hand:.1} µs ({:.3}×)",
            library / hand
        );
    }
    let written = if async_increment.is_some() { 5 } else { 3 };
    let keys: Vec<i32> = (0..written * n).collect();
    let counted = T1::hits_totals(&keys, conn)?;
    if let Some((key, total)) = counted.iter().find(|(_, &total)| total != rounds) {
        return Err(format!("record {key} counted {total} increments, not {rounds}").into());
    }

    if let Some(dir) = &opts.out {
        std::fs::create_dir_all(dir)?;
        let mut json = String::new();
        writeln!(
            json,
            "{{\n  \"backend\": \"{}\",\n  \"seconds\": {},\n  \"rounds\": {},\n  \"hold_ms\": {},\n  \"hold_note\": \"{}\",\n  \"slots\": {},\n  \"load_average_at_start\": \"{}\",\n  \"async\": \"tokio multi-thread, 2 workers, deadpool\",",
            C::NAME,
            opts.seconds,
            opts.rounds,
            opts.hold.as_secs_f64() * 1e3,
            hold_note,
            opts.slots,
            load.join(" ")
        )?;
        json.push_str("  \"runs\": [\n");
        let num = |v: f64| {
            if v.is_nan() {
                "null".to_owned()
            } else {
                format!("{v:.3}")
            }
        };
        for (i, r) in runs.iter().enumerate() {
            let comma = if i + 1 < runs.len() { "," } else { "" };
            writeln!(
                json,
                "    {{\"face\": \"{}\", \"mode\": \"{}\", \"shape\": \"{}\", \"writers\": {}, \"committed\": {}, \"tps\": {:.1}, \"p50_ms\": {}, \"p99_ms\": {}, \"errors\": {}, \"retries\": {}, \"client_cpu_us_per_tx\": {}, \"machine_cpu_us_per_tx\": {}, \"round_tps\": [{}]}}{comma}",
                r.face, r.mode, r.shape.name(), r.writers, r.committed, r.tps, num(r.p50_ms), num(r.p99_ms), r.errors, r.retries, num(r.client_cpu_us), num(r.machine_cpu_us),
                r.round_tps.iter().map(|t| format!("{t:.1}")).collect::<Vec<_>>().join(", ")
            )?;
        }
        writeln!(
            json,
            "  ],\n  \"ratios_business_{w}_writers\": [\n    {}\n  ],",
            ratios.join(",\n    ")
        )?;
        json.push_str("  \"sweep\": [");
        let sweep_json: Vec<String> = sweep
            .iter()
            .map(|(s, tps)| {
                let cells: Vec<String> = columns
                    .iter()
                    .zip(tps)
                    .map(|(c, t)| format!("\"{c}\": {t:.1}"))
                    .collect();
                format!("{{\"slots\": {s}, {}}}", cells.join(", "))
            })
            .collect();
        json.push_str(&sweep_json.join(",\n    "));
        let within_json: Vec<String> = columns
            .iter()
            .zip(&smallest)
            .map(|(c, s)| format!("\"{c}\": {s}"))
            .collect();
        writeln!(
            json,
            "],\n  \"sweep_writers\": {w},\n  \"smallest_within_5pct\": {{{}}},",
            within_json.join(", ")
        )?;
        let reads_json: Vec<String> = read_names
            .iter()
            .zip(&read_us)
            .map(|(n, us)| format!("\"{n}\": {us:.2}"))
            .collect();
        writeln!(json, "  \"reads_us\": {{{}}},", reads_json.join(", "))?;
        let async_json = async_increment.map_or(String::new(), |(l, h)| {
            format!(", \"async_library\": {l:.2}, \"async_hand_written_prepared\": {h:.2}")
        });
        writeln!(
            json,
            "  \"increment_us\": {{\"library\": {library:.2}, \"hand_written_prepared\": {hand:.2}, \"diesel_query_builder\": {dsl:.2}{async_json}}}\n}}"
        )?;
        std::fs::write(dir.join(format!("contention-{}.json", C::NAME)), json)?;
        for shape in [Shape::Bare, Shape::Business] {
            let mut names: Vec<&str> = Vec::new();
            for r in runs.iter().filter(|r| r.shape == shape) {
                if !names.contains(&r.mode.as_str()) {
                    names.push(&r.mode);
                }
            }
            let series: Vec<Series> = names
                .iter()
                .map(|name| Series {
                    name: (*name).to_owned(),
                    points: runs
                        .iter()
                        .filter(|r| r.mode == *name && r.shape == shape)
                        .map(|r| (r.writers, r.tps))
                        .collect(),
                })
                .collect();
            let title = format!(
                "{}: {} increments, {} slots",
                C::NAME,
                shape.name(),
                opts.slots
            );
            throughput_chart(
                &dir.join(format!("contention-{}-{}.svg", C::NAME, shape.name())),
                &title,
                &series,
            )?;
        }
        let mut text = String::new();
        for r in &runs {
            writeln!(
                text,
                "{}\t{}\t{}\t{}\t{:.1}",
                r.face,
                r.mode,
                r.shape.name(),
                r.writers,
                r.tps
            )?;
        }
        std::fs::write(dir.join(format!("contention-{}.tsv", C::NAME)), text)?;
        println!("\nwrote {}", dir.display());
    }
    Ok(())
}
