//! An axum service that counts likes with slotted's async face: a deadpool pool of diesel-async
//! connections, migrations run at start, graceful shutdown on Ctrl-C or SIGTERM. The routes and
//! the error mapping are in `examples/src/web.rs`, where every database call runs through a
//! `slotted_core::CancelGuard`, so a client that hangs up mid-call never leaves a broken
//! connection in the pool (docs/guide/async-and-cancellation.md).
//!
//!     cargo run --example axum_likes --features async,postgres -- \
//!         --database-url postgres://postgres@127.0.0.1:5432/test
//!     # or --features async,mysql with mysql://root@127.0.0.1:3306/test,
//!     # or --features async and no URL: a SQLite file in the temp directory
//!
//!     curl -X PUT http://127.0.0.1:PORT/posts/1 -H 'content-type: application/json' -d '{"title": "hello"}'
//!     curl -X POST http://127.0.0.1:PORT/posts/1/like
//!     curl http://127.0.0.1:PORT/posts/1/likes
//!     curl 'http://127.0.0.1:PORT/likes?ids=1,2,3'
//!
//! Flags: `--database-url URL` (else `DATABASE_URL`; the scheme picks the backend: `postgres://`,
//! `mysql://`, anything else a SQLite path), `--addr HOST:PORT` (default `127.0.0.1:0`, a free
//! port, printed), `--pool-size N` (default 16).

use std::time::Duration;

use slotted_examples::web::{self, Database};
use slotted_examples::BoxError;
use tokio::net::TcpListener;

struct Args {
    database_url: String,
    addr: String,
    pool_size: usize,
}

impl Args {
    fn parse() -> Result<Self, BoxError> {
        let mut args = Args {
            database_url: std::env::var("DATABASE_URL").unwrap_or_else(|_| {
                let path = std::env::temp_dir().join("slotted-axum-likes.db");
                path.to_string_lossy().into_owned()
            }),
            addr: "127.0.0.1:0".into(),
            pool_size: 16,
        };
        let mut argv = std::env::args().skip(1);
        while let Some(flag) = argv.next() {
            let mut value = || argv.next().ok_or(format!("{flag} needs a value"));
            match flag.as_str() {
                "--database-url" => args.database_url = value()?,
                "--addr" => args.addr = value()?,
                "--pool-size" => args.pool_size = value()?.parse()?,
                _ => return Err(format!("unknown flag {flag}; see the example's header").into()),
            }
        }
        Ok(args)
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse()?;
    let url = args.database_url.as_str();
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        #[cfg(feature = "postgres")]
        return run::<diesel_async::AsyncPgConnection>(url, &args).await;
        #[cfg(not(feature = "postgres"))]
        return Err("a postgres:// URL needs `--features async,postgres`".into());
    }
    if url.starts_with("mysql://") {
        #[cfg(feature = "mysql")]
        return run::<diesel_async::AsyncMysqlConnection>(url, &args).await;
        #[cfg(not(feature = "mysql"))]
        return Err("a mysql:// URL needs `--features async,mysql`".into());
    }
    #[cfg(feature = "sqlite")]
    return run::<
        diesel_async::sync_connection_wrapper::SyncConnectionWrapper<diesel::SqliteConnection>,
    >(url.strip_prefix("sqlite://").unwrap_or(url), &args)
    .await;
    #[cfg(not(feature = "sqlite"))]
    Err(format!("{url}: not a postgres:// or mysql:// URL, and SQLite is not enabled").into())
}

async fn run<C: Database>(url: &str, args: &Args) -> Result<(), BoxError> {
    // Migrations first: the service listens once its tables are there.
    let pool = web::connect::<C>(url, args.pool_size, Duration::from_secs(5)).await?;
    let listener = TcpListener::bind(&args.addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, web::router::<C>(pool))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    println!("stopped: every request in flight was answered");
    Ok(())
}

/// Ctrl-C, or SIGTERM (what `kill` and container runtimes send).
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                eprintln!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    println!("shutting down: answering the requests in flight");
}
