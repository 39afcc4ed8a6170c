//! `skillbox memory`: what the agent's long-term memory holds, and pruning
//! it. The store is `memory.sqlite` in the data folder.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{CliError, print_json};
use skillbox::agent::memory::{Entry, MemoryStore, Scope, day, printable};

#[derive(Subcommand, Debug)]
pub(super) enum MemoryCommand {
    /// List the scopes, or a scope's live entries.
    List {
        /// The scope; without it, every scope with its size.
        #[arg(long)]
        scope: Option<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Search a scope as the agent's memory_search does.
    Search {
        /// Words to look for.
        query: String,
        #[command(flatten)]
        scope: ScopeFlag,
        /// Entries shown at most.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        output: Output,
    },
    /// Remove one entry by id.
    Forget {
        /// The entry's id (`memory list` shows it).
        id: i64,
        #[command(flatten)]
        scope: ScopeFlag,
    },
    /// Print a scope's live entries as JSON lines, one entry per line.
    Export {
        #[command(flatten)]
        scope: ScopeFlag,
    },
    /// Remove every entry of a scope.
    Clear {
        #[command(flatten)]
        scope: ScopeFlag,
        /// Yes, remove them all.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Args, Debug)]
pub(super) struct ScopeFlag {
    /// The scope, as given to `agent --memory`.
    #[arg(long)]
    scope: String,
}

#[derive(Args, Debug)]
pub(super) struct Output {
    /// Print JSON on stdout.
    #[arg(long)]
    json: bool,
}

fn scope(name: &str) -> Result<Scope, CliError> {
    Scope::new(name).map_err(|e| CliError::Usage(format!("--scope: {e}")))
}

fn failed(e: skillbox::agent::memory::MemoryError) -> CliError {
    CliError::Other(anyhow::anyhow!(e))
}

pub(super) fn run(command: MemoryCommand) -> Result<ExitCode, CliError> {
    let store = MemoryStore::open_default().map_err(failed)?;
    match command {
        MemoryCommand::List {
            scope: None,
            output,
        } => {
            let scopes = store.scopes().map_err(failed)?;
            if output.json {
                print_json(&json!(scopes));
            } else if scopes.is_empty() {
                println!("no memory scopes yet; `skillbox agent --memory SCOPE` starts one");
            } else {
                for s in scopes {
                    println!("{}  {} entries  {} bytes", s.scope, s.entries, s.bytes);
                }
            }
        }
        MemoryCommand::List {
            scope: Some(name),
            output,
        } => print_entries(&store.list(&scope(&name)?).map_err(failed)?, &name, output),
        MemoryCommand::Search {
            query,
            scope: flag,
            limit,
            output,
        } => {
            let found = store
                .search(&scope(&flag.scope)?, &query, limit.max(1))
                .map_err(|e| CliError::Usage(e.to_string()))?;
            print_entries(&found, &flag.scope, output);
        }
        MemoryCommand::Forget { id, scope: flag } => {
            if !store.forget(&scope(&flag.scope)?, id).map_err(failed)? {
                return Err(CliError::Usage(format!(
                    "there is no entry {id} in scope `{}`; `skillbox memory list --scope {}` shows the ids",
                    flag.scope, flag.scope
                )));
            }
            eprintln!("forgot entry {id} of scope `{}`", flag.scope);
        }
        MemoryCommand::Export { scope: flag } => {
            for entry in store.list(&scope(&flag.scope)?).map_err(failed)? {
                println!("{}", json!(entry));
            }
        }
        MemoryCommand::Clear { scope: flag, yes } => {
            let scope = scope(&flag.scope)?;
            if !yes {
                return Err(CliError::Usage(format!(
                    "this removes every entry of scope `{scope}`; pass --yes to do it (`memory export --scope {scope}` keeps a copy)"
                )));
            }
            let removed = store.clear(&scope).map_err(failed)?;
            eprintln!("removed {removed} entries of scope `{scope}`");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_entries(entries: &[Entry], scope: &str, output: Output) {
    if output.json {
        print_json(&json!(entries));
        return;
    }
    if entries.is_empty() {
        println!("no entries in scope `{scope}`");
    }
    // Stored text is shown, never obeyed by the terminal.
    for e in entries {
        println!(
            "#{}  saved {} by {} step {}  expires {}{}\n    {}",
            e.id,
            day(Some(e.created_at)),
            printable(&e.run_id),
            e.step,
            day(e.expires_at),
            if e.tags.is_empty() {
                String::new()
            } else {
                format!("  tags {}", printable(&e.tags.join(", ")))
            },
            printable(&e.text).replace('\n', "\n    ")
        );
    }
}
