//! The MCP Skills extension (SEP-2640, `io.modelcontextprotocol/skills`):
//! `skills/list`, `skills/get` and `resources/directory/read`.
//!
//! Each skill is published at `skill://<name>/SKILL.md` with its frontmatter
//! as written and a manifest of every file it serves (sha256 and size of
//! the bytes `resources/read` returns), by the one rule of
//! `skill/fileset.rs`. Components are not among them: they run here, as
//! this server's tools, and no other client could run them.

use std::sync::Arc;

use rmcp::ErrorData as McpError;
use rmcp::model::{
    GetSkillResult, JsonObject, ListResourcesResult, ListSkillsResult, Resource,
    Skill as SkillEntry, SkillFrontmatter, SkillResource, SkillResources,
};
use serde_json::{Value, json};

use super::host_tools::read_off_runtime;
use super::resources::{mime_type, uri};
use crate::skill::model::SKILL_FILE;
use crate::skill::{Catalog, Skill};

/// Skills per page of `skills/list`.
pub(crate) const PAGE_SIZE: usize = 50;

/// A skill as the extension lists it. Reads every file the first time.
pub(crate) fn entry(skill: &Skill) -> SkillEntry {
    let mut extra: JsonObject = match &skill.frontmatter {
        Value::Object(map) => map.clone(),
        _ => JsonObject::new(),
    };
    extra.remove("name");
    extra.remove("description");
    let mut frontmatter = SkillFrontmatter::new(skill.name(), skill.meta.description.clone());
    frontmatter.extra = extra;
    let files = skill
        .served_files()
        .iter()
        .map(|f| SkillResource::new(uri(skill.name(), &f.path), f.digest.clone(), f.size))
        .collect();
    let entry = SkillEntry::new(
        uri(skill.name(), SKILL_FILE),
        frontmatter,
        SkillResources::Files(files),
    );
    match &skill.provenance {
        Some(provenance) => {
            let mut meta = JsonObject::new();
            meta.insert(
                PROVENANCE_META_KEY.into(),
                serde_json::to_value(provenance.as_ref()).unwrap_or_default(),
            );
            entry.with_meta(rmcp::model::MetaObject(meta))
        }
        None => entry,
    }
}

/// Where an installed skill came from (reference, resolved digest or
/// commit, content digest, signer), in a listed skill's `_meta`.
pub(crate) const PROVENANCE_META_KEY: &str = "io.skillbox/provenance";

fn parse_cursor(cursor: Option<&str>) -> Result<usize, McpError> {
    cursor.map_or(Ok(0), |c| {
        c.parse::<usize>().map_err(|_| {
            McpError::invalid_params(
                format!("invalid cursor `{c}`; pass the nextCursor of the previous page"),
                None,
            )
        })
    })
}

/// One page of `skills/list`, in the catalog's (name) order.
pub(crate) async fn list(
    catalog: Arc<Catalog>,
    cursor: Option<String>,
) -> Result<ListSkillsResult, McpError> {
    let start = parse_cursor(cursor.as_deref())?;
    let total = catalog.len();
    let page = read_off_runtime(move || {
        catalog
            .skills()
            .skip(start)
            .take(PAGE_SIZE)
            .map(|s| entry(s))
            .collect::<Vec<_>>()
    })
    .await
    .ok_or_else(|| McpError::internal_error("reading the skills took too long; try again", None))?;
    let mut result = ListSkillsResult::with_all_items(page);
    let next = start + PAGE_SIZE;
    result.next_cursor = (next < total).then(|| next.to_string());
    Ok(result)
}

/// The skill named by a `skill://<name>/…` URI.
fn skill_of<'a>(
    catalog: &'a Catalog,
    resource_uri: &str,
) -> Result<(&'a Arc<Skill>, String), McpError> {
    let rest = resource_uri.strip_prefix("skill://").ok_or_else(|| {
        McpError::invalid_params(
            format!("`{resource_uri}` is not a skill URI; use skill://<name>/SKILL.md"),
            Some(json!({"uri": resource_uri})),
        )
    })?;
    let (name, path) = rest.split_once('/').unwrap_or((rest, ""));
    let skill = catalog.get(name).ok_or_else(|| {
        McpError::invalid_params(
            format!("no skill named `{name}` is served here"),
            Some(json!({"uri": resource_uri})),
        )
    })?;
    Ok((skill, path.trim_end_matches('/').to_string()))
}

/// `skills/get`: the entry of the skill whose SKILL.md the URI names.
pub(crate) async fn get(
    catalog: Arc<Catalog>,
    resource_uri: String,
) -> Result<GetSkillResult, McpError> {
    let (skill, path) = skill_of(&catalog, &resource_uri)?;
    if path != SKILL_FILE {
        return Err(McpError::invalid_params(
            format!(
                "`{resource_uri}` is not a skill; skills are named by their SKILL.md, e.g. skill://{}/SKILL.md",
                skill.name()
            ),
            Some(json!({"uri": resource_uri})),
        ));
    }
    let skill = skill.clone();
    let entry = read_off_runtime(move || entry(&skill))
        .await
        .ok_or_else(|| {
            McpError::internal_error("reading the skill took too long; try again", None)
        })?;
    Ok(GetSkillResult::new(entry))
}

/// `resources/directory/read`: the direct children of a skill folder or
/// one of its subfolders.
pub(crate) async fn directory(
    catalog: Arc<Catalog>,
    resource_uri: String,
) -> Result<ListResourcesResult, McpError> {
    let (skill, path) = skill_of(&catalog, &resource_uri)?;
    let skill = skill.clone();
    let listed = read_off_runtime(move || {
        skill.files.children(&path).map(|children| {
            children
                .into_iter()
                .filter(|(name, is_dir)| {
                    let rel = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}/{name}")
                    };
                    // A folder of components alone (`tools/`) holds nothing
                    // that is served.
                    let served = skill.served_files();
                    if *is_dir {
                        let prefix = format!("{rel}/");
                        served.iter().any(|f| f.path.starts_with(&prefix))
                    } else {
                        !skill.is_component(&rel)
                    }
                })
                .map(|(name, is_dir)| {
                    let rel = if path.is_empty() {
                        name.clone()
                    } else {
                        format!("{path}/{name}")
                    };
                    let mut r = Resource::new(uri(skill.name(), &rel), name);
                    if is_dir {
                        r = r.with_mime_type(rmcp::model::DIRECTORY_MIME_TYPE);
                    } else {
                        r = r.with_mime_type(mime_type(&rel));
                        if let Some(size) = skill.files.file_size(&rel) {
                            r = r.with_size(size);
                        }
                    }
                    r
                })
                .collect::<Vec<_>>()
        })
    })
    .await
    .ok_or_else(|| McpError::internal_error("listing took too long; try again", None))?
    .map_err(|e| {
        McpError::invalid_params(
            format!("`{resource_uri}` is not a folder of a skill: {e}"),
            Some(json!({"uri": resource_uri})),
        )
    })?;
    Ok(ListResourcesResult::with_all_items(listed))
}
