//! A real OCI registry for the distribution tests: the CNCF Distribution
//! registry from Debian's `docker-registry` package, on 127.0.0.1 with a
//! temporary storage folder and htpasswd authentication, started once per
//! test binary. Every test pushes to its own repository.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

pub const USER: &str = "publisher";
pub const PASSWORD: &str = "correct horse battery staple";

pub struct Registry {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Where it keeps blobs (`docker/registry/v2/blobs/sha256/…/data`).
    pub storage: PathBuf,
}

/// The registry binary, or `None` (and a note) when it is not installed;
/// CI installs it and sets SKILLBOX_REQUIRE_REGISTRY, which makes its
/// absence a failure.
fn binary() -> Option<PathBuf> {
    let found = ["/usr/bin/docker-registry", "/usr/local/bin/docker-registry"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            std::env::var_os("SKILLBOX_REQUIRE_REGISTRY").is_none(),
            "docker-registry is not installed (apt-get install docker-registry); CI requires it"
        );
        eprintln!(
            "SKIPPED: docker-registry is not installed; `apt-get install docker-registry` to run this test"
        );
    }
    found
}

/// The registry this test binary shares, started on first use.
pub fn registry() -> Option<&'static Registry> {
    static REGISTRY: OnceLock<Option<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| binary().map(|bin| start(&bin)))
        .as_ref()
}

fn start(bin: &Path) -> Registry {
    let dir = tempfile::Builder::new()
        .prefix("skillbox-registry-")
        .tempdir()
        .expect("registry dir")
        .keep();
    let storage = dir.join("storage");
    let hash = bcrypt::hash(PASSWORD, 4).expect("bcrypt");
    std::fs::write(dir.join("htpasswd"), format!("{USER}:{hash}\n")).expect("htpasswd");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    std::fs::write(
        dir.join("config.yml"),
        format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\nauth:\n  htpasswd:\n    realm: skillbox-tests\n    path: {}\n",
            storage.display(),
            dir.join("htpasswd").display()
        ),
    )
    .expect("registry config");
    // Spawned from a thread that lives as long as the process, so the
    // parent-death signal fires when the test binary exits, not when the
    // first test's thread does.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let bin = bin.to_path_buf();
    let config = dir.join("config.yml");
    std::thread::spawn(move || {
        let mut command = Command::new(bin);
        command
            .arg("serve")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        #[allow(unsafe_code)]
        // SAFETY: prctl only sets this child's parent-death signal; it
        // allocates nothing and touches no memory of the parent.
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command.spawn().expect("start docker-registry");
        let stderr = child.stderr.take().expect("stderr");
        let mut told = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !told && line.contains("listening on") {
                let _ = ready_tx.send(());
                told = true;
            }
        }
        let _ = child.wait();
        loop {
            std::thread::park();
        }
    });
    ready_rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("docker-registry did not start listening");
    Registry { addr, storage }
}

impl Registry {
    /// `oci://ADDR/REPO:TAG`.
    pub fn reference(&self, repo: &str, tag: &str) -> String {
        format!("oci://{}/{repo}:{tag}", self.addr)
    }

    /// A Docker-style config.json granting this registry's login.
    pub fn auth_config(&self, password: &str) -> String {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{password}"));
        json!({"auths": {self.addr.clone(): {"auth": auth}}}).to_string()
    }

    /// Where the registry keeps the blob `sha256:<hex>`.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Pushes `blobs` and then `manifest` at `repo:tag` over plain HTTP,
    /// as any client could: what the registry accepts, skillbox must
    /// judge. Returns the manifest's digest.
    pub fn push_raw(&self, repo: &str, tag: &str, blobs: &[&[u8]], manifest: &Value) -> String {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let http = reqwest::Client::new();
            let base = format!("http://{}/v2/{repo}", self.addr);
            for blob in blobs {
                let digest = digest(blob);
                let started = http
                    .post(format!("{base}/blobs/uploads/"))
                    .basic_auth(USER, Some(PASSWORD))
                    .send()
                    .await
                    .expect("start upload");
                assert!(started.status().is_success(), "{}", started.status());
                let location = started.headers()["location"]
                    .to_str()
                    .expect("location")
                    .to_string();
                let location = if location.starts_with("http") {
                    location
                } else {
                    format!("http://{}{location}", self.addr)
                };
                let separator = if location.contains('?') { '&' } else { '?' };
                let done = http
                    .put(format!("{location}{separator}digest={digest}"))
                    .basic_auth(USER, Some(PASSWORD))
                    .header("content-type", "application/octet-stream")
                    .body(blob.to_vec())
                    .send()
                    .await
                    .expect("upload");
                assert!(done.status().is_success(), "blob upload: {}", done.status());
            }
            let body = serde_json::to_vec(manifest).expect("manifest");
            let put = http
                .put(format!("{base}/manifests/{tag}"))
                .basic_auth(USER, Some(PASSWORD))
                .header("content-type", "application/vnd.oci.image.manifest.v1+json")
                .body(body.clone())
                .send()
                .await
                .expect("put manifest");
            assert!(
                put.status().is_success(),
                "manifest: {} {}",
                put.status(),
                put.text().await.unwrap_or_default()
            );
            digest(&body)
        })
    }
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    use aws_lc_rs::digest;
    let d = digest::digest(&digest::SHA256, bytes);
    format!(
        "sha256:{}",
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}
