//! Expansion snapshots: every input in `tests/expand/*.rs` is expanded, pretty-printed and
//! compared with the `.expanded.rs` file beside it, so every change to the generated code shows
//! in review. `SLOTTED_BLESS=1 cargo test -p slotted-derive` rewrites them.

use std::fs;
use std::path::Path;

#[test]
fn expansions_match_their_snapshots() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/expand");
    let bless = std::env::var_os("SLOTTED_BLESS").is_some();
    let mut inputs: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension().is_some_and(|e| e == "rs")
                && !path.to_string_lossy().ends_with(".expanded.rs")
        })
        .collect();
    inputs.sort();
    assert!(inputs.len() >= 3, "inputs in {}", dir.display());
    let mut stale = Vec::new();
    for input in inputs {
        let source = fs::read_to_string(&input).unwrap();
        let expanded = crate::derive_inner(source.parse().unwrap());
        let file = syn::parse2::<syn::File>(expanded)
            .unwrap_or_else(|e| panic!("{}: not Rust: {e}", input.display()));
        let pretty = prettyplease::unparse(&file);
        let snapshot = input.with_extension("expanded.rs");
        if bless {
            fs::write(&snapshot, &pretty).unwrap();
        } else if fs::read_to_string(&snapshot).ok().as_deref() != Some(pretty.as_str()) {
            stale.push(snapshot.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "expansions changed; review and rerun with SLOTTED_BLESS=1: {stale:?}"
    );
}
