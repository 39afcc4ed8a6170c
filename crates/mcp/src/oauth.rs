//! OAuth 2.1 resource-server mode for the HTTP endpoint, as the MCP
//! authorization spec asks of a server: it publishes protected-resource
//! metadata (RFC 9728) naming its authorization server, and accepts a
//! request only with a bearer JWT that the issuer signed, that is meant for
//! this server (audience), and that has not expired.
//!
//! Keys come from the issuer's JWKS (found through its RFC 8414 or OpenID
//! metadata, or given with `--oauth-jwks-url`). A token naming a key the
//! set lacks makes the set be fetched again, so a key rotation is picked up
//! without a restart; a flood of made-up key ids makes at most one fetch
//! every ten seconds. Only asymmetric keys are used: a symmetric (`oct`)
//! key in a JWKS, or a token claiming `HS256` or `none`, is refused.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, Response, StatusCode, header};
use axum::middleware::Next;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::{Value, json};

/// How often a token naming an unknown key may make the set be fetched.
const REFETCH_AFTER: Duration = Duration::from_secs(10);
/// Clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 30;
/// The largest metadata document or key set read from an issuer.
const MAX_DOCUMENT_BYTES: usize = 1024 * 1024;
/// The well-known path of protected-resource metadata.
pub(crate) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// What the user configured.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OAuthOptions {
    /// The authorization server, as it appears in tokens' `iss`.
    pub issuer: String,
    /// This server's canonical URL, which tokens must name in `aud`.
    pub resource: String,
    /// The JWKS, when the issuer's metadata should not be used to find it.
    pub jwks_url: Option<String>,
    /// Scopes every token must carry.
    pub scopes: Vec<String>,
}

impl OAuthOptions {
    /// Tokens from `issuer` for the server at `resource`, the key set
    /// found through the issuer's metadata, no scope required.
    pub fn new(issuer: impl Into<String>, resource: impl Into<String>) -> Self {
        OAuthOptions {
            issuer: issuer.into(),
            resource: resource.into(),
            jwks_url: None,
            scopes: Vec::new(),
        }
    }
}

/// Checks bearer tokens against the issuer's keys.
pub struct Verifier {
    options: OAuthOptions,
    jwks_url: String,
    http: reqwest::Client,
    keys: tokio::sync::Mutex<JwkSet>,
    /// When a token with an unknown key last made the set be fetched again.
    refetched: Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("issuer", &self.options.issuer)
            .field("resource", &self.options.resource)
            .field("jwks_url", &self.jwks_url)
            .finish_non_exhaustive()
    }
}

/// The `sub` of a verified token, put in the request's extensions for
/// the call path's per-client share.
#[derive(Debug, Clone)]
pub(crate) struct Subject(pub String);

/// Why a request was turned away.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 401: no token, or one that does not verify.
    InvalidToken(String),
    /// 403: a valid token without the scopes this server needs.
    InsufficientScope,
}

/// Why the OAuth verifier cannot start: each says what to change.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum OAuthStartError {
    /// A flag's value is not a URL.
    #[error("{flag} {url}: not a URL")]
    NotAUrl {
        /// The flag (or document field) it came from.
        flag: &'static str,
        /// What was given.
        url: String,
    },
    /// An issuer URL over plain http to another machine.
    #[error(
        "{flag} {url}: use https (plain http is accepted only for localhost), so that keys \
         cannot be swapped on the way"
    )]
    NotHttps {
        /// The flag (or document field) it came from.
        flag: &'static str,
        /// What was given.
        url: String,
    },
    /// The issuer's metadata names no key set.
    #[error(
        "--oauth-issuer {issuer}: found no jwks_uri in its metadata (tried \
         /.well-known/oauth-authorization-server and /.well-known/openid-configuration); check \
         the issuer URL, or give the key set with --oauth-jwks-url"
    )]
    NoKeySet {
        /// The issuer.
        issuer: String,
    },
    /// The issuer's key set cannot be fetched or read.
    #[error("the issuer's keys at {url}: {why}")]
    Keys {
        /// Where they were fetched from.
        url: String,
        /// What went wrong.
        why: DocumentError,
    },
    /// The HTTP client could not be built (the system's TLS roots).
    #[error("cannot build the HTTP client for OAuth: {0}")]
    Client(String),
}

/// Why a document from the issuer could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
#[deny(missing_docs)]
pub enum DocumentError {
    /// The request failed or was answered with an error status.
    #[error("cannot fetch it ({0})")]
    Fetch(String),
    /// It is larger than any key set or metadata needs.
    #[error(
        "it is larger than {} KiB, more than any key set or metadata needs; check the URL",
        MAX_DOCUMENT_BYTES / 1024
    )]
    TooLarge,
    /// It is not the JSON expected.
    #[error("it is not the JSON expected ({0})")]
    NotJson(String),
}

/// An issuer URL must be https, except on this machine.
fn check_url(flag: &'static str, url: &str) -> Result<reqwest::Url, OAuthStartError> {
    let parsed = reqwest::Url::parse(url).map_err(|_| OAuthStartError::NotAUrl {
        flag,
        url: url.to_string(),
    })?;
    if !skillbox_call::net::https_or_loopback(
        parsed.scheme(),
        parsed.host_str().unwrap_or_default(),
    ) {
        return Err(OAuthStartError::NotHttps {
            flag,
            url: url.to_string(),
        });
    }
    Ok(parsed)
}

impl Verifier {
    /// Finds the issuer's key set and fetches it once, so a wrong issuer
    /// fails at startup with a message rather than on every request.
    pub async fn start(options: OAuthOptions) -> Result<Self, OAuthStartError> {
        check_url("--oauth-issuer", &options.issuer)?;
        reqwest::Url::parse(&options.resource).map_err(|_| OAuthStartError::NotAUrl {
            flag: "--oauth-resource",
            url: options.resource.clone(),
        })?;
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| OAuthStartError::Client(e.to_string()))?;
        let jwks_url = match &options.jwks_url {
            Some(url) => check_url("--oauth-jwks-url", url)?.to_string(),
            None => discover_jwks(&http, &options.issuer).await?,
        };
        let keys = fetch_jwks(&http, &jwks_url).await?;
        Ok(Verifier {
            options,
            jwks_url,
            http,
            keys: tokio::sync::Mutex::new(keys),
            refetched: Mutex::new(None),
        })
    }

    /// The options this verifier was started with.
    pub fn options(&self) -> &OAuthOptions {
        &self.options
    }

    /// Verifies a bearer token: signature by an issuer key, `iss`, `aud`,
    /// `exp` (required), `nbf`, and the required scopes. Returns the
    /// token's subject.
    pub(crate) async fn verify(&self, token: &str) -> Result<Subject, Refusal> {
        let invalid = |why: &str| Refusal::InvalidToken(why.to_string());
        let header =
            jsonwebtoken::decode_header(token).map_err(|_| invalid("the token is not a JWT"))?;
        let kid = header.kid.clone().unwrap_or_default();
        let mut jwk = self.keys.lock().await.find(&kid).cloned();
        if jwk.is_none()
            && self.may_refetch()
            && let Ok(fresh) = fetch_jwks(&self.http, &self.jwks_url).await
        {
            jwk = fresh.find(&kid).cloned();
            *self.keys.lock().await = fresh;
        }
        let jwk =
            jwk.ok_or_else(|| invalid("the token names a key the issuer does not publish"))?;
        let algorithms = algorithms_for(&jwk);
        if !algorithms.contains(&header.alg) {
            return Err(invalid(
                "the token's algorithm does not match the issuer's key",
            ));
        }
        let key =
            DecodingKey::from_jwk(&jwk).map_err(|_| invalid("the issuer's key is unusable"))?;
        let mut validation = Validation::new(header.alg);
        validation.algorithms = algorithms;
        validation.leeway = LEEWAY_SECS;
        validation.validate_nbf = true;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.set_issuer(&[&self.options.issuer]);
        validation.set_audience(&[&self.options.resource]);
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind;
            invalid(match e.kind() {
                ErrorKind::ExpiredSignature => "the token has expired",
                ErrorKind::ImmatureSignature => "the token is not valid yet",
                ErrorKind::InvalidAudience => "the token is meant for another resource",
                ErrorKind::InvalidIssuer => "the token comes from another issuer",
                ErrorKind::InvalidSignature => "the token's signature does not verify",
                ErrorKind::MissingRequiredClaim(_) => "the token lacks exp, iss or aud",
                _ => "the token does not verify",
            })
        })?;
        let granted = scopes_of(&data.claims);
        if self
            .options
            .scopes
            .iter()
            .all(|s| granted.contains(s.as_str()))
        {
            let subject = data.claims["sub"].as_str().unwrap_or_default();
            Ok(Subject(subject.to_string()))
        } else {
            Err(Refusal::InsufficientScope)
        }
    }

    /// At most one refetch per [`REFETCH_AFTER`].
    fn may_refetch(&self) -> bool {
        let mut last = self.refetched.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|t| t.elapsed() < REFETCH_AFTER) {
            return false;
        }
        *last = Some(Instant::now());
        true
    }

    /// Protected-resource metadata (RFC 9728).
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.options.resource,
            "authorization_servers": [self.options.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": self.options.scopes,
            "resource_name": "skillbox",
        })
    }

    /// Where the metadata is published, for `WWW-Authenticate`.
    pub fn metadata_url(&self) -> String {
        let resource = reqwest::Url::parse(&self.options.resource).expect("checked at start");
        let mut url = resource.clone();
        let path = resource.path().trim_end_matches('/');
        url.set_path(&format!("{METADATA_PATH}{path}"));
        url.set_query(None);
        url.to_string()
    }
}

/// The asymmetric algorithms a key may verify; none for symmetric keys.
fn algorithms_for(jwk: &Jwk) -> Vec<Algorithm> {
    let by_type = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => vec![
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![Algorithm::ES256],
            EllipticCurve::P384 => vec![Algorithm::ES384],
            _ => vec![],
        },
        AlgorithmParameters::OctetKeyPair(_) => vec![Algorithm::EdDSA],
        _ => vec![],
    };
    match jwk
        .common
        .key_algorithm
        .and_then(|a| Algorithm::try_from(a).ok())
    {
        Some(declared) => by_type.into_iter().filter(|a| *a == declared).collect(),
        None => by_type,
    }
}

/// `scope` (space-separated) or `scp` (a list or a string).
fn scopes_of(claims: &Value) -> HashSet<&str> {
    let mut scopes = HashSet::new();
    for field in ["scope", "scp"] {
        match &claims[field] {
            Value::String(s) => scopes.extend(s.split_whitespace()),
            Value::Array(items) => scopes.extend(items.iter().filter_map(Value::as_str)),
            _ => {}
        }
    }
    scopes
}

/// The issuer's `jwks_uri`, from its OAuth (RFC 8414) or OpenID metadata.
async fn discover_jwks(http: &reqwest::Client, issuer: &str) -> Result<String, OAuthStartError> {
    let base = issuer.trim_end_matches('/');
    for well_known in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let url = format!("{base}{well_known}");
        let Ok(metadata) = get_json::<Value>(http, &url).await else {
            continue;
        };
        if let Some(uri) = metadata["jwks_uri"].as_str() {
            return Ok(check_url("the issuer's jwks_uri", uri)?.to_string());
        }
    }
    Err(OAuthStartError::NoKeySet {
        issuer: issuer.to_string(),
    })
}

async fn fetch_jwks(http: &reqwest::Client, url: &str) -> Result<JwkSet, OAuthStartError> {
    get_json(http, url)
        .await
        .map_err(|why| OAuthStartError::Keys {
            url: url.to_string(),
            why,
        })
}

/// A JSON document from the issuer, read up to [`MAX_DOCUMENT_BYTES`], so a
/// hostile or broken issuer cannot make the server buffer without bound.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, DocumentError> {
    let mut response = http
        .get(url)
        .send()
        .await
        .and_then(|r| r.error_for_status())
        .map_err(|e| DocumentError::Fetch(e.to_string()))?;
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| DocumentError::Fetch(e.to_string()))?
    {
        if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
            return Err(DocumentError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    serde_json::from_slice(&body).map_err(|e| DocumentError::NotJson(e.to_string()))
}

/// Answers 401 or 403, with `WWW-Authenticate` pointing at the metadata,
/// unless the request carries a token the verifier accepts.
pub(crate) async fn require_token(
    verifier: std::sync::Arc<Verifier>,
    mut request: Request<Body>,
    next: Next,
) -> Response<Body> {
    let refusal = match super::http_guard::bearer_of(&request) {
        None => Refusal::InvalidToken("no bearer token".into()),
        Some(token) => match verifier.verify(token).await {
            Ok(subject) => {
                request.extensions_mut().insert(subject);
                return next.run(request).await;
            }
            Err(refusal) => refusal,
        },
    };
    let metadata = verifier.metadata_url();
    let (status, challenge, message) = match &refusal {
        Refusal::InvalidToken(why) => (
            StatusCode::UNAUTHORIZED,
            format!(
                r#"Bearer resource_metadata="{metadata}", error="invalid_token", error_description="{why}""#
            ),
            format!(
                "unauthorized: {why}. Get a token from {} for the resource {} (see {metadata})",
                verifier.options.issuer, verifier.options.resource
            ),
        ),
        Refusal::InsufficientScope => {
            let scopes = verifier.options.scopes.join(" ");
            (
                StatusCode::FORBIDDEN,
                format!(
                    r#"Bearer resource_metadata="{metadata}", error="insufficient_scope", scope="{scopes}""#
                ),
                format!("forbidden: the token lacks the scopes this server needs: {scopes}"),
            )
        }
    };
    Response::builder()
        .status(status)
        .header(header::WWW_AUTHENTICATE, challenge)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(json!({ "error": message }).to_string()))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symmetric_keys_verify_nothing() {
        let oct: Jwk = serde_json::from_value(json!({"kty": "oct", "k": "c2VjcmV0"})).unwrap();
        assert!(algorithms_for(&oct).is_empty());
        let ec: Jwk = serde_json::from_value(json!({
            "kty": "EC", "crv": "P-256",
            "x": "f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU",
            "y": "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0"
        }))
        .unwrap();
        assert_eq!(algorithms_for(&ec), vec![Algorithm::ES256]);
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let claims = json!({"scope": "mcp:read mcp:call", "scp": ["extra"]});
        let scopes = scopes_of(&claims);
        assert!(scopes.contains("mcp:call") && scopes.contains("extra"));
    }
}
