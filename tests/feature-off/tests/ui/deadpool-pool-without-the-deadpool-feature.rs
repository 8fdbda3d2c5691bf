// A diesel-async deadpool pool for the async buffer without slotted-core's `deadpool` feature:
// one error that names the feature.
use diesel::SqliteConnection;
use diesel_async::pooled_connection::deadpool::Pool;
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use slotted_core::buffer::{AsyncCounterBuffer, BufferConfig};

fn buffer(pool: Pool<SyncConnectionWrapper<SqliteConnection>>) -> AsyncCounterBuffer {
    AsyncCounterBuffer::start(pool, BufferConfig::default())
}

fn main() {}
