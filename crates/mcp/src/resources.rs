//! Skill files as MCP resources: `skill://<name>/SKILL.md` and every file
//! under `references/`, read through the skill folder's capability handle.

use base64::Engine;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, CompletionInfo, ListResourceTemplatesResult,
    ListResourcesResult, ReadResourceResult, Reference, Resource, ResourceContents,
    ResourceTemplate,
};

use crate::skill::Catalog;
use crate::skill::files::ReadError;
use crate::skill::model::{MAX_SERVED_FILE_BYTES, SKILL_FILE};

/// Resources per page of `resources/list`.
pub(crate) const PAGE_SIZE: usize = 50;

pub(crate) fn uri(skill: &str, path: &str) -> String {
    format!("skill://{skill}/{path}")
}

/// The type of bytes that are not text and have no better name.
const BINARY: &str = "application/octet-stream";

/// The MIME type of a skill file, by extension. A file without one
/// (`LICENSE`, `Makefile`) is text; an unknown extension is not assumed
/// to be.
pub(crate) fn mime_type(path: &str) -> &'static str {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((_, extension)) = name.rsplit_once('.').filter(|(stem, _)| !stem.is_empty()) else {
        return "text/plain";
    };
    match extension.to_ascii_lowercase().as_str() {
        "md" | "markdown" => "text/markdown",
        "txt" | "log" | "text" => "text/plain",
        "json" => "application/json",
        "yaml" | "yml" => "application/yaml",
        "toml" => "application/toml",
        "xml" | "xsd" => "application/xml",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "py" => "text/x-python",
        "js" | "mjs" | "cjs" => "text/javascript",
        "ts" => "text/x-typescript",
        "sh" | "bash" => "text/x-shellscript",
        "rs" => "text/x-rust",
        "wit" => "text/plain",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "wasm" => "application/wasm",
        "zip" => "application/zip",
        _ => BINARY,
    }
}

fn all(catalog: &Catalog) -> Vec<Resource> {
    let mut out = Vec::new();
    for skill in catalog.skills() {
        // Through the folder handle: a symlink leading out of the skill
        // has no size here, and nothing outside is ever stat'ed.
        let size = |rel: &str| skill.files.file_size(rel);
        // The skill's own name and description, as its frontmatter says.
        let mut main = Resource::new(uri(skill.name(), SKILL_FILE), skill.name())
            .with_description(skill.meta.description.clone())
            .with_mime_type("text/markdown");
        if let Some(n) = size(SKILL_FILE) {
            main = main.with_size(n);
        }
        out.push(main);
        for rel in &skill.references {
            let mut r = Resource::new(uri(skill.name(), rel), format!("{}/{rel}", skill.name()))
                .with_description(format!(
                    "Reference material of the `{}` skill",
                    skill.name()
                ))
                .with_mime_type(mime_type(rel));
            if let Some(n) = size(rel) {
                r = r.with_size(n);
            }
            out.push(r);
        }
    }
    out
}

/// One page of resources; the cursor is the index of the next one.
pub(crate) fn list(
    catalog: &Catalog,
    cursor: Option<&str>,
) -> Result<ListResourcesResult, McpError> {
    let start = match cursor {
        None => 0,
        Some(c) => c.parse::<usize>().map_err(|_| {
            McpError::invalid_params(
                format!("invalid cursor `{c}`; pass the nextCursor of the previous page"),
                None,
            )
        })?,
    };
    let items = all(catalog);
    let page: Vec<Resource> = items.iter().skip(start).take(PAGE_SIZE).cloned().collect();
    let mut result = ListResourcesResult::with_all_items(page);
    let next = start + PAGE_SIZE;
    result.next_cursor = (next < items.len()).then(|| next.to_string());
    Ok(result)
}

pub(crate) fn templates() -> ListResourceTemplatesResult {
    ListResourceTemplatesResult::with_all_items(vec![
        ResourceTemplate::new("skill://{name}/{path}", "skill-file").with_description(
            "Any file inside a skill's folder, e.g. skill://log-inspect/references/patterns.md",
        ),
    ])
}

/// Reads `skill://<name>/<path>`, on a blocking thread under a deadline.
pub(crate) async fn read(
    catalog: std::sync::Arc<Catalog>,
    resource_uri: String,
) -> Result<ReadResourceResult, McpError> {
    super::host_tools::read_off_runtime(move || read_now(&catalog, &resource_uri))
        .await
        .unwrap_or_else(|| {
            Err(McpError::internal_error(
                "reading the resource took too long and was abandoned; try again later",
                None,
            ))
        })
}

fn read_now(catalog: &Catalog, resource_uri: &str) -> Result<ReadResourceResult, McpError> {
    // Every miss is "resource not found" (-32002) with the URI in
    // `error.data`, whatever part of the URI is wrong.
    let not_found = |why: String| {
        McpError::resource_not_found(why, Some(serde_json::json!({"uri": resource_uri})))
    };
    let rest = resource_uri.strip_prefix("skill://").ok_or_else(|| {
        not_found(format!(
            "`{resource_uri}` is not a skill resource; this server serves skill://<name>/<path>"
        ))
    })?;
    let (name, path) = rest.split_once('/').ok_or_else(|| {
        not_found(format!(
            "`{resource_uri}` names no file; use skill://<name>/<path>"
        ))
    })?;
    let skill = catalog.get(name).ok_or_else(|| {
        McpError::resource_not_found(
            format!("no skill named `{name}`"),
            Some(serde_json::json!({"uri": resource_uri})),
        )
    })?;
    let bytes = skill
        .read_served(path, MAX_SERVED_FILE_BYTES)
        .map_err(|e| match e {
            ReadError::NotFound => McpError::resource_not_found(
                format!("skill `{name}` has no file `{path}`"),
                Some(serde_json::json!({"uri": resource_uri})),
            ),
            other => McpError::invalid_params(
                format!("cannot read `{path}` in skill `{name}`: {other}"),
                None,
            ),
        })?;
    let mime = mime_type(path);
    let contents = match String::from_utf8(bytes) {
        Ok(text) => ResourceContents::text(text, resource_uri).with_mime_type(mime),
        // Bytes that are not text never go out as text, whatever the name.
        Err(e) => ResourceContents::blob(
            base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            resource_uri,
        )
        .with_mime_type(if mime.starts_with("text/") {
            BINARY
        } else {
            mime
        }),
    };
    Ok(ReadResourceResult::new(vec![contents]))
}

/// Completions for the resource template's `{name}` (skill names) and
/// `{path}` (the files of the skill named in the context), by prefix.
/// Prompt arguments are free text and complete to nothing.
pub(crate) fn complete(catalog: &Catalog, request: &CompleteRequestParams) -> CompleteResult {
    let prefix = request.argument.value.as_str();
    let mut values: Vec<String> = match (&request.r#ref, request.argument.name.as_str()) {
        (Reference::Resource(_), "name") => {
            catalog.skills().map(|s| s.name().to_string()).collect()
        }
        (Reference::Resource(_), "path") => request
            .context
            .as_ref()
            .and_then(|c| c.arguments.as_ref())
            .and_then(|args| args.get("name"))
            .and_then(|name| catalog.get(name))
            .map(|skill| {
                std::iter::once(SKILL_FILE.to_string())
                    .chain(skill.references.iter().cloned())
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    values.retain(|v| v.starts_with(prefix));
    let total = values.len();
    values.truncate(CompletionInfo::MAX_VALUES);
    let mut info = CompletionInfo::new(values).unwrap_or_default();
    info.total = Some(total as u32);
    info.has_more = Some(total > CompletionInfo::MAX_VALUES);
    CompleteResult::new(info)
}
