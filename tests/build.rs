//! Turns every ```rust block of README.md and docs/guide/*.md into a function of
//! `$OUT_DIR/doc_snippets.rs`, which `tests/doc_snippets.rs` compiles: no snippet in the docs can
//! rot. A block is compiled, not run, inside an `async fn` that returns
//! `Result<(), Box<dyn Error + Send + Sync>>`, with the names of `tests/doc_snippets.rs`'s
//! `context` module in scope (the `posts` table, `Post`, `Video`), and the values `conn`
//! (`SqliteConnection`), `post`, `ids` and some `SystemTime`s (`yesterday`, `monday`, …): a snippet shows only
//! the lines a reader needs, and may declare its own items, which shadow the context's. As in
//! rustdoc, a line `# code` is compiled but meant to be hidden, and ```rust,ignore or
//! ```rust,compile_fail blocks are skipped. A block whose first line is a comment that starts
//! `// In a module` is compiled as a module's items instead (a newtype-keyed model, whose counter
//! table imports the key type's alias from its module, cannot be declared in a function).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf();
    let mut files = vec![root.join("README.md")];
    let guide = root.join("docs/guide");
    println!("cargo:rerun-if-changed={}", guide.display());
    if let Ok(entries) = std::fs::read_dir(&guide) {
        let mut guide_files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        guide_files.sort();
        files.extend(guide_files);
    }
    let mut out = String::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let name = file.strip_prefix(&root).unwrap_or(file);
        for (line, code) in rust_blocks(&text) {
            write_snippet(&mut out, name, line, &code);
        }
    }
    let dest = Path::new(&std::env::var("OUT_DIR").expect("cargo sets it")).join("doc_snippets.rs");
    std::fs::write(dest, out).expect("write doc_snippets.rs");
}

/// The ```rust blocks of a Markdown text: the line of each opening fence, and its code.
fn rust_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, bool, String)> = None; // (line, indent, compiled, code)
    for (i, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    let mut words = info.split(',').map(str::trim);
                    let lang = words.next().unwrap_or("");
                    let skipped = words.any(|w| w == "ignore" || w == "compile_fail");
                    open = Some((i + 1, indent, lang == "rust" && !skipped, String::new()));
                }
            }
            Some((line, fence_indent, compiled, code)) => {
                if trimmed.starts_with("```") {
                    if *compiled {
                        blocks.push((*line, std::mem::take(code)));
                    }
                    open = None;
                } else {
                    let body = raw.get(*fence_indent..).unwrap_or(trimmed);
                    let body = match body.strip_prefix("# ") {
                        Some(hidden) => hidden,
                        None if body == "#" => "",
                        None => body,
                    };
                    code.push_str(body);
                    code.push('\n');
                }
            }
        }
    }
    blocks
}

fn write_snippet(out: &mut String, file: &Path, line: usize, code: &str) {
    let ident: String = format!("{}_{line}", file.display())
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    // A snippet that says it is module code (`// In a module …`) is compiled as the items of a
    // module: a model keyed by a newtype must be declared there, not in a function's body.
    if code.trim_start().starts_with("// In a module") {
        let _ = writeln!(
            out,
            "/// {file}, the block at line {line}.\n\
             #[allow(unused, unreachable_code, unnameable_test_items, clippy::all, missing_docs)]\n\
             mod {ident} {{\n\
             use super::context::*;\n\
             {code}\n\
             }}\n",
            file = file.display(),
        );
        return;
    }
    let _ = writeln!(
        out,
        "/// {file}, the block at line {line}.\n\
         #[allow(unused, unreachable_code, unnameable_test_items, clippy::all, missing_docs)]\n\
         mod {ident} {{\n\
         use super::context::*;\n\
         pub async fn snippet() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {{\n\
         let mut conn: SqliteConnection = unimplemented!();\n\
         let post: Post = unimplemented!();\n\
         let ids: Vec<i32> = unimplemented!();\n\
         let (yesterday, some_day, monday, saturday, ninety_days_ago): (std::time::SystemTime, std::time::SystemTime, std::time::SystemTime, std::time::SystemTime, std::time::SystemTime) = unimplemented!();\n\
         let _ = {{\n{code}}};\n\
         Ok(())\n\
         }}\n\
         }}\n",
        file = file.display(),
    );
}
