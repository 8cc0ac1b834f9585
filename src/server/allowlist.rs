//! Which networks may reach a listener: CIDR allowlists for Graphite (TCP and UDP), StatsD
//! and HTTP. Graphite and StatsD have no authentication in their protocols, so an allowlist
//! (or a private network) is what keeps strangers from writing. A refused TCP peer is closed
//! at once, before anything is read; a refused datagram is dropped unread. Both are counted
//! per listener for `/metrics`.

use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// One network: an address and how many leading bits of it must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    /// `10.0.0.0/8`, `2001:db8::/32`, or a bare address (the address alone).
    fn parse(text: &str) -> std::result::Result<Network, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{text:?}: {addr:?} is not an IP address"))?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= bits => p,
                _ => return Err(format!("{text:?}: the prefix length must be 0 to {bits}")),
            },
        };
        Ok(Network { addr, prefix })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        fn leading(a: u128, b: u128, prefix: u8, bits: u8) -> bool {
            let shift = u32::from(bits - prefix);
            prefix == 0 || (a >> shift) == (b >> shift)
        }
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                leading(u32::from(net).into(), u32::from(ip).into(), self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                leading(u128::from(net), u128::from(ip), self.prefix, 128)
            }
            _ => false,
        }
    }
}

/// The networks one listener admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowlist(Vec<Network>);

impl Allowlist {
    /// The networks of `entries` (CIDRs or addresses), given with `flag`.
    ///
    /// # Errors
    /// [`Error::Security`] naming the flag and the entry that is not a network.
    pub fn parse<S: AsRef<str>>(flag: &str, entries: &[S]) -> Result<Allowlist> {
        let networks = entries
            .iter()
            .map(|e| e.as_ref().trim())
            .filter(|e| !e.is_empty())
            .map(Network::parse)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::Security(format!("{flag}: {e}")))?;
        if networks.is_empty() {
            return Err(Error::Security(format!("{flag}: no network given")));
        }
        Ok(Allowlist(networks))
    }

    /// Whether `ip` is in one of the networks (an IPv4 address mapped into IPv6 counts as
    /// IPv4).
    pub fn admits(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(ip))
    }
}

/// A listener an allowlist guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// Graphite plaintext over TCP.
    GraphiteTcp,
    /// Graphite plaintext over UDP.
    GraphiteUdp,
    /// StatsD over UDP.
    Statsd,
    /// The HTTP API.
    Http,
}

impl Listener {
    /// Every listener, in the order `/metrics` lists them.
    pub const ALL: [Listener; 4] = [
        Listener::GraphiteTcp,
        Listener::GraphiteUdp,
        Listener::Statsd,
        Listener::Http,
    ];

    /// The `listener` label's value.
    pub fn as_str(self) -> &'static str {
        match self {
            Listener::GraphiteTcp => "graphite_tcp",
            Listener::GraphiteUdp => "graphite_udp",
            Listener::Statsd => "statsd",
            Listener::Http => "http",
        }
    }
}

/// The allowlists of every listener (`None`: open to every address) and what they refused.
#[derive(Debug, Default)]
pub struct Allowlists {
    /// Graphite TCP and UDP.
    pub graphite: Option<Allowlist>,
    /// StatsD.
    pub statsd: Option<Allowlist>,
    /// HTTP.
    pub http: Option<Allowlist>,
    /// Refused peers (TCP connections, UDP datagrams), indexed by `Listener as usize`.
    refused: [AtomicU64; 4],
}

impl Allowlists {
    /// Whether any listener has an allowlist.
    pub fn any(&self) -> bool {
        self.graphite.is_some() || self.statsd.is_some() || self.http.is_some()
    }

    /// Whether `listener` admits a peer at `ip`; a refusal is counted.
    pub fn admits(&self, listener: Listener, ip: IpAddr) -> bool {
        let list = match listener {
            Listener::GraphiteTcp | Listener::GraphiteUdp => &self.graphite,
            Listener::Statsd => &self.statsd,
            Listener::Http => &self.http,
        };
        let admitted = list.as_ref().is_none_or(|list| list.admits(ip));
        if !admitted {
            self.refused[listener as usize].fetch_add(1, Ordering::Relaxed);
            tracing::debug!(listener = listener.as_str(), %ip, "peer refused: not in the allowlist");
        }
        admitted
    }

    /// Peers of `listener` refused.
    pub fn refused(&self, listener: Listener) -> u64 {
        self.refused[listener as usize].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn networks_admit_their_addresses_only() {
        let list = Allowlist::parse(
            "--graphite-allow",
            &["10.1.0.0/16", "192.168.7.9", "fd00::/8"],
        )
        .unwrap();
        for admitted in [
            "10.1.0.1",
            "10.1.255.255",
            "192.168.7.9",
            "fd12::1",
            "::ffff:10.1.2.3",
        ] {
            assert!(list.admits(ip(admitted)), "{admitted}");
        }
        for refused in ["10.2.0.1", "192.168.7.10", "127.0.0.1", "fe80::1", "::1"] {
            assert!(!list.admits(ip(refused)), "{refused}");
        }
        let everyone = Allowlist::parse("x", &["0.0.0.0/0"]).unwrap();
        assert!(everyone.admits(ip("8.8.8.8")) && !everyone.admits(ip("::1")));
    }

    #[test]
    fn a_bad_entry_is_refused_naming_the_flag() {
        for (entry, needle) in [
            ("10.0.0.0/33", "prefix length must be 0 to 32"),
            ("10.0.0/8", "is not an IP address"),
            ("::/129", "0 to 128"),
        ] {
            let e = Allowlist::parse("--statsd-allow", &[entry])
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("--statsd-allow: ") && e.contains(needle),
                "{e}"
            );
        }
        assert!(Allowlist::parse::<&str>("--http-allow", &[]).is_err());
    }
}
