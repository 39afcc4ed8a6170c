//! User-invocable skills as MCP prompts, with `$ARGUMENTS` and `$1…$N`
//! substituted.

use rmcp::ErrorData as McpError;
use rmcp::model::{
    GetPromptResult, JsonObject, ListPromptsResult, Prompt, PromptArgument, PromptMessage, Role,
};
use serde_json::Value;

use super::host_tools::skill_dir_uri;
use crate::skill::{Catalog, invoke};

pub(crate) const PAGE_SIZE: usize = 50;
/// The one argument every skill prompt takes.
pub(crate) const ARGUMENT: &str = "arguments";

pub(crate) fn list(catalog: &Catalog, cursor: Option<&str>) -> Result<ListPromptsResult, McpError> {
    let start = match cursor {
        None => 0,
        Some(c) => c
            .parse::<usize>()
            .map_err(|_| McpError::invalid_params(format!("invalid cursor `{c}`"), None))?,
    };
    let all: Vec<Prompt> = catalog
        .user_visible()
        .map(|skill| {
            let hint = skill.meta.argument_hint.clone().unwrap_or_else(|| {
                "Arguments for the skill, substituted for $ARGUMENTS and $1…$N".to_string()
            });
            Prompt::new(
                skill.name(),
                Some(skill.meta.description.clone()),
                Some(vec![
                    PromptArgument::new(ARGUMENT)
                        .with_description(hint)
                        .with_required(false),
                ]),
            )
        })
        .collect();
    let page: Vec<Prompt> = all.iter().skip(start).take(PAGE_SIZE).cloned().collect();
    let mut result = ListPromptsResult::with_all_items(page);
    let next = start + PAGE_SIZE;
    result.next_cursor = (next < all.len()).then(|| next.to_string());
    Ok(result)
}

pub(crate) fn get(
    catalog: &Catalog,
    name: &str,
    args: Option<&JsonObject>,
) -> Result<GetPromptResult, McpError> {
    let request = invoke::Request {
        name,
        arguments: args
            .and_then(|a| a.get(ARGUMENT))
            .and_then(Value::as_str)
            .unwrap_or(""),
    };
    let skill = invoke::resolve(catalog, &request)
        .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
    let text = invoke::render(skill, request.arguments, &skill_dir_uri(name))
        .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
            .with_description(skill.meta.description.clone()),
    )
}
