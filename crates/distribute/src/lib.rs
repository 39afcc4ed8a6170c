//! Distribution: skills shipped as OCI artifacts or fetched from git,
//! signed with minisign, installed atomically into a source folder and
//! pinned in its `skillbox.lock`.
//!
//! ```text
//! publish: skill folder ─> artifact (one layer per file) ─> registry ─> signature tag
//! add:     reference ─> pull (caps, digests) ─> signature vs trusted keys
//!          ─> skills check ─> permissions shown ─> stage ─> commit + lock
//! load:    catalog ─> each locked skill's files vs its lock entry (skill/lock.rs)
//! ```
//!
//! Docs for authors and users: `docs/distribution.md`.

// Internal: used by the binary directly, with no stability promise.
#![allow(missing_docs)]
// stdout is the MCP channel when serving over stdio: the library never
// writes to it.
#![deny(clippy::print_stdout)]

pub mod artifact;
pub mod git;
pub mod install;
pub mod lifecycle;
pub mod permissions;
pub mod publish;
pub mod reference;
pub mod registry;
pub mod sign;

pub use lifecycle::{Plan, Settings};

// The layers below keep the paths this crate names them by.
use skillbox_sandbox as sandbox;
use skillbox_sandbox::{digest, dirs, text};
use skillbox_skill::skill;

/// Why a distribution command did nothing.
#[derive(Debug, thiserror::Error)]
pub enum DistributeError {
    #[error(transparent)]
    Registry(#[from] registry::RegistryError),
    #[error(transparent)]
    Artifact(#[from] artifact::ArtifactError),
    #[error(transparent)]
    Git(#[from] git::GitError),
    #[error(transparent)]
    Sign(#[from] sign::SignError),
    #[error(transparent)]
    Install(#[from] install::InstallError),
    #[error(transparent)]
    Lock(#[from] skill::lock::LockError),
    #[error("{reference} is not a skill: {why}; nothing was installed")]
    NotASkill { reference: String, why: String },
    #[error(
        "skill `{name}` fails its checks, so it was not {}:\n  {}",
        "installed or published",
        problems.join("\n  ")
    )]
    Check { name: String, problems: Vec<String> },
    #[error("{}", unsigned_message(reference, *git))]
    Unsigned { reference: String, git: bool },
    #[error(
        "the signer changed: the lock pins {pinned}, but this version is signed by {now}; nothing was installed. If the publisher rotated their key, check that with them, then run again with --allow-signer-change"
    )]
    SignerChanged { pinned: String, now: String },
    #[error("the signature stored beside the artifact is refused: {0}; nothing was installed")]
    BadSignatureArtifact(String),
    #[error("skill `{0}` is not installed here (see `skillbox skills list`)")]
    NotInstalled(String),
    #[error("{0}")]
    Io(String),
}

fn unsigned_message(reference: &str, git: bool) -> String {
    if git {
        format!(
            "{reference} is a git source, and git sources carry no signature skillbox checks; nothing was installed. Install it with --allow-unsigned if you trust the repository (the lock records it as unsigned)"
        )
    } else {
        format!(
            "{reference} is not signed; nothing was installed. Ask its publisher to sign it (skillbox publish --key), or install it with --allow-unsigned if you trust where it comes from (the lock records it as unsigned)"
        )
    }
}
