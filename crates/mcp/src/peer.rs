//! What a request says about the client behind it: the revision it speaks,
//! what it can do, and who it is.
//!
//! On a 2025-11-25 session these are fixed by the session's `initialize`;
//! a request's `_meta` cannot change them, or one request could claim the
//! stateless revision to skip a session rule, or claim elicitation it never
//! declared. Only a request without a session (the stateless 2026-07-28
//! revision) speaks for itself.

use std::sync::Arc;

use rmcp::model::{ClientCapabilities, InitializeRequestParams, ProtocolVersion};
use rmcp::service::{RequestContext, RoleServer};

/// The first revision whose tool list must not vary per connection.
const STATELESS_REVISION: &str = "2026-07-28";

/// The handshake of the request's session, if it belongs to one: over
/// stdio always, over HTTP when it names a session. (For a stateless HTTP
/// request the MCP library makes up a handshake from its headers, with no
/// capabilities; that is not a session's.)
pub(super) fn session(
    context: &RequestContext<RoleServer>,
) -> Option<Arc<InitializeRequestParams>> {
    #[cfg(feature = "http")]
    if let Some(parts) = context.extensions.get::<http::request::Parts>()
        && !parts.headers.contains_key("mcp-session-id")
    {
        return None;
    }
    context.peer.peer_info()
}

/// The HTTP session the request names, if any.
#[cfg(feature = "http")]
pub(super) fn session_id(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    let id = parts.headers.get("mcp-session-id")?.to_str().ok()?;
    Some(id.to_owned())
}

/// The revision of the request: its session's, else its own.
pub(super) fn revision(context: &RequestContext<RoleServer>) -> Option<ProtocolVersion> {
    match session(context) {
        Some(session) => Some(session.protocol_version.clone()),
        None => context.meta.protocol_version().or_else(|| {
            context
                .peer
                .peer_info()
                .map(|made_up| made_up.protocol_version.clone())
        }),
    }
}

/// Whether the request speaks the stateless revision (or later).
pub(super) fn stateless(context: &RequestContext<RoleServer>) -> bool {
    revision(context).is_some_and(|v| is_stateless_revision(v.as_str()))
}

/// Whether `revision` (a date) is the stateless revision or later.
pub(super) fn is_stateless_revision(revision: &str) -> bool {
    revision >= STATELESS_REVISION
}

/// The client's capabilities: its session's, else the request's own.
pub(super) fn capabilities(context: &RequestContext<RoleServer>) -> Option<ClientCapabilities> {
    match session(context) {
        Some(session) => Some(session.capabilities.clone()),
        None => context.meta.client_capabilities(),
    }
}

/// Whether the client declared it can ask its user (elicitation).
pub(super) fn can_elicit(context: &RequestContext<RoleServer>) -> bool {
    capabilities(context).is_some_and(|caps| caps.elicitation.is_some())
}

/// Whether the client takes a task for this call. Unlike elicitation this
/// may be declared per request, even on a session: taking a task grants the
/// client nothing, it only changes how the answer arrives.
pub(super) fn takes_task(context: &RequestContext<RoleServer>) -> bool {
    let declared = |caps: Option<ClientCapabilities>| caps.is_some_and(|c| c.supports_tasks());
    declared(capabilities(context)) || declared(context.meta.client_capabilities())
}

/// Who is calling: the subject of a verified OAuth token, else the
/// client's network address. Over stdio there is one client and no name.
#[cfg(feature = "http")]
pub(super) fn principal(context: &RequestContext<RoleServer>) -> Option<String> {
    let parts = context.extensions.get::<http::request::Parts>()?;
    super::http_principal::principal_in(&parts.extensions)
}

/// Without the HTTP transport every client is a byte stream's one client.
#[cfg(not(feature = "http"))]
pub(super) fn principal(_context: &RequestContext<RoleServer>) -> Option<String> {
    None
}
