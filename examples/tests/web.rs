#![cfg(feature = "async")]
