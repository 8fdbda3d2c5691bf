//! Every misuse of the derive and of the generated API is a compile error that points at the
//! mistake and says how to fix it: one file per failure in `tests/ui/`, its exact compiler output
//! beside it. `TRYBUILD=overwrite cargo test -p slotted-tests --all-features --test ui` rewrites
//! the `.stderr` files; review them.
//!
//! The output is pinned to the build `.ci/run` makes, every feature on: rustc's "the trait is
//! implemented for …" hints list the implementations it can see, and the `async` feature
//! (diesel-async) adds some. In another feature set the suite is ignored, and says why.

#[test]
#[cfg_attr(
    not(all(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "async",
        feature = "tracing"
    )),
    ignore = "the UI outputs are those of --all-features (what .ci/run builds)"
)]
fn ui() {
    trybuild::TestCases::new().compile_fail("ui/*.rs");
}
