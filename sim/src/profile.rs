//! NIC profiles: every timing and capacity parameter of the model, read from TOML.
//!
//! Each parameter is either a bare number or `{ value, basis, source }`, where `basis` is one of
//! `published`, `measured-elsewhere`, `derived` or `assumed`. The embedded profiles annotate every
//! parameter; a user's own profile may use bare numbers.

use std::collections::BTreeMap;
use std::fmt;

/// Where a parameter's value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    Published,
    MeasuredElsewhere,
    Derived,
    Assumed,
    /// A bare number in a user's profile.
    Unstated,
}

impl Basis {
    fn parse(s: &str) -> Option<Basis> {
        Some(match s {
            "published" => Basis::Published,
            "measured-elsewhere" => Basis::MeasuredElsewhere,
            "derived" => Basis::Derived,
            "assumed" => Basis::Assumed,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Basis::Published => "published",
            Basis::MeasuredElsewhere => "measured-elsewhere",
            Basis::Derived => "derived",
            Basis::Assumed => "assumed",
            Basis::Unstated => "unstated",
        }
    }
}

/// A parameter's provenance, kept for reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Provenance {
    pub basis: Basis,
    pub source: String,
}

/// A profile that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileError(pub String);

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad NIC profile: {}", self.0)
    }
}

impl std::error::Error for ProfileError {}

/// The NIC and memory-node parameters of one testbed. Rates are per second, times in
/// nanoseconds, sizes in bytes; "link" rates are per direction.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    pub description: String,
    /// Small verbs per second one memory-side NIC serves (the IOPS bound).
    pub responder_ops_per_s: f64,
    /// Verbs per second one compute-side NIC can issue.
    pub requester_ops_per_s: f64,
    pub link_bytes_per_s: f64,
    pub mtu_bytes: u64,
    pub packet_header_bytes: u64,
    pub rdma_header_bytes: u64,
    pub atomic_header_bytes: u64,
    pub ack_header_bytes: u64,
    pub atomic_ack_header_bytes: u64,
    pub requester_latency_ns: u64,
    pub wire_latency_ns: u64,
    pub responder_latency_ns: u64,
    pub completion_latency_ns: u64,
    pub pcie_read_latency_ns: u64,
    pub pcie_write_latency_ns: u64,
    pub pcie_bytes_per_s: f64,
    pub atomic_ops_per_s: f64,
    pub host_atomic_same_address_ns: u64,
    pub device_atomic_same_address_ns: u64,
    pub device_access_latency_ns: u64,
    pub device_memory_bytes: u64,
    pub transport_timeout_ns: u64,
    pub max_inline_bytes: u64,
    pub max_outstanding_reads_per_qp: u64,
    pub max_message_bytes: u64,
    /// The NIC's on-chip caches (README, "The NIC's caches"): queue-pair contexts and address
    /// translations it holds; 0 means the cache is not modelled (every look-up hits). A miss
    /// fetches the entry from host memory (a PCIe read in series with the verb) and holds the
    /// NIC's pipeline for `context_miss_occupancy_ns`.
    pub qp_context_cache_entries: u64,
    pub translation_cache_entries: u64,
    /// The page size memory is registered with: one translation entry covers one page.
    pub translation_page_bytes: u64,
    pub context_miss_occupancy_ns: u64,
    /// Memory-node CPU time per RPC (chunk allocator).
    pub rpc_handler_ns: u64,
    pub host_memory_bytes: u64,
    /// Compute-side CPU costs.
    pub cpu: CpuCosts,
    /// Basis and source of every parameter, by `section.name`.
    pub provenance: BTreeMap<String, Provenance>,
}

/// CPU time charged to a client's thread, in nanoseconds (per unit where it says so).
#[derive(Clone, Debug, PartialEq)]
pub struct CpuCosts {
    /// Posting a doorbell batch, plus this much per verb in it.
    pub post_ns: f64,
    pub post_per_verb_ns: f64,
    /// Polling one completion.
    pub poll_ns: f64,
    /// `yield_now`: handing the thread to another coroutine.
    pub coroutine_switch_ns: f64,
    pub cache_lookup_level_ns: f64,
    pub hash_ns_per_byte: f64,
    pub checksum_ns_per_byte: f64,
    pub node_search_ns_per_entry: f64,
    pub copy_ns_per_byte: f64,
    /// Receiving and dispatching one RPC on a server thread.
    pub rpc_dispatch_ns: f64,
}

impl CpuCosts {
    /// Nanoseconds of `units` of `work`.
    pub fn cost_ns(&self, work: dmkit_rdma::CpuWork, units: u64) -> f64 {
        use dmkit_rdma::CpuWork;
        let per_unit = match work {
            CpuWork::CacheLookupLevel => self.cache_lookup_level_ns,
            CpuWork::HashByte => self.hash_ns_per_byte,
            CpuWork::ChecksumByte => self.checksum_ns_per_byte,
            CpuWork::NodeSearchEntry => self.node_search_ns_per_entry,
            CpuWork::CopyByte => self.copy_ns_per_byte,
            CpuWork::Nanoseconds => 1.0,
        };
        per_unit * units as f64
    }
}

/// Names of the embedded profiles; the first is the default.
pub const EMBEDDED: [&str; 2] = ["cx6-100g", "cx5-100g"];

impl Profile {
    /// One of [`EMBEDDED`], by name.
    pub fn embedded(name: &str) -> Result<Profile, ProfileError> {
        let text = match name {
            "cx6-100g" => include_str!("../profiles/cx6-100g.toml"),
            "cx5-100g" => include_str!("../profiles/cx5-100g.toml"),
            _ => {
                return Err(ProfileError(format!(
                    "no embedded profile '{name}' (embedded: {}; or give a TOML file path)",
                    EMBEDDED.join(", ")
                )));
            }
        };
        Profile::from_toml(text)
    }

    /// The default profile, `cx6-100g`.
    pub fn default_profile() -> Profile {
        Profile::embedded(EMBEDDED[0]).expect("the embedded default profile parses")
    }

    /// An embedded profile's name, or else a TOML file's path.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if EMBEDDED.contains(&name_or_path) {
            return Profile::embedded(name_or_path);
        }
        if !std::path::Path::new(name_or_path).exists() {
            return Err(ProfileError(format!(
                "'{name_or_path}' is neither an embedded profile ({}) nor an existing file",
                EMBEDDED.join(", ")
            )));
        }
        let text = std::fs::read_to_string(name_or_path)
            .map_err(|e| ProfileError(format!("cannot read {name_or_path}: {e}")))?;
        Profile::from_toml(&text).map_err(|ProfileError(m)| ProfileError(format!("{name_or_path}: {m}")))
    }

    pub fn from_toml(text: &str) -> Result<Profile, ProfileError> {
        let root: toml::Table =
            text.parse().map_err(|e: toml::de::Error| ProfileError(e.message().replace('\n', " ")))?;
        let mut r = Reader { provenance: BTreeMap::new() };
        let mut nic = r.section(&root, "nic")?;
        let mut mn = r.section(&root, "memory_node")?;
        let mut cpu = r.section(&root, "cpu")?;
        for key in root.keys() {
            if !["name", "description", "nic", "memory_node", "cpu"].contains(&key.as_str()) {
                return Err(ProfileError(format!("unknown field '{key}'")));
            }
        }
        let text_field = |k: &str| -> Result<String, ProfileError> {
            match root.get(k) {
                Some(toml::Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(ProfileError(format!("'{k}' must be a string"))),
                None => Err(ProfileError(format!("missing field '{k}'"))),
            }
        };
        let p = Profile {
            name: text_field("name")?,
            description: text_field("description")?,
            responder_ops_per_s: r.rate(&mut nic, "nic", "responder_ops_per_s")?,
            requester_ops_per_s: r.rate(&mut nic, "nic", "requester_ops_per_s")?,
            link_bytes_per_s: r.rate(&mut nic, "nic", "link_bytes_per_s")?,
            mtu_bytes: r.int(&mut nic, "nic", "mtu_bytes", 256)?,
            packet_header_bytes: r.int(&mut nic, "nic", "packet_header_bytes", 0)?,
            rdma_header_bytes: r.int(&mut nic, "nic", "rdma_header_bytes", 0)?,
            atomic_header_bytes: r.int(&mut nic, "nic", "atomic_header_bytes", 0)?,
            ack_header_bytes: r.int(&mut nic, "nic", "ack_header_bytes", 0)?,
            atomic_ack_header_bytes: r.int(&mut nic, "nic", "atomic_ack_header_bytes", 0)?,
            requester_latency_ns: r.int(&mut nic, "nic", "requester_latency_ns", 0)?,
            wire_latency_ns: r.int(&mut nic, "nic", "wire_latency_ns", 0)?,
            responder_latency_ns: r.int(&mut nic, "nic", "responder_latency_ns", 0)?,
            completion_latency_ns: r.int(&mut nic, "nic", "completion_latency_ns", 0)?,
            pcie_read_latency_ns: r.int(&mut nic, "nic", "pcie_read_latency_ns", 0)?,
            pcie_write_latency_ns: r.int(&mut nic, "nic", "pcie_write_latency_ns", 0)?,
            pcie_bytes_per_s: r.rate(&mut nic, "nic", "pcie_bytes_per_s")?,
            atomic_ops_per_s: r.rate(&mut nic, "nic", "atomic_ops_per_s")?,
            host_atomic_same_address_ns: r.int(&mut nic, "nic", "host_atomic_same_address_ns", 0)?,
            device_atomic_same_address_ns: r.int(&mut nic, "nic", "device_atomic_same_address_ns", 0)?,
            device_access_latency_ns: r.int(&mut nic, "nic", "device_access_latency_ns", 0)?,
            device_memory_bytes: r.int(&mut nic, "nic", "device_memory_bytes", 0)?,
            transport_timeout_ns: r.int(&mut nic, "nic", "transport_timeout_ns", 1)?,
            max_inline_bytes: r.int(&mut nic, "nic", "max_inline_bytes", 0)?,
            max_outstanding_reads_per_qp: r.int(&mut nic, "nic", "max_outstanding_reads_per_qp", 1)?,
            max_message_bytes: r.int(&mut nic, "nic", "max_message_bytes", 64)?,
            qp_context_cache_entries: r.int_or(&mut nic, "nic", "qp_context_cache_entries", 0, 0)?,
            translation_cache_entries: r.int_or(&mut nic, "nic", "translation_cache_entries", 0, 0)?,
            translation_page_bytes: r.int_or(&mut nic, "nic", "translation_page_bytes", 4096, 2 << 20)?,
            context_miss_occupancy_ns: r.int_or(&mut nic, "nic", "context_miss_occupancy_ns", 0, 0)?,
            rpc_handler_ns: r.int(&mut mn, "memory_node", "rpc_handler_ns", 0)?,
            host_memory_bytes: r.int(&mut mn, "memory_node", "host_memory_bytes", 1 << 20)?,
            cpu: CpuCosts {
                post_ns: r.number(&mut cpu, "cpu", "post_ns")?,
                post_per_verb_ns: r.number(&mut cpu, "cpu", "post_per_verb_ns")?,
                poll_ns: r.number(&mut cpu, "cpu", "poll_ns")?,
                coroutine_switch_ns: r.number(&mut cpu, "cpu", "coroutine_switch_ns")?,
                cache_lookup_level_ns: r.number(&mut cpu, "cpu", "cache_lookup_level_ns")?,
                hash_ns_per_byte: r.number(&mut cpu, "cpu", "hash_ns_per_byte")?,
                checksum_ns_per_byte: r.number(&mut cpu, "cpu", "checksum_ns_per_byte")?,
                node_search_ns_per_entry: r.number(&mut cpu, "cpu", "node_search_ns_per_entry")?,
                copy_ns_per_byte: r.number(&mut cpu, "cpu", "copy_ns_per_byte")?,
                rpc_dispatch_ns: r.number(&mut cpu, "cpu", "rpc_dispatch_ns")?,
            },
            provenance: BTreeMap::new(),
        };
        for (section, rest) in [("nic", &nic), ("memory_node", &mn), ("cpu", &cpu)] {
            if let Some(key) = rest.keys().next() {
                return Err(ProfileError(format!("unknown field '{section}.{key}'")));
            }
        }
        Ok(Profile { provenance: r.provenance, ..p })
    }

    /// Wire bytes of a message of `payload` bytes with `ext` bytes of extra headers on its first
    /// packet: MTU segmentation, each packet with the full per-packet header.
    pub fn wire_bytes(&self, payload: u64, ext: u64) -> u64 {
        let packets = payload.div_ceil(self.mtu_bytes).max(1);
        payload + ext + packets * self.packet_header_bytes
    }

    /// The unloaded round trip of one verb from one client, by the same stage arithmetic the
    /// simulator uses: what `dmkit perftest --clients 1` must measure.
    pub fn unloaded_round_trip_ns(&self, op: crate::VerbKind, bytes: u64, device: bool) -> u64 {
        let stages = crate::nic::StageCosts::new(self);
        stages.unloaded_round_trip_ns(op, bytes, device)
    }
}

struct Reader {
    provenance: BTreeMap<String, Provenance>,
}

impl Reader {
    fn section(&mut self, root: &toml::Table, name: &str) -> Result<toml::Table, ProfileError> {
        match root.get(name) {
            Some(toml::Value::Table(t)) => Ok(t.clone()),
            Some(_) => Err(ProfileError(format!("'{name}' must be a table"))),
            None => Err(ProfileError(format!("missing section [{name}]"))),
        }
    }

    fn number(&mut self, t: &mut toml::Table, section: &str, key: &str) -> Result<f64, ProfileError> {
        let path = format!("{section}.{key}");
        let value = t.remove(key).ok_or_else(|| ProfileError(format!("missing field '{path}'")))?;
        let as_f64 = |v: &toml::Value| match v {
            toml::Value::Integer(i) => Some(*i as f64),
            toml::Value::Float(f) => Some(*f),
            _ => None,
        };
        let (number, provenance) = match &value {
            toml::Value::Table(inner) => {
                for k in inner.keys() {
                    if !["value", "basis", "source"].contains(&k.as_str()) {
                        return Err(ProfileError(format!("unknown field '{path}.{k}'")));
                    }
                }
                let number = inner
                    .get("value")
                    .and_then(as_f64)
                    .ok_or_else(|| ProfileError(format!("'{path}.value' must be a number")))?;
                let basis = match inner.get("basis") {
                    Some(toml::Value::String(s)) => Basis::parse(s).ok_or_else(|| {
                        ProfileError(format!(
                            "'{path}.basis' is '{s}'; expected published, measured-elsewhere, derived or assumed"
                        ))
                    })?,
                    Some(_) => return Err(ProfileError(format!("'{path}.basis' must be a string"))),
                    None => Basis::Unstated,
                };
                let source = match inner.get("source") {
                    Some(toml::Value::String(s)) => s.clone(),
                    Some(_) => return Err(ProfileError(format!("'{path}.source' must be a string"))),
                    None => String::new(),
                };
                (number, Provenance { basis, source })
            }
            other => (
                as_f64(other).ok_or_else(|| ProfileError(format!("'{path}' must be a number")))?,
                Provenance { basis: Basis::Unstated, source: String::new() },
            ),
        };
        if !number.is_finite() || number < 0.0 {
            return Err(ProfileError(format!("'{path}' must be a finite non-negative number, got {number}")));
        }
        self.provenance.insert(path, provenance);
        Ok(number)
    }

    fn rate(&mut self, t: &mut toml::Table, section: &str, key: &str) -> Result<f64, ProfileError> {
        let v = self.number(t, section, key)?;
        if v < 1.0 {
            return Err(ProfileError(format!("'{section}.{key}' must be a positive rate, got {v}")));
        }
        Ok(v)
    }

    /// An integer a profile may leave out (parameters added after users wrote profiles): absent,
    /// it is `default` and recorded as unstated.
    fn int_or(
        &mut self,
        t: &mut toml::Table,
        section: &str,
        key: &str,
        min: u64,
        default: u64,
    ) -> Result<u64, ProfileError> {
        if t.contains_key(key) {
            return self.int(t, section, key, min);
        }
        let source = "absent from the profile: the default".to_string();
        self.provenance.insert(format!("{section}.{key}"), Provenance { basis: Basis::Unstated, source });
        Ok(default)
    }

    fn int(&mut self, t: &mut toml::Table, section: &str, key: &str, min: u64) -> Result<u64, ProfileError> {
        let v = self.number(t, section, key)?;
        if v.fract() != 0.0 || v > 2f64.powi(62) {
            return Err(ProfileError(format!("'{section}.{key}' must be a whole number, got {v}")));
        }
        let v = v as u64;
        if v < min {
            return Err(ProfileError(format!("'{section}.{key}' must be at least {min}, got {v}")));
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_profiles_parse_and_annotate_every_parameter() {
        for name in EMBEDDED {
            let p = Profile::embedded(name).unwrap();
            assert_eq!(p.name, name);
            assert_eq!(p.provenance.len(), 41, "{name}");
            for (k, prov) in &p.provenance {
                assert_ne!(prov.basis, Basis::Unstated, "{name}: {k} has no basis");
                assert!(!prov.source.is_empty(), "{name}: {k} has no source");
            }
        }
    }

    #[test]
    fn malformed_profiles_give_one_clear_error() {
        let good = include_str!("../profiles/cx6-100g.toml");
        let cases = [
            ("[nic", "expected"),
            (&good.replace("mtu_bytes = { value = 4096", "mtu_bytes = { value = -1"), "nic.mtu_bytes"),
            (&good.replace("basis = \"assumed\"", "basis = \"guessed\""), "guessed"),
            (&good.replace("[memory_node]", "[memory_node]\nbogus = 1"), "unknown field 'memory_node.bogus'"),
            (&good.replace("link_bytes_per_s", "link_bytes_per_sec"), "link_bytes_per_s"),
            (
                &good.replace("responder_ops_per_s = { value = 45e6", "responder_ops_per_s = { value = \"fast\""),
                "must be a number",
            ),
        ];
        for (text, needle) in cases {
            let err = Profile::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(needle), "error '{err}' should mention '{needle}'");
            assert!(!err.contains('\n'), "one line: {err}");
        }
        assert!(Profile::load("no-such-profile").unwrap_err().to_string().contains("cx6-100g"));
    }

    #[test]
    fn bare_numbers_are_accepted() {
        let text = include_str!("../profiles/cx6-100g.toml").replace(
            "mtu_bytes = { value = 4096, basis = \"assumed\", source = \"RoCE active MTU 4096 with Ethernet MTU 4200 (Sherman README asks for MTU 4200)\" }",
            "mtu_bytes = 1024",
        );
        let p = Profile::from_toml(&text).unwrap();
        assert_eq!(p.mtu_bytes, 1024);
        assert_eq!(p.provenance["nic.mtu_bytes"].basis, Basis::Unstated);
        assert_eq!(p.wire_bytes(4096, 16), 4096 + 16 + 4 * p.packet_header_bytes);
    }
}
