//! Shell scripts a skill ships (`scripts/x.sh`).
//!
//! The sandbox has no shell of its own. A skill's shell script runs with
//! the shell the user granted the skill as a host program
//! (`--allow-program SKILL:bash`), in the OS sandbox every granted program
//! runs in. The Python runtime starts it through its `subprocess`, so the
//! run is an ordinary script call: the same grants, staged writes, limits
//! and audit record, and nothing new on the host's side. The programs the
//! script itself starts (grep, sed, jq) run inside that same OS sandbox:
//! granting a shell grants what the system folders hold, read-only, with
//! no network, as Claude Code and Codex run every script.

use crate::runtime::python;
use crate::sandbox::SKILL_MOUNT;

/// The granted shell that runs a script asking for `wanted`: that shell,
/// or `bash` for a POSIX `sh` script (bash runs them as sh would), or
/// `None` when none is granted.
pub fn granted_shell(wanted: &str, is_granted: impl Fn(&str) -> bool) -> Option<String> {
    let stand_ins: &[&str] = match wanted {
        "sh" | "dash" => &["bash"],
        _ => &[],
    };
    std::iter::once(wanted)
        .chain(stand_ins.iter().copied())
        .find(|shell| is_granted(shell))
        .map(str::to_string)
}

/// The Python runtime's argv that runs `script` (relative to the skill
/// folder) with `shell` and `options`: a few lines of Python that start
/// the shell through `subprocess`, hand it the call's stdin and exit with
/// its status (a signal as the shell reports one, 128 + its number).
pub fn launcher_argv(
    shell: &str,
    options: &[String],
    script: &str,
    args: Vec<String>,
) -> Vec<String> {
    let mut shell_argv = vec![shell.to_string()];
    shell_argv.extend(options.iter().cloned());
    shell_argv.push(format!("{SKILL_MOUNT}/{script}"));
    // A JSON list of strings is a Python list literal.
    let literal = serde_json::to_string(&shell_argv).expect("strings serialize");
    // It ends with `os._exit`, not an exception: the shell's status is the
    // call's, and the runtime's hints about a failed Python run (a
    // read-only workspace, a program it drives) are not about this one.
    let code = format!(
        "import os, subprocess, sys\n\
         done = subprocess.run({literal} + sys.argv[1:], stdin=sys.stdin.buffer)\n\
         sys.stdout.flush()\n\
         sys.stderr.flush()\n\
         os._exit(done.returncode if done.returncode >= 0 else 128 - done.returncode)\n"
    );
    python::code_argv(code, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_stands_in_for_sh_but_not_the_other_way() {
        let only = |granted: &'static str| move |shell: &str| shell == granted;
        assert_eq!(granted_shell("sh", only("bash")), Some("bash".into()));
        assert_eq!(granted_shell("sh", only("sh")), Some("sh".into()));
        assert_eq!(granted_shell("bash", only("sh")), None);
        assert_eq!(granted_shell("zsh", only("bash")), None);
    }

    #[test]
    fn the_launcher_passes_arguments_as_data() {
        let argv = launcher_argv(
            "bash",
            &["-e".into()],
            "scripts/x \"y\".sh",
            vec!["a".into()],
        );
        assert_eq!(argv[..2], ["python", "-c"]);
        assert!(argv[2].contains(r#"["bash","-e","/skill/scripts/x \"y\".sh"]"#));
        assert_eq!(argv[3], "a");
    }
}
