//! Where skills come from, and how much each place is trusted.

use std::path::{Path, PathBuf};

/// A kind of skill source. Precedence on a name collision, highest first:
/// explicit > project > user > system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Bundled with skillbox.
    System,
    /// `~/.skillbox/skills`, `~/.agents/skills`.
    User,
    /// `./.agents/skills`, `./.claude/skills`; loaded only with --trust-project.
    Project,
    /// `--skills DIR`.
    Explicit,
}

impl SourceKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::System => "system",
            SourceKind::User => "user",
            SourceKind::Project => "project",
            SourceKind::Explicit => "explicit",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    pub kind: SourceKind,
    pub root: PathBuf,
    /// Project sources are untrusted unless the user says otherwise:
    /// cloning a repository must not be enough to run its skills.
    pub trusted: bool,
}

/// What decides the list of sources.
#[derive(Debug, Clone, Default)]
pub struct SourceOptions {
    /// `--skills DIR`, in order.
    pub explicit: Vec<PathBuf>,
    pub trust_project: bool,
    /// The user's home, for user sources; `None` skips them.
    pub home: Option<PathBuf>,
    /// The project folder, for project sources; `None` skips them.
    pub project: Option<PathBuf>,
    /// The bundled skills folder; `None` skips it.
    pub system: Option<PathBuf>,
    /// Serve only these skills (`--skill NAME`); empty serves all.
    pub only: Vec<String>,
    /// Never serve these skills (`--exclude-skill NAME`).
    pub exclude: Vec<String>,
    /// How far each source is searched.
    pub limits: super::discover::Limits,
}

impl SourceOptions {
    /// Whether no source is named at all: no skills can ever load.
    pub fn is_empty(&self) -> bool {
        self.explicit.is_empty()
            && !self.trust_project
            && self.home.is_none()
            && self.project.is_none()
            && self.system.is_none()
    }

    /// The sources a command-line invocation uses: the bundled skills,
    /// the user's, the current project's, and `explicit`.
    pub fn from_environment(explicit: Vec<PathBuf>, trust_project: bool) -> Self {
        SourceOptions {
            explicit,
            trust_project,
            home: std::env::var_os("HOME").map(PathBuf::from),
            project: std::env::current_dir().ok(),
            system: system_skills_dir(),
            only: Vec::new(),
            exclude: Vec::new(),
            limits: Default::default(),
        }
    }

    /// Whether the user's filters let a skill of this name be served.
    pub fn exposes(&self, name: &str) -> bool {
        (self.only.is_empty() || self.only.iter().any(|n| n == name))
            && !self.exclude.iter().any(|n| n == name)
    }

    /// The sources, lowest precedence first. Folders that do not exist are
    /// left out, except explicit ones, which the caller asked for.
    pub fn sources(&self) -> Vec<Source> {
        let mut out = Vec::new();
        let mut push = |kind, root: PathBuf, trusted| {
            if kind == SourceKind::Explicit || root.is_dir() {
                out.push(Source {
                    kind,
                    root,
                    trusted,
                });
            }
        };
        if let Some(system) = &self.system {
            push(SourceKind::System, system.clone(), true);
        }
        if let Some(home) = &self.home {
            push(SourceKind::User, home.join(".skillbox/skills"), true);
            push(SourceKind::User, home.join(".agents/skills"), true);
        }
        if let Some(project) = &self.project {
            push(
                SourceKind::Project,
                project.join(".agents/skills"),
                self.trust_project,
            );
            push(
                SourceKind::Project,
                project.join(".claude/skills"),
                self.trust_project,
            );
        }
        for dir in &self.explicit {
            push(SourceKind::Explicit, absolute(dir), true);
        }
        out
    }
}

/// `dir` made absolute and canonical before a name is taken from it: a
/// skill found at `--skills .` is named by its folder, not by `.`. A folder
/// that does not resolve stays as given (discovery reports it).
fn absolute(dir: &Path) -> PathBuf {
    std::fs::canonicalize(dir)
        .or_else(|_| std::env::current_dir().map(|cwd| cwd.join(dir)))
        .unwrap_or_else(|_| dir.to_path_buf())
}

/// The bundled skills: `$SKILLBOX_SYSTEM_SKILLS` (empty disables them),
/// else a `skills/` folder next to the binary or above it (a source
/// checkout's `target/<profile>/skillbox` finds the repository's
/// `skills/`), else the data folder `scripts/install` fills
/// (`$XDG_DATA_HOME/skillbox/skills`, or `~/.local/share/skillbox/skills`).
pub fn system_skills_dir() -> Option<PathBuf> {
    crate::dirs::installed("SKILLBOX_SYSTEM_SKILLS", "skills", is_skill_collection)
}

fn is_skill_collection(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .filter_map(Result::ok)
            .any(|e| e.path().join("SKILL.md").is_file())
    })
}
