//! The store: one SQLite database per user (`memory.sqlite` in the data
//! folder), many scopes, one transaction per write.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rusqlite::{Connection, TransactionBehavior, params};

/// The schema this build reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    text TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '',
    run_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER
);
CREATE INDEX entries_by_scope ON entries (scope, expires_at);
CREATE VIRTUAL TABLE entries_fts USING fts5 (
    text, tags, content = 'entries', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);
CREATE TRIGGER entries_insert AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, text, tags) VALUES (new.id, new.text, new.tags);
END;
CREATE TRIGGER entries_delete AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, text, tags)
    VALUES ('delete', old.id, old.text, old.tags);
END;
";

/// Why the store refused or failed. Each message says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// The scope's name is not usable.
    #[error(
        "`{0}` is not a memory scope name: use 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit"
    )]
    Scope(String),
    /// The text holds control characters.
    #[error(
        "memory text may not hold control characters (other than newlines and tabs); save plain text"
    )]
    Control,
    /// No such entry in the scope.
    #[error("there is no memory entry {id} in scope `{scope}`; memory_search shows the ids")]
    NotFound {
        /// The id asked for.
        id: i64,
        /// The scope.
        scope: String,
    },
    /// The entry is empty or too large.
    #[error(
        "a memory entry must be 1 to {max} bytes; this one is {bytes}. Save one short fact per entry"
    )]
    Size {
        /// Its size.
        bytes: usize,
        /// The cap.
        max: usize,
    },
    /// A tag is not usable, or there are too many.
    #[error("{0}")]
    Tags(String),
    /// `ttl_days` is out of range.
    #[error("ttl_days must be 1 to {max}; got {got}")]
    Ttl {
        /// What was asked.
        got: u64,
        /// The cap.
        max: u64,
    },
    /// The scope holds as much as it may.
    #[error(
        "memory scope `{scope}` is full ({what}); forget entries that no longer matter with \
         memory_forget, or ask the user to prune it with `skillbox memory list/forget --scope {scope}`"
    )]
    Full {
        /// The scope.
        scope: String,
        /// Which cap, in words.
        what: String,
    },
    /// A search query with nothing to search for.
    #[error("the query has no words to search for; name what to recall, such as `build command`")]
    NoWords,
    /// The database was written by a newer skillbox.
    #[error(
        "the memory store has schema version {0}, newer than this skillbox reads ({SCHEMA_VERSION}); \
         upgrade skillbox, or point SKILLBOX_DATA_DIR elsewhere"
    )]
    Newer(i64),
    /// There is no data folder to keep the store in.
    #[error("long-term memory needs a data folder: set HOME, XDG_DATA_HOME or SKILLBOX_DATA_DIR")]
    NoFolder,
    /// SQLite failed.
    #[error("the memory store failed: {0}")]
    Database(String),
}

impl From<rusqlite::Error> for MemoryError {
    fn from(e: rusqlite::Error) -> Self {
        MemoryError::Database(e.to_string())
    }
}

impl From<std::io::Error> for MemoryError {
    fn from(e: std::io::Error) -> Self {
        MemoryError::Database(crate::sandbox::io_reason(&e))
    }
}

/// A scope: the entries one project (or one pipeline) shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope(String);

impl Scope {
    /// Checks the name: 1 to 64 of `[A-Za-z0-9._-]`, starting with a
    /// letter or digit.
    pub fn new(name: &str) -> Result<Self, MemoryError> {
        let fine = name.len() <= 64
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if fine {
            Ok(Scope(name.to_string()))
        } else {
            Err(MemoryError::Scope(
                name.chars()
                    .take(80)
                    .collect::<String>()
                    .escape_debug()
                    .to_string(),
            ))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The caps every scope lives within. Start from `Limits::default()` and
/// change what you need.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes of one entry's text.
    pub entry_bytes: usize,
    /// Entries in one scope.
    pub entries: usize,
    /// Bytes of text and tags in one scope.
    pub scope_bytes: usize,
    /// Tags on one entry.
    pub tags: usize,
    /// An entry's lifetime when the saver names none.
    pub default_ttl_days: u64,
    /// The longest lifetime an entry may ask for.
    pub max_ttl_days: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entry_bytes: 4 * 1024,
            entries: 1000,
            scope_bytes: 1024 * 1024,
            tags: 8,
            default_ttl_days: 90,
            max_ttl_days: 3650,
        }
    }
}

/// An entry to save, and where it came from.
#[derive(Debug, Clone)]
pub struct NewEntry {
    /// The fact.
    pub text: String,
    /// Words to find it by.
    pub tags: Vec<String>,
    /// Its lifetime; `None` is [`Limits::default_ttl_days`].
    pub ttl_days: Option<u64>,
    /// The run that saved it.
    pub run_id: String,
    /// The step of that run.
    pub step: u64,
}

/// A saved entry.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Entry {
    /// Its id in the store.
    pub id: i64,
    /// Its scope.
    pub scope: String,
    /// The fact.
    pub text: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// The run that saved it.
    pub run_id: String,
    /// The step of that run.
    pub step: u64,
    /// When it was saved, in seconds since the Unix epoch.
    pub created_at: i64,
    /// When it expires, in seconds since the Unix epoch.
    pub expires_at: Option<i64>,
}

/// One scope's size, for `skillbox memory list`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ScopeInfo {
    /// The scope.
    pub scope: String,
    /// Live entries.
    pub entries: u64,
    /// Bytes of their text and tags.
    pub bytes: u64,
}

/// An entry as it will be stored.
struct Checked {
    text: String,
    tags: String,
    ttl_days: u64,
}

/// The long-term memory store. One connection, shared by the run's tools.
pub struct MemoryStore {
    connection: Mutex<Connection>,
    limits: Limits,
}

const SECONDS_PER_DAY: i64 = 86_400;

/// Seconds since the Unix epoch. A test build may shift it with
/// `SKILLBOX_TEST_NOW_OFFSET_DAYS`, so expiry can be tested without waiting.
fn now() -> i64 {
    let real = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    #[cfg(debug_assertions)]
    if let Some(days) = std::env::var("SKILLBOX_TEST_NOW_OFFSET_DAYS")
        .ok()
        .and_then(|d| d.parse::<i64>().ok())
    {
        return real + days * SECONDS_PER_DAY;
    }
    real
}

const COLUMNS: &str = "id, scope, text, tags, run_id, step, created_at, expires_at";

fn entry(row: &rusqlite::Row<'_>) -> rusqlite::Result<Entry> {
    let tags: String = row.get(3)?;
    Ok(Entry {
        id: row.get(0)?,
        scope: row.get(1)?,
        text: row.get(2)?,
        tags: tags.split_whitespace().map(String::from).collect(),
        run_id: row.get(4)?,
        step: row.get(5)?,
        created_at: row.get(6)?,
        expires_at: row.get(7)?,
    })
}

impl MemoryStore {
    /// `memory.sqlite` in the user's data folder.
    pub fn default_path() -> Option<PathBuf> {
        crate::dirs::data_dir().map(|d| d.join("memory.sqlite"))
    }

    /// Opens the store at [`MemoryStore::default_path`].
    pub fn open_default() -> Result<Self, MemoryError> {
        Self::open(&Self::default_path().ok_or(MemoryError::NoFolder)?)
    }

    /// Opens (or creates) the store at `path`, private to this user.
    pub fn open(path: &Path) -> Result<Self, MemoryError> {
        Self::open_with(path, Limits::default())
    }

    /// The same, with other caps.
    pub fn open_with(path: &Path, limits: Limits) -> Result<Self, MemoryError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)?;
        }
        // Created private before SQLite opens it: the entries are the
        // user's, and tools' results may be in them.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        let connection = Connection::open(path)?;
        connection.busy_timeout(std::time::Duration::from_secs(10))?;
        // WAL with full syncs: a commit is durable once it returns, and a
        // crash mid-write leaves the last committed state.
        connection.pragma_update(None, "journal_mode", "WAL")?;
        connection.pragma_update(None, "synchronous", "FULL")?;
        let version: i64 = connection.pragma_query_value(None, "user_version", |r| r.get(0))?;
        match version {
            0 => connection.execute_batch(&format!(
                "BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))?,
            SCHEMA_VERSION => {}
            newer => return Err(MemoryError::Newer(newer)),
        }
        Ok(MemoryStore {
            connection: Mutex::new(connection),
            limits,
        })
    }

    /// The caps in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn connection(&self) -> std::sync::MutexGuard<'_, Connection> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Saves one entry in one transaction, within the scope's caps.
    pub fn save(&self, scope: &Scope, new: NewEntry) -> Result<Entry, MemoryError> {
        let mut saved = self.import(scope, [new])?;
        Ok(saved.pop().expect("one entry saved"))
    }

    /// Saves entries in one transaction, all or none, within the scope's
    /// caps (an export read back, or a corpus).
    pub fn import(
        &self,
        scope: &Scope,
        entries: impl IntoIterator<Item = NewEntry>,
    ) -> Result<Vec<Entry>, MemoryError> {
        let now = now();
        let mut connection = self.connection();
        let tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "DELETE FROM entries WHERE scope = ?1 AND expires_at <= ?2",
            params![scope.as_str(), now],
        )?;
        let (mut count, mut bytes): (i64, i64) = tx.query_row(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(text AS BLOB)) + LENGTH(tags)), 0) \
             FROM entries WHERE scope = ?1",
            [scope.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let mut saved = Vec::new();
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO entries (scope, text, tags, run_id, step, created_at, expires_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for new in entries {
                let checked = self.check(&new)?;
                if count as usize >= self.limits.entries {
                    return Err(MemoryError::Full {
                        scope: scope.to_string(),
                        what: format!("{count} of {} entries", self.limits.entries),
                    });
                }
                let adding = (checked.text.len() + checked.tags.len()) as i64;
                if (bytes + adding) as usize > self.limits.scope_bytes {
                    return Err(MemoryError::Full {
                        scope: scope.to_string(),
                        what: format!(
                            "{bytes} of {} bytes; this entry needs {adding}",
                            self.limits.scope_bytes
                        ),
                    });
                }
                let expires_at = now + checked.ttl_days as i64 * SECONDS_PER_DAY;
                insert.execute(params![
                    scope.as_str(),
                    checked.text,
                    checked.tags,
                    new.run_id,
                    new.step,
                    now,
                    expires_at
                ])?;
                count += 1;
                bytes += adding;
                saved.push(Entry {
                    id: tx.last_insert_rowid(),
                    scope: scope.to_string(),
                    text: checked.text,
                    tags: checked.tags.split_whitespace().map(String::from).collect(),
                    run_id: new.run_id,
                    step: new.step,
                    created_at: now,
                    expires_at: Some(expires_at),
                });
            }
        }
        crate::sandbox::stage::pause_point("memory-save-mid");
        tx.commit()?;
        Ok(saved)
    }

    /// An entry's text, tags and lifetime, checked against the caps.
    fn check(&self, new: &NewEntry) -> Result<Checked, MemoryError> {
        let text = new.text.trim();
        if text.is_empty() || text.len() > self.limits.entry_bytes {
            return Err(MemoryError::Size {
                bytes: text.len(),
                max: self.limits.entry_bytes,
            });
        }
        // What a person reads back on a terminal must not drive it.
        let control = |s: &str| s.chars().any(|c| c.is_control() && c != '\n' && c != '\t');
        if control(text) || control(&new.run_id) {
            return Err(MemoryError::Control);
        }
        let ttl_days = new.ttl_days.unwrap_or(self.limits.default_ttl_days);
        if ttl_days == 0 || ttl_days > self.limits.max_ttl_days {
            return Err(MemoryError::Ttl {
                got: ttl_days,
                max: self.limits.max_ttl_days,
            });
        }
        Ok(Checked {
            text: text.to_string(),
            tags: self.check_tags(&new.tags)?,
            ttl_days,
        })
    }

    /// Tags as stored: lowercase words separated by spaces.
    fn check_tags(&self, tags: &[String]) -> Result<String, MemoryError> {
        if tags.len() > self.limits.tags {
            return Err(MemoryError::Tags(format!(
                "at most {} tags per entry; got {}",
                self.limits.tags,
                tags.len()
            )));
        }
        let mut out = Vec::new();
        for tag in tags {
            let fine = !tag.is_empty()
                && tag.len() <= 32
                && tag
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
            if !fine {
                return Err(MemoryError::Tags(format!(
                    "the tag `{}` is not usable: use 1 to 32 letters, digits, `.`, `_`, `-` or `:`",
                    tag.chars().take(40).collect::<String>()
                )));
            }
            out.push(tag.to_ascii_lowercase());
        }
        Ok(out.join(" "))
    }

    /// Live entries of `scope` matching any word of `query`, best first.
    pub fn search(
        &self,
        scope: &Scope,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Entry>, MemoryError> {
        let words: Vec<String> = query
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .take(32)
            .map(|w| format!("\"{w}\""))
            .collect();
        if words.is_empty() {
            return Err(MemoryError::NoWords);
        }
        let connection = self.connection();
        let mut statement = connection.prepare_cached(
            "SELECT e.id, e.scope, e.text, e.tags, e.run_id, e.step, e.created_at, e.expires_at \
             FROM entries_fts JOIN entries e ON e.id = entries_fts.rowid \
             WHERE entries_fts MATCH ?1 AND e.scope = ?2 \
               AND (e.expires_at IS NULL OR e.expires_at > ?3) \
             ORDER BY bm25(entries_fts) LIMIT ?4",
        )?;
        let rows = statement.query_map(
            params![words.join(" OR "), scope.as_str(), now(), limit as i64],
            entry,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes one entry of `scope`; whether there was one.
    pub fn forget(&self, scope: &Scope, id: i64) -> Result<bool, MemoryError> {
        let removed = self.connection().execute(
            "DELETE FROM entries WHERE id = ?1 AND scope = ?2",
            params![id, scope.as_str()],
        )?;
        Ok(removed > 0)
    }

    /// Every live entry of `scope`, oldest first.
    pub fn list(&self, scope: &Scope) -> Result<Vec<Entry>, MemoryError> {
        let connection = self.connection();
        let mut statement = connection.prepare(&format!(
            "SELECT {COLUMNS} FROM entries WHERE scope = ?1 \
             AND (expires_at IS NULL OR expires_at > ?2) ORDER BY id"
        ))?;
        let rows = statement.query_map(params![scope.as_str(), now()], entry)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Removes every entry of `scope`; how many there were.
    pub fn clear(&self, scope: &Scope) -> Result<usize, MemoryError> {
        Ok(self
            .connection()
            .execute("DELETE FROM entries WHERE scope = ?1", [scope.as_str()])?)
    }

    /// Every scope with live entries, by name.
    pub fn scopes(&self) -> Result<Vec<ScopeInfo>, MemoryError> {
        let connection = self.connection();
        let mut statement = connection.prepare(
            "SELECT scope, COUNT(*), SUM(LENGTH(CAST(text AS BLOB)) + LENGTH(tags)) FROM entries \
             WHERE expires_at IS NULL OR expires_at > ?1 GROUP BY scope ORDER BY scope",
        )?;
        let rows = statement.query_map([now()], |r| {
            Ok(ScopeInfo {
                scope: r.get(0)?,
                entries: r.get(1)?,
                bytes: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(limits: Limits) -> (MemoryStore, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::open_with(&dir.path().join("m.sqlite"), limits).unwrap();
        (store, dir)
    }

    fn fact(text: &str) -> NewEntry {
        NewEntry {
            text: text.into(),
            tags: vec!["build".into()],
            ttl_days: None,
            run_id: "run-1".into(),
            step: 2,
        }
    }

    #[test]
    fn saves_finds_and_forgets_within_a_scope() {
        let (store, _dir) = store(Limits::default());
        let a = Scope::new("proj-a").unwrap();
        let b = Scope::new("proj-b").unwrap();
        let saved = store
            .save(&a, fact("the build uses cargo nextest"))
            .unwrap();
        store.save(&b, fact("the build uses make")).unwrap();
        let found = store.search(&a, "which build tool?", 5).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].text, "the build uses cargo nextest");
        assert_eq!((found[0].run_id.as_str(), found[0].step), ("run-1", 2));
        assert!(
            !store.forget(&b, saved.id).unwrap(),
            "other scopes' ids are not reachable"
        );
        assert!(store.forget(&a, saved.id).unwrap());
        assert!(store.search(&a, "build", 5).unwrap().is_empty());
    }

    #[test]
    fn every_cap_is_enforced() {
        let limits = Limits {
            entries: 2,
            entry_bytes: 40,
            scope_bytes: 60,
            ..Limits::default()
        };
        let (store, _dir) = store(limits);
        let s = Scope::new("s").unwrap();
        assert!(matches!(
            store.save(&s, fact(&"x".repeat(41))),
            Err(MemoryError::Size { .. })
        ));
        store.save(&s, fact("one fact of twenty-two")).unwrap();
        let error = store
            .save(&s, fact("another fact, thirty-two bytes.."))
            .unwrap_err();
        assert!(error.to_string().contains("bytes"), "{error}");
        store.save(&s, fact("two")).unwrap();
        let error = store.save(&s, fact("three")).unwrap_err();
        assert!(error.to_string().contains("2 of 2 entries"), "{error}");
        let mut tagged = fact("t");
        tagged.tags = vec!["no spaces".into()];
        assert!(matches!(store.save(&s, tagged), Err(MemoryError::Tags(_))));
        assert!(matches!(Scope::new("../x"), Err(MemoryError::Scope(_))));
        assert!(matches!(Scope::new("-x"), Err(MemoryError::Scope(_))));
        assert!(matches!(
            store.save(&s, fact("\u{1b}]0;title\u{7}")),
            Err(MemoryError::Control)
        ));
        assert!(matches!(
            store.search(&s, "?!", 5),
            Err(MemoryError::NoWords)
        ));
    }

    #[test]
    fn an_import_over_the_caps_saves_nothing() {
        let limits = Limits {
            entries: 3,
            ..Limits::default()
        };
        let (store, _dir) = store(limits);
        let s = Scope::new("s").unwrap();
        let four = (0..4).map(|i| fact(&format!("fact {i}")));
        assert!(matches!(
            store.import(&s, four),
            Err(MemoryError::Full { .. })
        ));
        assert!(store.list(&s).unwrap().is_empty(), "all or none");
    }

    #[test]
    fn query_syntax_is_never_interpreted() {
        let (store, _dir) = store(Limits::default());
        let s = Scope::new("s").unwrap();
        store.save(&s, fact("NEAR the AND gate")).unwrap();
        assert_eq!(store.search(&s, "NEAR(\"gate\" OR *", 5).unwrap().len(), 1);
    }
}
