//! A control group for one program's whole process tree: how many
//! processes it may have and how much memory all of them together use.
//!
//! Resource limits bind each process, and `RLIMIT_NPROC` does not bind
//! root at all, so a fork bomb started by a program of a host that runs as
//! root (a container, a CI runner) is stopped only by a control group. The
//! host makes one where it may: as root, under the root of a cgroup v2
//! hierarchy whose controllers include `pids` and `memory`, or in its own
//! groups of the v1 `pids` and `memory` hierarchies. A user that is not
//! root seldom may; its programs are bound by `RLIMIT_NPROC`, which does
//! bind it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup";

/// The groups one program runs in; removed when dropped.
pub(crate) struct ProgramCgroup {
    /// One folder on cgroup v2; a `pids` and a `memory` folder on v1.
    dirs: Vec<PathBuf>,
    /// The `cgroup.procs` file of each, for the child to join.
    pub(crate) join: Vec<CString>,
}

impl ProgramCgroup {
    /// New groups bounding the tree to `processes` and `memory` bytes, or
    /// `None` where this host may not make them.
    pub(crate) fn make(processes: u64, memory: u64) -> Option<ProgramCgroup> {
        let name = format!("skillbox-program-{}-{}", std::process::id(), unique());
        let root = Path::new(ROOT);
        let v2 = root.join("cgroup.controllers").is_file();
        let made = if v2 {
            let controllers = std::fs::read_to_string(root.join("cgroup.subtree_control")).ok()?;
            if !(controllers.contains("pids") && controllers.contains("memory")) {
                return None;
            }
            let dir = root.join(&name);
            std::fs::create_dir(&dir).ok()?;
            let group = ProgramCgroup::of(vec![dir.clone()]);
            write(&dir, "pids.max", processes)?;
            write(&dir, "memory.max", memory)?;
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            group
        } else {
            let wanted = [own_v1("pids")?.join(&name), own_v1("memory")?.join(&name)];
            let mut dirs = Vec::new();
            for dir in wanted {
                if std::fs::create_dir(&dir).is_err() {
                    // Dropping what was made removes it.
                    drop(ProgramCgroup::of(dirs));
                    return None;
                }
                dirs.push(dir);
            }
            let group = ProgramCgroup::of(dirs);
            write(&group.dirs[0], "pids.max", processes)?;
            write(&group.dirs[1], "memory.limit_in_bytes", memory)?;
            group
        };
        Some(made)
    }

    fn of(dirs: Vec<PathBuf>) -> ProgramCgroup {
        let join = dirs
            .iter()
            .filter_map(|d| CString::new(d.join("cgroup.procs").as_os_str().as_bytes()).ok())
            .collect();
        ProgramCgroup { dirs, join }
    }

    /// Kills whatever is left in the groups.
    fn kill_all(&self) {
        for dir in &self.dirs {
            if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
                continue;
            }
            for _ in 0..100 {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                let pids: Vec<i32> = procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect();
                if pids.is_empty() {
                    break;
                }
                for pid in pids {
                    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }
}

impl Drop for ProgramCgroup {
    fn drop(&mut self) {
        self.kill_all();
        for dir in &self.dirs {
            // A group is removed once its last process is gone, which the
            // kernel reports a moment after the kill.
            for _ in 0..200 {
                match std::fs::remove_dir(dir) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                    _ => break,
                }
            }
        }
    }
}

/// This process's own group in the v1 hierarchy of `controller`.
fn own_v1(controller: &str) -> Option<PathBuf> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = groups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
        names
            .split(',')
            .any(|n| n == controller)
            .then(|| path.to_string())
    })?;
    let dir = Path::new(ROOT)
        .join(controller)
        .join(path.trim_start_matches('/'));
    dir.is_dir().then_some(dir)
}

fn write(dir: &Path, file: &str, value: u64) -> Option<()> {
    std::fs::write(dir.join(file), value.to_string()).ok()
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
