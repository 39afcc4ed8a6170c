//! Distribution figures: what verifying installed skills against their
//! lock adds to building the catalog, and, when Debian's docker-registry
//! is installed, publishing a bundled skill to a loopback registry and
//! adding it back (pull, digests, signature, checks, atomic install).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::Stats;
use skillbox_distribute::reference::SkillRef;
use skillbox_distribute::registry::RegistryOptions;
use skillbox_distribute::sign::{self, TrustedKeys};
use skillbox_distribute::{Settings, lifecycle, publish};
use skillbox_sandbox::Sandbox;
use skillbox_skill::skill::lock::{LockEntry, LockFile, content_digest, tree_files};
use skillbox_skill::skill::{Catalog, Source, SourceKind};

pub(super) struct DistributionFigures {
    /// Building the catalog of 50 skills, not installed.
    pub catalog_50: Stats,
    /// The same skills, each installed and checked against its lock entry.
    pub catalog_50_locked: Stats,
    pub publish: Option<Stats>,
    pub add: Option<Stats>,
}

/// Writes a skillbox.lock in `root` that pins every skill folder in it as
/// it is now, as `add` would have.
pub(super) fn lock_every_skill(root: &Path) -> anyhow::Result<()> {
    let mut lock = LockFile {
        version: 1,
        skills: BTreeMap::new(),
    };
    for entry in std::fs::read_dir(root)? {
        let dir = entry?.path();
        if !dir.join("SKILL.md").is_file() {
            continue;
        }
        let name = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let (files, odd) = tree_files(&dir)?;
        if !odd.is_empty() {
            bail!("{}: {odd:?} cannot be locked", dir.display());
        }
        lock.skills.insert(
            name.clone(),
            LockEntry {
                reference: format!("oci://127.0.0.1/bench/{name}:1"),
                resolved: format!("oci://127.0.0.1/bench/{name}@sha256:{}", "0".repeat(64)),
                content_digest: content_digest(&files),
                files,
                signer: None,
                manifest: None,
                signature: None,
                installed_at: "2026-01-01T00:00:00Z".into(),
            },
        );
    }
    lock.write(root)?;
    Ok(())
}

fn catalog_builds(root: &Path, iterations: usize) -> anyhow::Result<Stats> {
    let source = Source {
        kind: SourceKind::User,
        root: root.to_path_buf(),
        trusted: true,
    };
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        let catalog = Catalog::from_sources(std::slice::from_ref(&source));
        samples.push(start.elapsed());
        if catalog.len() != 50 {
            bail!(
                "the catalog loaded {} of 50 skills: {:?}",
                catalog.len(),
                catalog.diagnostics()
            );
        }
    }
    Ok(Stats::of(samples))
}

/// A loopback registry in a temporary folder, stopped on drop.
struct LocalRegistry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for LocalRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry(bin: &Path) -> anyhow::Result<LocalRegistry> {
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.path().join("storage").display()
        ),
    )?;
    let mut child = Command::new(bin)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting docker-registry")?;
    let stderr = child.stderr.take().context("registry stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("listening on") => break,
            Some(Ok(_)) => {}
            _ => bail!("docker-registry stopped before it listened"),
        }
    }
    // Keep reading so the registry never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    Ok(LocalRegistry {
        child,
        addr,
        _dir: dir,
    })
}

pub(super) async fn run(
    trivial: &Path,
    bundled_skill: &Path,
    iterations: usize,
) -> anyhow::Result<DistributionFigures> {
    eprintln!("bench: building a catalog of 50 skills, installed and not…");
    let plain = super::mcp::skills_dir(trivial, 49)?;
    let locked = super::mcp::skills_dir(trivial, 49)?;
    lock_every_skill(locked.path())?;
    let rounds = iterations.clamp(5, 50);
    let catalog_50 = catalog_builds(plain.path(), rounds)?;
    let catalog_50_locked = catalog_builds(locked.path(), rounds)?;

    let registry_bin = Path::new("/usr/bin/docker-registry");
    if !registry_bin.is_file() || !bundled_skill.join("SKILL.md").is_file() {
        eprintln!(
            "bench: docker-registry or {} is missing (apt-get install docker-registry); publish and add figures skipped",
            bundled_skill.display()
        );
        return Ok(DistributionFigures {
            catalog_50,
            catalog_50_locked,
            publish: None,
            add: None,
        });
    }
    eprintln!(
        "bench: publishing {} to a loopback registry and adding it back…",
        bundled_skill.display()
    );
    let registry = start_registry(registry_bin)?;
    let keys = tempfile::tempdir()?;
    let (key_path, pub_path, _) = sign::new_key_pair(keys.path(), "bench")?;
    let key = sign::SigningKey::read(&key_path)?;
    let sandbox = Arc::new(Sandbox::new()?);
    let options = RegistryOptions {
        timeout: Duration::from_secs(30),
        ..RegistryOptions::default()
    };
    let reference: SkillRef = format!("oci://{}/bench/skill:1", registry.addr).parse()?;
    let SkillRef::Oci(at) = &reference else {
        unreachable!("an oci:// reference")
    };
    let dir = std::fs::canonicalize(bundled_skill)?;
    let n = iterations.clamp(3, 10);
    let mut publish = Vec::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        publish::publish(&dir, at, Some(&key), &options, &sandbox).await?;
        publish.push(start.elapsed());
    }
    let mut add = Vec::with_capacity(n);
    for _ in 0..n {
        let root = tempfile::tempdir()?;
        let settings = Settings {
            root: root.path().join("skills"),
            registry: options.clone(),
            trusted: TrustedKeys::load(None, std::slice::from_ref(&pub_path))?,
            allow_unsigned: false,
            allow_signer_change: false,
            grants: Default::default(),
        };
        let start = Instant::now();
        let plan = lifecycle::plan(&reference, &settings, &sandbox).await?;
        plan.install()?;
        add.push(start.elapsed());
    }
    Ok(DistributionFigures {
        catalog_50,
        catalog_50_locked,
        publish: Some(Stats::of(publish)),
        add: Some(Stats::of(add)),
    })
}
