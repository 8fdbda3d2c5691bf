//! The counters the benchmark measures (one model per slot count and strategy), its hand-written statements, and what differs per backend.

use super::*;

/// One model per slot count and strategy: the slot count is a compile-time attribute.
macro_rules! bench_models {
    ($($model:ident, $table:ident, $slots:literal, $strategy:ident $(, $prefill:ident)?;)*) => {
        $(
            // Each model exists for its counter table, which the modes count in.
            #[allow(dead_code)]
            #[derive(SlottedCounter)]
            #[diesel(table_name = $table)]
            #[slotted(counter = hits, slots = $slots, strategy = $strategy $(, $prefill)?)]
            pub struct $model {
                pub id: i32,
            }
        )*
    };
}

bench_models! {
    // `ceiling`: one record per writer, one slot each: the library's own upsert, no sharing.
    Private, bench_private, 1, thread;
    T1, bench_t1, 1, thread;
    T2, bench_t2, 2, thread;
    T4, bench_t4, 4, thread;
    T8, bench_t8, 8, thread;
    T16, bench_t16, 16, thread;
    T32, bench_t32, 32, thread;
    T64, bench_t64, 64, thread;
    T128, bench_t128, 128, thread;
    R1, bench_r1, 1, random;
    R2, bench_r2, 2, random;
    R4, bench_r4, 4, random;
    R8, bench_r8, 8, random;
    R16, bench_r16, 16, random;
    R32, bench_r32, 32, random;
    R64, bench_r64, 64, random;
    R128, bench_r128, 128, random;
    C1, bench_c1, 1, connection;
    C2, bench_c2, 2, connection;
    C4, bench_c4, 4, connection;
    C8, bench_c8, 8, connection;
    C16, bench_c16, 16, connection;
    C32, bench_c32, 32, connection;
    C64, bench_c64, 64, connection;
    C128, bench_c128, 128, connection;
    P64, bench_p64, 64, thread, prefill;
    K64, bench_k64, 64, connection, prefill;
}

/// A bound value of a [`HandWritten`] statement.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bind {
    Integer(i32),
    SmallInt(i16),
    BigInt(i64),
}

/// A statement written by hand, `pieces[0] bind[0] pieces[1] bind[1] …`, prepared once per
/// connection and found in Diesel's statement cache by its type `S`, as the library's own
/// increment is. Diesel's query builder never caches an `UPDATE`, an upsert or an insert of
/// `DEFAULT`-able columns (it parses them again on every call); built with it, the comparison
/// modes and the business transaction's event insert would pay a cost the library does not.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandWritten<'a, S> {
    pub(crate) pieces: &'static [&'static str],
    pub(crate) binds: &'a [Bind],
    pub(crate) statement: PhantomData<fn() -> S>,
}

/// The hand-written statements: each one's text is fixed on a connection.
pub(crate) enum SingleRow {}
pub(crate) enum Event {}
pub(crate) enum Upsert {}

impl<'a, S> HandWritten<'a, S> {
    pub(crate) fn new(pieces: &'static [&'static str], binds: &'a [Bind]) -> Self {
        HandWritten {
            pieces,
            binds,
            statement: PhantomData,
        }
    }
}

impl<DB, S> QueryFragment<DB> for HandWritten<'_, S>
where
    DB: diesel::backend::Backend,
    i16: ToSql<SmallInt, DB>,
    i32: ToSql<Integer, DB>,
    i64: ToSql<BigInt, DB>,
{
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        for (i, piece) in self.pieces.iter().enumerate() {
            out.push_sql(piece);
            if i + 1 == self.pieces.len() {
                break; // binds go between pieces; a dialect may use fewer than given
            }
            match self.binds.get(i) {
                Some(Bind::Integer(v)) => out.push_bind_param::<Integer, _>(v)?,
                Some(Bind::SmallInt(v)) => out.push_bind_param::<SmallInt, _>(v)?,
                Some(Bind::BigInt(v)) => out.push_bind_param::<BigInt, _>(v)?,
                None => {}
            }
        }
        Ok(())
    }
}

impl<S: 'static> QueryId for HandWritten<'_, S> {
    type QueryId = S;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<C, S> RunQueryDsl<C> for HandWritten<'_, S> {}

/// `UPDATE bench_single SET count = count + 1 WHERE id = ?`: the naive counter.
pub(crate) const SINGLE_ROW: &[&str] =
    &["UPDATE bench_single SET count = count + 1 WHERE id = ", ""];
/// The business transaction's own write.
pub(crate) const EVENT: &[&str] = &["INSERT INTO bench_events (writer) VALUES (", ")"];
/// The library's upsert into `T1`, written by hand: PostgreSQL and SQLite.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const ANSI_UPSERT: &[&str] = &[
    "INSERT INTO bench_t1_hits_slots (record_id, slot, count) VALUES (",
    ", ",
    ", ",
    ") ON CONFLICT (record_id, slot) DO UPDATE SET count = bench_t1_hits_slots.count + excluded.count",
];
/// The same for MySQL and MariaDB.
#[cfg(feature = "mysql")]
pub(crate) const MYSQL_UPSERT: &[&str] = &[
    "INSERT INTO bench_t1_hits_slots (record_id, slot, count) VALUES (",
    ", ",
    ", ",
    ") ON DUPLICATE KEY UPDATE count = count + ",
    "",
];

/// The `skip-locked` candidate on PostgreSQL: one statement adds to the first pre-created slot
/// of record 1 that no other transaction holds (0 rows when all are held).
pub(crate) const PG_SKIP_LOCKED: &[&str] = &["UPDATE bench_k64_hits_slots SET count = count + 1 \
     WHERE (record_id, slot) = (SELECT record_id, slot FROM bench_k64_hits_slots \
     WHERE record_id = 1 LIMIT 1 FOR UPDATE SKIP LOCKED)"];
/// The same on MySQL and MariaDB takes two statements: this one locks a free slot (MariaDB
/// does not skip locked rows inside a derived table of an `UPDATE`, measured: it waits)...
pub(crate) const MYSQL_SKIP_LOCKED: &str =
    "SELECT slot FROM bench_k64_hits_slots WHERE record_id = 1 LIMIT 1 FOR UPDATE SKIP LOCKED";
/// ... and this one adds to it.
pub(crate) const SLOT_UPDATE: &[&str] = &[
    "UPDATE bench_k64_hits_slots SET count = count + 1 WHERE record_id = 1 AND slot = ",
    "",
];
pub(crate) enum SkipLocked {}
pub(crate) enum SlotUpdate {}

/// The slot [`MYSQL_SKIP_LOCKED`] locked.
#[derive(QueryableByName)]
pub(crate) struct FreeSlot {
    #[diesel(sql_type = SmallInt)]
    pub(crate) slot: i16,
}

/// What differs per backend: DDL, the hand-written upsert, and running a hand-written statement.
pub(crate) trait BenchConnection:
    CounterConnection + R2D2Connection + SimpleConnection + Send + 'static
{
    const NAME: &'static str;
    const EVENTS_DDL: &'static str;
    const UPSERT: &'static [&'static str];
    /// The diesel-async connection of the same backend.
    #[cfg(feature = "async")]
    type Async: asynch::AsyncBench;
    fn run<S: 'static>(&mut self, statement: HandWritten<'_, S>) -> QueryResult<usize>;

    fn single_row(&mut self) -> QueryResult<usize> {
        self.run(HandWritten::<SingleRow>::new(
            SINGLE_ROW,
            &[Bind::Integer(1)],
        ))
    }

    fn event(&mut self, writer: i32) -> QueryResult<usize> {
        self.run(HandWritten::<Event>::new(EVENT, &[Bind::Integer(writer)]))
    }

    /// The library's upsert into `T1`'s row (`key`, `slot`), written by hand.
    fn hand_written_upsert(&mut self, key: i32, slot: i16) -> QueryResult<usize> {
        let (slot, delta) = (Bind::SmallInt(slot), Bind::BigInt(1));
        let binds = [Bind::Integer(key), slot, delta, delta];
        self.run(HandWritten::<Upsert>::new(Self::UPSERT, &binds))
    }

    fn read_single(&mut self) -> QueryResult<i64>;

    /// The `skip-locked` candidate's write: adds 1 to a pre-created slot of record 1 that no
    /// other transaction holds; 0 rows when every one is held.
    fn skip_locked(&mut self) -> QueryResult<usize> {
        if Self::NAME == "postgres" {
            return self.run(HandWritten::<SkipLocked>::new(PG_SKIP_LOCKED, &[]));
        }
        match self.free_slot()? {
            Some(slot) => self.run(HandWritten::<SlotUpdate>::new(
                SLOT_UPDATE,
                &[Bind::SmallInt(slot)],
            )),
            None => Ok(0),
        }
    }

    /// [`MYSQL_SKIP_LOCKED`].
    fn free_slot(&mut self) -> QueryResult<Option<i16>>;

    /// The library's upsert for `T1`, slot 0, with Diesel's query builder.
    fn dsl_upsert(&mut self, key: i32) -> QueryResult<usize>;

    /// The one BIGINT column `n` of `sql`'s one row.
    fn number(&mut self, sql: &str) -> QueryResult<i64>;
}

macro_rules! bench_connection {
    ($feature:literal, $conn:ty, $async:ty, $events:literal, $upsert:expr, |$insert:ident| $on_conflict:expr) => {
        #[cfg(feature = $feature)]
        impl BenchConnection for $conn {
            const NAME: &'static str = $feature;
            #[cfg(feature = "async")]
            type Async = $async;
            const EVENTS_DDL: &'static str = $events;
            const UPSERT: &'static [&'static str] = $upsert;

            fn run<S: 'static>(&mut self, statement: HandWritten<'_, S>) -> QueryResult<usize> {
                statement.execute(self)
            }

            fn read_single(&mut self) -> QueryResult<i64> {
                bench_single::table
                    .find(1)
                    .select(bench_single::count)
                    .first(self)
            }

            fn free_slot(&mut self) -> QueryResult<Option<i16>> {
                let rows: Vec<FreeSlot> = diesel::sql_query(MYSQL_SKIP_LOCKED).load(self)?;
                Ok(rows.first().map(|row| row.slot))
            }

            fn number(&mut self, sql: &str) -> QueryResult<i64> {
                Ok(diesel::sql_query(sql).get_result::<Number>(self)?.n)
            }

            fn dsl_upsert(&mut self, key: i32) -> QueryResult<usize> {
                use bench_t1_hits_slots as t;
                let $insert = diesel::insert_into(t::table).values((
                    t::record_id.eq(key),
                    t::slot.eq(0_i16),
                    t::count.eq(1_i64),
                ));
                $on_conflict.execute(self)
            }
        }
    };
}

/// PostgreSQL and SQLite: `ON CONFLICT (record_id, slot) DO UPDATE SET count = t.count + excluded.count`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! ansi_on_conflict {
    ($insert:ident) => {
        $insert
            .on_conflict((bench_t1_hits_slots::record_id, bench_t1_hits_slots::slot))
            .do_update()
            .set(
                bench_t1_hits_slots::count.eq(bench_t1_hits_slots::count
                    + diesel::upsert::excluded(bench_t1_hits_slots::count)),
            )
    };
}

bench_connection!(
    "sqlite",
    diesel::SqliteConnection,
    diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>,
    "CREATE TABLE bench_events (id INTEGER PRIMARY KEY AUTOINCREMENT, writer INTEGER NOT NULL)",
    ANSI_UPSERT,
    |insert| ansi_on_conflict!(insert)
);
bench_connection!(
    "postgres",
    diesel::PgConnection,
    diesel_async::AsyncPgConnection,
    "CREATE TABLE bench_events (id BIGSERIAL PRIMARY KEY, writer INTEGER NOT NULL)",
    ANSI_UPSERT,
    |insert| ansi_on_conflict!(insert)
);
bench_connection!(
    "mysql",
    diesel::MysqlConnection,
    diesel_async::AsyncMysqlConnection,
    "CREATE TABLE bench_events (id BIGINT AUTO_INCREMENT PRIMARY KEY, writer INT NOT NULL)",
    MYSQL_UPSERT,
    |insert| insert
        .on_conflict(diesel::dsl::DuplicatedKeys)
        .do_update()
        .set(bench_t1_hits_slots::count.eq(bench_t1_hits_slots::count + 1_i64))
);

/// SQLite through a pool: a busy timeout and WAL on every connection, as README advises.
#[derive(Debug)]
pub(crate) struct SqlitePragmas;

impl<C: SimpleConnection> CustomizeConnection<C, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut C) -> Result<(), diesel::r2d2::Error> {
        conn.batch_execute(
            "PRAGMA busy_timeout = 10000; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
        )
        .map_err(diesel::r2d2::Error::QueryError)
    }
}
