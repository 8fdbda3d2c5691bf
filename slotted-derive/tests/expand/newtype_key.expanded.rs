::slotted_core::__private::diesel::table! {
    use diesel::sql_types:: *; use super::__slotted_record_id_of_posts_likes_slots; #[doc
    =
    "The slots of the `likes` counter of [`Post`]: 16 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    posts_likes_slots(record_id, slot) { #[doc = "The `id` of the counted `Post`."]
    record_id -> __slotted_record_id_of_posts_likes_slots, #[doc = "The slot, 0 to 15."]
    slot -> SmallInt, #[doc = r" This slot's share of the count."] count -> BigInt, }
}
#[doc(hidden)]
#[allow(non_camel_case_types, dead_code)]
type __slotted_record_id_of_posts_likes_slots = ::slotted_core::KeyOf<Ulid>;
const _: () = if !::slotted_core::__private::key_check::has_columns::<
    posts_likes_slots::table,
>(1usize) {
    ::core::panic!(
        "the key field's type keys another number of columns than the model's primary key names\n\nhelp: a composite key is a field per column, each named in `#[diesel(primary_key(a, b))]` and each of a one-column key type"
    )
};
#[automatically_derived]
impl ::slotted_core::CounterTable for posts_likes_slots::table {
    type Key = Ulid;
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "Post",
        counter: "likes",
        table: "posts_likes_slots",
        slots: 16u16,
        strategy: ::slotted_core::SlotStrategy::Connection,
        key: ::slotted_core::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
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
impl Post {
    ///The `likes` counter of this record (16 slots).
    fn likes(&self) -> ::slotted_core::Counter<'_, posts_likes_slots::table> {
        ::slotted_core::Counter::new(&self.id)
    }
    ///The `likes` counter of the record with this key, without loading the record.
    fn likes_of(
        key: impl ::slotted_core::__private::IntoCounterKey<Ulid>,
    ) -> ::slotted_core::Counter<'static, posts_likes_slots::table> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `likes` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    fn likes_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<posts_likes_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        posts_likes_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `likes` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    fn likes_totals<C: ::slotted_core::CounterConnection>(
        keys: &[Ulid],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<Ulid, i64>> {
        ::slotted_core::Counter::<posts_likes_slots::table>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `likes` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."] fn
        likes_totals_async < 'a, C : ::slotted_core::AsyncCounterConnection > (keys : &
        'a[Ulid], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        ::slotted_core::Result < ::slotted_core::__private::HashMap < Ulid, i64 >>, > +
        ::core::marker::Send + 'a { ::slotted_core::Counter:: < posts_likes_slots::table
        > ::totals_async(keys, conn) }
    }
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for Post {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[
        <posts_likes_slots::table as ::slotted_core::CounterTable>::SPEC,
    ];
}
