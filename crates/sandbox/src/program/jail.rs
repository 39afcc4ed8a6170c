//! The OS sandbox one host program runs in: bubblewrap, over a kernel
//! overlay of the call's workspace, with the call's limits.
//!
//! ```text
//! skillbox ─fork─> [new user + mount namespace: mount the overlay] ─exec─> bwrap
//!                     ─> [new user, pid, net, ipc, uts, cgroup namespaces;
//!                         /usr, a few files of /etc, /tmp, /skill, /workspace]
//!                     ─exec─> the program
//! ```
//!
//! bubblewrap builds the view (read-only system folders, the call's own
//! `/tmp`, `/skill` read-only, `/workspace`), drops every capability,
//! forbids new privileges and further user namespaces, hides every other
//! process and gives the program no network. bubblewrap 0.8 (Debian 12)
//! cannot mount an overlay, so the step before it does: in a user
//! namespace of its own, the forked child mounts overlayfs with the
//! workspace below, the call's changes so far as a layer above it, and an
//! empty upper folder on top, then executes bubblewrap, which binds the
//! merged folder at `/workspace`. Whatever the program writes there lands
//! in the upper folder, which the call then takes in as staged changes
//! (`stage/layer.rs`).
//!
//! Limits: the call's remaining wall clock (then bubblewrap is killed,
//! and with it the program's whole pid namespace), CPU seconds, memory,
//! processes, file size and open files as resource limits, and the call's
//! output cap on what is kept of stdout and stderr.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rustix::process::{Resource, Rlimit};

use super::cgroup::ProgramCgroup;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// The memory one program may use: the address space of each of its
/// processes, and (where a control group bounds them) all together.
pub(crate) const PROGRAM_MEMORY_BYTES: u64 = 4 << 30;
/// Processes (threads count) the program may have at once.
pub(crate) const PROGRAM_PROCESSES: u64 = 512;
const PROGRAM_OPEN_FILES: u64 = 1024;

/// Files of `/etc` a program commonly reads, shown read-only when they
/// exist; the rest of `/etc` (passwords, keys, the host's configuration)
/// is not there.
const ETC_FILES: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/fonts",
    "/etc/localtime",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/mime.types",
    "/etc/libreoffice",
    "/etc/gitconfig",
    "/etc/papersize",
    "/etc/ImageMagick-6",
];

/// Where bubblewrap may be installed; the user's `PATH` is not asked.
const BWRAP: &[&str] = &["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"];

/// How the program sees `/workspace`.
pub(crate) enum WorkspaceView {
    ReadOnly(PathBuf),
    /// The workspace below, `layer` (the call's changes so far) above it,
    /// `upper` catching the program's writes; `work` is overlayfs's own
    /// and `merged` the mount point.
    Staged {
        lower: PathBuf,
        layer: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        merged: PathBuf,
    },
}

/// One program to run, and everything it may see.
pub(crate) struct Jail<'a> {
    pub program: &'a Path,
    pub args: &'a [String],
    /// The guest path it starts in.
    pub cwd: &'a str,
    pub env: &'a [(String, String)],
    pub stdin: Vec<u8>,
    pub skill_dir: Option<&'a Path>,
    pub scratch: &'a Path,
    pub workspace: Option<WorkspaceView>,
    pub deadline: Instant,
    /// What is kept of each of stdout and stderr.
    pub pipe_bytes: usize,
    pub file_bytes: u64,
}

/// How a program ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Its exit status, or minus the signal that killed it (Python's
    /// convention for `returncode`).
    pub returncode: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Whether either stream was cut at the output cap.
    pub truncated: bool,
    /// Whether the call's wall clock ran out first.
    pub timed_out: bool,
    pub duration: Duration,
}

/// Why a program could not be started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JailError {
    #[error(
        "this host cannot sandbox programs: bubblewrap (`bwrap`) is not installed. Install \
         it (Debian and Ubuntu: `apt install bubblewrap`); skillbox never runs a program \
         outside its OS sandbox"
    )]
    NoBubblewrap,
    #[error(
        "this host cannot sandbox programs: {0}. skillbox never runs a program outside its \
         OS sandbox"
    )]
    Unavailable(String),
    #[error("the program could not be started: {0}")]
    Spawn(String),
}

fn bwrap() -> Option<&'static str> {
    BWRAP.iter().copied().find(|p| Path::new(p).is_file())
}

impl Jail<'_> {
    /// Runs the program to its end, or to the call's deadline.
    pub(crate) async fn run(self) -> Result<Finished, JailError> {
        if !cfg!(target_os = "linux") {
            return Err(JailError::Unavailable(
                "the OS sandbox for programs needs Linux (user namespaces and bubblewrap)".into(),
            ));
        }
        let bwrap = bwrap().ok_or(JailError::NoBubblewrap)?;
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let mut command = tokio::process::Command::new(bwrap);
        command
            .args(self.bwrap_args())
            .arg("--")
            .arg(self.program)
            .args(self.args)
            .env_clear()
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let cgroup = ProgramCgroup::make(PROGRAM_PROCESSES, PROGRAM_MEMORY_BYTES);
        if cgroup.is_none() && rustix::process::getuid().is_root() {
            return Err(JailError::Unavailable(
                "skillbox runs as root here, where a program's processes can be bounded only \
                 by a control group, and it may not make one (it needs the cgroup v2 `pids` \
                 and `memory` controllers at /sys/fs/cgroup, or the v1 hierarchies); run \
                 skillbox as a user other than root"
                    .into(),
            ));
        }
        let mut setup = Setup::new(&self, remaining)?;
        setup.join = cgroup.as_ref().map(|c| c.join.clone()).unwrap_or_default();
        // SAFETY: `enter` makes only async-signal-safe system calls on
        // memory prepared before the fork (see `Setup`).
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || setup.enter());
        }
        let started = Instant::now();
        let mut child = command.spawn().map_err(|e| {
            if e.raw_os_error() == Some(libc::EPERM) || e.raw_os_error() == Some(libc::ENOSPC) {
                JailError::Unavailable(format!(
                    "user namespaces are not allowed here ({e}); on Linux they must be enabled \
                     for unprivileged users (kernel.unprivileged_userns_clone, \
                     user.max_user_namespaces)"
                ))
            } else {
                JailError::Spawn(crate::io_reason(&e))
            }
        })?;
        let mut stdin = child.stdin.take();
        let input = self.stdin;
        let feed = async move {
            if let Some(pipe) = stdin.as_mut() {
                // A program that exits without reading its input is not
                // an error of the call's.
                let _ = pipe.write_all(&input).await;
            }
            drop(stdin);
        };
        let stdout = read_capped(child.stdout.take(), self.pipe_bytes);
        let stderr = read_capped(child.stderr.take(), self.pipe_bytes);
        let wait = async {
            match tokio::time::timeout_at(self.deadline.into(), child.wait()).await {
                Ok(status) => (status, false),
                Err(_) => {
                    let _ = child.start_kill();
                    (child.wait().await, true)
                }
            }
        };
        let ((status, timed_out), (stdout, cut_out), (stderr, cut_err), ()) =
            tokio::join!(wait, stdout, stderr, feed);
        let status = status.map_err(|e| JailError::Spawn(crate::io_reason(&e)))?;
        use std::os::unix::process::ExitStatusExt;
        let returncode = match (status.code(), status.signal()) {
            (Some(code), _) => code,
            (None, Some(signal)) => -signal,
            (None, None) => -1,
        };
        let duration = started.elapsed();
        if let Some(cgroup) = cgroup {
            // Whatever the program left running is killed, and its groups
            // removed (which waits for the kernel a moment).
            let _ = tokio::task::spawn_blocking(move || drop(cgroup)).await;
        }
        Ok(Finished {
            returncode,
            stdout,
            stderr,
            truncated: cut_out || cut_err,
            timed_out,
            duration,
        })
    }

    fn bwrap_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut push = |parts: &[&std::ffi::OsStr]| args.extend(parts.iter().map(|p| p.into()));
        let s = |text: &'static str| std::ffi::OsStr::new(text);
        push(&[
            s("--unshare-user"),
            s("--unshare-all"),
            s("--disable-userns"),
            s("--die-with-parent"),
            s("--new-session"),
            s("--cap-drop"),
            s("ALL"),
            s("--ro-bind"),
            s("/usr"),
            s("/usr"),
        ]);
        for top in ["/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"] {
            match std::fs::read_link(top) {
                Ok(target) => push(&[s("--symlink"), target.as_os_str(), s(top)]),
                Err(_) if Path::new(top).is_dir() => push(&[s("--ro-bind"), s(top), s(top)]),
                Err(_) => {}
            }
        }
        for file in ETC_FILES {
            push(&[s("--ro-bind-try"), s(file), s(file)]);
        }
        push(&[s("--proc"), s("/proc"), s("--dev"), s("/dev")]);
        push(&[s("--bind"), self.scratch.as_os_str(), s("/tmp")]);
        if let Some(skill) = self.skill_dir {
            push(&[s("--ro-bind"), skill.as_os_str(), s("/skill")]);
        }
        match &self.workspace {
            Some(WorkspaceView::ReadOnly(dir)) => {
                push(&[s("--ro-bind"), dir.as_os_str(), s("/workspace")])
            }
            Some(WorkspaceView::Staged { merged, .. }) => {
                push(&[s("--bind"), merged.as_os_str(), s("/workspace")])
            }
            None => {}
        }
        push(&[s("--chdir"), std::ffi::OsStr::new(self.cwd)]);
        push(&[s("--clearenv")]);
        let base = [
            ("PATH", "/usr/local/bin:/usr/bin:/bin"),
            ("HOME", "/tmp"),
            ("TMPDIR", "/tmp"),
            ("LANG", "C.UTF-8"),
        ];
        let given = self.env.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        for (key, value) in base.into_iter().chain(given) {
            push(&[
                s("--setenv"),
                std::ffi::OsStr::new(key),
                std::ffi::OsStr::new(value),
            ]);
        }
        args
    }
}

/// What the forked child does before it executes bubblewrap, prepared
/// before the fork: after it, only async-signal-safe calls are allowed,
/// so nothing here allocates.
struct Setup {
    limits: Vec<(Resource, u64)>,
    /// The control groups' `cgroup.procs` files, to join first.
    join: Vec<CString>,
    overlay: Option<OverlayMount>,
}

struct OverlayMount {
    uid_map: CString,
    gid_map: CString,
    target: CString,
    options: CString,
}

impl Setup {
    fn new(jail: &Jail<'_>, remaining: Duration) -> Result<Setup, JailError> {
        let cpu = remaining.as_secs() + 1;
        let limits = vec![
            (Resource::Cpu, cpu),
            (Resource::As, PROGRAM_MEMORY_BYTES),
            (Resource::Nproc, PROGRAM_PROCESSES),
            (Resource::Fsize, jail.file_bytes),
            (Resource::Nofile, PROGRAM_OPEN_FILES),
            (Resource::Core, 0),
        ];
        let overlay = match &jail.workspace {
            Some(WorkspaceView::Staged {
                lower,
                layer,
                upper,
                work,
                merged,
            }) => {
                let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
                let c = |text: Vec<u8>| {
                    CString::new(text).map_err(|_| JailError::Spawn("a path holds NUL".into()))
                };
                let options = format!(
                    "userxattr,lowerdir={}:{},upperdir={},workdir={}",
                    escaped(layer),
                    escaped(lower),
                    escaped(upper),
                    escaped(work)
                );
                let (uid, gid) = (uid.as_raw(), gid.as_raw());
                Some(OverlayMount {
                    uid_map: c(format!("{uid} {uid} 1").into_bytes())?,
                    gid_map: c(format!("{gid} {gid} 1").into_bytes())?,
                    target: c(merged.as_os_str().as_bytes().to_vec())?,
                    options: c(options.into_bytes())?,
                })
            }
            _ => None,
        };
        Ok(Setup {
            limits,
            join: Vec::new(),
            overlay,
        })
    }

    /// Runs in the forked child.
    fn enter(&self) -> io::Result<()> {
        for procs in &self.join {
            write_file(procs, b"0")?;
        }
        for &(resource, value) in &self.limits {
            let limit = Rlimit {
                current: Some(value),
                maximum: Some(value),
            };
            rustix::process::setrlimit(resource, limit)?;
        }
        rustix::thread::set_no_new_privs(true)?;
        if let Some(overlay) = &self.overlay {
            overlay.mount()?;
        }
        Ok(())
    }
}

impl OverlayMount {
    fn mount(&self) -> io::Result<()> {
        use rustix::mount::{MountFlags, MountPropagationFlags};
        use rustix::thread::UnshareFlags;
        // SAFETY: the unshared tables are namespaces, not file descriptors
        // (the hazard `unshare_unsafe` warns of), in a child of one thread.
        #[allow(unsafe_code)]
        unsafe {
            rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNS)?;
        }
        write_file(c"/proc/self/setgroups", b"deny")?;
        write_file(c"/proc/self/uid_map", self.uid_map.as_bytes())?;
        write_file(c"/proc/self/gid_map", self.gid_map.as_bytes())?;
        rustix::mount::mount_change(
            c"/",
            MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
        )?;
        rustix::mount::mount(
            c"overlay",
            self.target.as_c_str(),
            c"overlay",
            MountFlags::empty(),
            self.options.as_c_str(),
        )?;
        Ok(())
    }
}

/// Writes `bytes` to the file at `path` with plain system calls.
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    rustix::io::write(&fd, bytes)?;
    Ok(())
}

/// A path as overlayfs's options take it: `\`, `,` and `:` escaped.
fn escaped(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '\\' | ',' | ':') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Reads a stream to its end, keeping the first `cap` bytes.
async fn read_capped(stream: Option<impl AsyncRead + Unpin>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut stream) = stream else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                cut |= n > room;
            }
        }
    }
    (kept, cut)
}
