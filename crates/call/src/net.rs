//! Where a secret may travel: the one rule for model-provider keys and for
//! the OAuth issuer's keys alike.

/// Whether a URL of `scheme` and `host` is https, or plain http to this
/// machine only (localhost or a loopback address), so nothing on the
/// network can read or swap what it carries. Takes the parts rather than a
/// parsed URL so each caller keeps its own URL type.
pub fn https_or_loopback(scheme: &str, host: &str) -> bool {
    match scheme {
        "https" => true,
        "http" => {
            let host = host.trim_start_matches('[').trim_end_matches(']');
            host.eq_ignore_ascii_case("localhost")
                || host
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::https_or_loopback;

    #[test]
    fn https_or_this_machine_only() {
        for (scheme, host) in [
            ("https", "api.openai.com"),
            ("http", "127.0.0.1"),
            ("http", "localhost"),
            ("http", "[::1]"),
        ] {
            assert!(https_or_loopback(scheme, host), "{scheme}://{host}");
        }
        for (scheme, host) in [
            ("http", "192.168.1.5"),
            ("http", "api.example.com"),
            ("ftp", "localhost"),
        ] {
            assert!(!https_or_loopback(scheme, host), "{scheme}://{host}");
        }
    }
}
