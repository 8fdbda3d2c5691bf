//! What slotted reports to `tracing` (the `tracing` feature), captured by a subscriber of our own
//! and checked field by field, on every backend.
#![cfg(feature = "tracing")]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use slotted_core::{retry::RetryPolicy, CounterMaintenance};
use slotted_tests::models::{posts_views_slots, Page, Post, Reaction};
use slotted_tests::{backend_tests, TestConnection, TestDb};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

backend_tests! {
    all: [
        a_counter_call_is_a_span_with_its_counter_slot_and_rows,
        maintenance_reports_and_retries_are_events,
        a_failed_call_is_an_event_in_its_span,
    ],
    servers: [the_connection_strategy_reports_a_server_slot],
}

/// A span or event as captured: its name (or message) and fields, as text.
#[derive(Debug, Clone, Default)]
struct Captured {
    name: String,
    fields: BTreeMap<String, String>,
    /// For events: the fields of the `slotted` span they happened in.
    parent: BTreeMap<String, String>,
}

impl Visit for Captured {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
}

#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<Captured>>>,
    events: Arc<Mutex<Vec<Captured>>>,
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut captured = Captured {
            name: attrs.metadata().name().to_owned(),
            ..Captured::default()
        };
        attrs.record(&mut captured);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(captured);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(captured) = span.extensions_mut().get_mut::<Captured>() {
                values.record(captured);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut captured = Captured::default();
        event.record(&mut captured);
        captured.name = captured.fields.remove("message").unwrap_or_default();
        if let Some(span) = ctx.event_span(event) {
            if let Some(parent) = span.extensions().get::<Captured>() {
                captured.parent = parent.fields.clone();
            }
        }
        self.events.lock().unwrap().push(captured);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if let Some(captured) = span.extensions().get::<Captured>() {
                self.spans.lock().unwrap().push(captured.clone());
            }
        }
    }
}

/// Runs `f` with a capturing subscriber as this thread's default, and returns what it saw.
fn capture(f: impl FnOnce()) -> (Vec<Captured>, Vec<Captured>) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    tracing::subscriber::with_default(subscriber, f);
    let spans = capture.spans.lock().unwrap().clone();
    let events = capture.events.lock().unwrap().clone();
    (spans, events)
}

fn the_span<'a>(spans: &'a [Captured], op: &str) -> &'a Captured {
    spans
        .iter()
        .find(|s| s.name == "slotted" && s.fields.get("op").map(String::as_str) == Some(op))
        .unwrap_or_else(|| panic!("no `slotted` span with op = {op}: {spans:#?}"))
}

fn a_counter_call_is_a_span_with_its_counter_slot_and_rows<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let (spans, _) = capture(|| {
        Post::likes_of(7).increment(&mut conn).unwrap();
        Post::likes_of(7).total(&mut conn).unwrap();
        Post::likes_totals(&[7, 8], &mut conn).unwrap();
    });
    let increment = the_span(&spans, "increment");
    assert_eq!(increment.fields["counter"], "Post.likes");
    assert_eq!(increment.fields["table"], "posts_likes_slots");
    assert_eq!(increment.fields["key"], "7");
    assert_eq!(increment.fields["rows"], "1");
    let slot: i64 = increment.fields["slot"].parse().expect("a numeric slot");
    assert!((0..16).contains(&slot), "{slot}");
    let slots = conn.slot_rows("posts_likes_slots", 7);
    assert_eq!(slots.len(), 1);
    assert_eq!(
        i64::from(slots[0].slot),
        slot,
        "the span names the slot written"
    );
    assert_eq!(the_span(&spans, "total").fields["key"], "7");
    assert_eq!(
        the_span(&spans, "totals").fields["table"],
        "posts_likes_slots"
    );
}

fn maintenance_reports_and_retries_are_events<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    for _ in 0..30 {
        Post::views_of(3).increment(&mut conn).unwrap(); // random slots: several rows
    }
    let rows_before = conn.slot_rows("posts_views_slots", 3).len();
    assert!(rows_before > 1);
    let (spans, events) = capture(|| {
        posts_views_slots::table
            .compact_all(100, &mut conn)
            .unwrap();
        let mut attempts = 0;
        slotted_core::retry::transaction_with_retry(&mut conn, &RetryPolicy::default(), |conn| {
            attempts += 1;
            Post::likes_of(1).increment(conn)?;
            if attempts == 1 {
                return Err(slotted_core::Error::Diesel(
                    diesel::result::Error::DatabaseError(
                        diesel::result::DatabaseErrorKind::SerializationFailure,
                        Box::new("could not serialize access".to_owned()),
                    ),
                ));
            }
            Ok(())
        })
        .unwrap();
    });
    let compaction = the_span(&spans, "compact_all");
    assert_eq!(compaction.fields["counter"], "Post.views");
    assert_eq!(compaction.fields["rows"], rows_before.to_string());
    let report = events
        .iter()
        .find(|e| e.name == "slotted: maintenance report")
        .unwrap_or_else(|| panic!("no report: {events:#?}"));
    assert_eq!(report.fields["records"], "1");
    assert_eq!(report.fields["rows_before"], rows_before.to_string());
    assert_eq!(report.fields["rows_after"], "1");
    assert_eq!(report.fields["failed"], "0");
    assert_eq!(report.parent["op"], "compact_all", "inside the job's span");
    let retry = events
        .iter()
        .find(|e| e.name == "slotted: transaction rolled back, running it again")
        .unwrap_or_else(|| panic!("no retry event: {events:#?}"));
    assert_eq!(retry.fields["attempt"], "1");
    assert_eq!(retry.fields["cause"], "serialization failure");
    assert!(retry.fields["error"].contains("could not serialize"));
    let backoff: f64 = retry.fields["backoff_ms"].parse().unwrap();
    assert!(
        (1.0..=2.0).contains(&backoff),
        "half to all of 2 ms: {backoff}"
    );
}

fn a_failed_call_is_an_event_in_its_span<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    let (_, events) = capture(|| {
        let long = "x".repeat(513);
        assert!(Page::views_of(long).increment(&mut conn).is_err());
    });
    let failed = events
        .iter()
        .find(|e| e.name == "slotted: the call failed")
        .unwrap_or_else(|| panic!("no failure event: {events:#?}"));
    assert!(
        failed.fields["error"].contains("cannot be stored"),
        "{failed:?}"
    );
    assert_eq!(failed.parent["counter"], "Page.views");
}

fn the_connection_strategy_reports_a_server_slot<C: TestConnection>(test: &str) {
    let Some((_db, mut conn)) = TestDb::migrated::<C>(test) else {
        return;
    };
    diesel_migrations::MigrationHarness::run_pending_migrations(
        &mut conn,
        slotted_core::CounterMigrations::of::<Reaction>(),
    )
    .unwrap();
    let (spans, _) = capture(|| Reaction::hearts_of(1).increment(&mut conn).unwrap());
    assert_eq!(the_span(&spans, "increment").fields["slot"], "server");
}

/// The async face reports the same span, entered on every poll of the call's future.
#[cfg(all(feature = "async", feature = "sqlite"))]
#[test]
fn an_async_call_is_a_span_too() {
    use diesel_async::sync_connection_wrapper::SyncConnectionWrapper;
    use diesel_async::AsyncConnection;
    let Some((db, _conn)) = TestDb::migrated::<diesel::SqliteConnection>("async_tracing") else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (spans, _) = capture(|| {
        runtime.block_on(async {
            let mut conn = SyncConnectionWrapper::<diesel::SqliteConnection>::establish(&db.url)
                .await
                .unwrap();
            Post::likes_of(9).increment_async(&mut conn).await.unwrap();
            posts_views_slots::table
                .compact_all_async(10, &mut conn)
                .await
                .unwrap();
        })
    });
    let increment = the_span(&spans, "increment_async");
    assert_eq!(increment.fields["key"], "9");
    assert_eq!(increment.fields["rows"], "1");
    assert!(
        increment.fields["slot"].parse::<i64>().is_ok(),
        "{increment:?}"
    );
    assert_eq!(
        the_span(&spans, "compact_all_async").fields["table"],
        "posts_views_slots"
    );
}
