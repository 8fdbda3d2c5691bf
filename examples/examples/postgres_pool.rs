//! slotted on PostgreSQL through an r2d2 pool.
//!
//!     PG_DATABASE_URL=postgres://postgres@127.0.0.1:5432/test \
//!         cargo run --example postgres_pool --features postgres

fn main() -> Result<(), slotted_examples::BoxError> {
    let url = std::env::var("PG_DATABASE_URL")
        .map_err(|_| "set PG_DATABASE_URL, e.g. postgres://postgres@127.0.0.1:5432/test")?;
    slotted_examples::pooled_workload::<diesel::PgConnection>(&url, 16, 200)
}
