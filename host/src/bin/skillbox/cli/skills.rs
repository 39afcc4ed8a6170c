//! `skills list`, `skills check` and `skills tokens`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};

use super::flags::SourceFlags;
use super::{CliError, print_json};
use skillbox_sandbox::Sandbox;
use skillbox_skill::skill::diagnostic::has_errors;
use skillbox_skill::skill::policy::UserGrants;
use skillbox_skill::skill::{Catalog, Skill, check, tokens, tools};

#[derive(Subcommand, Debug)]
pub(super) enum SkillsCommand {
    /// List the skills found in every source, then the diagnostics.
    List {
        #[command(flatten)]
        sources: SourceFlags,
        /// Print JSON on stdout instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Validate skill folders, as authors and CI would.
    ///
    /// Prints `path:line: severity: rule: message` per finding; exits 0 when
    /// every skill is valid, 1 when any is not, 2 on a usage error.
    Check {
        /// Skill folders, or folders of skills (default: the current folder).
        #[arg(value_name = "PATH", default_value = ".")]
        paths: Vec<PathBuf>,
        /// Print JSON on stdout instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Show the token cost of each skill: catalog (always resident), tool
    /// definitions, and body (on activation), counted with o200k_base.
    Tokens {
        #[command(flatten)]
        sources: SourceFlags,
        /// The resident catalog's budget, as for `serve --catalog-budget`.
        #[arg(long, value_name = "TOKENS", default_value_t = skillbox_skill::skill::resident::DEFAULT_BUDGET_TOKENS)]
        catalog_budget: usize,
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(command: SkillsCommand) -> Result<ExitCode, CliError> {
    match command {
        SkillsCommand::List { sources, json } => list(&sources, json),
        SkillsCommand::Check { paths, json } => check(&paths, json),
        SkillsCommand::Tokens {
            sources,
            catalog_budget,
            json,
        } => token_report(&sources, catalog_budget, json),
    }
}

/// The catalog line a model sees for a skill before activating it.
pub(super) fn catalog_entry(skill: &Skill) -> String {
    skillbox_skill::skill::resident::line(skill, false)
}

fn tool_count(skill: &Skill) -> String {
    match &skill.manifest {
        None => "0".into(),
        Some(m) if m.tools.iter().any(|t| t.functions.is_empty()) => "all".into(),
        Some(m) => m
            .tools
            .iter()
            .map(|t| t.functions.len())
            .sum::<usize>()
            .to_string(),
    }
}

fn list(sources: &SourceFlags, as_json: bool) -> Result<ExitCode, CliError> {
    let catalog = Catalog::build(&sources.options());
    let grants = match UserGrants::default_path() {
        Some(file) => UserGrants::load(&file).map_err(super::flags::grants_error)?,
        None => UserGrants::default(),
    };
    // Only a grant for the folder listed: one bound elsewhere is not this
    // skill's.
    let granted = |skill: &Skill| {
        grants
            .skills
            .get(skill.name())
            .filter(|g| g.folder.as_ref() == Some(&skill.dir))
    };
    if as_json {
        let skills: Vec<Value> = catalog
            .skills()
            .map(|s| {
                json!({
                    "name": s.name(),
                    "title": s.meta.title,
                    "description": s.meta.description,
                    "source": s.source.as_str(),
                    "trusted": s.trusted,
                    "path": s.dir,
                    "digest": s.digest,
                    "components": s.components.iter().map(|(p, d)| json!({"path": p, "digest": d})).collect::<Vec<_>>(),
                    "tools": tool_count(s),
                    "scripts": s.script_names(),
                    "tier1_tokens": tokens::count(&catalog_entry(s)),
                    "model_invocable": s.model_invocable(),
                    "user_invocable": s.user_invocable(),
                    "provenance": s.provenance,
                    "granted": granted(s),
                })
            })
            .collect();
        print_json(&json!({
            "skills": skills,
            "untrusted": catalog.untrusted(),
            "diagnostics": catalog.diagnostics(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 10]> = catalog
        .skills()
        .map(|s| {
            let warned = catalog
                .diagnostics()
                .iter()
                .any(|d| d.path.starts_with(&s.dir));
            [
                s.name().to_string(),
                s.source.as_str().to_string(),
                if s.trusted { "trusted" } else { "untrusted" }.to_string(),
                tool_count(s),
                s.script_names().len().to_string(),
                tokens::count(&catalog_entry(s)).to_string(),
                if warned { "warnings" } else { "ok" }.to_string(),
                origin(s),
                granted(s)
                    .map(|g| g.phrases().join("; "))
                    .unwrap_or_else(|| "-".into()),
                s.dir.display().to_string(),
            ]
        })
        .collect();
    print_table(
        &[
            "NAME", "SOURCE", "TRUST", "TOOLS", "SCRIPTS", "TIER-1", "STATUS", "ORIGIN", "GRANTED",
            "FOLDER",
        ],
        &rows,
    );
    if catalog.is_empty() {
        println!("(no skills found; add some with --skills DIR)");
    }
    if !catalog.diagnostics().is_empty() {
        println!();
        for d in catalog.diagnostics() {
            println!("{d}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where an installed skill came from: its pinned reference (the digest
/// shortened to 12 digits) and its signer, or `unsigned`; `-` for a folder
/// no `skillbox add` installed.
fn origin(skill: &Skill) -> String {
    let Some(p) = &skill.provenance else {
        return "-".into();
    };
    let pinned = match p.resolved.split_once("@sha256:") {
        Some((repo, hex)) => format!("{repo}@sha256:{}", &hex[..hex.len().min(12)]),
        None => p.resolved.clone(),
    };
    format!("{pinned} {}", p.signer_label())
}

/// Left-aligned columns sized to their widest cell.
fn print_table<const N: usize>(header: &[&str; N], rows: &[[String; N]]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let text: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", text.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

fn check(paths: &[PathBuf], as_json: bool) -> Result<ExitCode, CliError> {
    let (folders, mut all) =
        check::skill_folders(paths).map_err(|e| CliError::Usage(e.to_string()))?;
    let sandbox = std::sync::Arc::new(Sandbox::new()?);
    let mut results = Vec::new();
    for dir in &folders {
        let diags = check::check_folder(dir, &sandbox);
        results.push((dir.clone(), !has_errors(&diags)));
        all.extend(diags);
    }
    if as_json {
        print_json(&json!({
            "skills": results.iter().map(|(p, ok)| json!({"path": p, "valid": ok})).collect::<Vec<_>>(),
            "diagnostics": all,
        }));
    } else {
        for d in &all {
            println!("{d}");
        }
        let invalid = results.iter().filter(|(_, ok)| !ok).count();
        eprintln!(
            "checked {} skill(s): {} valid, {invalid} invalid",
            results.len(),
            results.len() - invalid
        );
    }
    Ok(if has_errors(&all) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn token_report(sources: &SourceFlags, budget: usize, as_json: bool) -> Result<ExitCode, CliError> {
    let catalog = Catalog::build(&sources.options());
    let sandbox = std::sync::Arc::new(Sandbox::new()?);
    let mut rows = Vec::new();
    let mut warnings = Vec::new();
    let (mut total_tier1, mut total_tools, mut total_body) = (0, 0, 0);
    let mut per_skill = Vec::new();
    // What the server really sends: its host tools, and every skill tool
    // the model may use, serialized as in tools/list.
    let host_tools = skillbox_mcp::host_tools::definitions(&catalog, false, budget);
    let unbudgeted = skillbox_mcp::host_tools::definitions(&catalog, false, usize::MAX);
    let mut all_tools = host_tools.clone();
    for skill in catalog.skills() {
        let tier1 = if skill.model_invocable() {
            tokens::count(&catalog_entry(skill))
        } else {
            0
        };
        let skill_tools = tools::resolve(skill, &sandbox).tools;
        let tool_costs: Vec<(String, usize)> = skill_tools
            .iter()
            .map(|t| {
                let definition = json!({"name": t.name, "description": t.description, "inputSchema": t.input_schema});
                (t.name.clone(), tokens::count(&definition.to_string()))
            })
            .collect();
        let tools_total: usize = tool_costs.iter().map(|(_, n)| n).sum();
        if skill.model_invocable() {
            all_tools.extend(
                skill_tools
                    .iter()
                    .map(skillbox_mcp::host_tools::skill_tool_definition),
            );
        }
        let body = tokens::count(&skill.body);
        if body > tokens::BODY_TOKEN_WARNING {
            warnings.push(format!(
                "{}: body is {body} tokens, over {}",
                skill.name(),
                tokens::BODY_TOKEN_WARNING
            ));
        }
        if let Some(p) = tokens::description_problem(&skill.meta.description) {
            warnings.push(format!("{}: {p}", skill.name()));
        }
        total_tier1 += tier1;
        total_tools += tools_total;
        total_body += body;
        rows.push([
            skill.name().to_string(),
            tier1.to_string(),
            format!("{tools_total} ({} tools)", tool_costs.len()),
            body.to_string(),
        ]);
        per_skill.push(json!({
            "name": skill.name(),
            "tier1": tier1,
            "tools": tool_costs.iter().map(|(n, c)| json!({"name": n, "tokens": c})).collect::<Vec<_>>(),
            "tools_total": tools_total,
            "body": body,
        }));
    }
    let sent = |tools: &[rmcp::model::Tool]| {
        tokens::count(&serde_json::to_string(tools).unwrap_or_default())
    };
    let (lazy, all) = (sent(&host_tools), sent(&all_tools));
    let (lazy_unbudgeted, resident) = (sent(&unbudgeted), catalog.resident(budget));
    if as_json {
        print_json(&json!({
            "tokenizer": "o200k_base",
            "skills": per_skill,
            "total": {"tier1": total_tier1, "tools": total_tools, "body": total_body},
            "resident": {
                "lazy_2025_11_25": lazy,
                "all_and_2026_07_28": all,
                "lazy_without_budget": lazy_unbudgeted,
                "catalog": {"budget": budget, "tokens": resident.tokens(), "listed": resident.listed.len(), "skills": resident.total},
            },
            "warnings": warnings,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    rows.push([
        "TOTAL".to_string(),
        total_tier1.to_string(),
        total_tools.to_string(),
        total_body.to_string(),
    ]);
    print_table(
        &[
            "SKILL",
            "CATALOG (tier 1)",
            "TOOL DEFINITIONS",
            "BODY (tier 2)",
        ],
        &rows,
    );
    println!(
        "\ntokens counted with o200k_base; the catalog is resident in every conversation, bodies only on activation"
    );
    println!("\nresident tool list, as tools/list sends it:");
    print_table(
        &["MODE", "TOKENS"],
        &[
            [
                "--tools lazy on 2025-11-25 (host tools; a skill's tools join after load_skill)"
                    .to_string(),
                lazy.to_string(),
            ],
            [
                "--tools all, and every client on 2026-07-28".to_string(),
                all.to_string(),
            ],
            [
                "--tools lazy without a catalog budget".to_string(),
                lazy_unbudgeted.to_string(),
            ],
        ],
    );
    println!(
        "\nresident catalog: {} of {} skills listed in {} tokens (budget {budget}, --catalog-budget)",
        resident.listed.len(),
        resident.total,
        resident.tokens()
    );
    for w in &warnings {
        println!("warning: {w}");
    }
    Ok(ExitCode::SUCCESS)
}
