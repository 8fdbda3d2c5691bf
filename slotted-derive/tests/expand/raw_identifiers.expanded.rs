::slotted_core::__private::diesel::table! {
    #[doc =
    "The slots of the `goals` counter of [`Match`]: 8 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    match_goals_slots(record_id, slot) { #[doc = "The `r#type` of the counted `Match`."]
    record_id -> Integer, #[doc = "The slot, 0 to 7."] slot -> SmallInt, #[doc =
    r" This slot's share of the count."] count -> BigInt, }
}
#[automatically_derived]
impl ::slotted_core::CounterTable for match_goals_slots::table {
    type Key = i32;
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "Match",
        counter: "goals",
        table: "match_goals_slots",
        slots: 8u16,
        strategy: ::slotted_core::SlotStrategy::Connection,
        key: ::slotted_core::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: ::slotted_core::Storage::Table,
        bucket: ::core::option::Option::None,
        prefill: false,
        cache: ::core::option::Option::Some(::slotted_core::CacheSpec {
            table: "match",
            key_columns: &[
                <crate::schema::r#match::r#type as ::slotted_core::__private::ParentColumn>::NAME,
            ],
            column: <crate::schema::r#match::goals_count as ::slotted_core::__private::ParentColumn>::NAME,
            bits: <<crate::schema::r#match::goals_count as ::slotted_core::__private::ParentColumn>::SqlType as ::slotted_core::__private::CacheColumnType>::BITS,
        }),
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
impl ::slotted_core::CachedCounterTable for match_goals_slots::table {}
#[automatically_derived]
#[allow(dead_code)]
impl r#Match {
    ///The `goals` counter of this record (8 slots).
    pub fn goals(&self) -> ::slotted_core::Counter<'_, match_goals_slots::table> {
        ::slotted_core::Counter::new(&self.r#type)
    }
    ///The `goals` counter of the record with this key, without loading the record.
    pub fn goals_of(
        key: impl ::slotted_core::__private::IntoCounterKey<i32>,
    ) -> ::slotted_core::Counter<'static, match_goals_slots::table> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `goals` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn goals_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<match_goals_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        match_goals_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `goals` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn goals_totals<C: ::slotted_core::CounterConnection>(
        keys: &[i32],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<i32, i64>> {
        ::slotted_core::Counter::<match_goals_slots::table>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `goals` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn goals_totals_async < 'a, C : ::slotted_core::AsyncCounterConnection >
        (keys : & 'a[i32], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        ::slotted_core::Result < ::slotted_core::__private::HashMap < i32, i64 >>, > +
        ::core::marker::Send + 'a { ::slotted_core::Counter:: < match_goals_slots::table
        > ::totals_async(keys, conn) }
    }
}
///The `fouls` counter of [`Match`], kept in the shared `slotted_counters` table. Declared by `#[derive(SlottedCounter)]`.
#[allow(non_camel_case_types)]
pub mod match_fouls {
    /// The counter's type: `CounterTable` and the maintenance calls are on it.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct counter;
}
#[automatically_derived]
impl ::slotted_core::CounterTable for match_fouls::counter {
    type Key = i32;
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "Match",
        counter: "fouls",
        table: ::slotted_core::SHARED_TABLE,
        slots: 2u16,
        strategy: ::slotted_core::SlotStrategy::Connection,
        key: ::slotted_core::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: ::slotted_core::Storage::Shared {
            record_type: "match.fouls",
        },
        bucket: ::core::option::Option::None,
        prefill: false,
        cache: ::core::option::Option::None,
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
#[allow(dead_code)]
impl r#Match {
    ///The `fouls` counter of this record (2 slots).
    pub fn fouls(&self) -> ::slotted_core::Counter<'_, match_fouls::counter> {
        ::slotted_core::Counter::new(&self.r#type)
    }
    ///The `fouls` counter of the record with this key, without loading the record.
    pub fn fouls_of(
        key: impl ::slotted_core::__private::IntoCounterKey<i32>,
    ) -> ::slotted_core::Counter<'static, match_fouls::counter> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `fouls` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn fouls_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<match_fouls::counter>,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        match_fouls::counter,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `fouls` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn fouls_totals<C: ::slotted_core::CounterConnection>(
        keys: &[i32],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<i32, i64>> {
        ::slotted_core::Counter::<match_fouls::counter>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `fouls` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn fouls_totals_async < 'a, C : ::slotted_core::AsyncCounterConnection >
        (keys : & 'a[i32], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        ::slotted_core::Result < ::slotted_core::__private::HashMap < i32, i64 >>, > +
        ::core::marker::Send + 'a { ::slotted_core::Counter:: < match_fouls::counter >
        ::totals_async(keys, conn) }
    }
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for r#Match {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[
        <match_goals_slots::table as ::slotted_core::CounterTable>::SPEC,
        <match_fouls::counter as ::slotted_core::CounterTable>::SPEC,
    ];
}
