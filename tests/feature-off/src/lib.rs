//! See `tests/ui`.
