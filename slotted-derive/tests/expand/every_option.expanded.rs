slotted::__private::diesel::table! {
    #[doc =
    "The slots of the `likes` counter of [`Video`]: 16 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    videos_likes_slots(record_id, slot) { #[doc = "The `id` of the counted `Video`."]
    record_id -> BigInt, #[doc = "The slot, 0 to 15."] slot -> SmallInt, #[doc =
    r" This slot's share of the count."] count -> BigInt, }
}
#[automatically_derived]
impl slotted::CounterTable for videos_likes_slots::table {
    type Key = i64;
    const SPEC: slotted::CounterSpec = slotted::CounterSpec {
        model: "Video",
        counter: "likes",
        table: "videos_likes_slots",
        slots: 16u16,
        strategy: slotted::SlotStrategy::Connection,
        key: slotted::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: slotted::Storage::Table,
        bucket: ::core::option::Option::None,
        prefill: false,
        cache: {
            #[allow(unused_imports)]
            use __slotted_missing_table_of_Video as videos;
            {
                #[allow(unused_imports)]
                use self::*;
                ::core::option::Option::Some(slotted::CacheSpec {
                    table: "videos",
                    key_columns: &[
                        <videos::video_id as slotted::__private::ParentColumn>::NAME,
                    ],
                    column: <videos::likes_count as slotted::__private::ParentColumn>::NAME,
                    bits: <<videos::likes_count as slotted::__private::ParentColumn>::SqlType as slotted::__private::CacheColumnType>::BITS,
                })
            }
        },
        adopt: {
            #[allow(unused_imports)]
            use __slotted_missing_table_of_Video as videos;
            {
                #[allow(unused_imports)]
                use self::*;
                ::core::option::Option::Some(slotted::CacheSpec {
                    table: "videos",
                    key_columns: &[
                        <videos::video_id as slotted::__private::ParentColumn>::NAME,
                    ],
                    column: <videos::likes_count as slotted::__private::ParentColumn>::NAME,
                    bits: <<videos::likes_count as slotted::__private::ParentColumn>::SqlType as slotted::__private::CacheColumnType>::BITS,
                })
            }
        },
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
impl slotted::CachedCounterTable for videos_likes_slots::table {}
#[automatically_derived]
impl slotted::AdoptingCounterTable for videos_likes_slots::table {}
#[automatically_derived]
#[allow(dead_code)]
impl Video {
    ///The `likes` counter of this record (16 slots).
    pub fn likes(&self) -> slotted::Counter<'_, videos_likes_slots::table> {
        slotted::Counter::new(&self.id)
    }
    ///The `likes` counter of the record with this key, without loading the record.
    pub fn likes_of(
        key: impl slotted::__private::IntoCounterKey<i64>,
    ) -> slotted::Counter<'static, videos_likes_slots::table> {
        slotted::Counter::of(slotted::__private::IntoCounterKey::into_counter_key(key))
    }
    ///The exact `likes` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn likes_total<
        __SlottedKeyExpression: slotted::query::TotalKey<videos_likes_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> slotted::query::Total<
        videos_likes_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        slotted::query::Total::new(slotted::query::TotalKey::into_key(key))
    }
    ///The `likes` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn likes_totals<C: slotted::CounterConnection>(
        keys: &[i64],
        conn: &mut C,
    ) -> slotted::Result<slotted::__private::HashMap<i64, i64>> {
        slotted::Counter::<videos_likes_slots::table>::totals(keys, conn)
    }
    slotted::__private::if_async! {
        #[doc =
        "The `likes` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn likes_totals_async < 'a, C : slotted::AsyncCounterConnection > (keys : &
        'a[i64], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        slotted::Result < slotted::__private::HashMap < i64, i64 >>, > +
        ::core::marker::Send + 'a { slotted::Counter:: < videos_likes_slots::table >
        ::totals_async(keys, conn) }
    }
}
slotted::__private::diesel::table! {
    #[doc =
    "The slots of the `views` counter of [`Video`]: 64 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    video_view_slots(record_id, bucket, slot) { #[doc =
    "The `id` of the counted `Video`."] record_id -> BigInt, #[doc =
    r" The time bucket: the Unix time, in seconds, at which it starts (UTC)."] bucket ->
    BigInt, #[doc = "The slot, 0 to 63."] slot -> SmallInt, #[doc =
    r" This slot's share of the count."] count -> BigInt, }
}
#[automatically_derived]
impl slotted::CounterTable for video_view_slots::table {
    type Key = i64;
    const SPEC: slotted::CounterSpec = slotted::CounterSpec {
        model: "Video",
        counter: "views",
        table: "video_view_slots",
        slots: 64u16,
        strategy: slotted::SlotStrategy::Connection,
        key: slotted::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: slotted::Storage::Table,
        bucket: ::core::option::Option::Some(slotted::BucketWidth::Day),
        prefill: false,
        cache: ::core::option::Option::None,
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
impl slotted::BucketedCounterTable for video_view_slots::table {}
#[automatically_derived]
#[allow(dead_code)]
impl Video {
    ///The `views` counter of this record (64 slots).
    pub fn views(&self) -> slotted::Counter<'_, video_view_slots::table> {
        slotted::Counter::new(&self.id)
    }
    ///The `views` counter of the record with this key, without loading the record.
    pub fn views_of(
        key: impl slotted::__private::IntoCounterKey<i64>,
    ) -> slotted::Counter<'static, video_view_slots::table> {
        slotted::Counter::of(slotted::__private::IntoCounterKey::into_counter_key(key))
    }
    ///The exact `views` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn views_total<
        __SlottedKeyExpression: slotted::query::TotalKey<video_view_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> slotted::query::Total<
        video_view_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        slotted::query::Total::new(slotted::query::TotalKey::into_key(key))
    }
    ///The `views` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn views_totals<C: slotted::CounterConnection>(
        keys: &[i64],
        conn: &mut C,
    ) -> slotted::Result<slotted::__private::HashMap<i64, i64>> {
        slotted::Counter::<video_view_slots::table>::totals(keys, conn)
    }
    slotted::__private::if_async! {
        #[doc =
        "The `views` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn views_totals_async < 'a, C : slotted::AsyncCounterConnection > (keys : &
        'a[i64], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        slotted::Result < slotted::__private::HashMap < i64, i64 >>, > +
        ::core::marker::Send + 'a { slotted::Counter:: < video_view_slots::table >
        ::totals_async(keys, conn) }
    }
}
slotted::__private::diesel::table! {
    #[doc =
    "The slots of the `shares` counter of [`Video`]: 8 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    videos_shares_slots(record_id, slot) { #[doc = "The `id` of the counted `Video`."]
    record_id -> BigInt, #[doc = "The slot, 0 to 7."] slot -> SmallInt, #[doc =
    r" This slot's share of the count."] count -> BigInt, }
}
#[automatically_derived]
impl slotted::CounterTable for videos_shares_slots::table {
    type Key = i64;
    const SPEC: slotted::CounterSpec = slotted::CounterSpec {
        model: "Video",
        counter: "shares",
        table: "videos_shares_slots",
        slots: 8u16,
        strategy: slotted::SlotStrategy::Connection,
        key: slotted::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: slotted::Storage::Table,
        bucket: ::core::option::Option::None,
        prefill: true,
        cache: ::core::option::Option::None,
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::None,
    };
}
#[automatically_derived]
impl slotted::PrefilledCounterTable for videos_shares_slots::table {}
#[automatically_derived]
#[allow(dead_code)]
impl Video {
    ///The `shares` counter of this record (8 slots).
    pub fn shares(&self) -> slotted::Counter<'_, videos_shares_slots::table> {
        slotted::Counter::new(&self.id)
    }
    ///The `shares` counter of the record with this key, without loading the record.
    pub fn shares_of(
        key: impl slotted::__private::IntoCounterKey<i64>,
    ) -> slotted::Counter<'static, videos_shares_slots::table> {
        slotted::Counter::of(slotted::__private::IntoCounterKey::into_counter_key(key))
    }
    ///The exact `shares` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn shares_total<
        __SlottedKeyExpression: slotted::query::TotalKey<videos_shares_slots::table>,
    >(
        key: __SlottedKeyExpression,
    ) -> slotted::query::Total<
        videos_shares_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        slotted::query::Total::new(slotted::query::TotalKey::into_key(key))
    }
    ///The `shares` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn shares_totals<C: slotted::CounterConnection>(
        keys: &[i64],
        conn: &mut C,
    ) -> slotted::Result<slotted::__private::HashMap<i64, i64>> {
        slotted::Counter::<videos_shares_slots::table>::totals(keys, conn)
    }
    slotted::__private::if_async! {
        #[doc =
        "The `shares` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn shares_totals_async < 'a, C : slotted::AsyncCounterConnection > (keys : &
        'a[i64], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        slotted::Result < slotted::__private::HashMap < i64, i64 >>, > +
        ::core::marker::Send + 'a { slotted::Counter:: < videos_shares_slots::table >
        ::totals_async(keys, conn) }
    }
}
///The `saves` counter of [`Video`], kept in the shared `slotted_counters` table. Declared by `#[derive(SlottedCounter)]`.
#[allow(non_camel_case_types)]
pub mod videos_saves {
    /// The counter's type: `CounterTable` and the maintenance calls are on it.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
    pub struct counter;
}
#[automatically_derived]
impl slotted::CounterTable for videos_saves::counter {
    type Key = i64;
    const SPEC: slotted::CounterSpec = slotted::CounterSpec {
        model: "Video",
        counter: "saves",
        table: slotted::SHARED_TABLE,
        slots: 2u16,
        strategy: slotted::SlotStrategy::Connection,
        key: slotted::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: slotted::Storage::Shared {
            record_type: "videos.saves",
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
impl Video {
    ///The `saves` counter of this record (2 slots).
    pub fn saves(&self) -> slotted::Counter<'_, videos_saves::counter> {
        slotted::Counter::new(&self.id)
    }
    ///The `saves` counter of the record with this key, without loading the record.
    pub fn saves_of(
        key: impl slotted::__private::IntoCounterKey<i64>,
    ) -> slotted::Counter<'static, videos_saves::counter> {
        slotted::Counter::of(slotted::__private::IntoCounterKey::into_counter_key(key))
    }
    ///The exact `saves` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn saves_total<
        __SlottedKeyExpression: slotted::query::TotalKey<videos_saves::counter>,
    >(
        key: __SlottedKeyExpression,
    ) -> slotted::query::Total<
        videos_saves::counter,
        __SlottedKeyExpression::Expression,
    > {
        slotted::query::Total::new(slotted::query::TotalKey::into_key(key))
    }
    ///The `saves` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn saves_totals<C: slotted::CounterConnection>(
        keys: &[i64],
        conn: &mut C,
    ) -> slotted::Result<slotted::__private::HashMap<i64, i64>> {
        slotted::Counter::<videos_saves::counter>::totals(keys, conn)
    }
    slotted::__private::if_async! {
        #[doc =
        "The `saves` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn saves_totals_async < 'a, C : slotted::AsyncCounterConnection > (keys : &
        'a[i64], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        slotted::Result < slotted::__private::HashMap < i64, i64 >>, > +
        ::core::marker::Send + 'a { slotted::Counter:: < videos_saves::counter >
        ::totals_async(keys, conn) }
    }
}
#[doc(hidden)]
#[allow(non_camel_case_types, non_snake_case, dead_code, unused_imports)]
mod __slotted_missing_table_of_Video {
    use super::*;
    pub type table = slotted::__private::MissingTable;
    pub type video_id = slotted::__private::MissingColumn;
    pub type likes_count = slotted::__private::MissingColumn;
}
const _: () = {
    #[allow(unused_imports)]
    use __slotted_missing_table_of_Video as videos;
    {
        #[allow(unused_imports)]
        use self::*;
        if <videos::table as slotted::__private::ParentTable>::MISSING {
            ::core::panic!(
                "no table `videos` is in scope for `Video`, whose `cache = likes_count` is a column of its table: `Video` has no `#[diesel(table_name = …)]`, and `videos` is Diesel's default for it (the struct's name in snake_case, plus `s`)\n\nhelp: name the model's table: `#[diesel(table_name = …)]`, a name or a path such as `crate::schema::videos`; or bring its `table!` into scope (a model declared inside a function names its table even when it is the default)"
            )
        }
    }
};
#[automatically_derived]
impl slotted::SlottedModel for Video {
    const COUNTERS: &'static [slotted::CounterSpec] = &[
        <videos_likes_slots::table as slotted::CounterTable>::SPEC,
        <video_view_slots::table as slotted::CounterTable>::SPEC,
        <videos_shares_slots::table as slotted::CounterTable>::SPEC,
        <videos_saves::counter as slotted::CounterTable>::SPEC,
    ];
}
