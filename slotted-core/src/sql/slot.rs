//! The slot of a write as SQL: a bound value, or the server's writer index (the `connection`
//! strategy on PostgreSQL and MySQL).
//!
//! # The writer index
//!
//! Each server session that writes holds a *writer index*: the smallest one no other live
//! session of the database holds, taken on the session's first write and held until the session
//! ends. Its slot is `index % slots` (on a Galera node, the node's share of the slots: see
//! [`push_node_share`]). So the writers alive at one time hold distinct indices `0..w`, and
//! distinct slots whenever `w <= slots`, whatever order their connections were opened in, however
//! a pool replaced them, in however many processes; with more writers than slots, each slot gets
//! `w / slots` of them, rounded up or down (never worse than a random draw).
//!
//! The index is the server session's, not the client's: behind a transaction-mode pooler the
//! sessions that contend for row locks are the pooler's server connections, and each holds its
//! own index whichever client's transaction it runs.
//!
//! - **PostgreSQL**: a session-level advisory lock `(INDEX_LOCK_CLASS, index)` (released by the
//!   server when the session ends), found by trying `0, 1, …` in order; the index is kept in the
//!   session setting `slotted.writer` (`set_config`). The write is an `INSERT … SELECT … WHERE
//!   <the session holds an index>`: in a session that holds none it writes nothing (an error
//!   would abort the caller's transaction), and slotted writes again with [`Use::Write`] to the
//!   connection's slot (`pg_backend_pid()`, as before writer indices), a write that says which
//!   (`RETURNING` the setting), then takes the index with [`TakeWriterIndex`] for the session's
//!   next writes. So a write in the steady state returns no row: one that did (`RETURNING` on
//!   every write) cost the client about 3,000 instructions, 13% of a write, and pgbench 8%
//!   of its throughput, prepared; unprepared (behind a transaction pooler) the two forms cost the
//!   same (`docs/bench/writer-index-statement-ab.txt`). Planning the taking in the write itself
//!   would cost every write (PostgreSQL plans a statement's every subquery, even one it never
//!   runs, and behind a transaction pooler each write is planned anew). Should the taking's
//!   transaction roll back, the setting rolls back with it while the lock stays: the next taking
//!   finds the lock the session holds (`pg_locks`) and keeps that index, so a session never
//!   holds two.
//! - **MySQL, MariaDB**: a named lock `GET_LOCK('slotted.<index>.<database>', 0)` (released
//!   when the session ends), the smallest index whose lock `IS_FREE_LOCK`, kept in the user
//!   variable `@slotted_writer`. A session without an index writes a `NULL` slot, which the
//!   single-row `INSERT` refuses with nothing written (error 1048; only the statement is rolled
//!   back): slotted takes the index with [`TakeWriterIndex`] and writes again, so even a
//!   session's first write goes to its index's slot. Two sessions racing for the same index:
//!   the loser tries again.
//!
//! Both cost nothing per write once the index is taken: the statement reads a session variable.
//! A `WHERE` (the prefill `UPDATE`) only reads the index: a session without one matches no row,
//! and its write goes on to the upsert. With every index taken (more than [`WRITER_INDICES`]
//! writers on one database), a session writes to its connection id's slot, as before the index
//! existed.

use diesel::deserialize::{self, QueryableByName};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::row::NamedRow;
use diesel::QueryResult;

use super::SlotValue;
use crate::dialect::{CounterBackend, Dialect};

/// How many writer indices a database hands out (`0..WRITER_INDICES`): the most slots a
/// counter can have ([`crate::MAX_SLOTS`]).
pub(crate) const WRITER_INDICES: u16 = crate::MAX_SLOTS;

/// The first key of PostgreSQL's two-key advisory locks that hold writer indices (`'slot'` in
/// ASCII); the second is the index. `pg_locks` shows them as `locktype = 'advisory'`,
/// `classid = 1936486260`, `objsubid = 2`.
pub(crate) const INDEX_LOCK_CLASS: i32 = 0x736c_6f74;

/// PostgreSQL: ` RETURNING <the session's writer index, as text; NULL or '' without one> AS w`,
/// the reply of a write of [`Use::Write`] (a [`Returned`]).
pub(crate) fn push_returning_index<DB: CounterBackend>(out: &mut AstPass<'_, '_, DB>) {
    out.push_sql(&PG_SLOT_TEXT.returning);
}

/// PostgreSQL: `current_setting('slotted.writer', true) <> ''`, true when the session holds a
/// writer index: the `WHERE` of the write that writes only then ([`Use::Match`]'s slot).
pub(crate) fn push_holds_index<DB: CounterBackend>(out: &mut AstPass<'_, '_, DB>) {
    out.push_sql(&PG_SLOT_TEXT.holds);
}

/// A row of a write that returns [`push_returning_index`].
pub(crate) struct Returned(pub Option<String>);

impl Returned {
    /// Whether the session that wrote holds a writer index.
    pub(crate) fn holds_index(&self) -> bool {
        self.0.as_deref().is_some_and(|w| !w.is_empty())
    }
}

impl<DB: CounterBackend> QueryableByName<DB> for Returned {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        DB::read_nullable_text(row, "w").map(Returned)
    }
}

/// MySQL: the indices are `hi * MYSQL_SIDE + lo` (see [`mysql_over_indices`]).
const MYSQL_SIDE: u16 = 32;
const _: () = assert!(MYSQL_SIDE * MYSQL_SIDE == WRITER_INDICES);

/// MySQL: `SELECT <select> FROM <every writer index> WHERE <condition>`, where `select` and
/// `condition` name the index as `{i}`. The indices are `hi * MYSQL_SIDE + lo` over the numbers
/// `0..MYSQL_SIDE` of `WITH RECURSIVE slotted_d (d)` (a recursion of 31 steps, well under every
/// server's limit), twice.
pub(crate) fn mysql_over_indices(select: &str, condition: &str) -> String {
    let index = format!("hi.d * {MYSQL_SIDE} + lo.d");
    format!(
        "WITH RECURSIVE slotted_d (d) AS (SELECT 0 UNION ALL SELECT d + 1 FROM slotted_d \
         WHERE d < {last}) SELECT {select} FROM slotted_d AS hi, slotted_d AS lo WHERE {condition}",
        last = MYSQL_SIDE - 1,
        select = select.replace("{i}", &index),
        condition = condition.replace("{i}", &index),
    )
}

/// MySQL: the name of the named lock that holds the writer index `index` (an SQL expression)
/// on this database, within the 64 characters a lock name may have.
pub(crate) fn mysql_lock_name(index: &str) -> String {
    format!("LEFT(CONCAT('slotted.', {index}, '.', DATABASE()), 64)")
}

/// The PostgreSQL session setting that keeps the index.
const PG_SETTING: &str = "'slotted.writer'";

/// PostgreSQL's writer-slot expressions (before ` % slots`), one per [`Use`], and the
/// [`push_returning_index`] clause. A write walks its statement on every call, also when its
/// prepared statement is cached (Diesel collects the binds in the same walk): so the text is
/// formatted once per process, never once per write.
struct PgSlotText {
    returning: String,
    holds: String,
    take: String,
    write: String,
    matched: String,
}

static PG_SLOT_TEXT: std::sync::LazyLock<PgSlotText> = std::sync::LazyLock::new(|| {
    let indices = WRITER_INDICES;
    let read = format!("CAST(NULLIF(current_setting({PG_SETTING}, true), '') AS INTEGER)");
    PgSlotText {
        returning: format!(" RETURNING current_setting({PG_SETTING}, true) AS w"),
        holds: format!("current_setting({PG_SETTING}, true) <> ''"),
        // One evaluation per statement (an InitPlan), however many rows it writes.
        take: format!("CAST({} AS INTEGER)", pg_take_index()),
        write: format!("COALESCE({read}, {indices} + pg_backend_pid() % {indices})"),
        matched: read,
    }
});

impl SlotValue {
    /// The slot of a multi-row write (a buffer flush): for [`SlotValue::Connection`], the
    /// session's writer slot; on PostgreSQL taking an index in the statement when the session
    /// holds none (planned once a flush, not once a write), on MySQL only read (the flush takes
    /// the index first).
    pub(crate) fn push<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        self.push_as(out, Use::Take)
    }

    /// The slot a row is matched by: for [`SlotValue::Connection`], the session's writer slot
    /// if it holds an index, else `NULL` (no row matches). A constant for the statement, so
    /// the row is found through the primary key.
    pub(crate) fn push_match<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
    ) -> QueryResult<()> {
        self.push_as(out, Use::Match)
    }

    pub(crate) fn push_as<'b, DB: CounterBackend>(
        &'b self,
        out: &mut AstPass<'_, 'b, DB>,
        how: Use,
    ) -> QueryResult<()> {
        match self {
            SlotValue::Bound(slot) => DB::push_small_int(out, slot),
            SlotValue::Connection(slots) => push_writer_slot(out, *slots, how),
        }
    }
}

/// What a statement does with the writer index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// A multi-row write: see [`SlotValue::push`].
    Take,
    /// A single-row write: the slot only read. A session without an index writes, on
    /// PostgreSQL, to its connection's slot (the write returns [`push_returning_index`] to say
    /// so); on MySQL, a `NULL` the `INSERT` refuses.
    Write,
    /// A `WHERE` (see [`SlotValue::push_match`]), or the slot of PostgreSQL's write that
    /// writes only when the session holds an index (`NULL` without one, never written).
    Match,
}

fn push_writer_slot<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    slots: u16,
    how: Use,
) -> QueryResult<()> {
    match DB::DIALECT {
        Dialect::Postgres => {
            let text = &*PG_SLOT_TEXT;
            out.push_sql("CAST(");
            out.push_sql(match how {
                Use::Take => &text.take,
                Use::Write => &text.write,
                Use::Match => &text.matched,
            });
            out.push_sql(" % ");
            push_integer(out, slots);
            out.push_sql(" AS SMALLINT)");
            Ok(())
        }
        // Only read: MySQL plans a statement's every subquery on each execution, even one it
        // never evaluates, and taking an index costs one (60 µs a write, measured). A session
        // without an index writes a NULL slot, which a single-row INSERT refuses with nothing
        // written (error 1048): the add then runs `TakeWriterIndex` and writes again.
        Dialect::Mysql => push_node_share(out, "@slotted_writer", slots),
        // Never chosen on SQLite, which has no server session: the caller binds a slot.
        Dialect::Sqlite => {
            out.push_sql("(0 * ");
            push_integer(out, slots);
            out.push_sql(")");
            Ok(())
        }
    }
}

/// PostgreSQL: the session's writer index as text, taken (and kept in the setting) when the
/// session holds none: the index whose advisory lock the session already holds (the setting is
/// gone when the transaction that took the index rolled back, or after `RESET ALL`; the lock
/// stays), else the smallest index whose lock it gets, or, with every index taken,
/// `WRITER_INDICES + pg_backend_pid() % WRITER_INDICES`. Only evaluated when the setting is
/// empty.
fn pg_take_index() -> String {
    let indices = WRITER_INDICES;
    format!(
        "(SELECT COALESCE(NULLIF(current_setting({PG_SETTING}, true), ''), \
         set_config({PG_SETTING}, CAST(COALESCE(\
         (SELECT MIN(CAST(objid AS BIGINT)) FROM pg_locks WHERE locktype = 'advisory' \
         AND classid = {INDEX_LOCK_CLASS} AND objsubid = 2 AND pid = pg_backend_pid() \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())), \
         (SELECT slotted_w FROM generate_series(0, {last}) AS slotted_w \
         WHERE pg_try_advisory_lock({INDEX_LOCK_CLASS}, slotted_w) LIMIT 1), \
         {indices} + pg_backend_pid() % {indices}) AS TEXT), false)))",
        last = indices - 1
    )
}

/// `n` as SQL text, without an allocation: a write walks its statement on every call.
fn push_integer<DB: CounterBackend>(out: &mut AstPass<'_, '_, DB>, n: u16) {
    let mut digits = [0_u8; 5];
    out.push_sql(integer_text(&mut digits, n));
}

/// `n`'s decimal digits, written into `digits`.
fn integer_text(digits: &mut [u8; 5], n: u16) -> &str {
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&digits[at..]).unwrap_or("1")
}

/// `index`'s slot on this node. Node-aware: a Galera node hands out writer indices from 0 like
/// every other node (named locks are the node's own), but has its own `auto_increment_offset`
/// among `auto_increment_increment` nodes (Galera sets both, and keeps them current as nodes
/// join and leave). So each node takes every increment-th slot, from its offset: nodes never
/// share a slot. On a single server (1 and 1) this is `MOD(index, slots)`.
fn push_node_share<DB: CounterBackend>(
    out: &mut AstPass<'_, '_, DB>,
    index: &str,
    slots: u16,
) -> QueryResult<()> {
    write_node_share(&mut |sql| out.push_sql(sql), index, slots);
    Ok(())
}

/// [`push_node_share`]'s text, written piece by piece into `out` (a statement's walk, which
/// must not allocate, or a `String`).
fn write_node_share(out: &mut dyn FnMut(&str), index: &str, slots: u16) {
    let mut digits = [0_u8; 5];
    let slots = integer_text(&mut digits, slots);
    out("MOD(MOD(");
    out(index);
    out(", GREATEST(FLOOR(");
    out(slots);
    out(
        " / @@auto_increment_increment), 1)) * @@auto_increment_increment \
         + @@auto_increment_offset - 1, ",
    );
    out(slots);
    out(")");
}

/// The slot a trigger of a counter that follows a child table writes to (see
/// `migration/follow.rs`): the writing session's writer slot, as a write of the `connection`
/// strategy takes it. PostgreSQL reads the plpgsql variable that [`pg_trigger_takes_index`]
/// sets; MySQL reads `@slotted_writer` (which [`mysql_trigger_takes_index`] sets) and, in a
/// session whose every try lost, uses its connection id's slot, as a session does with every
/// index taken; SQLite, whose one writer never waits for another, writes slot 0.
pub(crate) fn trigger_slot_sql(dialect: Dialect, slots: u16) -> String {
    let indices = WRITER_INDICES;
    match dialect {
        Dialect::Postgres => format!("CAST({PG_TRIGGER_WRITER} % {slots} AS SMALLINT)"),
        Dialect::Mysql => {
            let mut sql = String::new();
            write_node_share(
                &mut |piece| sql.push_str(piece),
                &format!("COALESCE(@slotted_writer, {indices} + MOD(CONNECTION_ID(), {indices}))"),
                slots,
            );
            sql
        }
        Dialect::Sqlite => "0".to_owned(),
    }
}

/// The plpgsql variable that holds the writing session's writer index in a trigger function.
const PG_TRIGGER_WRITER: &str = "slotted_writer";

/// PostgreSQL: the declaration and the first statement of a trigger function, which set
/// [`PG_TRIGGER_WRITER`] to the session's writer index, taken when the session holds none.
/// The setting is read by a plain expression, which plpgsql evaluates without the executor:
/// only a session without an index runs the query that takes one. (Evaluating that query on
/// every call cost about 20 µs of server time per trigger call, measured with three counters
/// on one child table: 140-170 µs a one-row insert against 55-65 µs for a row trigger writing
/// client-private rows.)
pub(crate) fn pg_trigger_takes_index() -> (String, String) {
    let declare = format!(
        "{PG_TRIGGER_WRITER}_text TEXT := current_setting({PG_SETTING}, true);\n    \
         {PG_TRIGGER_WRITER} INTEGER;\n"
    );
    let take = format!(
        "IF {PG_TRIGGER_WRITER}_text IS NULL OR {PG_TRIGGER_WRITER}_text = '' THEN\n        \
             {PG_TRIGGER_WRITER}_text := {};\n    \
         END IF;\n    \
         {PG_TRIGGER_WRITER} := CAST({PG_TRIGGER_WRITER}_text AS INTEGER);\n",
        pg_take_index()
    );
    (declare, take)
}

/// Takes this session's writer index, or reads it when the session has one: one row, `n`, the
/// index. MySQL: -1 when another session took the candidate first (try again); with `fallback`
/// 1, a session that loses keeps `WRITER_INDICES + CONNECTION_ID() % WRITER_INDICES` instead
/// (every index taken, or a race lost too often). PostgreSQL's try-locks never lose a race
/// (`fallback` unused).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TakeWriterIndex {
    pub fallback: i64,
}

impl<DB: CounterBackend> QueryFragment<DB> for TakeWriterIndex {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        if DB::DIALECT == Dialect::Postgres {
            out.push_sql(&format!("SELECT CAST({} AS BIGINT) AS n", pg_take_index()));
            return Ok(());
        }
        let (before, after) = mysql_take_index();
        out.push_sql("SELECT ");
        out.push_sql(&before);
        DB::push_big_int(&mut out, &self.fallback)?;
        out.push_sql(&after);
        out.push_sql(" AS n");
        Ok(())
    }
}

/// MySQL: [`TakeWriterIndex`]'s expression, cut where its `fallback` goes (a bind of the
/// statement, a literal in a trigger).
fn mysql_take_index() -> (String, String) {
    let indices = WRITER_INDICES;
    let smallest_free = mysql_over_indices(
        "MIN({i})",
        &format!("IS_FREE_LOCK({}) = 1", mysql_lock_name("{i}")),
    );
    (
        format!(
            "CAST(COALESCE(@slotted_writer, IF(GET_LOCK({lock}, 0) = 1, \
             @slotted_writer := @slotted_candidate, IF(",
            lock = mysql_lock_name(&format!("@slotted_candidate := ({smallest_free})")),
        ),
        format!(
            " = 1, @slotted_writer := {indices} + MOD(CONNECTION_ID(), {indices}), -1))) AS SIGNED)"
        ),
    )
}

/// MySQL: the statement a trigger runs first, so that its session holds a writer index: the
/// smallest free, taken as [`TakeWriterIndex`] takes it, tried again (up to 16 times, as
/// `take_writer_index` does) when another session took that one first; then, with every index
/// taken or every race lost, the session's connection id's. MariaDB and MySQL allow `GET_LOCK`
/// in a trigger; a binary log in `STATEMENT` format calls it unsafe, as it does the write that
/// takes an index outside a trigger.
pub(crate) fn mysql_trigger_takes_index() -> String {
    let (before, after) = mysql_take_index();
    format!(
        "IF @slotted_writer IS NULL THEN\n        \
             SET @slotted_tries = 0;\n        \
             WHILE @slotted_writer IS NULL AND @slotted_tries < 16 DO\n            \
                 DO {before}0{after};\n            \
                 SET @slotted_tries = @slotted_tries + 1;\n        \
             END WHILE;\n        \
             DO {before}1{after};\n    \
         END IF"
    )
}

impl QueryId for TakeWriterIndex {
    type QueryId = Self;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn> diesel::RunQueryDsl<Conn> for TakeWriterIndex {}

/// A row of [`TakeWriterIndex`].
pub(crate) struct WriterIndex(pub i64);

impl<DB: CounterBackend> QueryableByName<DB> for WriterIndex {
    fn build<'a>(row: &impl NamedRow<'a, DB>) -> deserialize::Result<Self> {
        DB::read_big_int(row, "n").map(WriterIndex)
    }
}
