//! The ways to count the benchmark compares: the modes, their prefill and totals, the slot sweep and the shapes.

use super::*;

/// The retry helper's policy for business transactions: one attempt; the benchmark counts a
/// deadlock victim as a retry and runs the next transaction.
pub(crate) const ONCE: RetryPolicy = RetryPolicy {
    max_retries: 0,
    base_delay: Duration::ZERO,
    max_delay: Duration::ZERO,
};

pub(crate) type Op<C> = Box<dyn Fn(&mut C, i32) -> slotted_core::Result<()> + Send + Sync>;
pub(crate) type Total<C> = Box<dyn Fn(&mut C) -> slotted_core::Result<i64> + Send + Sync>;

/// A way to count: its increment, how to read its total, and the table it empties first.
pub(crate) struct Mode<C: BenchConnection> {
    pub(crate) name: String,
    pub(crate) increment: Op<C>,
    pub(crate) total: Total<C>,
    pub(crate) table: String,
    /// Pre-creates the slots of record 1, for a mode that writes into pre-created slots.
    pub(crate) prefill: Option<Prefill<C>>,
    /// Business transactions run in Diesel's `conn.transaction` instead of slotted's retry
    /// helper (sync only: a diagnosis of Diesel's MySQL transactions, see `modes`).
    pub(crate) diesel_tx: bool,
    /// The same increment on a diesel-async connection.
    #[cfg(feature = "async")]
    pub(crate) async_increment: Arc<asynch::AsyncOp<C::Async>>,
}

pub(crate) fn slotted<C: BenchConnection, T: CounterTable<Key = i32>>(name: &str) -> Mode<C> {
    Mode {
        name: name.to_owned(),
        increment: Box::new(|conn, _| Counter::<T>::of(1).increment(conn)),
        total: Box::new(|conn| Counter::<T>::of(1).total(conn)),
        table: T::SPEC.table.to_owned(),
        prefill: None,
        diesel_tx: false,
        #[cfg(feature = "async")]
        async_increment: Arc::new(asynch::slotted::<C::Async, T>()),
    }
}

/// Creates the slot rows of record 1 of `T`.
pub(crate) type Prefill<C> = fn(&mut C) -> slotted_core::Result<u64>;

pub(crate) fn prefill_record_1<C: BenchConnection, T: PrefilledCounterTable<Key = i32>>(
    conn: &mut C,
) -> slotted_core::Result<u64> {
    Counter::<T>::of(1).create_slots(conn)
}

/// The sum of every writer's own record of `T` (the ceilings: a record per writer).
pub(crate) fn per_writer_total<C: BenchConnection, T: CounterTable<Key = i32>>(
    max_writers: u32,
) -> Total<C> {
    Box::new(move |conn: &mut C| {
        let writers: Vec<i32> = (0..max_writers as i32).collect();
        Ok(Counter::<T>::totals(&writers, conn)?.values().sum())
    })
}

/// The row a hand-written mode's writer adds to: slot 0 of its own record, or (`one_record`)
/// its own slot of record 1.
pub(crate) fn hand_written_row(one_record: bool, writer: i32) -> (i32, i16) {
    if one_record {
        (1, i16::try_from(writer).unwrap_or(i16::MAX))
    } else {
        (writer, 0)
    }
}

pub(crate) fn modes<C: BenchConnection>(
    slots: u32,
    max_writers: u32,
) -> Result<Vec<Mode<C>>, BoxError> {
    macro_rules! strategies {
        ($t:ident, $r:ident, $c:ident) => {
            (
                slotted::<C, $t::table>("slotted-thread"),
                slotted::<C, $r::table>("slotted-random"),
                slotted::<C, $c::table>("slotted-connection"),
            )
        };
    }
    let (thread, random, connection): (Mode<C>, Mode<C>, Mode<C>) = match slots {
        16 => strategies!(
            bench_t16_hits_slots,
            bench_r16_hits_slots,
            bench_c16_hits_slots
        ),
        32 => strategies!(
            bench_t32_hits_slots,
            bench_r32_hits_slots,
            bench_c32_hits_slots
        ),
        64 => strategies!(
            bench_t64_hits_slots,
            bench_r64_hits_slots,
            bench_c64_hits_slots
        ),
        128 => strategies!(
            bench_t128_hits_slots,
            bench_r128_hits_slots,
            bench_c128_hits_slots
        ),
        other => return Err(format!("--slots {other}: choose 16, 32, 64 or 128").into()),
    };
    let mut prefill = slotted::<C, bench_p64_hits_slots::table>("slotted-prefill");
    prefill.name = "slotted-prefill (64)".into();
    prefill.prefill = Some(prefill_record_1::<C, bench_p64_hits_slots::table>);
    let mut all = vec![
        Mode {
            name: "single-row".into(),
            increment: Box::new(|conn: &mut C, _| Ok(conn.single_row().map(drop)?)),
            total: Box::new(|conn: &mut C| Ok(conn.read_single()?)),
            table: "bench_single".into(),
            prefill: None,
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(asynch::single_row()),
        },
        thread,
        connection,
        random,
        prefill,
        Mode {
            name: "ceiling".into(),
            increment: Box::new(|conn: &mut C, writer| {
                Counter::<bench_private_hits_slots::table>::of(writer).increment(conn)
            }),
            total: per_writer_total::<C, bench_private_hits_slots::table>(max_writers),
            table: "bench_private_hits_slots".into(),
            prefill: None,
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(
                asynch::private::<C::Async, bench_private_hits_slots::table>(),
            ),
        },
    ];
    // The ceiling with the library's upsert written by hand (prepared, into a one-slot table,
    // a record per writer): what the library's own code costs inside a business transaction.
    // And the same statement into one record's rows, a slot per writer: what the slot layout
    // (one record's rows side by side in the table and its index) costs against a record each.
    for (name, one_record) in [
        ("hand-written ceiling", false),
        ("hand-written slots", true),
    ] {
        all.push(Mode {
            name: name.into(),
            increment: Box::new(move |conn: &mut C, writer| {
                let (key, slot) = hand_written_row(one_record, writer);
                Ok(conn.hand_written_upsert(key, slot).map(drop)?)
            }),
            total: per_writer_total::<C, bench_t1_hits_slots::table>(max_writers.max(2)),
            table: "bench_t1_hits_slots".into(),
            prefill: None,
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(asynch::hand_written_ceiling::<C>(one_record)),
        });
    }
    if C::NAME != "sqlite" {
        // A candidate strategy, written by hand: a server-side choice of a slot nobody holds,
        // `FOR UPDATE SKIP LOCKED` over 64 pre-created slots; when every slot is held, the
        // library's increment (`connection`) adds beside them.
        all.push(Mode {
            name: "skip-locked (64)".into(),
            increment: Box::new(|conn: &mut C, _| {
                if conn.skip_locked()? == 0 {
                    Counter::<bench_k64_hits_slots::table>::of(1).increment(conn)?;
                }
                Ok(())
            }),
            total: Box::new(|conn: &mut C| {
                Counter::<bench_k64_hits_slots::table>::of(1).total(conn)
            }),
            table: "bench_k64_hits_slots".into(),
            prefill: Some(prefill_record_1::<C, bench_k64_hits_slots::table>),
            diesel_tx: false,
            #[cfg(feature = "async")]
            async_increment: Arc::new(asynch::skip_locked::<C::Async>()),
        });
    }
    if C::NAME == "mysql" {
        // The ceiling again, in Diesel's `conn.transaction`: what Diesel's MySQL transaction
        // manager costs (it turns multi-statements on and off around `BEGIN` and `COMMIT`,
        // four round trips per transaction that the retry helper's prepared ones do not take).
        all.push(Mode {
            name: "ceiling, Diesel's conn.transaction".into(),
            increment: Box::new(|conn: &mut C, writer| {
                Counter::<bench_private_hits_slots::table>::of(writer).increment(conn)
            }),
            total: per_writer_total::<C, bench_private_hits_slots::table>(max_writers),
            table: "bench_private_hits_slots".into(),
            prefill: None,
            diesel_tx: true,
            #[cfg(feature = "async")]
            async_increment: Arc::new(
                asynch::private::<C::Async, bench_private_hits_slots::table>(),
            ),
        });
    }
    Ok(all)
}

/// The sweep's modes: every slot count, every strategy (thread, random, connection).
pub(crate) fn sweep_modes<C: BenchConnection>() -> Vec<(u32, [Mode<C>; 3])> {
    macro_rules! strategies {
        ($slots:literal, $t:ident, $r:ident, $c:ident) => {
            (
                $slots,
                [
                    slotted::<C, $t::table>("thread"),
                    slotted::<C, $r::table>("random"),
                    slotted::<C, $c::table>("connection"),
                ],
            )
        };
    }
    vec![
        strategies!(
            1,
            bench_t1_hits_slots,
            bench_r1_hits_slots,
            bench_c1_hits_slots
        ),
        strategies!(
            2,
            bench_t2_hits_slots,
            bench_r2_hits_slots,
            bench_c2_hits_slots
        ),
        strategies!(
            4,
            bench_t4_hits_slots,
            bench_r4_hits_slots,
            bench_c4_hits_slots
        ),
        strategies!(
            8,
            bench_t8_hits_slots,
            bench_r8_hits_slots,
            bench_c8_hits_slots
        ),
        strategies!(
            16,
            bench_t16_hits_slots,
            bench_r16_hits_slots,
            bench_c16_hits_slots
        ),
        strategies!(
            32,
            bench_t32_hits_slots,
            bench_r32_hits_slots,
            bench_c32_hits_slots
        ),
        strategies!(
            64,
            bench_t64_hits_slots,
            bench_r64_hits_slots,
            bench_c64_hits_slots
        ),
        strategies!(
            128,
            bench_t128_hits_slots,
            bench_r128_hits_slots,
            bench_c128_hits_slots
        ),
    ]
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Bare,
    Business,
}

impl Shape {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Shape::Bare => "bare",
            Shape::Business => "business",
        }
    }
}
