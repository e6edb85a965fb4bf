//! A network namespace of the test's own (`ip netns`, as root) joined to
//! the test's by two veth pairs: one for a daemon's API, one for its way
//! to the database, which the test takes down to partition the daemon
//! from the database (packets go unanswered; nothing is refused). Every
//! address is inside the namespaces this test made.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A namespace and its links; deleted with them when dropped.
pub struct Netns {
    name: String,
    /// The test's side of the database link (the relay listens here).
    pub db_host: String,
    /// The daemon's API address inside the namespace.
    pub api_ns: String,
    db_link: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Netns {
    /// A new namespace, or `None` where this test cannot make one (not
    /// root, no `ip`, no namespace support).
    pub fn create() -> Option<Netns> {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let id = (std::process::id() % 4096) * 4 + n % 4;
        let name = format!("tsr{id}");
        let (a, b) = (64 + (id >> 8), id & 0xff);
        let (api, db) = (format!("tsa{id}"), format!("tsd{id}"));
        let net = |last: u8| format!("10.{a}.{b}.{last}");
        let ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", name.as_str(), "ip"];
            all.extend(args);
            ip(&all)
        };
        let _ = ip(&["netns", "del", &name]);
        if !ip(&["netns", "add", &name]) {
            return None;
        }
        let made = Netns {
            db_host: net(5),
            api_ns: net(2),
            db_link: format!("{db}h"),
            name: name.clone(),
        };
        for (link, host, inside) in [(&api, net(1), net(2)), (&db, net(5), net(6))] {
            let (h, i) = (format!("{link}h"), format!("{link}n"));
            let ok = ip(&["link", "add", &h, "type", "veth", "peer", "name", &i])
                && ip(&["link", "set", &i, "netns", &name])
                && ip(&["addr", "add", &format!("{host}/30"), "dev", &h])
                && ip(&["link", "set", &h, "up"])
                && ns(&["addr", "add", &format!("{inside}/30"), "dev", &i])
                && ns(&["link", "set", &i, "up"]);
            if !ok {
                return None;
            }
        }
        ns(&["link", "set", "lo", "up"]);
        Some(made)
    }

    /// The command prefix that runs a program inside the namespace.
    pub fn wrap(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// Partitions the namespace from the database: its link goes down.
    pub fn cut(&self) {
        assert!(ip(&["link", "set", &self.db_link, "down"]), "link down");
    }

    /// Joins them again.
    pub fn heal(&self) {
        assert!(ip(&["link", "set", &self.db_link, "up"]), "link up");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // The namespace's ends of the veth pairs go with it, and so do
        // their peers here.
        let _ = ip(&["netns", "del", &self.name]);
    }
}
