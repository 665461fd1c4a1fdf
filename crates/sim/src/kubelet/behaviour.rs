//! What a simulated node reads from its name and a pod's spec: the node's block of pod addresses,
//! the annotations that drive a pod's containers, the restart policy and what follows a run.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{ANNOTATION_EXIT_CODE, ANNOTATION_LOG, ANNOTATION_RUN_SECONDS, MAX_PODS_LIMIT};

/// The pod addresses of one simulated node: its block of `10.128.0.0/9`, at the block index of
/// its [`node_number`], a `/24` or, for nodes allowed more than 253 pods, as large as they need
/// (up to a `/17`). The first two addresses and the last are not given to pods.
#[derive(Clone, Debug)]
pub struct PodAddresses {
    network: u32,
    size: u32,
    used: BTreeSet<u32>,
    cursor: u32,
}

impl PodAddresses {
    /// The block of node `number`, for `max_pods` pods (at most [`MAX_PODS_LIMIT`]).
    pub fn new(number: u8, max_pods: u32) -> PodAddresses {
        let size = (max_pods.min(MAX_PODS_LIMIT) + 3).next_power_of_two().max(256);
        let base = u32::from(std::net::Ipv4Addr::new(10, 128, 0, 0));
        PodAddresses {
            network: base + u32::from(number) * size,
            size,
            used: BTreeSet::new(),
            cursor: 2,
        }
    }

    /// The block, as a CIDR.
    pub fn cidr(&self) -> String {
        format!("{}/{}", std::net::Ipv4Addr::from(self.network), 32 - self.size.trailing_zeros())
    }

    /// The address of slot `slot`.
    pub fn ip(&self, slot: u32) -> String {
        std::net::Ipv4Addr::from(self.network + slot).to_string()
    }

    /// A free slot, taken; `None` when the block is full.
    pub fn take(&mut self) -> Option<u32> {
        let usable = self.size - 3;
        if self.used.len() >= usable as usize {
            return None;
        }
        loop {
            let slot = self.cursor;
            self.cursor = if self.cursor + 1 >= self.size - 1 { 2 } else { self.cursor + 1 };
            if self.used.insert(slot) {
                return Some(slot);
            }
        }
    }

    /// The slot of address `ip`, taken, if it is a free pod address of this block.
    pub fn adopt(&mut self, ip: &str) -> Option<u32> {
        let ip: std::net::Ipv4Addr = ip.parse().ok()?;
        let slot = u32::from(ip).checked_sub(self.network)?;
        ((2..self.size - 1).contains(&slot) && self.used.insert(slot)).then_some(slot)
    }

    /// Slot `slot` is free again.
    pub fn release(&mut self, slot: u32) {
        self.used.remove(&slot);
    }
}

/// What a pod's simulated containers do, from its annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct Behaviour {
    /// How long a run lasts; `None`: until the pod is deleted.
    pub run_seconds: Option<f64>,
    /// The exit code at the end of a run.
    pub exit_code: i32,
    /// The lines printed at the start of a run.
    pub log: Vec<String>,
}

impl Behaviour {
    /// The behaviour the annotations ask for; values that do not parse are ignored.
    pub fn of(annotations: &BTreeMap<String, String>) -> Behaviour {
        let run_seconds = annotations
            .get(ANNOTATION_RUN_SECONDS)
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| s.min(1e9));
        let exit_code = annotations
            .get(ANNOTATION_EXIT_CODE)
            .and_then(|s| s.trim().parse::<i32>().ok())
            .unwrap_or(0);
        let log = match annotations.get(ANNOTATION_LOG) {
            Some(text) => {
                let text = text.strip_suffix('\n').unwrap_or(text);
                text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned()).collect()
            }
            None => Vec::new(),
        };
        Behaviour { run_seconds, exit_code, log }
    }
}

/// A pod's `restartPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart whatever the exit code (the default).
    Always,
    /// Restart on a non-zero exit code.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// The policy a pod spec names (`Always` when absent or unknown).
    pub fn parse(policy: Option<&str>) -> RestartPolicy {
        match policy {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }
}

/// A pod's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Accepted, not running yet.
    Pending,
    /// Running.
    Running,
    /// Every container ended with 0 and will not restart.
    Succeeded,
    /// A container ended with a non-zero code and will not restart.
    Failed,
}

impl Phase {
    /// The phase as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }
}

/// What happens when a run ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterExit {
    /// The containers start again.
    Restart,
    /// The pod ends in this phase.
    Finish(Phase),
}

/// What the restart policy makes of a run that ended with `exit_code`.
pub fn after_exit(policy: RestartPolicy, exit_code: i32) -> AfterExit {
    let ended = if exit_code == 0 { Phase::Succeeded } else { Phase::Failed };
    match (policy, exit_code) {
        (RestartPolicy::Always, _) => AfterExit::Restart,
        (RestartPolicy::OnFailure, 0) => AfterExit::Finish(ended),
        (RestartPolicy::OnFailure, _) => AfterExit::Restart,
        (RestartPolicy::Never, _) => AfterExit::Finish(ended),
    }
}

/// How long a container that has restarted `restarts` times waits before the next restart: the
/// first restart is immediate, then 1 s doubling up to 60 s.
pub fn restart_delay(restarts: u32) -> Duration {
    match restarts {
        0 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 1).min(6)).min(Duration::from_secs(60)),
    }
}

/// The number the node's addresses derive from: its name's trailing digits (mod 256), else a hash.
pub fn node_number(name: &str) -> u8 {
    let digits: String = name
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    match digits.parse::<u64>() {
        Ok(n) => (n % 256) as u8,
        Err(_) => (fnv(name) % 256) as u8,
    }
}

pub(super) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn behaviour_from_annotations() {
        let b = Behaviour::of(&annotations(&[
            (ANNOTATION_RUN_SECONDS, "0.25"),
            (ANNOTATION_EXIT_CODE, "3"),
            (ANNOTATION_LOG, "one\ntwo\n"),
        ]));
        assert_eq!(
            b,
            Behaviour {
                run_seconds: Some(0.25),
                exit_code: 3,
                log: vec!["one".into(), "two".into()]
            }
        );
        let b = Behaviour::of(&annotations(&[
            (ANNOTATION_RUN_SECONDS, "soon"),
            (ANNOTATION_EXIT_CODE, "x"),
        ]));
        assert_eq!(b, Behaviour { run_seconds: None, exit_code: 0, log: vec![] });
        assert_eq!(
            Behaviour::of(&annotations(&[(ANNOTATION_RUN_SECONDS, "-1")])).run_seconds,
            None
        );
    }

    #[test]
    fn restart_policies_decide_what_follows_a_run() {
        use AfterExit::*;
        use RestartPolicy::*;
        assert_eq!(after_exit(Never, 0), Finish(Phase::Succeeded));
        assert_eq!(after_exit(Never, 3), Finish(Phase::Failed));
        assert_eq!(after_exit(OnFailure, 0), Finish(Phase::Succeeded));
        assert_eq!(after_exit(OnFailure, 1), Restart);
        assert_eq!(after_exit(Always, 0), Restart);
        assert_eq!(after_exit(Always, 2), Restart);
        assert_eq!(RestartPolicy::parse(None), Always);
        assert_eq!(RestartPolicy::parse(Some("OnFailure")), OnFailure);
        assert_eq!(restart_delay(0), Duration::ZERO);
        assert_eq!(restart_delay(1), Duration::from_secs(1));
        assert_eq!(restart_delay(3), Duration::from_secs(4));
        assert_eq!(restart_delay(40), Duration::from_secs(60));
    }

    #[test]
    fn node_numbers() {
        assert_eq!(node_number("carrel-sim-3"), 3);
        assert_eq!(node_number("gpu-node-260"), 4);
        assert_eq!(node_number("alpha"), node_number("alpha"));
    }

    #[test]
    fn each_node_gets_a_block_of_pod_addresses_sized_for_its_pods() {
        let mut a = PodAddresses::new(3, 110);
        assert_eq!(a.cidr(), "10.128.3.0/24");
        let first = a.take().expect("free");
        assert_eq!(a.ip(first), "10.128.3.2");
        let mut taken = vec![first];
        while let Some(slot) = a.take() {
            taken.push(slot);
        }
        assert_eq!(taken.len(), 253, ".2 to .254");
        assert_eq!(a.ip(*taken.last().unwrap()), "10.128.3.254");
        a.release(taken[10]);
        assert_eq!(a.take(), Some(taken[10]), "a freed address is given again");
        // Nodes allowed more pods get larger blocks that do not overlap.
        let big = PodAddresses::new(1, 5000);
        assert_eq!(big.cidr(), "10.128.32.0/19");
        assert_eq!(PodAddresses::new(2, 5000).cidr(), "10.128.64.0/19");
        assert_eq!(PodAddresses::new(255, MAX_PODS_LIMIT).cidr(), "10.255.128.0/17");
        // A running pod's address is adopted once, if it is a pod address of the block.
        let mut b = PodAddresses::new(3, 110);
        assert_eq!(b.adopt("10.128.3.7"), Some(7));
        assert_eq!(b.adopt("10.128.3.7"), None, "taken");
        assert_eq!(b.adopt("10.128.4.7"), None, "another node's");
        assert_eq!(b.adopt("10.128.3.1"), None, "the gateway");
        assert_eq!(b.adopt("10.128.3.255"), None, "broadcast");
        assert_eq!(b.adopt("not an address"), None);
    }
}
