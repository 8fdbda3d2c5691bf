::slotted_core::__private::diesel::table! {
    #[doc =
    "The slots of the `views` counter of [`Page`]: 4 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    pages_views_slots(record_id, slot) { #[doc = "The `url` of the counted `Page`."]
    record_id -> Text, #[doc = "The slot, 0 to 3."] slot -> SmallInt, #[doc =
    r" This slot's share of the count."] count -> BigInt, }
}
#[automatically_derived]
impl ::slotted_core::CounterTable for pages_views_slots::table {
    type Key = String;
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "Page",
        counter: "views",
        table: "pages_views_slots",
        slots: 4u16,
        strategy: ::slotted_core::SlotStrategy::Random,
        key: ::slotted_core::__private::key_kinds::<Self>(),
        max_key_length: 512u16,
        storage: ::slotted_core::Storage::Table,
        bucket: ::core::option::Option::None,
        prefill: false,
        cache: ::core::option::Option::None,
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
#[allow(dead_code)]
impl Page {
    ///The `views` counter of this record (4 slots).
    pub(crate) fn views(&self) -> ::slotted_core::Counter<'_, pages_views_slots::table> {
        ::slotted_core::Counter::new(&self.url)
    }
    ///The `views` counter of the record with this key, without loading the record.
    pub(crate) fn views_of(
        key: impl ::slotted_core::__private::IntoCounterKey<String>,
    ) -> ::slotted_core::Counter<'static, pages_views_slots::table> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `views` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub(crate) fn views_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<pages_views_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        pages_views_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `views` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub(crate) fn views_totals<C: ::slotted_core::CounterConnection>(
        keys: &[String],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<String, i64>> {
        ::slotted_core::Counter::<pages_views_slots::table>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `views` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub (crate) fn views_totals_async < 'a, C :
        ::slotted_core::AsyncCounterConnection > (keys : & 'a[String], conn : & 'a mut
        C,) -> impl ::core::future::Future < Output = ::slotted_core::Result <
        ::slotted_core::__private::HashMap < String, i64 >>, > + ::core::marker::Send +
        'a { ::slotted_core::Counter:: < pages_views_slots::table > ::totals_async(keys,
        conn) }
    }
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for Page {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[
        <pages_views_slots::table as ::slotted_core::CounterTable>::SPEC,
    ];
}
