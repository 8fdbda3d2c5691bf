//! The axum service of `examples/axum_likes.rs`: likes on posts, counted by slotted's async face
//! through a deadpool pool of diesel-async connections. The example is a thin `main` around this
//! module, and `examples/tests/web.rs` starts the very same router on a loopback port.
//!
//! | route | does | answers |
//! |---|---|---|
//! | `PUT /posts/{id}` with `{"title": "…"}` | creates a post | 201; 409 when it exists |
//! | `POST /posts/{id}/like` | one like: one upsert into one slot row | 200 `{"id": 1, "likes": 42}` |
//! | `GET /posts/{id}/likes` | the post's total | 200 `{"id": 1, "likes": 42}` |
//! | `GET /likes?ids=1,2,3` | many totals in one query, 0 for an unknown id | 200 `{"1": 42, "2": 0, "3": 7}` |
//!
//! Errors are JSON, `{"error": "…"}`, and never a panic: 400 for an id that is not an `i32` or a
//! bad body, 404 for an unknown post, 409, 503 (with `Retry-After`) when no pooled connection is
//! free within the pool's wait or the database cannot be reached, 500 for a database error, whose
//! detail goes to the server's log, not to the client.
//!
//! A client that hangs up drops its request's future wherever it is, the database call
//! included. Every database call runs through a [`CancelGuard`], so that a connection whose
//! call was cut off in a way that leaves it unusable (any cut-off on MySQL/MariaDB, where
//! diesel-async's connection then reads the cut-off query's reply as the next one's; a
//! transaction left open on PostgreSQL) is closed instead of handed to the next request; see
//! docs/guide/async-and-cancellation.md, which also measures running each request's database
//! work in a task of its own ([`Pattern::SPAWN`]).
//!
//! The service is generic over the connection type only so that one binary serves PostgreSQL,
//! MySQL/MariaDB and SQLite, chosen by the URL. A service of your own has one backend: write
//! `AsyncPgConnection` (or `AsyncMysqlConnection`) for `C` and drop the [`Database`] trait.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use diesel::result::DatabaseErrorKind;
use diesel::{
    Insertable, OptionalExtension, QueryDsl, QueryResult, Queryable, Selectable, SelectableHelper,
};
use diesel_migrations::{embed_migrations, EmbeddedMigrations};
use serde::{Deserialize, Serialize};
use slotted_core::{CancelGuard, PooledAsyncConnection, SlottedCounter};

use crate::BoxError;

diesel::table! {
    posts (id) {
        id -> Integer,
        title -> Text,
    }
}

/// A post, with a slotted counter of its likes (table `posts_likes_slots`).
#[derive(Debug, Clone, Queryable, Selectable, Insertable, SlottedCounter)]
#[diesel(table_name = posts)]
// The default slot strategy; see README's "Slot strategies" for the others.
#[slotted(counter = likes, slots = 16)]
pub struct Post {
    /// The primary key.
    pub id: i32,
    /// At most [`MAX_TITLE`] characters.
    pub title: String,
}

/// The app's own migrations (the `posts` table), beside the counter migrations of [`Post`].
pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

/// The longest title, in characters (the column is `VARCHAR(200)`).
pub const MAX_TITLE: usize = 200;

/// The most ids one `GET /likes` may ask for.
pub const MAX_IDS: usize = 1_000;

/// A diesel-async connection type the service runs on, with its deadpool pool: implemented
/// below for each enabled backend. The bodies are the same for every backend; only the types
/// differ.
pub trait Database: slotted_core::AsyncCounterConnection + Sized + 'static {
    /// `deadpool::Pool<Self>`.
    type Pool: Clone + Send + Sync + 'static;
    /// One of its connections, passed to slotted as it is.
    type Pooled: PooledAsyncConnection + 'static;

    /// A pool of at most `size` connections to `url`: a request waits at most `wait` for a free
    /// connection, and a new connection at most `wait` to connect.
    fn pool(url: &str, size: usize, wait: Duration) -> Result<Self::Pool, BoxError>;

    /// A connection from the pool.
    fn connection(
        pool: &Self::Pool,
    ) -> impl Future<
        Output = Result<Self::Pooled, diesel_async::pooled_connection::deadpool::PoolError>,
    > + Send;

    /// Runs the app's migrations and the counter migrations through diesel-async's
    /// `AsyncMigrationHarness`; a no-op when they ran before.
    fn migrate(pool: &Self::Pool) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// The post with this id.
    fn find_post(
        id: i32,
        conn: &mut Self::Pooled,
    ) -> impl Future<Output = QueryResult<Option<Post>>> + Send;

    /// Inserts a post.
    fn insert_post(
        post: Post,
        conn: &mut Self::Pooled,
    ) -> impl Future<Output = QueryResult<()>> + Send;
}

macro_rules! database {
    ($(#[$cfg:meta])* $conn:ty, setup: $setup:expr) => {
        $(#[$cfg])*
        impl Database for $conn {
            type Pool = diesel_async::pooled_connection::deadpool::Pool<$conn>;
            type Pooled = diesel_async::pooled_connection::deadpool::Object<$conn>;

            fn pool(url: &str, size: usize, wait: Duration) -> Result<Self::Pool, BoxError> {
                use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig};
                let mut config = ManagerConfig::<$conn>::default();
                let setup: &'static str = $setup;
                if !setup.is_empty() {
                    config.custom_setup = Box::new(move |url| {
                        let url = url.to_owned();
                        Box::pin(async move {
                            use diesel_async::{AsyncConnection, SimpleAsyncConnection};
                            let mut conn = <$conn>::establish(&url).await?;
                            conn.batch_execute(setup)
                                .await
                                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                            Ok(conn)
                        })
                    });
                }
                let manager = AsyncDieselConnectionManager::new_with_config(url, config);
                Ok(Self::Pool::builder(manager)
                    .max_size(size)
                    .wait_timeout(Some(wait))
                    .create_timeout(Some(wait))
                    .recycle_timeout(Some(wait))
                    .runtime(deadpool::Runtime::Tokio1)
                    .build()?)
            }

            async fn connection(
                pool: &Self::Pool,
            ) -> Result<Self::Pooled, diesel_async::pooled_connection::deadpool::PoolError> {
                pool.get().await
            }

            async fn migrate(pool: &Self::Pool) -> Result<(), BoxError> {
                use diesel_migrations::MigrationHarness;
                let mut harness = diesel_async::AsyncMigrationHarness::new(pool.get().await?);
                harness.run_pending_migrations(MIGRATIONS)?;
                harness.run_pending_migrations(slotted_core::CounterMigrations::of::<Post>())?;
                Ok(())
            }

            async fn find_post(id: i32, conn: &mut Self::Pooled) -> QueryResult<Option<Post>> {
                use diesel_async::RunQueryDsl;
                posts::table
                    .find(id)
                    .select(Post::as_select())
                    .first(conn)
                    .await
                    .optional()
            }

            async fn insert_post(post: Post, conn: &mut Self::Pooled) -> QueryResult<()> {
                use diesel_async::RunQueryDsl;
                diesel::insert_into(posts::table)
                    .values(post)
                    .execute(conn)
                    .await
                    .map(drop)
            }
        }
    };
}

database!(#[cfg(feature = "postgres")] diesel_async::AsyncPgConnection, setup: "");
database!(#[cfg(feature = "mysql")] diesel_async::AsyncMysqlConnection, setup: "");
// SQLite lets one writer in at a time: the others wait on the busy timeout instead of failing
// with `database is locked`.
database!(
    #[cfg(feature = "sqlite")]
    diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>,
    setup: "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL;"
);

/// A pool of `size` connections to `url` (see [`Database::pool`]), with the migrations run.
pub async fn connect<C: Database>(
    url: &str,
    size: usize,
    wait: Duration,
) -> Result<C::Pool, BoxError> {
    let pool = C::pool(url, size, wait)?;
    C::migrate(&pool).await?;
    Ok(pool)
}

/// How a request's database work meets cancellation (a client that hangs up, a timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    /// Each request's database work runs in a task of its own, which a client hanging up does
    /// not cut off: the request's work runs to its end.
    pub spawn: bool,
    /// Every call goes through a [`CancelGuard`]: a connection whose call was cut off is closed
    /// where it cannot be trusted, not returned to the pool.
    pub guard: bool,
}

impl Pattern {
    /// The guard, in the request's own task: what [`router`] serves.
    pub const GUARD: Pattern = Pattern {
        spawn: false,
        guard: true,
    };
    /// A task per request's database work, without the guard.
    pub const SPAWN: Pattern = Pattern {
        spawn: true,
        guard: false,
    };
    /// Both.
    pub const SPAWN_AND_GUARD: Pattern = Pattern {
        spawn: true,
        guard: true,
    };
    /// Neither: the pattern of the example before issue 22, which hands MySQL connections out
    /// of step with their server to the next request. Kept for the probe that measures it
    /// (`examples/cancellation.rs`); do not copy it.
    pub const UNGUARDED: Pattern = Pattern {
        spawn: false,
        guard: false,
    };
}

/// The service's routes on `pool`, every database call through a [`CancelGuard`].
pub fn router<C: Database>(pool: C::Pool) -> Router {
    router_with::<C>(pool, Pattern::GUARD)
}

/// The service's routes on `pool`, meeting cancellation with `pattern`.
pub fn router_with<C: Database>(pool: C::Pool, pattern: Pattern) -> Router {
    Router::new()
        .route("/posts/{id}", put(create_post::<C>))
        .route("/posts/{id}/like", post(like::<C>))
        .route("/posts/{id}/likes", get(likes::<C>))
        .route("/likes", get(totals::<C>))
        .with_state(App::<C> { pool, pattern })
}

/// The router's state: the pool.
struct App<C: Database> {
    pool: C::Pool,
    pattern: Pattern,
}

impl<C: Database> Clone for App<C> {
    fn clone(&self) -> Self {
        App {
            pool: self.pool.clone(),
            pattern: self.pattern,
        }
    }
}

impl<C: Database> App<C> {
    /// Runs a request's database work, in a task of its own with [`Pattern::spawn`].
    async fn db<T, F, W>(&self, work: W) -> Result<T, ApiError>
    where
        T: Send + 'static,
        W: FnOnce(App<C>) -> F,
        F: Future<Output = Result<T, ApiError>> + Send + 'static,
    {
        let work = work(self.clone());
        if !self.pattern.spawn {
            return work.await;
        }
        // Dropping the handle does not stop the task: a client that hangs up no longer cuts
        // the database work off.
        tokio::spawn(work).await.unwrap_or_else(|e| {
            eprintln!("a request's database task failed: {e}");
            Err(ApiError::Database)
        })
    }

    /// A connection from the pool, guarded as the pattern says.
    async fn connection(&self) -> Result<Conn<C::Pooled>, ApiError> {
        let conn = C::connection(&self.pool).await?;
        Ok(if self.pattern.guard {
            Conn::Guarded(CancelGuard::new(conn))
        } else {
            Conn::Bare(conn)
        })
    }
}

/// A pooled connection, through a [`CancelGuard`] or (for the probe's "before") bare.
enum Conn<P: PooledAsyncConnection> {
    Guarded(CancelGuard<P>),
    Bare(P),
}

impl<P: PooledAsyncConnection> Conn<P> {
    /// Runs one call on the connection: [`CancelGuard::run`].
    async fn run<'a, T, E, F>(&'a mut self, call: impl FnOnce(&'a mut P) -> F) -> Result<T, E>
    where
        F: Future<Output = Result<T, E>> + 'a,
        E: From<diesel::result::Error>,
    {
        match self {
            Conn::Guarded(conn) => conn.run(call).await,
            Conn::Bare(conn) => call(conn).await,
        }
    }
}

/// `PUT /posts/{id}`'s body.
#[derive(Debug, Serialize, Deserialize)]
pub struct NewPost {
    /// The title.
    pub title: String,
}

/// A post's total.
#[derive(Debug, Serialize, Deserialize)]
pub struct Likes {
    /// The post.
    pub id: i32,
    /// Its likes, as read after the request's own write.
    pub likes: i64,
}

/// `GET /likes`' query: `?ids=1,2,3`.
#[derive(Debug, Deserialize)]
struct Ids {
    ids: String,
}

async fn create_post<C: Database>(
    State(app): State<App<C>>,
    id: Result<Path<i32>, PathRejection>,
    body: Result<Json<NewPost>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let Path(id) = id?;
    let Json(NewPost { title }) = body?;
    if title.chars().count() > MAX_TITLE {
        return Err(ApiError::BadRequest(format!(
            "the title is longer than {MAX_TITLE} characters"
        )));
    }
    app.db(move |app| async move {
        let mut conn = app.connection().await?;
        match conn.run(|c| C::insert_post(Post { id, title }, c)).await {
            Ok(()) => Ok(StatusCode::CREATED),
            Err(diesel::result::Error::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                Err(ApiError::Conflict(id))
            }
            Err(e) => Err(e.into()),
        }
    })
    .await
}

async fn like<C: Database>(
    State(app): State<App<C>>,
    id: Result<Path<i32>, PathRejection>,
) -> Result<Json<Likes>, ApiError> {
    let Path(id) = id?;
    app.db(move |app| async move {
        let mut conn = app.connection().await?;
        let post = conn
            .run(|c| C::find_post(id, c))
            .await?
            .ok_or(ApiError::NotFound(id))?;
        let likes = post.likes();
        // One upsert into one slot row, committed on its own (no transaction is open). Cut
        // off at any await (the client hung up), it has counted once or not at all.
        conn.run(|c| likes.increment_async(c)).await?;
        let total = conn.run(|c| likes.total_async(c)).await?;
        Ok(Json(Likes { id, likes: total }))
    })
    .await
}

async fn likes<C: Database>(
    State(app): State<App<C>>,
    id: Result<Path<i32>, PathRejection>,
) -> Result<Json<Likes>, ApiError> {
    let Path(id) = id?;
    app.db(move |app| async move {
        let mut conn = app.connection().await?;
        let post = conn
            .run(|c| C::find_post(id, c))
            .await?
            .ok_or(ApiError::NotFound(id))?;
        let likes = post.likes();
        let total = conn.run(|c| likes.total_async(c)).await?;
        Ok(Json(Likes { id, likes: total }))
    })
    .await
}

async fn totals<C: Database>(
    State(app): State<App<C>>,
    query: Result<Query<Ids>, QueryRejection>,
) -> Result<Json<HashMap<i32, i64>>, ApiError> {
    let Query(Ids { ids }) = query?;
    let ids = ids
        .split(',')
        .map(|id| id.trim().parse::<i32>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            ApiError::BadRequest("ids must be integers separated by commas: ?ids=1,2,3".into())
        })?;
    if ids.len() > MAX_IDS {
        return Err(ApiError::BadRequest(format!(
            "at most {MAX_IDS} ids at a time"
        )));
    }
    app.db(move |app| async move {
        let mut conn = app.connection().await?;
        let ids = &ids;
        Ok(Json(conn.run(|c| Post::likes_totals_async(ids, c)).await?))
    })
    .await
}

/// What a request can fail with, and its HTTP status.
#[derive(Debug)]
pub enum ApiError {
    /// 400: a bad id, query or body.
    BadRequest(String),
    /// 404: no post with this id.
    NotFound(i32),
    /// 409: a post with this id exists.
    Conflict(i32),
    /// 503: no connection free within the pool's wait, or the database cannot be reached.
    Unavailable(&'static str),
    /// 500: the database failed the request (logged on the server).
    Database,
}

/// The body of every error response.
#[derive(Debug, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, error) = match self {
            ApiError::BadRequest(why) => (StatusCode::BAD_REQUEST, why),
            ApiError::NotFound(id) => (StatusCode::NOT_FOUND, format!("no post {id}")),
            ApiError::Conflict(id) => (StatusCode::CONFLICT, format!("post {id} exists")),
            ApiError::Unavailable(why) => {
                let body = Json(ErrorBody { error: why.into() });
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    [(header::RETRY_AFTER, "1")],
                    body,
                )
                    .into_response();
            }
            ApiError::Database => (StatusCode::INTERNAL_SERVER_ERROR, "database error".into()),
        };
        (status, Json(ErrorBody { error })).into_response()
    }
}

impl From<diesel_async::pooled_connection::deadpool::PoolError> for ApiError {
    fn from(e: diesel_async::pooled_connection::deadpool::PoolError) -> Self {
        use deadpool::managed::PoolError;
        eprintln!("database pool: {e}");
        match e {
            PoolError::Timeout(_) => ApiError::Unavailable("no database connection free in time"),
            PoolError::Backend(_) | PoolError::Closed => {
                ApiError::Unavailable("the database cannot be reached")
            }
            PoolError::NoRuntimeSpecified | PoolError::PostCreateHook(_) => ApiError::Database,
        }
    }
}

impl From<slotted_core::Error> for ApiError {
    fn from(e: slotted_core::Error) -> Self {
        eprintln!("database: {e}");
        ApiError::Database
    }
}

impl From<diesel::result::Error> for ApiError {
    fn from(e: diesel::result::Error) -> Self {
        eprintln!("database: {e}");
        ApiError::Database
    }
}

impl From<PathRejection> for ApiError {
    fn from(e: PathRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(e: QueryRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}

impl From<JsonRejection> for ApiError {
    fn from(e: JsonRejection) -> Self {
        ApiError::BadRequest(e.body_text())
    }
}
