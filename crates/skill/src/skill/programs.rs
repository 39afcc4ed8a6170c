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

#[cfg(test)]
mod tests {
    use super::*;

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
