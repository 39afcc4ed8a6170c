//! The MCP server as an embedder builds and runs it: [`Server::builder`],
//! then serve stdio, any async byte stream, or Streamable HTTP.

use std::sync::Arc;
use std::time::Duration;

use super::server::{ServeOptions, Shared, ToolsMode};
use super::shared_state::StateStore;
use super::{banner, reload, stdio};
use skillbox_call::Skillbox;

/// An MCP server over a [`Skillbox`]: skills as resources and prompts,
/// `load_skill`, `read_skill_file`, `run_script` and the skills' tools,
/// each call through the host's one call path. Cheap to clone; clones
/// serve the same sessions' shared state (tasks, reload notifications).
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
///
/// let skillbox = skillbox::Skillbox::builder().skills_dir("skills").build()?;
/// let server = skillbox::mcp::Server::builder(&skillbox)
///     .reload_every(Some(Duration::from_secs(2)))
///     .build()?;
/// server.serve_stdio().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Server {
    shared: Arc<Shared>,
    skillbox: Skillbox,
}

/// Configures a [`Server`]. Start with [`Server::builder`].
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    skillbox: Skillbox,
    options: ServeOptions,
    state: Option<Arc<StateStore>>,
    shared_workspace: Option<(std::path::PathBuf, String)>,
}

impl Server {
    /// Starts configuring a server over `skillbox`.
    pub fn builder(skillbox: &Skillbox) -> ServerBuilder {
        ServerBuilder {
            skillbox: skillbox.clone(),
            options: ServeOptions::default(),
            state: None,
            shared_workspace: None,
        }
    }

    /// Serves one client on this process's stdin and stdout until stdin
    /// closes; replies to every request read before then are sent.
    pub async fn serve_stdio(&self) -> std::io::Result<()> {
        self.watch_for_changes();
        stdio::serve(self.shared.clone())
            .await
            .map_err(std::io::Error::other)
    }

    /// Serves one client on any pair of async byte streams (a socket, a
    /// pipe, an in-memory duplex), one JSON-RPC message per line.
    pub async fn serve<R, W>(&self, input: R, output: W) -> std::io::Result<()>
    where
        R: tokio::io::AsyncRead + Unpin + Send + 'static,
        W: tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        self.watch_for_changes();
        stdio::serve_on(self.shared.clone(), input, output)
            .await
            .map_err(std::io::Error::other)
    }

    /// A short summary for a terminal: what is served, with which grants,
    /// and how to connect common clients. The library never prints it.
    pub fn banner(&self, endpoint: &str) -> String {
        banner::render(&self.shared, endpoint)
    }

    /// The host this server serves.
    pub fn skillbox(&self) -> &Skillbox {
        &self.skillbox
    }

    #[doc(hidden)]
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Starts the reload watcher once per server, when it is configured.
    pub(crate) fn watch_for_changes(&self) {
        let Some(interval) = self.shared.options.reload_interval else {
            return;
        };
        if self.shared.claim_watcher() {
            tokio::spawn(reload::watch(
                self.shared.clone(),
                interval,
                self.skillbox.fingerprint(),
            ));
        }
    }
}

#[cfg(feature = "http")]
impl Server {
    /// Starts loading every skill's components once per server, so
    /// `/readyz` can say when the first call of each tool will not wait
    /// for a compile.
    pub(crate) fn warm_up(&self) {
        if self.shared.claim_warm_up() {
            tokio::spawn(super::ops::warm_up(self.shared.clone()));
            tokio::spawn(super::ops::watch_state(self.shared.clone()));
        }
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("skillbox", &self.skillbox)
            .field("options", &self.shared.options)
            .finish()
    }
}

impl ServerBuilder {
    /// List skill tools after `load_skill` ([`ToolsMode::Lazy`], the
    /// default) or all from the start ([`ToolsMode::All`]).
    pub fn tools(mut self, mode: ToolsMode) -> Self {
        self.options.tools_mode = mode;
        self
    }

    /// Bytes of a tool result put into the model's context (at least
    /// 1024); the rest is cut head and tail with a note.
    pub fn output_budget(mut self, bytes: usize) -> Self {
        self.options.output_budget = bytes.max(1024);
        self
    }

    /// Checks the skill folders for changes this often and tells clients
    /// when the catalog changed; `None` (the default) never reloads.
    pub fn reload_every(mut self, interval: Option<Duration>) -> Self {
        self.options.reload_interval = interval;
        self
    }

    /// A call still running after `after` becomes a task for clients that
    /// declare the tasks extension; at most `max` run at once, and each is
    /// kept for `ttl`.
    pub fn tasks(mut self, after: Duration, ttl: Duration, max: usize) -> Self {
        self.options.task_after = after;
        self.options.task_ttl = ttl.max(Duration::from_secs(1));
        self.options.max_tasks = max;
        self
    }

    /// Tokens the resident skill catalog (load_skill's description) may
    /// take; past it, descriptions shorten, then skills are left to
    /// `find_skills`.
    pub fn catalog_budget(mut self, tokens: usize) -> Self {
        self.options.catalog_budget = tokens;
        self
    }

    /// How long a person has to answer a confirmation (at least a
    /// second): an elicitation on a session, or the `requestState` a
    /// stateless client retries with, which is good once and only until
    /// then. The default is [`crate::DEFAULT_CONFIRM_TIMEOUT`].
    pub fn confirm_timeout(mut self, timeout: Duration) -> Self {
        self.options.confirm_timeout = timeout.max(Duration::from_secs(1));
        self
    }

    /// Where what replicas share is kept ([`StateStore::redis`]): the key
    /// sealing confirmation state and the approvals spent. By default this
    /// process keeps them ([`StateStore::local`]).
    pub fn state(mut self, store: StateStore) -> Self {
        self.state = Some(Arc::new(store));
        self
    }

    /// The workspace at `workspace` lies on a volume that replicas on
    /// other machines write too (NFS, a `ReadWriteMany` claim), where all
    /// of them call it `name`: each commit to it takes its turn in the
    /// shared [`state`] store and records its journal there, so commits
    /// are serialized across machines and any replica finishes one
    /// another left half-done. Needs a shared store. Without it, replicas
    /// that mount separate workspaces never apply each other's journals.
    ///
    /// [`state`]: ServerBuilder::state
    pub fn shared_workspace(
        mut self,
        workspace: impl Into<std::path::PathBuf>,
        name: impl Into<String>,
    ) -> Self {
        self.shared_workspace = Some((workspace.into(), name.into()));
        self
    }

    /// Builds the server. Fails when the system's random source cannot
    /// seed the key that seals confirmation state, or a shared workspace
    /// has no shared store to take turns in, or a name the store cannot
    /// take.
    pub fn build(self) -> std::io::Result<Server> {
        let state = match self.state {
            Some(state) => state,
            None => Arc::new(StateStore::local()?),
        };
        if let Some((workspace, name)) = &self.shared_workspace {
            state.share_commits(workspace, name)?;
        }
        Ok(Server {
            shared: Arc::new(Shared::new(
                self.skillbox.host().clone(),
                self.options,
                state,
            )),
            skillbox: self.skillbox,
        })
    }
}
