//! Entry points for the fuzz targets in `fuzz/` (`cargo fuzz`): each takes
//! untrusted bytes the way one parser gets them. A parser may refuse
//! anything; it may not panic, hang or allocate without bound, and the
//! properties asserted here must hold for every input.
//!
//! They are plain functions, built in every build, so the unit test below
//! runs each on the project's own fixtures and they cannot rot between
//! fuzzing runs.

use skillbox_skill::skill::frontmatter::{Strictness, split_with};

/// SKILL.md: its frontmatter, strictly and leniently. Whatever the strict
/// reading accepts, the lenient one accepts too.
pub fn skill_md(data: &[u8]) {
    let strict = split_with(data, Strictness::Strict);
    let lenient = split_with(data, Strictness::Lenient);
    assert!(
        strict.is_err() || lenient.is_ok(),
        "lenient refused what strict took"
    );
}

/// `skillbox.yaml`, against the manifest's schema.
pub fn skillbox_yaml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = skillbox_skill::skill::manifest::parse_text(text);
    }
}

/// The lock file.
pub fn lock_file(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(lock) = skillbox_skill::skill::lock::LockFile::parse(text)
    {
        // What parses is written back as a lock that parses the same.
        let again = serde_json::to_string(&lock).expect("a lock serializes");
        let reread =
            skillbox_skill::skill::lock::LockFile::parse(&again).expect("a written lock parses");
        assert_eq!(serde_json::to_string(&reread).unwrap(), again);
    }
}

/// JSON-RPC on stdio: the bytes as the framer gets them, cut in pieces the
/// input's first bytes choose. Where the pieces end changes nothing.
#[cfg(feature = "mcp")]
pub fn jsonrpc_stdio(data: &[u8]) {
    let (cuts, input) = data.split_at(data.len().min(4));
    let whole = skillbox_mcp::stdio::frames(input, &[]);
    let cut = skillbox_mcp::stdio::frames(input, cuts);
    assert_eq!(whole, cut, "the framing depends on where reads end");
}

/// A 2026-07-28 `requestState`: a forged one never opens; a sealed one
/// opens once, for its principal.
#[cfg(feature = "mcp")]
pub fn request_state(data: &[u8]) {
    use sha2::Digest;
    let text = String::from_utf8_lossy(data);
    let digest = skillbox_sandbox::sha256_hex(data);
    let principal = format!("{:x}", sha2::Sha256::digest(text.as_bytes()))[..8].to_string();
    skillbox_mcp::confirm::check_states(&text, &digest, &principal);
}

/// `run_script`'s command line.
#[cfg(feature = "mcp")]
pub fn command_line(data: &[u8]) {
    if let Ok(line) = std::str::from_utf8(data)
        && let Ok(command) = skillbox_skill::runtime::command::parse(line)
    {
        // One command, one line: a newline never survives into a word.
        let words = std::iter::once(&command.script).chain(&command.args);
        assert!(
            words.into_iter().all(|w| !w.contains(['\n', '\r'])),
            "{command:?}"
        );
    }
}

/// An OCI manifest as a registry serves it: a skill artifact's layers.
#[cfg(feature = "distribute")]
pub fn oci_manifest(data: &[u8]) {
    if let Ok(layers) = skillbox_distribute::artifact::layers(data) {
        for layer in layers {
            assert!(
                skillbox_distribute::artifact::check_path(&layer.path).is_ok(),
                "a layer path that leaves the folder was accepted: {}",
                layer.path
            );
        }
    }
}

/// The trace `skillbox agent --replay` reads.
#[cfg(feature = "agent")]
pub fn replay_trace(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::agent::replay::Recording::parse(text);
    }
}

#[cfg(test)]
mod tests {
    /// Every entry point on the seeds the fuzz targets start from.
    #[test]
    fn each_target_takes_its_seeds() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
        type Target = fn(&[u8]);
        let targets: &[(&str, Target)] = &[
            ("skill_md", super::skill_md),
            ("skillbox_yaml", super::skillbox_yaml),
            ("lock_file", super::lock_file),
            #[cfg(feature = "mcp")]
            ("jsonrpc_stdio", super::jsonrpc_stdio),
            #[cfg(feature = "mcp")]
            ("request_state", super::request_state),
            #[cfg(feature = "mcp")]
            ("command_line", super::command_line),
            #[cfg(feature = "distribute")]
            ("oci_manifest", super::oci_manifest),
            #[cfg(feature = "agent")]
            ("replay_trace", super::replay_trace),
        ];
        for (name, target) in targets {
            let dir = seeds.join(name);
            let mut files: Vec<_> = std::fs::read_dir(&dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .flatten()
                .map(|e| e.path())
                .collect();
            assert!(!files.is_empty(), "no seeds for {name}");
            // The bundled skills' own files seed the skill parsers too.
            let bundled = seeds.join("../../skills");
            let own = match *name {
                "skill_md" => Some("SKILL.md"),
                "skillbox_yaml" => Some("skillbox.yaml"),
                _ => None,
            };
            if let Some(own) = own {
                for skill in std::fs::read_dir(&bundled).unwrap().flatten() {
                    files.push(skill.path().join(own));
                }
            }
            for file in files {
                target(&std::fs::read(file).unwrap());
            }
            target(b"");
        }
    }
}
