//! slotted on MySQL or MariaDB through an r2d2 pool.
//!
//!     MYSQL_DATABASE_URL=mysql://root@127.0.0.1:3306/test \
//!         cargo run --example mysql_pool --features mysql

fn main() -> Result<(), slotted_examples::BoxError> {
    let url = std::env::var("MYSQL_DATABASE_URL")
        .map_err(|_| "set MYSQL_DATABASE_URL, e.g. mysql://root@127.0.0.1:3306/test")?;
    slotted_examples::pooled_workload::<diesel::MysqlConnection>(&url, 16, 200)
}
