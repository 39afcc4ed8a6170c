//! The short banner `serve` prints on stderr in a terminal: what is served,
//! with which grants, and how to connect common clients.

use std::fmt::Write;

use super::server::{Shared, ToolsMode};

pub(crate) fn render(server: &Shared, endpoint: &str) -> String {
    let host = &server.host;
    let catalog = host.catalog();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "skillbox {} — MCP server on {endpoint}",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(out, "skills ({}):", catalog.len());
    for skill in catalog.skills() {
        let tools: Vec<String> = skill
            .manifest
            .iter()
            .flat_map(|m| &m.tools)
            .flat_map(|t| t.functions.keys())
            .map(|f| format!("{}__{f}", skill.name()))
            .collect();
        let scripts = skill.script_names();
        let mut what = Vec::new();
        if !tools.is_empty() {
            what.push(tools.join(", "));
        }
        if !scripts.is_empty() {
            what.push(format!("scripts: {}", scripts.join(", ")));
        }
        let _ = writeln!(
            out,
            "  {:<16} [{}] {}",
            skill.name(),
            skill.source.as_str(),
            if what.is_empty() {
                "instructions only".to_string()
            } else {
                what.join("; ")
            }
        );
    }
    let errors = catalog
        .diagnostics()
        .iter()
        .filter(|d| d.is_error())
        .count();
    if errors > 0 {
        let _ = writeln!(
            out,
            "  ({errors} skill problems; run `skillbox skills list` to see them)"
        );
    }
    let policy = &host.options.policy;
    let workspace = match (&policy.workspace, policy.allow_write) {
        (None, _) => "none (pass --workspace DIR)".to_string(),
        (Some(dir), true) => format!(
            "{} (read-write where a skill requests write)",
            dir.display()
        ),
        (Some(dir), false) if policy.may_write() && !host.options.read_only => format!(
            "{} (read-only, except for the skills you granted write)",
            dir.display()
        ),
        (Some(dir), false) => format!("{} (read-only)", dir.display()),
    };
    let _ = writeln!(
        out,
        "grants: workspace {workspace}; network none; env {}",
        if policy.allow_env.is_empty() {
            "none".into()
        } else {
            policy
                .allow_env
                .iter()
                .map(|g| match &g.skill {
                    Some(skill) => format!("{}→{skill}", g.key),
                    None => g.key.clone(),
                })
                .collect::<Vec<_>>()
                .join(",")
        }
    );
    let _ = writeln!(
        out,
        "tools: {}",
        match server.options.tools_mode {
            ToolsMode::Lazy => "lazy (a skill's tools appear after load_skill)",
            ToolsMode::All => "all listed up front",
        }
    );
    if let Some(path) = host.audit_path() {
        let _ = writeln!(out, "audit: {}", path.display());
    }
    let _ = writeln!(out, "connect:");
    if endpoint.starts_with("http") {
        let _ = writeln!(
            out,
            "  Claude Code:    claude mcp add --transport http skillbox {endpoint}"
        );
        let _ = writeln!(
            out,
            "  MCP Inspector:  npx @modelcontextprotocol/inspector  (Streamable HTTP, {endpoint})"
        );
    } else {
        let _ = writeln!(
            out,
            "  Claude Code:    claude mcp add skillbox -- skillbox serve --workspace \"$PWD\""
        );
        let _ = writeln!(
            out,
            "  Claude Desktop: \"mcpServers\": {{\"skillbox\": {{\"command\": \"skillbox\", \"args\": [\"serve\", \"--workspace\", \"/path/to/dir\"]}}}}"
        );
        let _ = writeln!(
            out,
            "  MCP Inspector:  npx @modelcontextprotocol/inspector skillbox serve"
        );
    }
    out
}
