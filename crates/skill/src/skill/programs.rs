//! The host programs a skill's Python scripts start, read from their
//! source: what `load_skill`'s notes and `add`'s permissions name, so the
//! user sees which programs a public skill without a manifest will ask
//! for, and can grant them (`skillbox grant SKILL --program NAME`).
//!
//! Only programs scripts commonly start are looked for, and only in a
//! script that starts processes at all (`subprocess`, `os.system`,
//! `os.popen`): a name as a string (`"soffice"`, `'git'`) or at the start
//! of one (`"pdftoppm -png"`).

use std::collections::BTreeSet;

/// Programs skills' scripts start, by the names they use.
pub const KNOWN_PROGRAMS: &[&str] = &[
    "soffice",
    "libreoffice",
    "pdftoppm",
    "pdftotext",
    "pdfinfo",
    "pdfimages",
    "qpdf",
    "pandoc",
    "git",
    "gh",
    "convert",
    "magick",
    "ffmpeg",
    "ffprobe",
    "tesseract",
    "node",
    "npx",
    "chromium",
    "curl",
    "wget",
    "pdflatex",
    "xelatex",
    "dot",
];

/// Adds the known programs `source` starts to `into`.
pub fn programs_named(source: &str, into: &mut BTreeSet<String>) {
    let starts = ["subprocess", "os.system", "os.popen"];
    if !starts.iter().any(|s| source.contains(s)) {
        return;
    }
    for name in KNOWN_PROGRAMS {
        let named = ['"', '\''].iter().any(|quote| {
            source.contains(&format!("{quote}{name}{quote}"))
                || source.contains(&format!("{quote}{name} "))
        });
        if named {
            into.insert((*name).to_string());
        }
    }
}

/// The shells a script may ask for by its `#!` line.
pub const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash"];

/// The shell a script asks for and the options its `#!` line gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    pub shell: String,
    pub options: Vec<String>,
}

/// The interpreter `script` asks for: its `#!` line (`#!/bin/bash -e`,
/// `#!/usr/bin/env bash`), else its extension (`.bash`, `.zsh`; `sh`
/// otherwise). `Err` names what a `#!` line asks for when it is no shell.
pub fn shell_interpreter(script: &str, first_line: &str) -> Result<Interpreter, String> {
    let Some(line) = first_line.strip_prefix("#!") else {
        let ext = script
            .rsplit_once('.')
            .map(|(_, ext)| ext.to_ascii_lowercase());
        let shell = match ext.as_deref() {
            Some("bash") => "bash",
            Some("zsh") => "zsh",
            _ => "sh",
        };
        return Ok(Interpreter {
            shell: shell.into(),
            options: Vec::new(),
        });
    };
    let mut words = line.split_whitespace();
    let mut program = words.next().unwrap_or_default();
    if program.rsplit('/').next() == Some("env") {
        program = words
            .by_ref()
            .find(|w| !w.starts_with('-'))
            .unwrap_or_default();
    }
    let shell = program.rsplit('/').next().unwrap_or_default();
    if !SHELLS.contains(&shell) {
        return Err(shell.to_string());
    }
    Ok(Interpreter {
        shell: shell.into(),
        options: words
            .take_while(|w| w.starts_with('-'))
            .map(str::to_string)
            .collect(),
    })
}

/// Whether `path` is a shell script, by its extension.
pub fn is_shell_script(path: &str) -> bool {
    let ext = path
        .rsplit('/')
        .next()
        .and_then(|file| file.rsplit_once('.'));
    matches!(
        ext.map(|(_, e)| e.to_ascii_lowercase()).as_deref(),
        Some("sh" | "bash" | "zsh")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asks(script: &str, line: &str) -> Result<(String, Vec<String>), String> {
        shell_interpreter(script, line).map(|i| (i.shell, i.options))
    }

    #[test]
    fn the_hash_bang_line_names_the_shell_and_its_options() {
        let plain = |s: &str| Ok((s.to_string(), vec![]));
        assert_eq!(asks("scripts/a.sh", "#!/bin/bash"), plain("bash"));
        assert_eq!(asks("scripts/a.sh", "#!/usr/bin/env bash"), plain("bash"));
        assert_eq!(
            asks("scripts/a.sh", "#!/usr/bin/env -S bash"),
            plain("bash")
        );
        assert_eq!(asks("scripts/a.sh", "#! /bin/sh"), plain("sh"));
        assert_eq!(
            asks("scripts/a.sh", "#!/bin/bash -eu"),
            Ok(("bash".into(), vec!["-eu".into()]))
        );
        assert_eq!(asks("scripts/a.sh", "set -e"), plain("sh"));
        assert_eq!(asks("scripts/a.bash", ""), plain("bash"));
        assert_eq!(
            asks("scripts/a.sh", "#!/usr/bin/python3"),
            Err("python3".into())
        );
        assert_eq!(asks("scripts/a.sh", "#!"), Err(String::new()));
    }

    fn named(source: &str) -> Vec<String> {
        let mut found = BTreeSet::new();
        programs_named(source, &mut found);
        found.into_iter().collect()
    }

    #[test]
    fn names_in_scripts_that_start_processes_are_found() {
        assert_eq!(
            named(
                "import subprocess\nsubprocess.run(['soffice', '--headless'])\nos.system(\"git log\")"
            ),
            ["git", "soffice"]
        );
        // A script that starts nothing names nothing, whatever it says.
        assert!(named("print('git')").is_empty());
        // A word inside another is not a name.
        assert!(named("import subprocess\nx = 'digit'\n").is_empty());
    }
}
