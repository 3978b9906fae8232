//! Simulator speed and memory (DESIGN.md §7):
//! - simulated verbs per wall-clock second at 640 clients (10 compute nodes × 64), target ≥ 5 M/s;
//! - host bytes per non-zero simulated byte, target ≤ 1.1 (printed before the timing groups,
//!   for dense, half-dense and sparse write patterns, from the store's own accounting and from
//!   the process's resident set).
//!
//! Run: `cargo bench -p dmkit-sim --bench sim_throughput`.

use criterion::{Criterion, Throughput, criterion_group};
use dmkit_rdma::{Buf, NodeId, RemoteAddr, Request, Response, Verbs};
use dmkit_sim::{Sim, SimConfig, SparseMemory, Topology};
use rand::Rng;
use std::hint::black_box;

const CLIENTS: u32 = 640;

/// 640 closed-loop clients issuing `verb`s for `virtual_ns`; returns verbs completed.
fn run(memory_nodes: u16, verb: &str, virtual_ns: u64) -> u64 {
    let cfg = SimConfig {
        topology: Topology { memory_nodes, compute_nodes: 10, ..Topology::default() },
        seed: 1,
        ..SimConfig::default()
    };
    let mut sim = Sim::new(cfg).unwrap();
    for i in 0..CLIENTS {
        let c = sim.add_client((i % 10) as u16).unwrap();
        let c2 = c.clone();
        let verb = verb.to_string();
        sim.spawn(&c, async move {
            let mut buf = Buf::zeroed(64);
            while c2.now_ns() < virtual_ns {
                let (node, line) = {
                    let mut rng = c2.rng();
                    (rng.random_range(0..memory_nodes), rng.random_range(0..1u64 << 20))
                };
                let addr = RemoteAddr::host(NodeId(node), line * 64);
                let request = match verb.as_str() {
                    "read" => Request::read(addr, buf),
                    "write" => Request::write(addr, buf),
                    _ => Request::faa(addr, 1),
                };
                buf = match c2.post(vec![request]).await.unwrap().pop() {
                    Some(Response::Read(b) | Response::Write(b)) => b,
                    _ => Buf::zeroed(64),
                };
            }
        });
    }
    sim.run().unwrap();
    sim.stats().verbs_posted
}

fn verbs_per_second(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim_640_clients");
    group.sample_size(10);
    for (mns, verb) in [(1u16, "read"), (2, "read"), (2, "write"), (2, "faa")] {
        let virtual_ns = 1_000_000;
        let verbs = run(mns, verb, virtual_ns);
        group.throughput(Throughput::Elements(verbs));
        group.bench_function(format!("{verb}_{mns}mn_1ms"), |b| b.iter(|| black_box(run(mns, verb, virtual_ns))));
    }
    group.finish();
}

fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

const PATTERNS: [(&str, u64); 4] = [
    ("dense (every line)", 1),
    ("half the lines", 2),
    ("8 lines per 4 KiB page", 8),
    ("sparse (1 line per 4 KiB page)", 64),
];

/// Prints host bytes per non-zero simulated byte for four patterns, each in a process of its
/// own (this binary again, told the pattern by `DMKIT_MEMORY_PATTERN`), so one pattern's RSS is
/// not measured over another's freed memory.
fn memory_ratio() {
    for (i, (name, _)) in PATTERNS.iter().enumerate() {
        let exe = std::env::current_exe().expect("the bench binary");
        match std::process::Command::new(exe).env("DMKIT_MEMORY_PATTERN", i.to_string()).output() {
            Ok(out) if out.status.success() => print!("{}", String::from_utf8_lossy(&out.stdout)),
            Ok(out) => println!("memory {name}: failed: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => println!("memory {name}: could not run: {e}"),
        }
    }
}

/// One pattern of [`memory_ratio`]: a quarter of a GiB of lines.
fn memory_pattern(i: usize) {
    let (name, every) = PATTERNS[i];
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64_compat(3);
    let gib_lines = (1u64 << 30) / 64;
    let before = resident_bytes();
    let mut m = SparseMemory::new();
    let line = [0x5au8; 64];
    for i in 0..gib_lines / 4 {
        let l = i * every + if every > 1 { rng.random_range(0..every) } else { 0 };
        m.write(l * 64, &line);
    }
    let after = resident_bytes();
    let accounted = m.host_bytes() as f64 / m.nonzero_line_bytes() as f64;
    let rss = match (before, after) {
        (Some(b), Some(a)) => format!("{:.3}", a.saturating_sub(b) as f64 / m.nonzero_line_bytes() as f64),
        _ => "n/a".into(),
    };
    println!(
        "memory {name}: {} MiB non-zero; host/non-zero = {accounted:.3} (store accounting), {rss} (RSS delta)",
        m.nonzero_line_bytes() >> 20
    );
    black_box(&m);
}

trait SeedCompat {
    fn seed_from_u64_compat(seed: u64) -> Self;
}
impl SeedCompat for rand_chacha::ChaCha8Rng {
    fn seed_from_u64_compat(seed: u64) -> Self {
        <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed)
    }
}

/// Random 64-byte reads of a dense memory of 16 MiB (fits the host's caches) and of 1 GiB (a
/// 10 M-key index's size): what one access to simulated memory costs the host as the index
/// grows. Loading's cost per key grows with the key count mostly by this (README, Benchmarks).
fn random_reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("sparse_memory_random_read");
    group.sample_size(10);
    for mib in [16u64, 1024] {
        let lines = (mib << 20) / 64;
        let mut m = SparseMemory::new();
        let line = [0x5au8; 64];
        for i in 0..lines {
            m.write(i * 64, &line);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64_compat(5);
        let at: Vec<u64> = (0..1u64 << 16).map(|_| rng.random_range(0..lines) * 64).collect();
        group.throughput(Throughput::Elements(at.len() as u64));
        group.bench_function(format!("{mib}_mib"), |b| {
            let mut out = [0u8; 64];
            b.iter(|| {
                for &a in &at {
                    m.read(a, &mut out);
                    black_box(&out);
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, verbs_per_second, random_reads);

fn main() {
    if let Some(i) = std::env::var("DMKIT_MEMORY_PATTERN").ok().and_then(|i| i.parse().ok()) {
        return memory_pattern(i);
    }
    memory_ratio();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
