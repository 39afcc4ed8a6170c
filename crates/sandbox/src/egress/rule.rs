//! What a grant names: `host[:port]`.

use std::net::IpAddr;
use std::str::FromStr;

/// One `host[:port]` a call may reach. Without a port, 80 and 443 match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct NetRule {
    /// A host name or IP address, lowercase.
    pub host: String,
    /// The port; `None` matches 80 and 443.
    pub port: Option<u16>,
}

impl NetRule {
    pub(super) fn matches(&self, host: &str, port: u16) -> bool {
        self.host.eq_ignore_ascii_case(host)
            && self.port.map_or(port == 80 || port == 443, |p| p == port)
    }

    /// The address this rule names, when its host is an IP literal: such a
    /// rule is an explicit grant of that address, internal or not.
    pub(super) fn named_address(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

impl std::fmt::Display for NetRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.port {
            Some(port) => write!(f, "{host}:{port}"),
            None => f.write_str(&host),
        }
    }
}

impl FromStr for NetRule {
    type Err = String;

    /// `host`, `host:port`, `[v6]` or `[v6]:port`.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "`{text}` is not host[:port] (for example api.example.com:443 or 127.0.0.1:8080)"
            )
        };
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None if after.is_empty() => (host, None),
                None => return Err(bad()),
            }
        } else {
            match text.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (text, None),
            }
        };
        let valid_host = !host.is_empty()
            && (host.parse::<IpAddr>().is_ok()
                || host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'));
        if !valid_host {
            return Err(bad());
        }
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(bad)?),
        };
        Ok(NetRule {
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_match() {
        let rule: NetRule = "API.example.com:8443".parse().unwrap();
        assert!(rule.matches("api.example.com", 8443));
        assert!(!rule.matches("api.example.com", 443));
        let any_web: NetRule = "example.com".parse().unwrap();
        assert!(any_web.matches("example.com", 443) && any_web.matches("example.com", 80));
        assert!(!any_web.matches("example.com", 22));
        let v6: NetRule = "[::1]:8080".parse().unwrap();
        assert_eq!(v6.named_address(), Some("::1".parse().unwrap()));
        assert_eq!(v6.to_string(), "[::1]:8080");
        for bad in ["", ":80", "a b", "host:0", "host:99999", "[::1", "x/y"] {
            assert!(bad.parse::<NetRule>().is_err(), "{bad}");
        }
    }
}
