//! Helpers every skillbox guest tool shares: where paths point, how file
//! errors read, how long text is cut.

use std::io;

pub mod time;

/// The guest path of the user's workspace, when granted.
pub const WORKSPACE: &str = "/workspace";

/// Resolves a tool's `path` argument: absolute guest paths (`/workspace/…`,
/// `/skill/…`, `/tmp/…`) stay as they are, relative ones are taken inside
/// the workspace.
pub fn resolve(path: &str) -> String {
    let trimmed = path.trim();
    if trimmed.starts_with('/') {
        trimmed.to_string()
    } else if trimmed.is_empty() || trimmed == "." {
        WORKSPACE.to_string()
    } else {
        format!("{WORKSPACE}/{}", trimmed.trim_start_matches("./"))
    }
}

/// An error about `path` that says what to do next.
pub fn file_error(path: &str, err: &io::Error) -> String {
    let hint = match err.kind() {
        io::ErrorKind::NotFound => {
            "no such file or folder, or it is outside the folders this tool was granted \
             (relative paths are inside /workspace; /skill and /tmp also exist). \
             List the folder to see what is there"
        }
        io::ErrorKind::PermissionDenied => {
            "permission denied: the folder is read-only or not granted to this tool"
        }
        io::ErrorKind::IsADirectory => "it is a folder; pass a file",
        io::ErrorKind::NotADirectory => "it is a file; pass a folder",
        _ => "it could not be read",
    };
    format!("cannot open `{path}`: {hint} ({err})")
}

/// Cuts `text` to at most `max` characters, saying how much was cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}…[+{} chars]", &text[..cut], text[cut..].chars().count()),
    }
}

/// Clamps an optional count argument to `1..=max`, with a default.
pub fn bounded(value: Option<u32>, default: u32, max: u32) -> u32 {
    value.unwrap_or(default).clamp(1, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_live_in_the_workspace() {
        assert_eq!(resolve("logs/app.log"), "/workspace/logs/app.log");
        assert_eq!(resolve("./a"), "/workspace/a");
        assert_eq!(resolve("/skill/references/x.md"), "/skill/references/x.md");
        assert_eq!(resolve(""), "/workspace");
    }

    #[test]
    fn clip_says_how_much_was_cut() {
        assert_eq!(clip("abcdef", 3), "abc…[+3 chars]");
        assert_eq!(clip("ab", 3), "ab");
    }
}
