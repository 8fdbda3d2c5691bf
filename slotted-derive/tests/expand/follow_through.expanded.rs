::slotted_core::__private::diesel::table! {
    #[doc =
    "The slots of the `comments` counter of [`Community`]: 16 rows a record at most, whose `count`s add up to its total. Declared by `#[derive(SlottedCounter)]`."]
    communities_comments_slots(record_id, slot) { #[doc =
    "The `id` of the counted `Community`."] record_id -> Integer, #[doc =
    "The slot, 0 to 15."] slot -> SmallInt, #[doc = r" This slot's share of the count."]
    count -> BigInt, }
}
#[automatically_derived]
impl ::slotted_core::CounterTable for communities_comments_slots::table {
    type Key = i32;
    const SPEC: ::slotted_core::CounterSpec = ::slotted_core::CounterSpec {
        model: "Community",
        counter: "comments",
        table: "communities_comments_slots",
        slots: 16u16,
        strategy: ::slotted_core::SlotStrategy::Connection,
        key: ::slotted_core::__private::key_kinds::<Self>(),
        max_key_length: 255u16,
        storage: ::slotted_core::Storage::Table,
        bucket: ::core::option::Option::None,
        prefill: false,
        cache: ::core::option::Option::None,
        adopt: ::core::option::Option::None,
        follow: ::core::option::Option::Some({
            #[allow(unused_imports)]
            use comments as __slotted_followed_table;
            {
                #[allow(unused_imports)]
                use __slotted_followed_table as comments;
                ::slotted_core::follow::FollowSpec {
                    table: "comments",
                    key_columns: &[
                        {
                            let () = <<comments::post_id as ::slotted_core::__private::follow_check::ChildColumn<
                                comments::table,
                            >>::SqlType as ::slotted_core::__private::follow_check::ThroughKeyColumn<
                                <<posts::table as ::slotted_core::__private::diesel::Table>::PrimaryKey as ::slotted_core::__private::diesel::Expression>::SqlType,
                            >>::CHECKED;
                            <comments::post_id as ::slotted_core::__private::follow_check::ChildColumn<
                                comments::table,
                            >>::NAME
                        },
                    ],
                    record: ::core::option::Option::None,
                    sum: ::core::option::Option::None,
                    filter: &[
                        (
                            {
                                let () = <<comments::deleted as ::slotted_core::__private::follow_check::ChildColumn<
                                    comments::table,
                                >>::SqlType as ::slotted_core::__private::follow_check::FilterColumn>::CHECKED;
                                <comments::deleted as ::slotted_core::__private::follow_check::ChildColumn<
                                    comments::table,
                                >>::NAME
                            },
                            false,
                        ),
                    ],
                    through: ::core::option::Option::Some(::slotted_core::__private::follow_check::Through {
                        table: "posts",
                        key: <<posts::table as ::slotted_core::__private::diesel::Table>::PrimaryKey as ::slotted_core::__private::follow_check::ThroughKey<
                            posts::table,
                        >>::NAME,
                        column: {
                            let () = <<posts::community_id as ::slotted_core::__private::follow_check::ThroughColumn<
                                posts::table,
                            >>::SqlType as ::slotted_core::__private::follow_check::ThroughParentColumn<
                                <communities::id as ::slotted_core::__private::ParentColumn>::SqlType,
                            >>::CHECKED;
                            <posts::community_id as ::slotted_core::__private::follow_check::ThroughColumn<
                                posts::table,
                            >>::NAME
                        },
                    }),
                }
            }
        }),
    };
}
#[automatically_derived]
impl ::slotted_core::FollowingCounterTable for communities_comments_slots::table {}
#[automatically_derived]
#[allow(dead_code)]
impl Community {
    ///The `comments` counter of this record (16 slots).
    pub fn comments(
        &self,
    ) -> ::slotted_core::Counter<'_, communities_comments_slots::table> {
        ::slotted_core::Counter::new(&self.id)
    }
    ///The `comments` counter of the record with this key, without loading the record.
    pub fn comments_of(
        key: impl ::slotted_core::__private::IntoCounterKey<i32>,
    ) -> ::slotted_core::Counter<'static, communities_comments_slots::table> {
        ::slotted_core::Counter::of(
            ::slotted_core::__private::IntoCounterKey::into_counter_key(key),
        )
    }
    ///The exact `comments` total of the record whose key is `key`, as an SQL expression for `select`, `filter` and `order_by`: `key` is the key in the query, such as the model's key column (a tuple of columns for a composite key). A correlated subquery over the record's slot rows; see `slotted_core::query`.
    pub fn comments_total<
        __SlottedKeyExpression: ::slotted_core::query::TotalKey<
                communities_comments_slots::table,
            >,
    >(
        key: __SlottedKeyExpression,
    ) -> ::slotted_core::query::Total<
        communities_comments_slots::table,
        __SlottedKeyExpression::Expression,
    > {
        ::slotted_core::query::Total::new(::slotted_core::query::TotalKey::into_key(key))
    }
    ///The `comments` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys.
    pub fn comments_totals<C: ::slotted_core::CounterConnection>(
        keys: &[i32],
        conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<i32, i64>> {
        ::slotted_core::Counter::<communities_comments_slots::table>::totals(keys, conn)
    }
    ::slotted_core::__private::if_async! {
        #[doc =
        "The `comments` counts of many records by key, each key present (0 when it has no slot): one query per `slotted_core::TOTALS_CHUNK` keys."]
        #[doc = ""] #[doc =
        "On an async connection (diesel-async, bb8, deadpool); the future is `Send`."]
        pub fn comments_totals_async < 'a, C : ::slotted_core::AsyncCounterConnection >
        (keys : & 'a[i32], conn : & 'a mut C,) -> impl ::core::future::Future < Output =
        ::slotted_core::Result < ::slotted_core::__private::HashMap < i32, i64 >>, > +
        ::core::marker::Send + 'a { ::slotted_core::Counter:: <
        communities_comments_slots::table > ::totals_async(keys, conn) }
    }
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for Community {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[
        <communities_comments_slots::table as ::slotted_core::CounterTable>::SPEC,
    ];
}
