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

/// The top-level module names `source` imports, added to `into`.
/// Relative imports (`from . import x`) are the code's own, not a
/// package's, and are left out.
pub fn top_level_imports(source: &str, into: &mut BTreeSet<String>) {
    let code = source
        .lines()
        .map(|line| line.split('#').next().unwrap_or_default());
    for statement in code.flat_map(|line| line.split(';')).map(str::trim_start) {
        if let Some(rest) = statement.strip_prefix("import ") {
            for part in rest.split(',') {
                add(part.split_whitespace().next(), into);
            }
        } else if let Some(rest) = statement.strip_prefix("from ") {
            let mut words = rest.split_whitespace();
            let module = words.next();
            if words.next() == Some("import") {
                add(module, into);
            }
        }
    }
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
    fn relative_imports_strings_and_other_words_are_not_modules() {
        let source = "from . import helpers\nfrom .core import x\n\
                      print('import numpy')\nimported = 1\nfromage = 2\n\
                      # import pandas\nx = 'from scipy import stats'\n";
        assert_eq!(imports(source), Vec::<String>::new());
    }
}
