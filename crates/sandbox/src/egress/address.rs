//! Which addresses a guest may not reach unless a grant names them: every
//! block of the IANA special-purpose address registries that is not
//! globally reachable (loopback, private, shared, link-local, documentation,
//! benchmarking, reserved, multicast), and any IPv6 form that carries such an
//! IPv4 address inside it (mapped, compatible, NAT64, 6to4).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use ipnet::{Ipv4Net, Ipv6Net};

/// IPv4 blocks that are not globally reachable (IANA IPv4 Special-Purpose
/// Address Registry), plus multicast.
const INTERNAL_V4: &[&str] = &[
    "0.0.0.0/8",          // "this network"
    "10.0.0.0/8",         // private
    "100.64.0.0/10",      // shared address space (carrier-grade NAT)
    "127.0.0.0/8",        // loopback
    "169.254.0.0/16",     // link-local (cloud metadata lives here)
    "172.16.0.0/12",      // private
    "192.0.0.0/24",       // IETF protocol assignments
    "192.0.2.0/24",       // documentation (TEST-NET-1)
    "192.88.99.0/24",     // 6to4 relay anycast (deprecated)
    "192.168.0.0/16",     // private
    "198.18.0.0/15",      // benchmarking
    "198.51.100.0/24",    // documentation (TEST-NET-2)
    "203.0.113.0/24",     // documentation (TEST-NET-3)
    "224.0.0.0/4",        // multicast
    "240.0.0.0/4",        // reserved
    "255.255.255.255/32", // limited broadcast
];

/// IPv6 blocks that are not globally reachable (IANA IPv6 Special-Purpose
/// Address Registry), plus multicast. The forms that embed an IPv4
/// address are judged by that address first ([`embedded_v4`]).
const INTERNAL_V6: &[&str] = &[
    "::/128",          // unspecified
    "::1/128",         // loopback
    "::/96",           // IPv4-compatible (deprecated)
    "::ffff:0:0/96",   // IPv4-mapped
    "::ffff:0:0:0/96", // IPv4-translated (SIIT)
    "64:ff9b:1::/48",  // local-use IPv4/IPv6 translation
    "100::/64",        // discard-only
    "2001::/23",       // IETF protocol assignments (Teredo, benchmarking, …)
    "2001:db8::/32",   // documentation
    "3fff::/20",       // documentation
    "5f00::/16",       // segment routing SIDs
    "fc00::/7",        // unique-local
    "fe80::/10",       // link-local
    "fec0::/10",       // site-local (deprecated)
    "ff00::/8",        // multicast
];

fn blocks_v4() -> &'static [Ipv4Net] {
    static BLOCKS: OnceLock<Vec<Ipv4Net>> = OnceLock::new();
    BLOCKS.get_or_init(|| {
        INTERNAL_V4
            .iter()
            .map(|b| b.parse().expect("a valid IPv4 block"))
            .collect()
    })
}

fn blocks_v6() -> &'static [Ipv6Net] {
    static BLOCKS: OnceLock<Vec<Ipv6Net>> = OnceLock::new();
    BLOCKS.get_or_init(|| {
        INTERNAL_V6
            .iter()
            .map(|b| b.parse().expect("a valid IPv6 block"))
            .collect()
    })
}

/// The IPv4 address an IPv6 address carries and is routed to: mapped
/// (`::ffff:a.b.c.d`), translated (`::ffff:0:a.b.c.d`, SIIT), compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::a.b.c.d`) or 6to4 (`2002:aabb:ccdd::`).
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(mapped) = v6.to_ipv4_mapped() {
        return Some(mapped);
    }
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return Some(low);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

/// Whether `ip` is on the host's own or a private network, or otherwise
/// not a globally reachable address, by the special-purpose registries.
pub(super) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => blocks_v4().iter().any(|b| b.contains(&v4)),
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_internal(IpAddr::V4(v4));
            }
            blocks_v6().iter().any(|b| b.contains(&v6))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn internal(text: &str) -> bool {
        is_internal(text.parse().unwrap())
    }

    #[test]
    fn every_special_purpose_block_is_internal() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "192.0.0.8",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "100::1",
            "64:ff9b:1::1",
        ] {
            assert!(internal(ip), "{ip}");
        }
    }

    #[test]
    fn an_internal_ipv4_address_inside_an_ipv6_one_is_internal() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:0:7f00:1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
        ] {
            assert!(internal(ip), "{ip}");
        }
        // The same forms around a public address are public.
        for ip in [
            "::ffff:93.184.216.34",
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
        ] {
            assert!(!internal(ip), "{ip}");
        }
    }

    #[test]
    fn public_addresses_are_not() {
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "2a00:1450::1",
        ] {
            assert!(!internal(ip), "{ip}");
        }
    }
}
