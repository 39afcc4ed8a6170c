//! `--mcp-config FILE`: external MCP servers in the common `mcpServers`
//! form that Claude Desktop, Cursor and others use.
//!
//! ```json
//! {"mcpServers": {
//!   "files": {"command": "npx", "args": ["-y", "some-server"], "env": {"TOKEN": "…"}},
//!   "remote": {"url": "http://127.0.0.1:9000/mcp"}
//! }}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// External MCP servers, in the `{"mcpServers": {NAME: {…}}}` form most
/// clients use: a command with arguments and environment, or a URL.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct McpConfig {
    /// The servers by name.
    #[serde(default)]
    pub(crate) mcp_servers: BTreeMap<String, ServerSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum ServerSpec {
    Stdio {
        command: String,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
    },
}

/// Why an `--mcp-config` file cannot be used: each says what to fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum McpConfigError {
    /// The file cannot be read.
    #[error("--mcp-config {}: cannot read it ({reason})", path.display())]
    Unreadable {
        /// The file given.
        path: std::path::PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// The file is not the `mcpServers` form.
    #[error(
        "--mcp-config {}: {why}; expected {{\"mcpServers\": {{\"name\": {{\"command\": …, \
         \"args\": […]}} or {{\"url\": …}}}}}}",
        path.display()
    )]
    Invalid {
        /// The file given.
        path: std::path::PathBuf,
        /// What the JSON parser found.
        why: String,
    },
    /// A server name that cannot prefix tool names.
    #[error(
        "--mcp-config {}: server name `{name}` must use letters, digits, `-` and `_` only: it \
         prefixes tool names",
        path.display()
    )]
    ServerName {
        /// The file given.
        path: std::path::PathBuf,
        /// The name.
        name: String,
    },
}

impl McpConfig {
    /// Reads and checks a configuration file; the error says what to fix.
    pub fn load(path: &Path) -> Result<Self, McpConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| McpConfigError::Unreadable {
            path: path.to_path_buf(),
            reason: crate::sandbox::io_reason(&e),
        })?;
        let config: McpConfig =
            serde_json::from_str(&text).map_err(|e| McpConfigError::Invalid {
                path: path.to_path_buf(),
                why: e.to_string(),
            })?;
        for name in config.mcp_servers.keys() {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(McpConfigError::ServerName {
                    path: path.to_path_buf(),
                    name: name.clone(),
                });
            }
        }
        Ok(config)
    }
}
