//! How the agent answers when a server asks the user to confirm a call:
//! it is the MCP client, so the user's policy for the run decides.

use std::io::{BufRead, Write};
use std::sync::{Arc, Mutex};

use rmcp::ClientHandler;
use rmcp::ErrorData as McpError;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use serde_json::{Value, json};

use skillbox_mcp::confirm::APPROVE_FIELD;

/// The user's answer policy for one agent run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver {
    /// `--yes`: approve every confirmation.
    Yes,
    /// Ask on the terminal.
    Prompt,
    /// No one to ask (CI, a pipe): refuse, and stop the run.
    Refuse,
}

impl Approver {
    /// The person at the terminal is asked; without a terminal every
    /// confirmation is refused.
    pub fn for_terminal() -> Self {
        use std::io::IsTerminal;
        if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Approver::Prompt
        } else {
            Approver::Refuse
        }
    }
}

/// The agent's MCP client handler: declares that it can be asked, and
/// answers confirmations with the run's [`Approver`].
#[derive(Clone)]
pub(crate) struct AgentClient {
    approver: Approver,
    /// Questions refused because no one could answer them.
    refused: Arc<Mutex<Vec<String>>>,
}

impl AgentClient {
    pub(crate) fn new(approver: Approver) -> Self {
        AgentClient {
            approver,
            refused: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The first question refused since the last look, if any.
    pub(crate) fn take_refusal(&self) -> Option<String> {
        let mut refused = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        (!refused.is_empty()).then(|| refused.remove(0))
    }

    fn answer(&self, message: &str) -> bool {
        match self.approver {
            Approver::Yes => {
                eprintln!("skillbox: approved (--yes): {message}");
                true
            }
            Approver::Prompt => ask_terminal(message).unwrap_or(false),
            Approver::Refuse => {
                eprintln!("skillbox: refused, no one to ask (pass --yes to approve): {message}");
                self.refused
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(message.lines().next().unwrap_or_default().to_string());
                false
            }
        }
    }
}

/// Asks on the controlling terminal; `None` if there is none.
fn ask_terminal(message: &str) -> Option<bool> {
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .ok()?;
    let mut out = tty.try_clone().ok()?;
    write!(out, "\n{message}\nAllow? [y/N] ").ok()?;
    out.flush().ok()?;
    let mut line = String::new();
    std::io::BufReader::new(tty).read_line(&mut line).ok()?;
    Some(matches!(line.trim(), "y" | "Y" | "yes" | "Yes"))
}

/// Whether a form is a confirmation: one boolean `approve` field.
fn is_confirmation(schema: &Value) -> bool {
    schema["properties"]
        .as_object()
        .is_some_and(|p| p.len() == 1 && p[APPROVE_FIELD]["type"] == "boolean")
}

impl ClientHandler for AgentClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("skillbox-agent", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            eprintln!("skillbox: a server asked to open a URL; the agent does not, so it declined");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or_default();
        if !is_confirmation(&schema) {
            eprintln!(
                "skillbox: a server asked for input the agent cannot give; declined: {message}"
            );
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        }
        let message = message.clone();
        let this = self.clone();
        let yes = tokio::task::spawn_blocking(move || this.answer(&message))
            .await
            .unwrap_or(false);
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({APPROVE_FIELD: yes})))
    }
}
