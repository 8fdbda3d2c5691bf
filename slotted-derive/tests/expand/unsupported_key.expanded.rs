::core::compile_error! {
    "unsupported primary key type for a slotted counter\n\nhelp: slotted counters are keyed by `i16`, `i32`, `i64`, `u32`, `u64` (MySQL's UNSIGNED), `String` (TEXT/VARCHAR) or `uuid::Uuid` (PostgreSQL, slotted-core's `uuid` feature); a newtype key is not supported yet: key the field by its inner type"
}
#[automatically_derived]
impl ::slotted_core::SlottedModel for Post {
    const COUNTERS: &'static [::slotted_core::CounterSpec] = &[];
}
#[automatically_derived]
impl Post {
    #[doc(hidden)]
    fn likes(
        &self,
    ) -> ::slotted_core::Counter<'static, ::slotted_core::__private::InvalidCounter> {
        ::slotted_core::Counter::of(0)
    }
    #[doc(hidden)]
    fn likes_of<K>(
        _key: K,
    ) -> ::slotted_core::Counter<'static, ::slotted_core::__private::InvalidCounter> {
        ::slotted_core::Counter::of(0)
    }
    #[doc(hidden)]
    fn likes_totals<K, C>(
        _keys: &[K],
        _conn: &mut C,
    ) -> ::slotted_core::Result<::slotted_core::__private::HashMap<K, i64>> {
        ::core::result::Result::Ok(::slotted_core::__private::HashMap::new())
    }
}
