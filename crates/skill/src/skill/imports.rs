//! The modules Python source imports, read from its import lines: how the
//! host decides which Python runtime a script or code needs, without
//! running it.
//!
//! Only plain statements count (`import a.b as c, d`, `from a.b import c`,
//! at any indentation, so an import inside `try:` or a function counts
//! too). An import built at run time (`importlib.import_module(name)`,
//! `__import__`) is not seen; the runtime's hint then says how to write
//! it.

use std::collections::BTreeSet;

/// The most module names read from one source: far more than a program
/// imports, few enough that a skill made of import lines cannot make the
/// host's choice of runtime slow.
pub const MAX_IMPORTS: usize = 2_000;

/// The top-level module names `source` imports, added to `into` until it
/// holds [`MAX_IMPORTS`]. Relative imports (`from . import x`) are the
/// code's own, not a package's, and are left out.
pub fn top_level_imports(source: &str, into: &mut BTreeSet<String>) {
    let code = source
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default());
    for statement in code.flat_map(|line| line.split(';')) {
        if into.len() >= MAX_IMPORTS {
            return;
        }
        // A one-line compound statement (`try: import numpy`, `if x: import
        // y`) has its import after a colon.
        for part in std::iter::once(statement).chain(statement.split(':').skip(1)) {
            import_statement(part.trim_start(), into);
        }
    }
}

/// Adds the modules one statement imports, if it is an import.
fn import_statement(statement: &str, into: &mut BTreeSet<String>) {
    if let Some(rest) = keyword(statement, "import") {
        for part in rest.split(',') {
            add(part.split_whitespace().next(), into);
        }
    } else if let Some(rest) = keyword(statement, "from") {
        // `from a.b import c`, `from a import(c, d)`
        let module = rest.split_whitespace().next().unwrap_or_default();
        let after = rest.trim_start()[module.len()..].trim_start();
        if after.starts_with("import") {
            add(Some(module), into);
        }
    }
}

/// What follows `word` when the statement starts with it as a keyword
/// (followed by whitespace).
fn keyword<'a>(statement: &'a str, word: &str) -> Option<&'a str> {
    statement
        .strip_prefix(word)
        .filter(|rest| rest.starts_with(char::is_whitespace))
}

fn add(dotted: Option<&str>, into: &mut BTreeSet<String>) {
    let Some(top) = dotted.and_then(|d| d.split('.').next()) else {
        return;
    };
    if !top.is_empty() && top.chars().all(|c| c.is_alphanumeric() || c == '_') {
        into.insert(top.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imports(source: &str) -> Vec<String> {
        let mut found = BTreeSet::new();
        top_level_imports(source, &mut found);
        found.into_iter().collect()
    }

    #[test]
    fn plain_statements_name_their_top_level_modules() {
        let source = "import numpy as np, os.path\n\
                      from lxml.etree import parse\n\
                      try:\n    import yaml  # optional\nexcept ImportError: pass\n\
                      def f():\n    from PIL import Image; import json\n";
        assert_eq!(
            imports(source),
            ["PIL", "json", "lxml", "numpy", "os", "yaml"]
        );
    }

    #[test]
    fn one_line_compound_statements_tabs_and_parenthesized_names_count() {
        let source = "try: import numpy\nexcept ImportError: numpy = None\n\
                      import\tpandas\nfrom scipy import(stats)\nif True: import lxml.etree\n";
        assert_eq!(imports(source), ["lxml", "numpy", "pandas", "scipy"]);
    }

    #[test]
    fn a_source_of_import_lines_yields_at_most_the_cap() {
        let source: String = (0..5 * MAX_IMPORTS)
            .map(|k| format!("import m{k}\n"))
            .collect();
        assert_eq!(imports(&source).len(), MAX_IMPORTS);
    }

    #[test]
    fn relative_imports_strings_and_other_words_are_not_modules() {
        let source = "from . import helpers\nfrom .core import x\n\
                      print('import numpy')\nimported = 1\nfromage = 2\n\
                      # import pandas\nx = 'from scipy import stats'\n";
        assert_eq!(imports(source), Vec::<String>::new());
    }
}
