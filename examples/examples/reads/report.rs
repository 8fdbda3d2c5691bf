//! The benchmark's report: the table of figures, with the commands that made them.

use super::*;

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn ratio(a: Duration, b: Duration) -> String {
    format!("{:.2}", a.as_secs_f64() / b.as_secs_f64())
}

pub(crate) fn render<C: TestConnection>(version: &str, o: &Options, rows: &[Row]) -> String {
    let raw = RawClient::name::<C>();
    let per_round = o.reps.div_ceil(ROUNDS).max(1);
    let mut out = format!(
        "# reads (issue 41), {}: a page of 20 and the top 20 by likes, the counts as an indexed \
         column (the anchor) and as slotted's exact totals; a roll-up pass after 1% of the \
         records were written\n# {}\n# {}; 2 cores, a shared machine; medians of {} runs \
         of each query, alternated, through one Diesel connection; the anchors also by {raw} in \
         the same run, on the same tables, the same SQL: {} rounds between the Diesel runs, {} \
         runs of each query a round\n# cargo run --release \
         --example reads --features postgres,mysql -- --backend {} --records {} --reps {}\n\n",
        C::NAME,
        version.trim(),
        slotted_examples::now_utc(),
        o.reps,
        o.reps.div_ceil(per_round),
        per_round * RAW_RUNS_PER_REP,
        C::NAME,
        o.records
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
        o.reps
    );
    out += &format!(
        "## The top 20 by likes, microseconds (median)\n\n\
        | records | the column by {raw} (raw anchor) | the column by Diesel (anchor) | Diesel / raw | slotted: by the column, exact counts, by Diesel | / Diesel anchor | / raw anchor | slotted's SQL by {raw} | / raw anchor | slotted: by the exact total, by Diesel | / raw anchor |\n\
        |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for r in rows {
        let anchor = r.raw.reads[TOP];
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.records,
            us(anchor),
            us(r.top_column),
            ratio(r.top_column, anchor),
            us(r.top_exact_counts),
            ratio(r.top_exact_counts, r.top_column),
            ratio(r.top_exact_counts, anchor),
            us(r.raw.reads[TOP_EXACT]),
            ratio(r.raw.reads[TOP_EXACT], anchor),
            r.top_exact.map_or("not run".to_owned(), us),
            r.top_exact.map_or("–".to_owned(), |t| ratio(t, anchor)),
        );
    }
    out += &format!(
        "\n## A page of 20 with their counts, microseconds (median)\n\n\
        | records | the column by {raw} (raw anchor) | the column by Diesel (anchor) | Diesel / raw | slotted: exact counts, by Diesel | / Diesel anchor | / raw anchor | slotted's SQL by {raw} | / raw anchor |\n\
        |---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for r in rows {
        let anchor = r.raw.reads[PAGE];
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.records,
            us(anchor),
            us(r.page_column),
            ratio(r.page_column, anchor),
            us(r.page_exact),
            ratio(r.page_exact, r.page_column),
            ratio(r.page_exact, anchor),
            us(r.raw.reads[PAGE_EXACT]),
            ratio(r.raw.reads[PAGE_EXACT], anchor),
        );
    }
    out += &format!(
        "\nThe raw client runs the timed loop's four queries, Diesel's SQL text: the two anchors \
         and slotted's two reads, so that its anchors run in the same mix as Diesel's \
         ({}).\n",
        match C::NAME {
            "postgres" => "pgbench picks one of the four scripts at random for each transaction",
            _ => "in the loop's order, as Diesel's are",
        }
    );
    let (kept, fresh) = (RawClient::kept_name::<C>(), RawClient::fresh_name::<C>());
    out += &format!(
        "\n## A pass after 1% of the records were written, milliseconds (medians of 3; of 6 for the hand-written UPDATEs)\n\n\
        | records | maintain_changed (compaction and roll-up) | records it took | refresh_cache_all | rows it updated | hand-written UPDATE of those records, Diesel (anchor) | the same by {kept}, its connection kept (raw anchor) | Diesel / raw | the same by {fresh} | maintain_changed / hand | refresh_cache_all / hand | maintain_changed / raw hand |\n\
        |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    );
    for r in rows {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.records,
            ms(r.changed),
            r.changed_records,
            ms(r.pass),
            r.pass_updated,
            ms(r.hand_update),
            ms(r.raw.hand_update),
            ratio(r.hand_update, r.raw.hand_update),
            ms(r.raw.hand_update_fresh),
            ratio(r.changed, r.hand_update),
            ratio(r.pass, r.hand_update),
            ratio(r.changed, r.raw.hand_update),
        );
    }
    out += "\nmaintain_changed finds the records written since the last pass through the index of \
            unsettled rows, compacts them into the settled slot and rolls them up (the \
            maintainer's pass); refresh_cache_all reads every record's total (its cost follows \
            the table); both write only the rows whose total changed. The hand-written UPDATE \
            knows which records changed and does not compact. It runs by Diesel (batch_execute, \
            on the bench's connection), by the raw client on a connection kept open, and by \
            the raw client on a fresh connection each time (warmed by the same UPDATE of no \
            record), on the same table, each after the same records were written again, in the \
            order ABCCBA, then CBAABC; after each, those records' cache equals their exact \
            totals (checked), and after the last pass every record's (checked).\n";
    out += &format!("\n## The raw anchors, as run ({raw})\n");
    for r in rows {
        out += &format!("\n### {} records\n\n", r.records);
        out += &format!(
            "timed runs: top {}, top with exact counts {}, page {}, page with exact counts {}",
            r.raw.runs[TOP], r.raw.runs[TOP_EXACT], r.raw.runs[PAGE], r.raw.runs[PAGE_EXACT]
        );
        if let Some(tps) = r.raw.tps {
            out += &format!("; pgbench's own report: {tps:.0} tps (mean over its runs)");
        }
        out += "\n";
        out += &r.raw.commands;
    }
    out
}
