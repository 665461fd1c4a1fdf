//! Where the API server may send a tenant's admission reviews.
//!
//! A webhook's address is the tenant's to choose (`clientConfig.url`, or a Service it owns), and
//! the request leaves from the API server, which can reach what tenants cannot: its own loopback,
//! the node's link-local services (a cloud's instance metadata at 169.254.169.254). Every address
//! a webhook's name resolves to is checked before it is dialled, so a name cannot be pointed
//! somewhere else between the check and the connection.

use std::net::IpAddr;

/// The addresses webhooks may be called at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Egress {
    loopback: bool,
}

impl Egress {
    /// What an installation on a real cluster allows: any address but this machine's own
    /// (unspecified, loopback), link-local and multicast ones.
    pub fn strict() -> Egress {
        Egress { loopback: false }
    }

    /// [`Egress::strict`], and loopback too: `carrel up`, where every workload of every tenant
    /// is a process of this machine.
    pub fn with_loopback() -> Egress {
        Egress { loopback: true }
    }

    /// Why `ip` may not be called, if it may not.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match ip {
            ip if ip.is_unspecified() => Some("an unspecified address"),
            ip if ip.is_loopback() && !self.loopback => Some("a loopback address"),
            ip if ip.is_multicast() => Some("a multicast address"),
            IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address"),
            IpAddr::V4(v4) if v4.is_broadcast() => Some("a broadcast address"),
            IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80 => Some("a link-local address"),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_and_its_link_local_neighbours_are_out_of_reach() {
        let strict = Egress::strict();
        for refused in [
            "127.0.0.1",
            "::1",
            "0.0.0.0",
            "169.254.169.254",
            "fe80::1",
            "224.0.0.1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(strict.refusal(refused.parse().unwrap()).is_some(), "{refused}");
        }
        for allowed in ["10.96.0.20", "192.168.1.5", "203.0.113.7", "fd00::5"] {
            assert_eq!(strict.refusal(allowed.parse().unwrap()), None, "{allowed}");
        }
        let local = Egress::with_loopback();
        assert_eq!(local.refusal("127.0.0.1".parse().unwrap()), None);
        assert!(local.refusal("169.254.169.254".parse().unwrap()).is_some());
    }
}
