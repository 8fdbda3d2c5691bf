//! The files of the diesel CLI flow: what a call finds (a `Plan`), what it writes, and what it
//! reports ([`DieselCliFiles`]).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::diesel_toml::{self, DieselToml, SectionEdit};
use super::{CounterMigrations, Table};
use crate::dialect::Dialect;
use crate::error::{DieselCliChange, Error, Result};

/// [`Error::MigrationFolder`] for `path`.
pub(super) fn folder_error(path: &Path, reason: &str, source: Option<io::Error>) -> Error {
    Error::MigrationFolder {
        path: path.to_owned(),
        reason: reason.to_owned(),
        source,
    }
}

/// What a table's migration folder holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FolderState {
    /// Holds exactly the SQL slotted writes.
    Same,
    /// Not there.
    Missing,
    /// Holds other SQL, or is not a folder of two files.
    Differs,
}

/// One table's migration folder: where it goes, its SQL, and what is there now.
pub(super) struct PlannedFolder {
    pub(super) path: PathBuf,
    up: String,
    down: String,
    pub(super) state: FolderState,
}

impl PlannedFolder {
    pub(super) fn write(self) -> Result<MigrationFolder> {
        let written = self.state == FolderState::Missing;
        if written {
            write_folder(&self.path, &self.up, &self.down)
                .map_err(|e| folder_error(&self.path, "cannot be written", Some(e)))?;
        }
        Ok(MigrationFolder {
            path: self.path,
            written,
        })
    }
}

pub(super) fn plan_folders(tables: &[Table], dir: &Path, dialect: Dialect) -> Vec<PlannedFolder> {
    tables
        .iter()
        .map(|table| {
            let path = dir.join(table.folder());
            let (up, down) = (table.up(dialect), table.down(dialect));
            let existing = (
                fs::read_to_string(path.join("up.sql")),
                fs::read_to_string(path.join("down.sql")),
            );
            let state = match existing {
                (Ok(u), Ok(d)) if u == up && d == down => FolderState::Same,
                _ if path.exists() => FolderState::Differs,
                _ => FolderState::Missing,
            };
            PlannedFolder {
                path,
                up,
                down,
                state,
            }
        })
        .collect()
}

/// Everything a call found, and what writing would change.
pub(super) struct Plan {
    migrations_dir: PathBuf,
    dir_missing: bool,
    folders: Vec<PlannedFolder>,
    toml_path: PathBuf,
    /// The new text of `diesel.toml`, when it changes.
    toml_text: Option<String>,
    toml_missing: bool,
    sections: Vec<SectionEdit>,
    /// Each table's pattern, and what the table is.
    descriptions: Vec<(String, String)>,
}

impl Plan {
    /// What writing `migrations`' diesel CLI files into `crate_dir` would do, read from the files.
    pub(super) fn read(
        migrations: &CounterMigrations,
        crate_dir: &Path,
        dialect: Dialect,
    ) -> Result<Plan> {
        let tables = migrations.tables();
        let patterns = migrations.patterns();
        let toml_path = crate_dir.join("diesel.toml");
        let toml_error = |reason: String, source| Error::DieselToml {
            path: toml_path.clone(),
            reason,
            source,
        };
        let (toml_text, toml_missing, sections, dir) = match fs::read_to_string(&toml_path) {
            Ok(text) => {
                let mut toml = DieselToml::parse(&text).map_err(|r| toml_error(r, None))?;
                let dir = toml.migrations_dir().map_err(|r| toml_error(r, None))?;
                let sections = if patterns.is_empty() {
                    Vec::new()
                } else {
                    toml.add_patterns(&patterns)
                        .map_err(|r| toml_error(r, None))?
                };
                let edited = toml.to_string();
                (Some(edited).filter(|e| *e != text), false, sections, dir)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && !patterns.is_empty() => {
                let section = SectionEdit {
                    name: "print_schema".into(),
                    added: patterns.clone(),
                    only_tables: false,
                    line: diesel_toml::filter_line(&patterns),
                };
                let text = diesel_toml::setup_file(&patterns);
                (Some(text), true, vec![section], None)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (None, false, Vec::new(), None),
            Err(e) => return Err(toml_error("cannot be read".into(), Some(e))),
        };
        // Relative to the file's folder, or absolute (`join` keeps an absolute path as it is).
        let migrations_dir = crate_dir.join(dir.unwrap_or_else(|| PathBuf::from("migrations")));
        let dir_missing = match fs::metadata(&migrations_dir) {
            Ok(meta) if meta.is_dir() => false,
            Ok(_) => return Err(folder_error(&migrations_dir, "is not a directory", None)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => !tables.is_empty(),
            Err(e) => return Err(folder_error(&migrations_dir, "cannot be read", Some(e))),
        };
        let folders = plan_folders(&tables, &migrations_dir, dialect);
        let descriptions = tables
            .iter()
            .filter_map(|table| Some((table.pattern()?, table.describe())))
            .collect();
        Ok(Plan {
            migrations_dir,
            dir_missing,
            folders,
            toml_path,
            toml_text,
            toml_missing,
            sections,
            descriptions,
        })
    }

    /// Whether a folder holds other SQL, which stops every write.
    pub(super) fn conflicts(&self) -> bool {
        self.folders
            .iter()
            .any(|folder| folder.state == FolderState::Differs)
    }

    pub(super) fn changes(&self) -> Vec<DieselCliChange> {
        let mut changes = Vec::new();
        if self.dir_missing {
            changes.push(DieselCliChange::MissingMigrationsDir(
                self.migrations_dir.clone(),
            ));
        }
        for folder in &self.folders {
            match folder.state {
                FolderState::Same => {}
                FolderState::Missing => {
                    changes.push(DieselCliChange::MissingFolder(folder.path.clone()))
                }
                FolderState::Differs => {
                    changes.push(DieselCliChange::FolderDiffers(folder.path.clone()))
                }
            }
        }
        if self.toml_missing {
            changes.push(DieselCliChange::MissingDieselToml {
                path: self.toml_path.clone(),
                line: self
                    .sections
                    .first()
                    .map(|s| s.line.clone())
                    .unwrap_or_default(),
            });
            return changes;
        }
        for section in self.sections.iter().filter(|s| !s.added.is_empty()) {
            changes.push(DieselCliChange::MissingPatterns {
                path: self.toml_path.clone(),
                section: section.name.clone(),
                tables: self
                    .descriptions
                    .iter()
                    .filter(|(pattern, _)| section.added.contains(pattern))
                    .map(|(_, what)| what.clone())
                    .collect(),
                patterns: section.added.clone(),
                line: section.line.clone(),
            });
        }
        changes
    }

    /// Creates the directory, writes each missing folder (whole or not at all), then
    /// `diesel.toml` (through a temporary file renamed over it).
    pub(super) fn write(self) -> Result<DieselCliFiles> {
        if self.dir_missing {
            fs::create_dir_all(&self.migrations_dir)
                .map_err(|e| folder_error(&self.migrations_dir, "cannot be created", Some(e)))?;
        }
        let folders = self
            .folders
            .into_iter()
            .map(PlannedFolder::write)
            .collect::<Result<Vec<_>>>()?;
        if let Some(text) = &self.toml_text {
            write_file(&self.toml_path, text).map_err(|e| Error::DieselToml {
                path: self.toml_path.clone(),
                reason: "cannot be written".into(),
                source: Some(e),
            })?;
        }
        Ok(DieselCliFiles {
            migrations_dir: self.migrations_dir,
            migrations_dir_created: self.dir_missing,
            folders,
            diesel_toml: self.toml_path,
            diesel_toml_created: self.toml_missing,
            print_schema: self.sections.into_iter().map(Into::into).collect(),
        })
    }

    /// What a check that found nothing to change reports: nothing written.
    pub(super) fn report(self) -> DieselCliFiles {
        DieselCliFiles {
            migrations_dir: self.migrations_dir,
            migrations_dir_created: false,
            folders: self
                .folders
                .into_iter()
                .map(|folder| MigrationFolder {
                    path: folder.path,
                    written: false,
                })
                .collect(),
            diesel_toml: self.toml_path,
            diesel_toml_created: false,
            print_schema: self.sections.into_iter().map(Into::into).collect(),
        }
    }
}

/// A diesel CLI migration folder, as [`CounterMigrations::write_diesel_cli_folders`] or
/// [`CounterMigrations::update_diesel_cli`] left it.
///
/// ```no_run
/// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// let files = CounterMigrations::of::<Post>().update_diesel_cli(".", Dialect::Postgres)?;
/// for folder in files.folders.iter().filter(|f| f.written) {
///     println!("new: {}", folder.path.display());
/// }
/// # Ok::<(), slotted_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationFolder {
    /// `migrations/{version}_create_{table}`.
    pub path: PathBuf,
    /// `true` when this call wrote it; `false` when it held exactly this SQL already and was left
    /// alone.
    pub written: bool,
}

/// A crate's diesel CLI files, as [`CounterMigrations::update_diesel_cli`] left (or
/// [`check_diesel_cli`](CounterMigrations::check_diesel_cli) found) them. Its `Display` says
/// what was written, one line each.
///
/// ```no_run
/// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// let files = CounterMigrations::of::<Post>().update_diesel_cli(".", Dialect::Postgres)?;
/// if files.written() {
///     println!("{files}\ncommit these");
/// }
/// # Ok::<(), slotted_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DieselCliFiles {
    /// The migrations directory: `diesel.toml`'s `[migrations_directory] dir`, or `migrations`,
    /// in the crate's directory.
    pub migrations_dir: PathBuf,
    /// `true` when this call created it.
    pub migrations_dir_created: bool,
    /// One folder per table.
    pub folders: Vec<MigrationFolder>,
    /// The crate's `diesel.toml`.
    pub diesel_toml: PathBuf,
    /// `true` when there was none and this call wrote one, as `diesel setup` does, with the
    /// filter.
    pub diesel_toml_created: bool,
    /// Each print-schema configuration of `diesel.toml`, and the patterns this call added to it.
    pub print_schema: Vec<PrintSchemaSection>,
}

impl DieselCliFiles {
    /// Whether this call wrote anything (a folder, the directory, `diesel.toml`): the files to
    /// commit.
    ///
    /// ```no_run
    /// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
    /// # #[derive(SlottedCounter)]
    /// # #[slotted(counter = likes, slots = 16)]
    /// # struct Post { id: i32 }
    /// let counters = CounterMigrations::of::<Post>();
    /// counters.write_diesel_cli(".", Dialect::Sqlite)?;
    /// assert!(!counters.write_diesel_cli(".", Dialect::Sqlite)?.written()); // all there now
    /// # Ok::<(), slotted_core::Error>(())
    /// ```
    pub fn written(&self) -> bool {
        self.migrations_dir_created
            || self.diesel_toml_created
            || self.folders.iter().any(|f| f.written)
            || self.print_schema.iter().any(|s| !s.added.is_empty())
    }
}

impl fmt::Display for DieselCliFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut lines = Vec::new();
        if self.migrations_dir_created {
            lines.push(format!("{}: created", self.migrations_dir.display()));
        }
        for folder in &self.folders {
            let what = if folder.written {
                "written"
            } else {
                "already there"
            };
            lines.push(format!("{}: {what}", folder.path.display()));
        }
        let toml = self.diesel_toml.display();
        if self.diesel_toml_created {
            lines.push(format!(
                "{toml}: written as `diesel setup` writes it, with the print-schema filter"
            ));
        }
        for section in &self.print_schema {
            let name = &section.name;
            if section.only_tables {
                lines.push(format!(
                    "{toml} [{name}]: filters with only_tables, left alone: slotted's tables are \
                     printed only if one of its patterns matches them"
                ));
            } else if self.diesel_toml_created {
                // Said above.
                continue;
            } else if section.added.is_empty() {
                lines.push(format!(
                    "{toml} [{name}]: leaves slotted's tables out already"
                ));
            } else {
                let added: Vec<String> = section.added.iter().map(|p| format!("\"{p}\"")).collect();
                lines.push(format!(
                    "{toml} [{name}]: added {} to except_tables",
                    added.join(", ")
                ));
            }
        }
        f.write_str(&lines.join("\n"))
    }
}

/// One print-schema configuration of `diesel.toml` (`[print_schema]`, or a named
/// `[print_schema.NAME]` of diesel 2.3), as [`CounterMigrations::update_diesel_cli`] left it.
///
/// ```no_run
/// # use slotted_core::{CounterMigrations, Dialect, SlottedCounter};
/// # #[derive(SlottedCounter)]
/// # #[slotted(counter = likes, slots = 16)]
/// # struct Post { id: i32 }
/// let files = CounterMigrations::of::<Post>().update_diesel_cli(".", Dialect::Postgres)?;
/// for section in files.print_schema.iter().filter(|s| s.only_tables) {
///     println!("[{}] prints slotted's tables only if its only_tables matches them", section.name);
/// }
/// # Ok::<(), slotted_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PrintSchemaSection {
    /// `print_schema`, or `print_schema.NAME`.
    pub name: String,
    /// The patterns this call added to its `except_tables` (`^posts_likes_slots$`); empty when
    /// it held them all.
    pub added: Vec<String>,
    /// It filters with `only_tables`, and was left alone: slotted's tables are printed only if
    /// one of its patterns matches them.
    pub only_tables: bool,
}

impl From<SectionEdit> for PrintSchemaSection {
    fn from(edit: SectionEdit) -> Self {
        Self {
            name: edit.name,
            added: edit.added,
            only_tables: edit.only_tables,
        }
    }
}

/// Writes into a hidden sibling, then renames: a folder is either whole or absent.
fn write_folder(path: &Path, up: &str, down: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("migration");
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir(&tmp)?;
    let result = fs::write(tmp.join("up.sql"), up)
        .and_then(|()| fs::write(tmp.join("down.sql"), down))
        .and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// Writes into a hidden sibling, then renames over `path`: the file is either old or new.
fn write_file(path: &Path, text: &str) -> io::Result<()> {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("diesel.toml");
    let tmp = path.with_file_name(format!(".{name}.slotted.tmp"));
    let result = fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
