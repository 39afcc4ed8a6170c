//! What `skillbox add` is given: `oci://HOST[:PORT]/REPO[:TAG][@sha256:…]`,
//! `git+URL[@REV][#path=SUBDIR]`, or the path of a git repository on this
//! machine (`PATH[#path=SUBDIR]`, read as `git+file://` of its real path).

use std::fmt;

/// Where a skill is fetched from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillRef {
    Oci(OciRef),
    Git(GitRef),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciRef {
    /// `host[:port]`.
    pub registry: String,
    pub repository: String,
    /// `None` with a digest; `latest` when neither is given.
    pub tag: Option<String>,
    /// `sha256:<64 hex>`.
    pub digest: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitRef {
    /// `https://…`, `ssh://…`, `file://…` (`http://` only to loopback).
    pub url: String,
    /// A commit, branch or tag; `None` is the remote's HEAD.
    pub rev: Option<String>,
    /// The skill's folder in the repository, `/`-separated; `None` is the
    /// repository's root.
    pub path: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "`{reference}` is not a skill reference: {why}; use oci://HOST[:PORT]/REPO:TAG, oci://HOST/REPO@sha256:DIGEST, git+URL[@COMMIT][#path=SUBDIR], or the path of a git repository on this machine"
)]
pub struct RefError {
    pub reference: String,
    pub why: String,
}

impl std::str::FromStr for SkillRef {
    type Err = RefError;

    fn from_str(text: &str) -> Result<Self, RefError> {
        let fail = |why: &str| RefError {
            reference: text.to_string(),
            why: why.to_string(),
        };
        if let Some(rest) = text.strip_prefix("oci://") {
            return parse_oci(rest).map(SkillRef::Oci).map_err(|why| fail(&why));
        }
        if let Some(rest) = text.strip_prefix("git+") {
            return parse_git(rest).map(SkillRef::Git).map_err(|why| fail(&why));
        }
        Err(fail(
            "it names neither an OCI registry nor a git repository",
        ))
    }
}

impl SkillRef {
    /// A reference as [`str::parse`] reads it, or the path of a git
    /// repository on this machine (a checkout, or a bare repository),
    /// optionally with `#path=SUBDIR`: read as `git+file://` of its real
    /// path, so the lock names the repository wherever `add` ran.
    pub fn parse_or_local(text: &str) -> Result<SkillRef, RefError> {
        if text.starts_with("oci://") || text.starts_with("git+") {
            return text.parse();
        }
        let (path, fragment) = match text.split_once('#') {
            Some((path, fragment)) => (path, Some(fragment)),
            None => (text, None),
        };
        let dir = std::path::Path::new(path);
        let is_repository = dir.join(".git").exists()
            || (dir.join("HEAD").is_file() && dir.join("objects").is_dir());
        let real = match std::fs::canonicalize(dir) {
            Ok(real) if is_repository => real,
            _ => return text.parse(),
        };
        let fragment = fragment.map(|f| format!("#{f}")).unwrap_or_default();
        let url = format!("git+file://{}{fragment}", real.display());
        url.parse().map_err(|e: RefError| RefError {
            reference: text.to_string(),
            why: if real.to_string_lossy().contains(char::is_whitespace) {
                format!(
                    "it is a git repository on this machine, read as `{url}`, and its path \
                     holds a space, which a git URL here may not; clone or link it to a path \
                     without spaces"
                )
            } else {
                format!(
                    "it is a git repository on this machine, read as `{url}`: {}",
                    e.why
                )
            },
        })
    }
}

fn parse_oci(rest: &str) -> Result<OciRef, String> {
    let (name, digest) = match rest.split_once('@') {
        Some((name, digest)) => {
            let hex = digest
                .strip_prefix("sha256:")
                .ok_or("the digest must be sha256:<64 hex digits>")?;
            if hex.len() != 64
                || !hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err("the digest must be sha256:<64 lowercase hex digits>".into());
            }
            (name, Some(digest.to_string()))
        }
        None => (rest, None),
    };
    let (registry, path) = name
        .split_once('/')
        .ok_or("there is no repository after the registry's host")?;
    if registry.is_empty()
        || !registry
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b))
    {
        return Err(format!("`{registry}` is not a registry host[:port]"));
    }
    // A tag follows the last `:` after the last `/`.
    let last = path.rsplit('/').next().unwrap_or(path);
    let (repository, tag) = match last.rsplit_once(':') {
        Some((_, tag)) => (&path[..path.len() - tag.len() - 1], Some(tag.to_string())),
        None => (path, None),
    };
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && c.as_bytes()[0].is_ascii_alphanumeric()
    };
    if !repository.split('/').all(component_ok) {
        return Err(format!(
            "`{repository}` is not a repository name (lowercase letters, digits, `.`, `_`, `-`, `/`)"
        ));
    }
    if let Some(tag) = &tag
        && (tag.is_empty()
            || tag.len() > 128
            || !tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b)))
    {
        return Err(format!("`{tag}` is not a tag"));
    }
    let tag = match (&tag, &digest) {
        (None, None) => Some("latest".to_string()),
        _ => tag,
    };
    Ok(OciRef {
        registry: registry.to_string(),
        repository: repository.to_string(),
        tag,
        digest,
    })
}

fn parse_git(rest: &str) -> Result<GitRef, String> {
    let (url_rev, path) = match rest.split_once('#') {
        Some((url, fragment)) => {
            let path = fragment
                .strip_prefix("path=")
                .ok_or("the fragment must be #path=SUBDIR")?
                .trim_matches('/');
            if path.is_empty()
                || path
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
            {
                return Err(format!("`{path}` is not a folder inside the repository"));
            }
            (url, Some(path.to_string()))
        }
        None => (rest, None),
    };
    let scheme_end = url_rev.find("://").ok_or("the URL has no scheme")?;
    let scheme = &url_rev[..scheme_end];
    // A revision is the last `@` in the path (an `@` in the authority is
    // a user name); it may hold `/` (`@feature/x`).
    let path_start = url_rev[scheme_end + 3..]
        .find('/')
        .map_or(url_rev.len(), |i| scheme_end + 3 + i);
    let (url, rev) = match url_rev[path_start..].rfind('@') {
        Some(at) => {
            let at = path_start + at;
            (&url_rev[..at], Some(url_rev[at + 1..].to_string()))
        }
        None => (url_rev, None),
    };
    if let Some(rev) = &rev
        && (rev.is_empty()
            || rev.starts_with('-')
            || !rev
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b)))
    {
        return Err(format!("`{rev}` is not a commit, branch or tag"));
    }
    check_git_url(url, scheme)?;
    Ok(GitRef {
        url: url.to_string(),
        rev,
        path,
    })
}

/// Refuses what git could read differently from this check (spaces,
/// backslashes, control characters), transports other than https, ssh
/// and file, plain http to anything but loopback, and a password in the
/// URL (it would be stored in skillbox.lock and shown in listings).
fn check_git_url(url: &str, scheme: &str) -> Result<(), String> {
    if url
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err("the URL holds spaces, backslashes or control characters".into());
    }
    let parsed = url::Url::parse(url).map_err(|e| format!("the URL does not parse ({e})"))?;
    if parsed.password().is_some() {
        return Err(
            "the URL holds a password, which would be stored in skillbox.lock; let git's credential helper supply it".into(),
        );
    }
    if parsed.query().is_some() {
        return Err(
            "the URL has a query (`?`), which git and this check could read differently".into(),
        );
    }
    match scheme {
        "https" | "ssh" | "file" => Ok(()),
        "http" if parsed.host_str().is_some_and(is_loopback) => Ok(()),
        "http" => Err("plain http:// is allowed only to a loopback host; use https://".into()),
        other => Err(format!(
            "`{other}://` is not a git transport skillbox uses (https, ssh, file)"
        )),
    }
}

/// Whether `host` (`name`, `name:port`, `[v6]:port`) is this machine.
pub fn is_loopback(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => host.rsplit_once(':').map_or(host, |(name, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                name
            } else {
                host
            }
        }),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl OciRef {
    /// The same repository at `digest` (what a lock pins).
    pub fn at(&self, digest: &str) -> OciRef {
        OciRef {
            tag: None,
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// The same repository at `tag`.
    pub fn tagged(&self, tag: &str) -> OciRef {
        OciRef {
            tag: Some(tag.to_string()),
            digest: None,
            ..self.clone()
        }
    }
}

impl fmt::Display for GitRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "git+{}", self.url)?;
        if let Some(rev) = &self.rev {
            write!(f, "@{rev}")?;
        }
        if let Some(path) = &self.path {
            write!(f, "#path={path}")?;
        }
        Ok(())
    }
}

impl fmt::Display for SkillRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkillRef::Oci(r) => r.fmt(f),
            SkillRef::Git(r) => r.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_repository_whose_path_holds_a_space_says_how_it_was_read() {
        let root = tempfile::tempdir().unwrap();
        let repo = root.path().join("my skills");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        let error = SkillRef::parse_or_local(repo.to_str().unwrap()).unwrap_err();
        assert!(
            error.why.contains("git repository on this machine"),
            "{error}"
        );
        assert!(error.why.contains("holds a space"), "{error}");
        assert!(!error.why.contains("URL holds spaces"), "{error}");
    }

    #[test]
    fn oci_and_git_references_parse_and_print_back() {
        for text in [
            "oci://127.0.0.1:5000/skills/greet:1.0",
            "oci://registry.example/greet@sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "git+https://example.org/skills.git@main#path=skills/pdf",
            "git+file:///tmp/repo.git",
            "git+ssh://git@example.org/skills.git@0123abc",
            "git+https://example.org/skills.git@feature/x#path=a",
            // Collections keep skills under hidden folders; named, they are
            // allowed.
            "git+https://example.org/skills.git#path=skills/.curated/pdf",
        ] {
            let parsed: SkillRef = text.parse().unwrap();
            assert_eq!(parsed.to_string(), text);
        }
        let SkillRef::Oci(r) = "oci://localhost/x".parse().unwrap() else {
            panic!()
        };
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let SkillRef::Git(g) = "git+ssh://git@example.org/s.git".parse().unwrap() else {
            panic!()
        };
        assert_eq!(
            (g.url.as_str(), g.rev),
            ("ssh://git@example.org/s.git", None)
        );
    }

    #[test]
    fn hostile_or_malformed_references_are_refused() {
        for text in [
            "greet",
            "oci://host",
            "oci://host/UPPER:1",
            "oci://host/x@sha256:xyz",
            "oci://host/x:bad tag",
            "git+ext::sh -c touch% /tmp/pwned",
            "git+http://example.org/s.git",
            "git+https://example.org/s.git#path=../up",
            "git+https://example.org/s.git@--upload-pack=x",
            "git+https://example.org/s.git#sub",
            "git+http://192.0.2.2:5320?@127.0.0.1/plain.git",
            "git+https://bob:secret@example.org/s.git",
            "git+https://example.org/a b.git",
        ] {
            assert!(text.parse::<SkillRef>().is_err(), "{text}");
        }
    }
}
