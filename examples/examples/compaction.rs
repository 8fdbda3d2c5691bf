//! How long compaction takes: 100,000 records with 8 slot rows each, folded into one row per
//! record by `compact_all`, with the sum of every count checked before and after.
//!
//!     cargo run --release --example compaction                                   # SQLite
//!     cargo run --release --example compaction --features postgres -- postgres   # PG_DATABASE_URL
//!     cargo run --release --example compaction --features mysql -- mysql         # MYSQL_DATABASE_URL
//!
//! Optional second argument: the number of records (default 100000).

use std::time::Instant;

use diesel::connection::SimpleConnection;
use diesel::sql_types::BigInt;
use diesel::{QueryableByName, RunQueryDsl};
use slotted_core::{CounterConnection, CounterMaintenance, SlottedCounter};
use slotted_examples::BoxError;

/// A counter with 8 slots, to be folded.
#[derive(SlottedCounter)]
#[diesel(table_name = songs)]
#[slotted(counter = plays, slots = 8, strategy = random)]
pub struct Song {
    pub id: i32,
}

#[derive(QueryableByName)]
struct Number {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

const SLOTS: i32 = 8;

fn number<C: CounterConnection>(conn: &mut C, sql: &str) -> Result<i64, BoxError>
where
    Number: QueryableByName<C::Backend>,
    diesel::query_builder::SqlQuery: diesel::query_dsl::LoadQuery<'static, C, Number>,
{
    Ok(diesel::sql_query(sql).get_result::<Number>(conn)?.n)
}

fn run<C>(mut conn: C, backend: &str, records: i32) -> Result<(), BoxError>
where
    C: CounterConnection + SimpleConnection,
    Number: QueryableByName<C::Backend>,
    diesel::query_builder::SqlQuery: diesel::query_dsl::LoadQuery<'static, C, Number>,
{
    // Its own table, from the migration's SQL, without touching the database's migration log.
    conn.batch_execute("DROP TABLE IF EXISTS songs_plays_slots")?;
    let spec = <songs_plays_slots::table as slotted_core::CounterTable>::SPEC;
    conn.batch_execute(&slotted_core::migration::up_sql(
        &spec,
        <C::Backend as slotted_core::CounterBackend>::DIALECT,
    ))?;

    // Fill: every record gets all 8 slots, count = slot + 1 (a record's total is 36).
    let started = Instant::now();
    for first in (1..=records).step_by(1000) {
        let rows: Vec<String> = (first..(first + 1000).min(records + 1))
            .flat_map(|id| (0..SLOTS).map(move |slot| format!("({id}, {slot}, {})", slot + 1)))
            .collect();
        conn.batch_execute(&format!(
            "INSERT INTO songs_plays_slots (record_id, slot, count) VALUES {}",
            rows.join(", ")
        ))?;
    }
    let filled = started.elapsed();
    let sum_sql = "SELECT CAST(COALESCE(SUM(count), 0) AS BIGINT) AS n FROM songs_plays_slots";
    let sum_sql = if backend == "mysql" {
        sum_sql.replace("BIGINT", "SIGNED")
    } else {
        sum_sql.to_owned()
    };
    let count_sql = "SELECT COUNT(*) AS n FROM songs_plays_slots";
    let (sum_before, rows_before) = (number(&mut conn, &sum_sql)?, number(&mut conn, count_sql)?);

    let started = Instant::now();
    let report = songs_plays_slots::table
        .compact_all(slotted_core::maintenance::MAINTENANCE_BATCH, &mut conn)?;
    let took = started.elapsed();
    let (sum_after, rows_after) = (number(&mut conn, &sum_sql)?, number(&mut conn, count_sql)?);

    println!("backend {backend}: {records} records x {SLOTS} slots filled in {filled:.1?}");
    println!(
        "compact_all: {} records, rows {rows_before} -> {rows_after}, {} transactions, {took:.2?} ({:.0} records/s)",
        report.records,
        report.batches,
        f64::from(records) / took.as_secs_f64()
    );
    println!("sum of all counts: {sum_before} before, {sum_after} after");
    assert_eq!(sum_before, sum_after, "compaction changed the sum");
    assert_eq!(sum_before, i64::from(records) * 36);
    assert_eq!(rows_after, i64::from(records), "one row per record");
    assert_eq!(Song::plays_of(records / 2).total(&mut conn)?, 36);
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "sqlite".to_owned());
    let records: i32 = args.next().map_or(Ok(100_000), |n| n.parse())?;
    match backend.as_str() {
        #[cfg(feature = "sqlite")]
        "sqlite" => {
            let path = std::env::temp_dir().join("slotted-compaction.db");
            let _ = std::fs::remove_file(&path);
            let conn = <diesel::SqliteConnection as diesel::Connection>::establish(&path.to_string_lossy())?;
            run(conn, "sqlite", records)
        }
        #[cfg(feature = "postgres")]
        "postgres" => {
            let url = std::env::var("PG_DATABASE_URL")?;
            run(<diesel::PgConnection as diesel::Connection>::establish(&url)?, "postgres", records)
        }
        #[cfg(feature = "mysql")]
        "mysql" => {
            let url = std::env::var("MYSQL_DATABASE_URL")?;
            run(<diesel::MysqlConnection as diesel::Connection>::establish(&url)?, "mysql", records)
        }
        other => Err(format!("unknown or disabled backend `{other}`: sqlite, postgres (--features postgres), mysql (--features mysql)").into()),
    }
}
