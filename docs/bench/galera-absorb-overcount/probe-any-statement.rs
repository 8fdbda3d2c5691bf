// Not compiled: the fourth probe of this folder, as it was appended to tests/tests/cluster.rs for
// a run (2026-12-01). Node 1 holds a row FOR UPDATE in a transaction and runs one statement after
// another (V=one: a prepared SELECT 1; V=take: the writer-index SELECT; V=text: DO 1 by the text
// protocol; V=write: a prepared UPDATE of another row), each followed by SELECT @@in_transaction,
// while node 2 updates the held row 1.5 ms in. 200 transactions a run.
//
//   V=one|take|text|write SLOTTED_GALERA_URLS=... cargo test --all-features -p slotted-tests --test cluster probe_silent -- --nocapture

#[cfg(feature = "mysql")]
mod probe_silent {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    use diesel::sql_types::BigInt;
    use std::time::Duration;

    #[derive(QueryableByName, Debug)]
    #[allow(dead_code)]
    struct N {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }

    #[test]
    fn probe_silent_abort() {
        let urls = slotted_tests::cluster_databases("probe_silent").unwrap();
        let mut a = MysqlConnection::establish(&urls[0]).unwrap();
        let mut b = MysqlConnection::establish(&urls[1]).unwrap();
        a.batch_execute("CREATE TABLE t (id INT PRIMARY KEY, n BIGINT NOT NULL); INSERT INTO t VALUES (1, 0), (2, 0)").unwrap();
        b.batch_execute("SET SESSION wsrep_sync_wait = 15").unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let idx = "(WITH RECURSIVE slotted_d (d) AS (SELECT 0 UNION ALL SELECT d + 1 FROM slotted_d WHERE d < 15) SELECT MIN(hi.d * 16 + lo.d) FROM slotted_d AS hi, slotted_d AS lo WHERE IS_FREE_LOCK(LEFT(CONCAT('slotted.', hi.d * 16 + lo.d, '.', DATABASE()), 64)) = 1)";
        let take = format!("SELECT CAST(COALESCE(@slotted_writer, IF(GET_LOCK(LEFT(CONCAT('slotted.', @slotted_candidate := {idx}, '.', DATABASE()), 64), 0) = 1, @slotted_writer := @slotted_candidate, IF(0 = 1, @slotted_writer := 256 + MOD(CONNECTION_ID(), 256), -1))) AS SIGNED) AS n");
        let variant = std::env::var("V").unwrap_or_default();
        let wait = std::env::var("W").unwrap_or("0".into());
        a.batch_execute(&format!("SET SESSION wsrep_sync_wait = {wait}")).unwrap();
        let stmt = match variant.as_str() {
            "one" => "SELECT CAST(1 AS SIGNED) AS n".to_owned(),
            "var" => "SELECT CAST(COALESCE(@slotted_writer, 5) AS SIGNED) AS n".to_owned(),
            _ => take.clone(),
        };
        println!("index {:?}", diesel::sql_query(&take).load::<N>(&mut a));
        let (mut silent, mut reported, mut neither) = (0, 0, 0);
        for _ in 0..200 {
            a.batch_execute("BEGIN").unwrap();
            diesel::sql_query("SELECT n FROM t WHERE id = 1 FOR UPDATE").load::<N>(&mut a).unwrap();
            let outcome = std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(Duration::from_micros(1500));
                    b.batch_execute("UPDATE t SET n = n + 1 WHERE id = 1").unwrap();
                });
                for _ in 0..400 {
                    let r = if variant == "text" {
                        a.batch_execute("DO 1").map(|_| ())
                    } else if variant == "write" {
                        diesel::sql_query("UPDATE t SET n = n WHERE id = 2").execute(&mut a).map(|_| ())
                    } else {
                        diesel::sql_query(&stmt).load::<N>(&mut a).map(|_| ())
                    };
                    if r.is_err() {
                        return 1;
                    }
                    // Outside the transaction already, with no error?
                    let w: QueryResult<()> = Ok(());
                    let inside = diesel::sql_query("SELECT CAST(@@in_transaction AS SIGNED) AS n").load::<N>(&mut a);
                    match (w, inside) {
                        (Ok(_), Ok(v)) if v[0].n == 0 => return 2,
                        (Ok(_), Ok(_)) => {}
                        _ => return 1,
                    }
                }
                0
            });
            match outcome { 1 => reported += 1, 2 => silent += 1, _ => neither += 1 }
            let _ = a.batch_execute("ROLLBACK");
        }
        println!("variant {variant:?} sync_wait {wait}: silent {silent} reported {reported} neither {neither}");
    }
}
