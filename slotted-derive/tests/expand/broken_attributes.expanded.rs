::core::compile_error! {
    "expected `=` after `counter`\n\nhelp: the correct format looks like `#[slotted(counter = likes, slots = 16)]`"
}
::core::compile_error! {
    "unknown slot strategy `fastest`\n\nhelp: `strategy = connection` (the default: a slot per database connection, chosen by the server), `strategy = thread` (a slot per live thread) or `strategy = random`"
}
::core::compile_error! {
    "table name `r#type` must be ASCII letters, digits and `_`\n\nhelp: e.g. `table = post_likes_slots`"
}
::slotted_core::__private::diesel::table! {
    #[doc =
    "The slots of the `views` counter of [`Post`]: 8 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    posts_views_slots(record_id, slot) { #[doc = "The `id` of the counted `Post`."]
    record_id -> Integer, #[doc = "The slot, 0 to 7."] slot -> SmallInt, #[doc =
    r" This slot's share of the count."] count -> BigInt, }
}
#[automatically_derived]
impl ::slotted_core::CounterTable for posts_views_slots::table {
    type Key = i32;
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "Post",
        counter: "views",
        table: "posts_views_slots",
        slots: 8u16,
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
    ///The `views` counter of this record (8 slots).
    pub fn views(&self) -> ::slotted_core::Counter<'_, posts_views_slots::table> {
        ::slotted_core::Counter::new(&self.id)
    }
    ///The `views` counter of the record with this key, without loading the record.
    pub fn views_of(
        key: impl ::slotted_core::__private::IntoCounterKey<i32>,
    ) -> ::slotted_core::Counter<'static, posts_views_slots::table> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `views` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn views_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<posts_views_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        posts_views_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `views` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn views_totals<C: ::slotted_core::CounterConnection>(
        keys: &[i32],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<i32, i64>> {
        ::slotted_core::Counter::<posts_views_slots::table>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `views` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn views_totals_async < 'a, C : ::slotted_core::AsyncCounterConnection >
        (keys : & 'a[i32], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        ::slotted_core::Result < ::slotted_core::__private::HashMap < i32, i64 >>, > +
        ::core::marker::Send + 'a { ::slotted_core::Counter:: < posts_views_slots::table
        > ::totals_async(keys, conn) }
    }
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for Post {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[
        <posts_views_slots::table as ::slotted_core::CounterTable>::SPEC,
    ];
}
#[automatically_derived]
impl Post {
    #[doc(hidden)]
    pub fn likes(
        &self,
    ) -> ::slotted_core::Counter<'static, ::slotted_core::__private::InvalidCounter> {
        ::slotted_core::Counter::of(0)
    }
    #[doc(hidden)]
    pub fn likes_of<K>(
        _key: K,
    ) -> ::slotted_core::Counter<'static, ::slotted_core::__private::InvalidCounter> {
        ::slotted_core::Counter::of(0)
    }
    #[doc(hidden)]
    pub fn likes_totals<K, C>(
        _keys: &[K],
        _conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<K, i64>> {
        ::core::result::Result::Ok(::slotted_core::__private::HashMap::new())
    }
    #[doc(hidden)]
    pub fn likes_total<K>(
        _key: K,
    ) -> ::slotted_core::__private::diesel::expression::SqlLiteral<
        ::slotted_core::__private::diesel::sql_types::BigInt,
    > {
        ::slotted_core::__private::diesel::dsl::sql("0")
    }
    #[doc(hidden)]
    pub fn shares(
        &self,
    ) -> ::slotted_core::Counter<'static, ::slotted_core::__private::InvalidCounter> {
        ::slotted_core::Counter::of(0)
    }
    #[doc(hidden)]
    pub fn shares_of<K>(
        _key: K,
    ) -> ::slotted_core::Counter<'static, ::slotted_core::__private::InvalidCounter> {
        ::slotted_core::Counter::of(0)
    }
    #[doc(hidden)]
    pub fn shares_totals<K, C>(
        _keys: &[K],
        _conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<K, i64>> {
        ::core::result::Result::Ok(::slotted_core::__private::HashMap::new())
    }
    #[doc(hidden)]
    pub fn shares_total<K>(
        _key: K,
    ) -> ::slotted_core::__private::diesel::expression::SqlLiteral<
        ::slotted_core::__private::diesel::sql_types::BigInt,
    > {
        ::slotted_core::__private::diesel::dsl::sql("0")
    }
}
