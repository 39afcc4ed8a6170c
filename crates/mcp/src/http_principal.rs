//! Who is calling over HTTP, for the per-client shares of connections,
//! streams and calls.

use super::http_listener::ClientAddr;

/// Who is calling, for the per-client shares: the subject of a verified
/// OAuth token, else the client's network address.
pub(crate) fn principal_in(extensions: &http::Extensions) -> Option<String> {
    if let Some(subject) = extensions.get::<super::oauth::Subject>() {
        return Some(format!("sub:{}", subject.0));
    }
    extensions
        .get::<axum::extract::ConnectInfo<ClientAddr>>()
        .map(|info| format!("ip:{}", info.0.0.ip()))
}
