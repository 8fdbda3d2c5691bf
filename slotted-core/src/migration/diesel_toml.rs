//! A crate's `diesel.toml`, read and edited with `toml_edit` so the user's formatting and
//! comments stay: where its migrations are, and the print-schema filter that keeps slotted's
//! tables out of `diesel print-schema`. The layout is diesel_cli 2.3's (`src/config.rs`):
//! `[print_schema]` holds one configuration, and every table under it whose name is not one of
//! that configuration's keys is a named configuration, `[print_schema.NAME]`.

use std::path::PathBuf;

use toml_edit::{Array, DocumentMut, InlineTable, Item, Table, Value};

/// The keys of one print-schema configuration (diesel_cli 2.3's `PrintSchema`). A table under
/// `[print_schema]` with any other name is a named configuration.
const CONFIG_KEYS: &[&str] = &[
    "file",
    "with_docs",
    "allow_tables_to_appear_in_same_query_config",
    "filter",
    "column_sorting",
    "schema",
    "patch_file",
    "import_types",
    "generate_missing_sql_type_definitions",
    "except_custom_type_definitions",
    "custom_type_derives",
    "sqlite_integer_primary_key_is_bigint",
    "pg_domains_as_custom_types",
    "include_views",
    "experimental_infer_nullable_for_views",
    "custom_enum_derives",
    "generate_rust_enum_definitions",
];

/// Above a filter slotted adds.
const FILTER_COMMENT: &str =
    "# The tables slotted declares or owns: print-schema leaves them out.\n";

/// What `diesel setup` (diesel_cli 2.3) writes, with the print-schema filter of `patterns`.
pub(super) fn setup_file(patterns: &[String]) -> String {
    let filter = written_filter(patterns);
    format!(
        "# For documentation on how to configure this file,\n\
         # see https://diesel.rs/guides/configuring-diesel-cli\n\
         \n\
         [print_schema]\n\
         file = \"src/schema.rs\"\n\
         custom_type_derives = [\"diesel::query_builder::QueryId\", \"Clone\"]\n\
         {FILTER_COMMENT}filter = {filter}\n\
         \n\
         [migrations_directory]\n\
         dir = \"migrations\"\n"
    )
}

/// `filter = { except_tables = ["^a$", "^b$"] }`.
pub(super) fn filter_line(patterns: &[String]) -> String {
    format!("filter = {}", except_filter(patterns))
}

fn except_filter(patterns: &[String]) -> InlineTable {
    let mut filter = InlineTable::new();
    filter.insert("except_tables", Value::Array(patterns.iter().collect()));
    filter
}

/// The filter slotted writes into a file: one pattern a line when there are several, so a new
/// counter is a one-line change.
fn written_filter(patterns: &[String]) -> InlineTable {
    if patterns.len() < 2 {
        return except_filter(patterns);
    }
    let mut array: Array = patterns
        .iter()
        .map(|p| Value::from(p.as_str()).decorated("\n    ", ""))
        .collect();
    array.set_trailing("\n");
    array.set_trailing_comma(true);
    let mut filter = InlineTable::new();
    filter.insert("except_tables", Value::Array(array));
    filter
}

/// What the filter edit found in, or did to, one print-schema configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SectionEdit {
    /// `print_schema`, or `print_schema.NAME`.
    pub name: String,
    /// The patterns added to its `except_tables`.
    pub added: Vec<String>,
    /// It filters with `only_tables`, and was left alone.
    pub only_tables: bool,
    /// Its filter after the edit, as a line to write (`filter = { … }`, or `except_tables = […]`
    /// under a `[….filter]` table).
    pub line: String,
}

/// A parsed `diesel.toml`.
pub(super) struct DieselToml {
    doc: DocumentMut,
}

impl DieselToml {
    /// Parses `text`; the error says why it is not TOML.
    pub fn parse(text: &str) -> Result<Self, String> {
        let doc = text
            .parse::<DocumentMut>()
            .map_err(|e| format!("is not valid TOML: {}", e.to_string().trim_end()))?;
        Ok(Self { doc })
    }

    /// `[migrations_directory] dir`, as written (relative to the file's folder, or absolute).
    pub fn migrations_dir(&self) -> Result<Option<PathBuf>, String> {
        let Some(section) = self.doc.get("migrations_directory") else {
            return Ok(None);
        };
        let dir = section
            .as_table_like()
            .ok_or("`migrations_directory` is not a table")?
            .get("dir");
        match dir {
            None => Ok(None),
            Some(dir) => dir
                .as_str()
                .map(|dir| Some(PathBuf::from(dir)))
                .ok_or_else(|| "`[migrations_directory] dir` is not a string".to_owned()),
        }
    }

    /// Adds the `patterns` each print-schema configuration's `except_tables` lacks (creating the
    /// filter, or `[print_schema]`, when there is none), and says what it did per configuration.
    /// A configuration that filters with `only_tables` is left alone.
    pub fn add_patterns(&mut self, patterns: &[String]) -> Result<Vec<SectionEdit>, String> {
        let root = self.doc.as_table_mut();
        if !root.contains_key("print_schema") {
            let mut section = Table::new();
            if !root.is_empty() {
                section.decor_mut().set_prefix("\n");
            }
            root.insert("print_schema", Item::Table(section));
        }
        let print_schema = root
            .get_mut("print_schema")
            .filter(|item| item.is_table_like())
            .ok_or("`print_schema` is not a table")?;
        let named: Vec<String> = print_schema
            .as_table_like()
            .into_iter()
            .flat_map(|table| table.iter())
            .filter(|(key, item)| !CONFIG_KEYS.contains(key) && item.is_table_like())
            .map(|(key, _)| key.to_owned())
            .collect();
        let mut edits = Vec::new();
        // diesel_cli reads the keys of `[print_schema]` itself as the configuration `default`,
        // unless a named one takes that name.
        if !named.iter().any(|name| name == "default") {
            edits.push(edit_config("print_schema".into(), print_schema, patterns)?);
        }
        for name in named {
            let config = print_schema
                .get_mut(&name)
                .ok_or_else(|| format!("`print_schema.{name}` is not a table"))?;
            edits.push(edit_config(
                format!("print_schema.{name}"),
                config,
                patterns,
            )?);
        }
        Ok(edits)
    }
}

impl std::fmt::Display for DieselToml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.doc.fmt(f)
    }
}

fn edit_config(
    name: String,
    config: &mut Item,
    patterns: &[String],
) -> Result<SectionEdit, String> {
    let in_table = match config.as_table_mut() {
        // A key added to a table diesel only implied (`[print_schema.NAME]` with no
        // `[print_schema]`) needs the table's header.
        Some(table) => {
            table.set_implicit(false);
            true
        }
        None => false,
    };
    let config = config
        .as_table_like_mut()
        .ok_or_else(|| format!("`{name}` is not a table"))?;
    let Some(filter) = config.get_mut("filter") else {
        let mut value = Value::InlineTable(written_filter(patterns));
        value.decor_mut().set_prefix(" ");
        config.insert("filter", Item::Value(value));
        // A comment inside an inline table (`print_schema = { … }`) would end it.
        if let Some(mut key) = config.key_mut("filter").filter(|_| in_table) {
            key.leaf_decor_mut().set_prefix(FILTER_COMMENT);
        }
        return Ok(SectionEdit {
            name,
            added: patterns.to_vec(),
            only_tables: false,
            line: filter_line(patterns),
        });
    };
    let is_table = filter.is_table();
    let filter = filter
        .as_table_like_mut()
        .ok_or_else(|| format!("`[{name}] filter` is not a table"))?;
    if filter.contains_key("only_tables") {
        return Ok(SectionEdit {
            name,
            added: Vec::new(),
            only_tables: true,
            line: String::new(),
        });
    }
    let except = filter
        .entry("except_tables")
        .or_insert(Item::Value(Value::Array(Array::new())))
        .as_array_mut()
        .ok_or_else(|| format!("`[{name}] filter.except_tables` is not an array"))?;
    let mut all: Vec<String> = except
        .iter()
        .filter_map(|p| p.as_str().map(str::to_owned))
        .collect();
    let added: Vec<String> = patterns
        .iter()
        .filter(|p| !all.contains(p))
        .cloned()
        .collect();
    push_keeping_layout(except, &added);
    all.extend(added.iter().cloned());
    let line = if is_table {
        format!("except_tables = {}", all.iter().collect::<Array>())
    } else {
        filter_line(&all)
    };
    Ok(SectionEdit {
        name,
        added,
        only_tables: false,
        line,
    })
}

/// Pushes `values` onto `array`: one a line, indented as the last, when the array is written
/// one element a line; a comment after the last element stays after it.
fn push_keeping_layout(array: &mut Array, values: &[String]) {
    let multiline = array.trailing().as_str().is_some_and(|t| t.contains('\n'))
        || array.iter().any(|v| {
            let decor = v.decor();
            [decor.prefix(), decor.suffix()]
                .into_iter()
                .flatten()
                .any(|raw| raw.as_str().is_some_and(|s| s.contains('\n')))
        });
    if !multiline {
        for value in values {
            array.push(value.as_str());
        }
        return;
    }
    let raw =
        |raw: Option<&toml_edit::RawString>| raw.and_then(|r| r.as_str()).unwrap_or("").to_owned();
    let last = array.len().checked_sub(1);
    let indent = last
        .and_then(|i| array.get(i))
        .map(|v| raw(v.decor().prefix()))
        .and_then(|prefix| {
            prefix
                .rsplit_once('\n')
                .map(|(_, indent)| indent.to_owned())
        })
        .unwrap_or_else(|| "    ".to_owned());
    // A comment after the last element (`"^b$" # mine` with no comma) moves to after the comma
    // the new element brings, where toml_edit keeps such comments.
    let mut carried = String::new();
    if let Some(value) = last.and_then(|i| array.get_mut(i)) {
        carried = raw(value.decor().suffix());
        value.decor_mut().set_suffix("");
    }
    let carried = carried.trim_end_matches([' ', '\t', '\n', '\r']);
    for (i, value) in values.iter().enumerate() {
        let prefix = if i == 0 {
            format!("{carried}\n{indent}")
        } else {
            format!("\n{indent}")
        };
        array.push_formatted(Value::from(value.as_str()).decorated(prefix, ""));
    }
    if !array.trailing().as_str().is_some_and(|t| t.contains('\n')) {
        array.set_trailing("\n");
        array.set_trailing_comma(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The filter slotted writes for [`patterns`], one a line.
    const MULTI: &str = "filter = { except_tables = [\n    \"^posts_likes_slots$\",\n    \"^slotted_columns$\",\n] }";

    fn patterns() -> Vec<String> {
        vec!["^posts_likes_slots$".into(), "^slotted_columns$".into()]
    }

    fn edit(text: &str) -> (String, Vec<SectionEdit>) {
        let mut toml = DieselToml::parse(text).unwrap();
        let edits = toml.add_patterns(&patterns()).unwrap();
        (toml.to_string(), edits)
    }

    #[test]
    fn an_existing_filter_keeps_its_patterns_and_comments() {
        let text = "# my config\n\
                    [print_schema]\n\
                    file = \"src/schema.rs\" # generated\n\
                    filter = { except_tables = [\"^spatial_ref_sys$\"] } # postgis\n\
                    \n\
                    [migrations_directory]\n\
                    dir = \"migrations\"\n";
        let (edited, edits) = edit(text);
        assert_eq!(
            edited,
            "# my config\n\
             [print_schema]\n\
             file = \"src/schema.rs\" # generated\n\
             filter = { except_tables = [\"^spatial_ref_sys$\", \"^posts_likes_slots$\", \"^slotted_columns$\"] } # postgis\n\
             \n\
             [migrations_directory]\n\
             dir = \"migrations\"\n"
        );
        assert_eq!(edits.len(), 1);
        assert_eq!(edits[0].added, patterns());
        assert_eq!(
            edits[0].line,
            "filter = { except_tables = [\"^spatial_ref_sys$\", \"^posts_likes_slots$\", \"^slotted_columns$\"] }"
        );
        // A second edit adds nothing.
        let (again, edits) = edit(&edited);
        assert_eq!(again, edited);
        assert!(edits[0].added.is_empty());
    }

    #[test]
    fn a_filter_one_pattern_a_line_gets_one_a_line() {
        let text = "[print_schema]\n\
                    filter = { except_tables = [\n    \"^a$\", # mine\n    \"^posts_likes_slots$\" # theirs\n] }\n";
        let (edited, edits) = edit(text);
        assert_eq!(
            edited,
            "[print_schema]\n\
             filter = { except_tables = [\n    \"^a$\", # mine\n    \"^posts_likes_slots$\", # theirs\n    \"^slotted_columns$\",\n] }\n"
        );
        assert_eq!(edits[0].added, vec!["^slotted_columns$".to_owned()]);
        let text = "[print_schema]\nfilter = { except_tables = [\n    \"^a$\",\n] }\n";
        assert_eq!(
            edit(text).0,
            "[print_schema]\nfilter = { except_tables = [\n    \"^a$\",\n    \"^posts_likes_slots$\",\n    \"^slotted_columns$\",\n] }\n"
        );
    }

    #[test]
    fn a_filter_table_is_edited_in_place() {
        let text = "[print_schema]\nfile = \"src/schema.rs\"\n\n[print_schema.filter]\nexcept_tables = [\"x\"]\n";
        let (edited, edits) = edit(text);
        assert_eq!(
            edited,
            "[print_schema]\nfile = \"src/schema.rs\"\n\n[print_schema.filter]\nexcept_tables = [\"x\", \"^posts_likes_slots$\", \"^slotted_columns$\"]\n"
        );
        assert_eq!(edits.len(), 1, "`filter` is not a named configuration");
        assert_eq!(
            edits[0].line,
            "except_tables = [\"x\", \"^posts_likes_slots$\", \"^slotted_columns$\"]"
        );
    }

    #[test]
    fn no_filter_gets_one() {
        let text =
            "[print_schema]\nfile = \"src/schema.rs\"\n\n[migrations_directory]\ndir = \"m\"\n";
        let (edited, edits) = edit(text);
        assert_eq!(
            edited,
            format!(
                "[print_schema]\nfile = \"src/schema.rs\"\n{FILTER_COMMENT}{MULTI}\n\n[migrations_directory]\ndir = \"m\"\n"
            )
        );
        assert_eq!(edits[0].added, patterns());
        let toml = DieselToml::parse(&edited).unwrap();
        assert_eq!(toml.migrations_dir().unwrap(), Some(PathBuf::from("m")));
    }

    #[test]
    fn no_print_schema_gets_one() {
        let text = "[migrations_directory]\ndir = \"migrations\"\n";
        let (edited, edits) = edit(text);
        assert_eq!(
            edited,
            format!(
                "[migrations_directory]\ndir = \"migrations\"\n\n[print_schema]\n{FILTER_COMMENT}{MULTI}\n"
            )
        );
        assert_eq!(edits.len(), 1);
        assert_eq!(
            edit("").0,
            format!("[print_schema]\n{FILTER_COMMENT}{MULTI}\n")
        );
    }

    #[test]
    fn one_pattern_stays_on_the_filter_line() {
        let mut toml = DieselToml::parse("").unwrap();
        toml.add_patterns(&patterns()[..1]).unwrap();
        assert_eq!(
            toml.to_string(),
            format!("[print_schema]\n{FILTER_COMMENT}filter = {{ except_tables = [\"^posts_likes_slots$\"] }}\n")
        );
    }

    #[test]
    fn named_configurations_each_get_the_patterns() {
        let text = "[print_schema]\n\
                    file = \"src/schema.rs\"\n\
                    \n\
                    [print_schema.user1]\n\
                    file = \"src/schema1.rs\"\n\
                    schema = \"user1\"\n\
                    filter = { except_tables = [\"^x$\"] }\n\
                    \n\
                    [print_schema.user2]\n\
                    file = \"src/schema2.rs\"\n\
                    filter = { only_tables = [\"^users$\"] }\n";
        let (edited, edits) = edit(text);
        let names: Vec<&str> = edits.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            ["print_schema", "print_schema.user1", "print_schema.user2"]
        );
        assert_eq!(edits[0].added, patterns());
        assert_eq!(edits[1].added, patterns());
        assert!(edits[2].only_tables && edits[2].added.is_empty());
        assert!(
            edited.contains("filter = { only_tables = [\"^users$\"] }\n"),
            "{edited}"
        );
        assert!(
            edited.contains("filter = { except_tables = [\"^x$\", \"^posts_likes_slots$\", \"^slotted_columns$\"] }\n"),
            "{edited}"
        );
        // `[print_schema]` only implied by its named configurations: it gets its header.
        let text = "[print_schema.user1]\nfile = \"src/schema1.rs\"\n";
        let (edited, edits) = edit(text);
        assert_eq!(edits.len(), 2);
        let reparsed: DocumentMut = edited.parse().unwrap();
        assert!(
            reparsed["print_schema"]["filter"].is_inline_table(),
            "{edited}"
        );
        assert!(
            reparsed["print_schema"]["user1"]["filter"].is_inline_table(),
            "{edited}"
        );
        // A named `default` replaces the keys of `[print_schema]`, which are not edited then.
        let text =
            "[print_schema.default]\nfile = \"a.rs\"\n[print_schema.other]\nfile = \"b.rs\"\n";
        let names: Vec<String> = edit(text).1.into_iter().map(|e| e.name).collect();
        assert_eq!(names, ["print_schema.default", "print_schema.other"]);
    }

    #[test]
    fn only_tables_is_left_alone() {
        let text = "[print_schema]\nfilter = { only_tables = [\"^posts$\"] }\n";
        let (edited, edits) = edit(text);
        assert_eq!(edited, text);
        assert!(edits[0].only_tables);
    }

    #[test]
    fn a_missing_file_is_written_as_diesel_setup_writes_it() {
        let text = setup_file(&patterns());
        let toml = DieselToml::parse(&text).unwrap();
        assert_eq!(
            toml.migrations_dir().unwrap(),
            Some(PathBuf::from("migrations"))
        );
        let (edited, edits) = edit(&text);
        assert_eq!(edited, text, "it holds the filter already");
        assert!(edits[0].added.is_empty());
        assert!(text.contains("\nfile = \"src/schema.rs\"\n"));
    }

    #[test]
    fn what_is_not_diesel_toml_is_an_error() {
        assert!(DieselToml::parse("[print_schema").is_err());
        let mut toml = DieselToml::parse("print_schema = 3\n").unwrap();
        assert!(toml.add_patterns(&patterns()).is_err());
        let mut toml = DieselToml::parse("[print_schema]\nfilter = 3\n").unwrap();
        assert!(toml.add_patterns(&patterns()).is_err());
        let toml = DieselToml::parse("[migrations_directory]\ndir = 3\n").unwrap();
        assert!(toml.migrations_dir().is_err());
        assert_eq!(
            DieselToml::parse("").unwrap().migrations_dir().unwrap(),
            None
        );
    }
}
