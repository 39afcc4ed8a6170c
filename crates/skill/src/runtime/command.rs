//! A script's command line as a skill's instructions write it
//! (`python3 scripts/fill.py --out a.pdf`, `python -m scripts.fill`),
//! split into the script and its arguments without a shell: quotes and
//! backslashes are honoured, shell operators are refused.

use thiserror::Error;

/// The script a command line runs, relative to the skill folder, and its
/// arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct ScriptCommand {
    pub script: String,
    pub args: Vec<String>,
}

/// Why a command line names no script that can run.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CommandError {
    #[error("the command line is empty; give the script, e.g. `python3 scripts/x.py --flag a`.")]
    Empty,
    #[error(
        "the command line has an unclosed quote; close it, or pass the script and `args` \
         separately."
    )]
    UnclosedQuote,
    #[error(
        "the command line uses `{0}`, which needs a shell; skillbox runs one script without a \
         shell. Run each step as its own run_script call, and pass input as `stdin`."
    )]
    Shell(String),
    #[error(
        "`{0} -c` runs inline code, not a script the skill ships: run_script runs only a \
         skill's own scripts. Run the code with run_code {{\"code\": …, \"skill\": …}} \
         instead."
    )]
    InlineCode(String),
    #[error("`{0}` is followed by no script; give one, e.g. `{0} scripts/x.py`.")]
    NoScript(String),
    #[error(
        "the command line has more than one line; give one command, and run the next as its \
         own run_script call."
    )]
    Lines,
}

/// Interpreters whose next word is the script.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "py", "sh", "bash", "zsh", "node", "deno", "bun",
];

/// Python's own options that take no value, and those that take one.
const PYTHON_FLAGS: &[&str] = &[
    "-u", "-B", "-E", "-s", "-S", "-I", "-O", "-OO", "-q", "-b", "-bb",
];
const PYTHON_FLAGS_WITH_VALUE: &[&str] = &["-X", "-W"];

/// Splits `line` and finds the script it runs.
pub fn parse(line: &str) -> Result<ScriptCommand, CommandError> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.contains(['\n', '\r']) {
        return Err(CommandError::Lines);
    }
    let mut words = split(line)?.into_iter().peekable();
    // `uv run python x.py` and `uv run x.py` run the same script.
    if words.peek().is_some_and(|w| w == "uv") {
        words.next();
        if words.peek().is_some_and(|w| w == "run") {
            words.next();
        }
    }
    let first = words.next().ok_or(CommandError::Empty)?;
    let program = first.rsplit('/').next().unwrap_or(&first).to_string();
    let script = if is_interpreter(&program) {
        let mut module = None;
        let mut script = None;
        while let Some(word) = words.next() {
            if PYTHON_FLAGS.contains(&word.as_str()) || word == "--" {
                continue;
            }
            if PYTHON_FLAGS_WITH_VALUE.contains(&word.as_str()) {
                words.next();
                continue;
            }
            match word.as_str() {
                "-c" => return Err(CommandError::InlineCode(program)),
                "-m" => {
                    module = words.next();
                    break;
                }
                _ => {
                    script = Some(word);
                    break;
                }
            }
        }
        match (module, script) {
            (Some(module), _) => format!("{}.py", module.replace('.', "/")),
            (None, Some(script)) => script,
            (None, None) => return Err(CommandError::NoScript(program)),
        }
    } else {
        first
    };
    Ok(ScriptCommand {
        script: skill_relative(&script),
        args: words.collect(),
    })
}

fn is_interpreter(program: &str) -> bool {
    INTERPRETERS.contains(&program)
        || program
            .strip_prefix("python3.")
            .is_some_and(|minor| minor.chars().all(|c| c.is_ascii_digit()))
}

/// The path relative to the skill folder: `./x`, `/skill/x` and a leading
/// `$VAR/` or `${VAR}/` (a skill-folder variable) name the same file.
fn skill_relative(path: &str) -> String {
    let mut rest = path;
    if let Some(after) = rest.strip_prefix("${")
        && let Some((_, tail)) = after.split_once("}/")
    {
        rest = tail;
    } else if let Some(after) = rest.strip_prefix('$')
        && let Some((_, tail)) = after.split_once('/')
    {
        rest = tail;
    }
    rest = rest.strip_prefix("/skill/").unwrap_or(rest);
    rest.split('/')
        .filter(|part| *part != "." && !part.is_empty())
        .collect::<Vec<_>>()
        .join("/")
}

/// Words as a POSIX shell would split them, refusing what only a shell
/// could do: pipes, lists, redirections, substitutions.
///
/// Written here rather than taken from the `shlex` crate: refusing shell
/// syntax needs to know whether a `|` or `$(` was quoted, which a splitter
/// that returns only the words cannot say.
fn split(line: &str) -> Result<Vec<String>, CommandError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(CommandError::UnclosedQuote),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(CommandError::UnclosedQuote),
                        },
                        Some(c @ '`') => return Err(CommandError::Shell(c.to_string())),
                        Some('$') if chars.peek() == Some(&'(') => {
                            return Err(CommandError::Shell("$(".into()));
                        }
                        Some(c) => word.push(c),
                        None => return Err(CommandError::UnclosedQuote),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '|' | '&' | ';' | '<' | '>' | '`' | '(' | ')' => {
                return Err(CommandError::Shell(c.to_string()));
            }
            '$' if chars.peek() == Some(&'(') => return Err(CommandError::Shell("$(".into())),
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> (String, Vec<String>) {
        let c = parse(line).unwrap();
        (c.script, c.args)
    }

    #[test]
    fn a_command_line_names_its_script_and_arguments() {
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parsed("python3 scripts/fill.py --out 'a b.pdf' \"x\\\"y\""),
            (
                "scripts/fill.py".into(),
                owned(&["--out", "a b.pdf", "x\"y"])
            )
        );
        assert_eq!(
            parsed("python -u -X utf8 ./scripts/x.py a"),
            ("scripts/x.py".into(), owned(&["a"]))
        );
        assert_eq!(
            parsed("python -m scripts.tools.x --n 3"),
            ("scripts/tools/x.py".into(), owned(&["--n", "3"]))
        );
        assert_eq!(
            parsed("uv run scripts/x.py"),
            ("scripts/x.py".into(), vec![])
        );
        assert_eq!(
            parsed("python3.14 ${SKILL_DIR}/scripts/x.py"),
            ("scripts/x.py".into(), vec![])
        );
        assert_eq!(
            parsed("/usr/bin/python3 /skill/scripts/x.py"),
            ("scripts/x.py".into(), vec![])
        );
        assert_eq!(
            parsed("scripts/x.py -h"),
            ("scripts/x.py".into(), owned(&["-h"]))
        );
        assert_eq!(
            parsed("bash scripts/setup.sh"),
            ("scripts/setup.sh".into(), vec![])
        );
        assert_eq!(
            parsed("python3 -- scripts/./x.py\r\n"),
            ("scripts/x.py".into(), vec![])
        );
    }

    #[test]
    fn what_needs_a_shell_is_refused() {
        for line in [
            "python x.py | head",
            "cd scripts && python x.py",
            "python x.py > out.txt",
            "python x.py; rm -rf /",
            "python $(which x).py",
            "python \"$(x)\"",
            "python `x`",
        ] {
            assert!(matches!(parse(line), Err(CommandError::Shell(_))), "{line}");
        }
        assert_eq!(
            parse("python -c 'print(1)'"),
            Err(CommandError::InlineCode("python".into()))
        );
        assert_eq!(parse("python 'x"), Err(CommandError::UnclosedQuote));
        assert_eq!(parse("  "), Err(CommandError::Empty));
        assert_eq!(
            parse("python3 a.py\npython3 ../x.py"),
            Err(CommandError::Lines)
        );
        assert_eq!(
            parse("python3 -u"),
            Err(CommandError::NoScript("python3".into()))
        );
    }
}
