//! Where a secret may travel: the one rule for model-provider keys and for
//! the OAuth issuer's keys alike.

/// Whether `url` is https, or plain http to this machine only (localhost or
/// a loopback address), so nothing on the network can read or swap what it
/// carries.
pub(crate) fn https_or_loopback(url: &reqwest::Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => {
            let host = url.host_str().unwrap_or_default();
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
        let ok = |url: &str| https_or_loopback(&reqwest::Url::parse(url).unwrap());
        for url in [
            "https://api.openai.com/v1",
            "http://127.0.0.1:11434/v1",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            assert!(ok(url), "{url}");
        }
        for url in [
            "http://192.168.1.5:8080/v1",
            "http://api.example.com",
            "ftp://x",
        ] {
            assert!(!ok(url), "{url}");
        }
    }
}
