//! Talking to an OCI distribution registry, through `oci-client`, with
//! this host's rules on top: plain HTTP only to loopback or a registry the
//! user names, credentials from the file the OCI tools share, a timeout on
//! every request, and every byte pulled counted against the size the
//! manifest declared and checked against its digest.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use super::artifact::{MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES};
use super::reference::{OciRef, is_loopback};
use crate::text::printable_line;

/// The slowest download accepted, on average over a blob.
const MIN_BYTES_PER_SEC: u64 = 64 * 1024;

/// How to reach registries.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Hosts (`host[:port]`) reached over plain HTTP although not loopback.
    pub insecure: Vec<String>,
    /// A Docker-style `config.json` with `auths`; default
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
    pub auth_file: Option<PathBuf>,
    /// Connecting, and each read, give up after this long.
    pub timeout: Duration,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            insecure: Vec::new(),
            auth_file: None,
            timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("{registry} refused the credentials{hint}")]
    Unauthorized { registry: String, hint: String },
    #[error("{reference} was not found in the registry")]
    NotFound { reference: String },
    #[error(
        "{registry} did not answer in time ({secs} s); check that it is up, or raise --registry-timeout-secs"
    )]
    Timeout { registry: String, secs: u64 },
    #[error("{registry}: {why}")]
    Failed { registry: String, why: String },
    #[error(
        "{what} ({digest}) does not match what the registry sent: {why}; the registry's copy is damaged or was tampered with, and nothing was installed"
    )]
    Tampered {
        what: String,
        digest: String,
        why: String,
    },
    #[error("the credentials file {path} cannot be read: {why}")]
    AuthFile { path: String, why: String },
}

/// A client for one registry.
pub struct Registry {
    client: Client,
    /// For manifests, read with a cap as they stream (the OCI client reads
    /// a whole body before anyone can look at its size).
    http: reqwest::Client,
    scheme: &'static str,
    auth: RegistryAuth,
    registry: String,
    timeout: Duration,
    has_credentials: bool,
}

impl Registry {
    pub fn new(registry: &str, options: &RegistryOptions) -> Result<Registry, RegistryError> {
        let plain = is_loopback(registry) || options.insecure.iter().any(|h| h == registry);
        let config = ClientConfig {
            protocol: if plain {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            read_timeout: Some(options.timeout),
            connect_timeout: Some(options.timeout),
            ..ClientConfig::default()
        };
        let auth = credentials_within(registry, options.auth_file.as_deref(), options.timeout)?;
        let http = reqwest::Client::builder()
            .connect_timeout(options.timeout)
            .read_timeout(options.timeout)
            .build()
            .map_err(|e| RegistryError::Failed {
                registry: registry.to_string(),
                why: format!("cannot start an HTTP client ({e})"),
            })?;
        Ok(Registry {
            client: Client::new(config),
            http,
            scheme: if plain { "http" } else { "https" },
            has_credentials: !matches!(auth, RegistryAuth::Anonymous),
            auth,
            registry: registry.to_string(),
            timeout: options.timeout,
        })
    }

    fn reference(r: &OciRef) -> Reference {
        match (&r.tag, &r.digest) {
            (_, Some(digest)) => {
                Reference::with_digest(r.registry.clone(), r.repository.clone(), digest.clone())
            }
            (tag, None) => Reference::with_tag(
                r.registry.clone(),
                r.repository.clone(),
                tag.clone().unwrap_or_else(|| "latest".into()),
            ),
        }
    }

    fn error(&self, reference: &OciRef, e: OciDistributionError) -> RegistryError {
        let text = format!("{e}");
        let chain = {
            let mut all = text.clone();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                all.push_str(&format!(": {s}"));
                source = s.source();
            }
            all
        };
        match &e {
            OciDistributionError::AuthenticationFailure(_)
            | OciDistributionError::UnauthorizedError { .. } => RegistryError::Unauthorized {
                registry: self.registry.clone(),
                hint: self.credentials_hint(),
            },
            OciDistributionError::ImageManifestNotFoundError(_) => RegistryError::NotFound {
                reference: reference.to_string(),
            },
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(
                        e.code,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::BlobUnknown
                    )
                }) =>
            {
                RegistryError::NotFound {
                    reference: reference.to_string(),
                }
            }
            OciDistributionError::RegistryError { envelope, .. }
                if envelope.errors.iter().any(|e| {
                    matches!(e.code, OciErrorCode::Unauthorized | OciErrorCode::Denied)
                }) =>
            {
                RegistryError::Unauthorized {
                    registry: self.registry.clone(),
                    hint: self.credentials_hint(),
                }
            }
            _ if chain.contains("timed out") || chain.contains("operation timed out") => {
                RegistryError::Timeout {
                    registry: self.registry.clone(),
                    secs: self.timeout.as_secs(),
                }
            }
            _ if chain.contains("401") || chain.contains("Unauthorized") => {
                RegistryError::Unauthorized {
                    registry: self.registry.clone(),
                    hint: self.credentials_hint(),
                }
            }
            _ => RegistryError::Failed {
                registry: self.registry.clone(),
                why: printable_line(&chain),
            },
        }
    }

    fn credentials_hint(&self) -> String {
        if self.has_credentials {
            "; check the user and password it was given (the `auths` entry, or what the \
             credential helper keeps: `docker login` again)"
                .into()
        } else {
            format!(
                "; it needs a login: `docker login {}` (which writes ~/.docker/config.json or \
                 its credential helper), or pass --registry-auth-file",
                self.registry
            )
        }
    }

    /// Pushes a blob unless the registry has it.
    pub async fn push_blob(&self, at: &OciRef, bytes: &[u8]) -> Result<String, RegistryError> {
        let reference = Self::reference(at);
        let digest = crate::skill::model::digest(bytes);
        self.client
            .store_auth_if_needed(reference.resolve_registry(), &self.auth)
            .await;
        let exists = self
            .with_timeout(at, self.client.blob_exists(&reference, &digest))
            .await?;
        if !exists {
            self.with_timeout(
                at,
                self.client.push_blob(&reference, bytes.to_vec(), &digest),
            )
            .await?;
        }
        Ok(digest)
    }

    /// Pushes a manifest at `at`'s tag; returns its digest.
    pub async fn push_manifest(
        &self,
        at: &OciRef,
        manifest: &[u8],
    ) -> Result<String, RegistryError> {
        let reference = Self::reference(at);
        self.client
            .store_auth_if_needed(reference.resolve_registry(), &self.auth)
            .await;
        self.with_timeout(
            at,
            self.client.push_manifest_raw(
                &reference,
                manifest.to_vec(),
                http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
            ),
        )
        .await?;
        Ok(crate::skill::model::digest(manifest))
    }

    /// The manifest at `at`, and its digest as computed here. A reference
    /// by digest must match it. At most [`MAX_MANIFEST_BYTES`] are read.
    pub async fn pull_manifest(&self, at: &OciRef) -> Result<(Vec<u8>, String), RegistryError> {
        let reference = Self::reference(at);
        // The OCI client negotiates the login (basic, or a bearer token)
        // and hands back a token when there is one.
        let token = self
            .with_timeout(
                at,
                self.client
                    .auth(&reference, &self.auth, oci_client::RegistryOperation::Pull),
            )
            .await?;
        let url = format!(
            "{}://{}/v2/{}/manifests/{}",
            self.scheme,
            self.registry,
            at.repository,
            at.digest
                .as_deref()
                .or(at.tag.as_deref())
                .unwrap_or("latest")
        );
        let mut request = self
            .http
            .get(&url)
            .header(http::header::ACCEPT, MANIFEST_MEDIA_TYPE);
        request = match (token, &self.auth) {
            (Some(token), _) => request.bearer_auth(token),
            (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
            (None, _) => request,
        };
        let timed_out = || RegistryError::Timeout {
            registry: self.registry.clone(),
            secs: self.timeout.as_secs(),
        };
        let failed = |why: String| RegistryError::Failed {
            registry: self.registry.clone(),
            why: printable_line(&why),
        };
        let deadline = tokio::time::Instant::now() + self.timeout * 2;
        let mut response = tokio::time::timeout_at(deadline, request.send())
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| match e.is_timeout() {
                true => timed_out(),
                false => failed(format!("{at}: {e}")),
            })?;
        match response.status().as_u16() {
            200..=299 => {}
            404 => {
                return Err(RegistryError::NotFound {
                    reference: at.to_string(),
                });
            }
            401 | 403 => {
                return Err(RegistryError::Unauthorized {
                    registry: self.registry.clone(),
                    hint: self.credentials_hint(),
                });
            }
            status => return Err(failed(format!("{at}: the registry answered HTTP {status}"))),
        }
        let too_large = || {
            failed(format!(
                "the manifest of {at} is larger than {MAX_MANIFEST_BYTES} bytes"
            ))
        };
        if response
            .content_length()
            .is_some_and(|n| n > MAX_MANIFEST_BYTES as u64)
        {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = tokio::time::timeout_at(deadline, response.chunk())
            .await
            .map_err(|_| timed_out())?
            .map_err(|e| failed(format!("{at}: {e}")))?
        {
            if bytes.len() + chunk.len() > MAX_MANIFEST_BYTES {
                return Err(too_large());
            }
            bytes.extend_from_slice(&chunk);
        }
        let digest = crate::skill::model::digest(&bytes);
        if let Some(wanted) = &at.digest
            && *wanted != digest
        {
            return Err(RegistryError::Tampered {
                what: format!("the manifest of {at}"),
                digest: wanted.clone(),
                why: format!("its bytes hash to {digest}"),
            });
        }
        Ok((bytes, digest))
    }

    /// The manifest at `at`, or `None` when the registry has none there.
    pub async fn pull_manifest_if_any(
        &self,
        at: &OciRef,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        match self.pull_manifest(at).await {
            Ok((bytes, _)) => Ok(Some(bytes)),
            Err(RegistryError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The blob `digest` of `size` bytes, refused as soon as the registry
    /// sends more than `size`, and refused unless its bytes hash to
    /// `digest`.
    pub async fn pull_blob(
        &self,
        at: &OciRef,
        what: &str,
        digest: &str,
        size: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let reference = Self::reference(at);
        let descriptor = OciDescriptor {
            digest: digest.to_string(),
            size: size as i64,
            ..OciDescriptor::default()
        };
        let tampered = |why: String| RegistryError::Tampered {
            what: what.to_string(),
            digest: digest.to_string(),
            why,
        };
        let mut stream = self
            .with_timeout(at, self.client.pull_blob_stream(&reference, &descriptor))
            .await?;
        let mut bytes = Vec::with_capacity(size.min(1 << 20) as usize);
        // One deadline for the whole blob, at a slow but honest rate, so a
        // registry that trickles a byte at a time cannot hold an install.
        let deadline = tokio::time::Instant::now()
            + self.timeout * 2
            + Duration::from_secs(size / MIN_BYTES_PER_SEC);
        loop {
            let next = tokio::time::timeout_at(deadline, stream.next())
                .await
                .map_err(|_| RegistryError::Timeout {
                    registry: self.registry.clone(),
                    secs: self.timeout.as_secs(),
                })?;
            let Some(chunk) = next else { break };
            // The client checks the digest as the stream ends, too.
            let chunk = chunk.map_err(|e| match e.to_string() {
                text if text.contains("digest") => tampered(match text.split_once("got ") {
                    Some((_, actual)) => format!("its bytes hash to {}", actual.trim()),
                    None => "its bytes hash to something else".into(),
                }),
                text => RegistryError::Failed {
                    registry: self.registry.clone(),
                    why: printable_line(&format!("the download of {what} broke off: {text}")),
                },
            })?;
            if (bytes.len() + chunk.len()) as u64 > size {
                return Err(tampered(format!(
                    "the registry sent more than the {size} bytes the manifest declares"
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if bytes.len() as u64 != size {
            return Err(tampered(format!(
                "the registry sent {} bytes, not the {size} the manifest declares",
                bytes.len()
            )));
        }
        let actual = crate::digest::sha256(&bytes);
        if actual != digest {
            return Err(tampered(format!("its bytes hash to {actual}")));
        }
        Ok(bytes)
    }

    async fn with_timeout<T>(
        &self,
        at: &OciRef,
        work: impl Future<Output = Result<T, OciDistributionError>>,
    ) -> Result<T, RegistryError> {
        // A request that connects but never answers is not always caught
        // by the client's own timeouts; this bounds the whole request.
        match tokio::time::timeout(self.timeout * 2, work).await {
            Ok(result) => result.map_err(|e| self.error(at, e)),
            Err(_) => Err(RegistryError::Timeout {
                registry: self.registry.clone(),
                secs: self.timeout.as_secs(),
            }),
        }
    }
}

/// [`credentials`], given up on after `limit`: a credential helper that
/// waits (for a passphrase prompt, a stalled desktop app) must not hold
/// `add` or `publish` for ever. The helper's thread is left to finish on
/// its own; the command ends long before it matters.
fn credentials_within(
    registry: &str,
    file: Option<&Path>,
    limit: Duration,
) -> Result<RegistryAuth, RegistryError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (host, file_owned) = (registry.to_string(), file.map(Path::to_path_buf));
    std::thread::spawn(move || {
        block_sigpipe_in_this_thread();
        let _ = tx.send(credentials(&host, file_owned.as_deref()));
    });
    rx.recv_timeout(limit).unwrap_or_else(|_| {
        let helper = config_path(file)
            .and_then(|(path, _)| std::fs::read(path).ok())
            .and_then(|config| helper_named(&config, registry))
            .unwrap_or_else(|| "docker-credential-NAME".to_string());
        Err(RegistryError::AuthFile {
            path: file.map_or_else(
                || "the Docker config".to_string(),
                |f| f.display().to_string(),
            ),
            why: format!(
                "its credential helper `{helper}` did not answer for {registry} within {} s; \
                 check that it runs (`echo {registry} | {helper} get`), or pass \
                 --registry-auth-file",
                limit.as_secs()
            ),
        })
    })
}

/// The Docker config to read: `file` when the user named one (`true`:
/// it must exist), else `$DOCKER_CONFIG/config.json` or
/// `~/.docker/config.json`.
fn config_path(file: Option<&Path>) -> Option<(PathBuf, bool)> {
    match file {
        Some(path) => Some((path.to_path_buf(), true)),
        None => std::env::var_os("DOCKER_CONFIG")
            .map(|d| PathBuf::from(d).join("config.json"))
            .or_else(|| {
                std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
            })
            .map(|path| (path, false)),
    }
}

/// The credential helper program a Docker config names for `registry`
/// (`credHelpers`, else `credsStore`), for an error to name.
fn helper_named(config: &[u8], registry: &str) -> Option<String> {
    let config: serde_json::Value = serde_json::from_slice(config).ok()?;
    let named = login_keys(registry)
        .into_iter()
        .find_map(|key| config["credHelpers"][key].as_str())
        .or_else(|| config["credsStore"].as_str())?;
    Some(format!("docker-credential-{named}"))
}

/// The hosts under which docker keeps a registry's login: Docker Hub's
/// is kept under its v1 index URL.
fn login_keys(registry: &str) -> Vec<&str> {
    match registry {
        "docker.io" | "registry-1.docker.io" | "index.docker.io" => {
            vec![registry, "https://index.docker.io/v1/"]
        }
        _ => vec![registry],
    }
}

/// The answer docker's credential helpers give, with exit code 1, for a
/// registry they hold no login for: docker goes on anonymously then.
fn helper_has_no_login(stdout: &str) -> bool {
    stdout
        .trim()
        .to_ascii_lowercase()
        .contains("credentials not found")
}

/// A helper that exits without reading the registry name on its stdin
/// (docker's own do, when they hold no login) makes the write to it fail.
/// The command line restores SIGPIPE's default, which would end skillbox
/// there; blocked in the thread that writes, the write returns `EPIPE`
/// instead and the helper's answer is read as usual. The signal stays
/// pending on this thread only and is dropped when it ends; the helper
/// itself starts with an empty mask, as every spawned program does.
fn block_sigpipe_in_this_thread() {
    #[allow(unsafe_code)]
    // SAFETY: the set is initialised by `sigemptyset` before use, and the
    // mask changed is the calling thread's alone.
    unsafe {
        let mut set = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The credentials for `registry` as docker and podman keep them, read
/// from a Docker-style `config.json` by the `docker_credential` crate:
/// `auths.<host>` (`auth` as base64 `user:password`, or `username` and
/// `password`), or the credential helper or store the file names
/// (`credHelpers`, `credsStore`: `docker-credential-<name> get`, which
/// reads the keychain or the cloud's login). Anonymous when the file names
/// none for `registry`, and for an `identitytoken` (an OAuth refresh
/// token, which the registry client cannot exchange).
fn credentials(registry: &str, file: Option<&Path>) -> Result<RegistryAuth, RegistryError> {
    use docker_credential::{CredentialRetrievalError as Lookup, DockerCredential};
    let Some((path, explicit)) = config_path(file) else {
        return Ok(RegistryAuth::Anonymous);
    };
    let fail = |why: String| RegistryError::AuthFile {
        path: path.display().to_string(),
        why,
    };
    let config = match std::fs::read(&path) {
        Ok(config) => config,
        Err(e) if !explicit && e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(RegistryAuth::Anonymous);
        }
        Err(e) => return Err(fail(e.to_string())),
    };
    let mut found = Err(Lookup::NoCredentialConfigured);
    for key in login_keys(registry) {
        found = docker_credential::get_credential_from_reader(config.as_slice(), key);
        let none = match &found {
            Err(Lookup::NoCredentialConfigured) => true,
            Err(Lookup::HelperFailure { stdout, .. }) => helper_has_no_login(stdout),
            _ => false,
        };
        if !none {
            break;
        }
    }
    // The helper's own output is never repeated: it may hold the secret.
    let why = match found {
        Ok(DockerCredential::UsernamePassword(user, password)) => {
            return Ok(RegistryAuth::Basic(user, password));
        }
        Ok(DockerCredential::IdentityToken(_))
        | Err(Lookup::NoCredentialConfigured | Lookup::ConfigNotFound) => {
            return Ok(RegistryAuth::Anonymous);
        }
        Err(Lookup::HelperFailure { stdout, .. }) if helper_has_no_login(&stdout) => {
            return Ok(RegistryAuth::Anonymous);
        }
        Err(Lookup::ConfigReadError) => {
            "not a Docker config.json (not JSON, or a field of the wrong type)".to_string()
        }
        Err(Lookup::CredentialDecodingError) => {
            format!("the `auth` of {registry} is not base64 user:password")
        }
        Err(Lookup::CredentialMismatchError) => format!(
            "the `auth` of {registry} does not match its `username` and `password`; keep one"
        ),
        Err(Lookup::HelperFailure { helper, .. }) => format!(
            "the credential helper `{helper}` found no login for {registry}; log in again \
             (`docker login {registry}`), or see why with `echo {registry} | {helper} get`"
        ),
        Err(Lookup::HelperCommunicationError) => format!(
            "the credential helper it names for {registry} (`{}`) could not be run; install \
             it or put it on PATH",
            helper_named(&config, registry).unwrap_or_else(|| "docker-credential-<name>".into())
        ),
        Err(Lookup::MalformedHelperResponse) => format!(
            "the credential helper it names for {registry} did not answer with the \
             `{{\"Username\", \"Secret\"}}` JSON the helper protocol defines"
        ),
    };
    Err(fail(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_helper_a_config_names_for_a_registry() {
        let config = br#"{"credsStore": "desktop", "credHelpers": {"ghcr.io": "gh", "https://index.docker.io/v1/": "hub"}}"#;
        let named = |registry| helper_named(config, registry);
        assert_eq!(named("ghcr.io").as_deref(), Some("docker-credential-gh"));
        assert_eq!(named("docker.io").as_deref(), Some("docker-credential-hub"));
        assert_eq!(
            named("quay.io").as_deref(),
            Some("docker-credential-desktop")
        );
        assert_eq!(helper_named(b"{}", "quay.io"), None);
        assert_eq!(helper_named(b"not json", "quay.io"), None);
    }

    #[test]
    fn only_this_machine_is_loopback() {
        use super::super::reference::is_loopback;
        for host in [
            "127.0.0.1:5000",
            "localhost",
            "LOCALHOST:80",
            "[::1]:5000",
            "127.9.9.9",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "registry.example",
            "10.0.0.1:5000",
            "localhost.evil.example",
            "[::2]:1",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }

    #[test]
    fn credentials_come_from_the_auths_the_oci_tools_share() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.json");
        std::fs::write(
            &file,
            r#"{"auths": {"127.0.0.1:5000": {"auth": "YWxpY2U6czNjcjN0"}, "https://other": {"username": "u", "password": "p"}}}"#,
        )
        .unwrap();
        assert!(matches!(
            credentials("127.0.0.1:5000", Some(&file)).unwrap(),
            RegistryAuth::Basic(u, p) if u == "alice" && p == "s3cr3t"
        ));
        assert!(matches!(
            credentials("other", Some(&file)).unwrap(),
            RegistryAuth::Basic(..)
        ));
        assert!(matches!(
            credentials("none", Some(&file)).unwrap(),
            RegistryAuth::Anonymous
        ));
        assert!(credentials("x", Some(&dir.path().join("missing"))).is_err());
    }
}
