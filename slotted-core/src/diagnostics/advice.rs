//! Advice in words, from what a [`TableReport`] saw.

use std::collections::BTreeMap;

use super::{Advice, LockWaits, TableReport, WriterIndices};
use crate::slot::SlotStrategy;
use crate::table::MAX_SLOTS;

pub(super) fn advise(table: &TableReport, writers: Option<&WriterIndices>) -> Vec<Advice> {
    let mut advice = Vec::new();
    let slots = table.spec.slots;
    if let Some(writers) = writers {
        if table.spec.strategy == SlotStrategy::Connection && writers.held > u64::from(slots) {
            let wanted = u16::try_from(writers.held.next_power_of_two()).unwrap_or(MAX_SLOTS);
            advice.push(Advice::MoreWritersThanSlots {
                writers: writers.held,
                slots,
                suggested: wanted.min(MAX_SLOTS),
            });
        }
    }
    let waits = table.lock_waits.waits();
    let mut by_record: BTreeMap<Option<&String>, usize> = BTreeMap::new();
    for wait in waits {
        *by_record.entry(wait.record.as_ref()).or_default() += 1;
    }
    let mut by_record: Vec<_> = by_record.into_iter().collect();
    by_record.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    for (record, waiting) in by_record {
        advice.push(Advice::RaiseSlots {
            record: record.cloned(),
            waiting,
            slots,
            suggested: slots.saturating_mul(2).min(MAX_SLOTS),
        });
    }
    if table.compactable_rows > 0 && table.compactable_rows.saturating_mul(2) >= table.rows {
        advice.push(Advice::Compact {
            rows_removed: table.compactable_rows,
            rows: table.rows,
        });
    }
    let seen = matches!(table.lock_waits, LockWaits::Seen(_));
    if seen
        && waits.is_empty()
        && slots > 1
        && table.max_rows_per_group >= 4
        && table.max_rows_per_group * 2 > u64::from(slots)
    {
        advice.push(Advice::LowerSlots {
            rows_per_read: table.max_rows_per_group,
            slots,
            suggested: (slots / 2).max(1),
        });
    }
    advice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::LockWait;
    use crate::table::TEST_SPEC as SPEC;

    fn table(rows: u64, compactable: u64, max: u64, waits: Vec<LockWait>) -> TableReport {
        TableReport {
            spec: SPEC,
            rows,
            records: 1,
            groups: 1,
            max_rows_per_group: max,
            compactable_rows: compactable,
            hottest: Vec::new(),
            lock_waits: LockWaits::Seen(waits),
            advice: Vec::new(),
        }
    }

    #[test]
    fn advice_follows_waits_rows_and_spread() {
        let wait = |record: &str| LockWait {
            waiter: 1,
            blockers: vec![2],
            record: Some(record.into()),
            slot: Some(0),
            bucket: None,
            waited_ms: Some(5),
            lock: "tuple".into(),
            query: String::new(),
        };
        let advice = advise(
            &table(16, 15, 16, vec![wait("1"), wait("1"), wait("2")]),
            None,
        );
        assert_eq!(
            advice,
            vec![
                Advice::RaiseSlots {
                    record: Some("1".into()),
                    waiting: 2,
                    slots: 16,
                    suggested: 32
                },
                Advice::RaiseSlots {
                    record: Some("2".into()),
                    waiting: 1,
                    slots: 16,
                    suggested: 32
                },
                Advice::Compact {
                    rows_removed: 15,
                    rows: 16
                },
            ]
        );
        assert_eq!(
            advise(&table(16, 0, 16, Vec::new()), None),
            vec![Advice::LowerSlots {
                rows_per_read: 16,
                slots: 16,
                suggested: 8
            }]
        );
        assert_eq!(advise(&table(4, 1, 2, Vec::new()), None), Vec::new());
    }

    #[test]
    fn more_writers_than_slots_of_a_connection_counter() {
        let writers = |held| WriterIndices {
            held,
            highest: Some(held - 1),
        };
        let spec_slots = u64::from(SPEC.slots);
        let mut connection = table(4, 1, 2, Vec::new());
        connection.spec.strategy = SlotStrategy::Connection;
        assert_eq!(
            advise(&connection, Some(&writers(spec_slots))),
            Vec::new(),
            "as many writers as slots"
        );
        assert_eq!(
            advise(&table(4, 1, 2, Vec::new()), Some(&writers(spec_slots + 1))),
            Vec::new(),
            "the thread strategy takes no writer index"
        );
        assert_eq!(
            advise(&connection, Some(&writers(spec_slots + 1))),
            vec![Advice::MoreWritersThanSlots {
                writers: spec_slots + 1,
                slots: SPEC.slots,
                suggested: u16::try_from((spec_slots + 1).next_power_of_two()).unwrap(),
            }]
        );
    }
}
