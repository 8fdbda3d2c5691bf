// A diesel-async bb8 pool for the async buffer without slotted-core's `bb8` feature: one error
// that names the feature.
use diesel::SqliteConnection;
use diesel_async::pooled_connection::bb8::Pool;
use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
use slotted_core::buffer::{AsyncCounterBuffer, BufferConfig};

fn buffer(pool: Pool<SyncConnectionWrapper<SqliteConnection>>) -> AsyncCounterBuffer {
    AsyncCounterBuffer::start(pool, BufferConfig::default())
}

fn main() {}
