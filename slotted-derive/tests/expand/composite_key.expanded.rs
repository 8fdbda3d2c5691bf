::slotted_core::__private::diesel::table! {
    use diesel::sql_types:: *; use
    super::__slotted_record_id_2_of_post_votes_score_slots; #[doc =
    "The slots of the `score` counter of [`PostVote`]: 8 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    post_votes_score_slots(record_id, record_id_2, slot) { #[doc =
    "The `person_id` of the counted `PostVote`."] record_id -> Integer, #[doc =
    "The `post_id` of the counted `PostVote`."] record_id_2 ->
    __slotted_record_id_2_of_post_votes_score_slots, #[doc = "The slot, 0 to 7."] slot ->
    SmallInt, #[doc = r" This slot's share of the count."] count -> BigInt, }
}
#[doc(hidden)]
#[allow(non_camel_case_types, dead_code)]
type __slotted_record_id_2_of_post_votes_score_slots = ::slotted_core::KeyOf<PostId>;
const _: () = if !::slotted_core::__private::key_check::has_columns::<
    post_votes_score_slots::table,
>(2usize) {
    ::core::panic!(
        "the key field's type keys another number of columns than the model's primary key names\n\nhelp: a composite key is a field per column, each named in `#[diesel(primary_key(a, b))]` and each of a one-column key type"
    )
};
#[automatically_derived]
impl ::slotted_core::CounterTable for post_votes_score_slots::table {
    type Key = (i32, PostId);
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "PostVote",
        counter: "score",
        table: "post_votes_score_slots",
        slots: 8u16,
        strategy: ::slotted_core::SlotStrategy::Connection,
        key: ::slotted_core::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: ::slotted_core::Storage::Table,
        bucket: ::core::option::Option::None,
        prefill: false,
        cache: ::core::option::Option::Some(::slotted_core::CacheSpec {
            table: "post_votes",
            key_columns: &[
                <post_votes::person_id as ::slotted_core::__private::ParentColumn>::NAME,
                <post_votes::post_id as ::slotted_core::__private::ParentColumn>::NAME,
            ],
            column: <post_votes::score_count as ::slotted_core::__private::ParentColumn>::NAME,
            bits: <<post_votes::score_count as ::slotted_core::__private::ParentColumn>::SqlType as ::slotted_core::__private::CacheColumnType>::BITS,
        }),
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
impl ::slotted_core::CachedCounterTable for post_votes_score_slots::table {}
#[automatically_derived]
#[allow(dead_code)]
impl PostVote {
    ///The `score` counter of this record (8 slots).
    fn score(&self) -> ::slotted_core::Counter<'_, post_votes_score_slots::table> {
        ::slotted_core::Counter::of((
            ::core::clone::Clone::clone(&self.person_id),
            ::core::clone::Clone::clone(&self.post_id),
        ))
    }
    ///The `score` counter of the record with this key, without loading the record.
    fn score_of(
        key: impl ::slotted_core::__private::IntoCounterKey<(i32, PostId)>,
    ) -> ::slotted_core::Counter<'static, post_votes_score_slots::table> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `score` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    fn score_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<
                post_votes_score_slots::table,
            >,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        post_votes_score_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `score` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    fn score_totals<C: ::slotted_core::CounterConnection>(
        keys: &[(i32, PostId)],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<(i32, PostId), i64>> {
        ::slotted_core::Counter::<post_votes_score_slots::table>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `score` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."] fn
        score_totals_async < 'a, C : ::slotted_core::AsyncCounterConnection > (keys : &
        'a[(i32, PostId,)], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        ::slotted_core::Result < ::slotted_core::__private::HashMap < (i32, PostId,), i64
        >>, > + ::core::marker::Send + 'a { ::slotted_core::Counter:: <
        post_votes_score_slots::table > ::totals_async(keys, conn) }
    }
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for PostVote {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[
        <post_votes_score_slots::table as ::slotted_core::CounterTable>::SPEC,
    ];
}
