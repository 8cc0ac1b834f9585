//! Cluster log messages (src/cluster/wire.rs): bytes per sample on the log, and the speed of
//! encoding and decoding one message. The target: at most 8 bytes per sample for a
//! backfill of non-random values; decoding in the tens of millions of samples a second.
//!
//! `cargo bench --bench wire`. Printed first, for three key styles of 1,000 series
//! (Graphite paths like `servers.host0042.cpu.user` and tagged keys like
//! `cpu_usage{core=3,host=h0042}`, each 100 hosts × 10 metrics; and, less regular,
//! collectd-style keys of varied host names like
//! `collectd.web-07_fra1_example_net.cpu-0.cpu-user`):
//! - backfill: 1,000 series × 60 samples at a 10 s cadence, written time by time (every
//!   series at t, then every series at t + 10), for a constant, an integer random walk, a
//!   2-decimal gauge (a random walk of cents, e.g. 12.34) and random floats;
//! - edge: 1,000 series × 1 sample at one timestamp (one collectd flush), with 2-decimal
//!   and with random float values;
//!
//! each as one message, and split by partition into 16 messages (as the publisher sends
//! them); bytes per sample count the whole messages, headers included. Then samples a
//! second of encoding and decoding (Graphite keys), over the CPU time of this thread (the
//! machine is shared), then the same through criterion.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tierdb::testing::cluster::partition_of;
use tierdb::testing::cluster::wire::{decode, encode};
use tierdb::SeriesKey;
use tierdb::{KeyIndex, SampleBatch};

#[path = "support.rs"]
#[allow(dead_code)]
mod support;
use support::{thread_cpu_secs, Rng};

/// 2026-11-23T00:00:00Z.
const START: i64 = 1_795_392_000;
const HOSTS: usize = 100;
const PARTITIONS: u32 = 16;

type Walk = fn(&mut Rng, f64) -> f64;

/// The value kinds: each sample from the one before (the first from 50.0).
const VALUES: [(&str, Walk); 4] = [
    ("constant", |_, _| 42.0),
    ("integer walk", |r, v| v + (r.next() % 21) as f64 - 10.0),
    ("2-decimal gauge", |r, v| {
        ((v * 100.0).round() + (r.next() % 201) as f64 - 100.0) / 100.0
    }),
    ("random floats", |r, _| {
        (r.next() >> 11) as f64 / (1u64 << 53) as f64 * 1000.0
    }),
];

/// 1,000 collectd-style keys with varied host names (role, number, data centre), each host
/// with a random two thirds of 12 plugin values: less regular than [`keys`].
fn collectd_keys() -> Vec<String> {
    const ROLES: [&str; 8] = [
        "web", "db", "cache", "queue", "api", "worker", "lb", "search",
    ];
    const DCS: [&str; 4] = ["fra1", "ams3", "nyc2", "sfo1"];
    const PLUGINS: [&str; 12] = [
        "cpu-0.cpu-user",
        "cpu-0.cpu-system",
        "cpu-1.cpu-user",
        "cpu-1.cpu-idle",
        "memory.memory-used",
        "memory.memory-cached",
        "load.load",
        "interface-eth0.if_octets.rx",
        "interface-eth0.if_octets.tx",
        "df-root.df_complex-used",
        "disk-sda.disk_ops.read",
        "disk-sda.disk_octets.write",
    ];
    let mut rng = Rng(99);
    let mut keys = std::collections::BTreeSet::new();
    while keys.len() < 1000 {
        let host = format!(
            "{}-{:02}_{}_example_net",
            ROLES[(rng.next() % 8) as usize],
            rng.next() % 40,
            DCS[(rng.next() % 4) as usize]
        );
        for plugin in PLUGINS {
            if !rng.next().is_multiple_of(3) && keys.len() < 1000 {
                keys.insert(format!("collectd.{host}.{plugin}"));
            }
        }
    }
    keys.into_iter().collect()
}

/// 1,000 canonical keys: 100 hosts × 10 metrics.
fn keys(tagged: bool) -> Vec<String> {
    const METRICS: [&str; 10] = [
        "cpu.user",
        "cpu.system",
        "cpu.idle",
        "cpu.iowait",
        "memory.used",
        "memory.free",
        "load.shortterm",
        "load.midterm",
        "df.root.used",
        "interface.eth0.rx",
    ];
    let mut keys = Vec::new();
    for h in 0..HOSTS {
        for (m, metric) in METRICS.iter().enumerate() {
            let text = if tagged {
                let name = metric.replace('.', "_");
                format!("{name}{{host=h{h:04},core={}}}", m % 4)
            } else {
                format!("servers.host{h:04}.{metric}")
            };
            keys.push(SeriesKey::parse(&text).unwrap().as_str().to_string());
        }
    }
    keys
}

/// `samples` samples of every key, time by time, values from `walk`.
fn batch(keys: &[String], samples: usize, walk: Walk, seed: u64) -> SampleBatch {
    let mut rng = Rng(seed | 1);
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    let mut last = vec![50.0; keys.len()];
    for t in 0..samples {
        for (k, key) in keys.iter().enumerate() {
            last[k] = walk(&mut rng, last[k]);
            b.push(&mut index, key, None, START + 10 * t as i64, last[k]);
        }
    }
    b
}

/// `b` split into one batch per partition, as the publisher sends it.
fn by_partition(b: &SampleBatch) -> Vec<SampleBatch> {
    let mut parts: Vec<(SampleBatch, KeyIndex)> =
        (0..PARTITIONS).map(|_| Default::default()).collect();
    for s in &b.samples {
        let series = &b.series[s.series as usize];
        let (part, index) = &mut parts[partition_of(&series.key, PARTITIONS) as usize];
        part.push(index, &series.key, series.kind, s.ts, s.value);
    }
    parts.into_iter().map(|(p, _)| p).collect()
}

fn encoded_len(batches: &[SampleBatch]) -> usize {
    let mut out = Vec::new();
    for b in batches {
        out.clear();
        encode(b, &mut out).unwrap();
        // Check while here: every message decodes to its batch's samples.
        assert_eq!(decode(&out).unwrap().samples.len(), b.samples.len());
    }
    batches
        .iter()
        .map(|b| {
            out.clear();
            encode(b, &mut out).unwrap();
            out.len()
        })
        .sum()
}

/// The workloads: name and batch.
fn workloads() -> Vec<(String, SampleBatch)> {
    let mut all = Vec::new();
    for style in ["graphite", "tagged", "collectd"] {
        let keys = match style {
            "collectd" => collectd_keys(),
            _ => keys(style == "tagged"),
        };
        for (i, (name, walk)) in VALUES.iter().enumerate() {
            all.push((
                format!("backfill {style} {name}"),
                batch(&keys, 60, *walk, 7 + i as u64),
            ));
        }
        for i in [2, 3] {
            let (name, walk) = VALUES[i];
            all.push((
                format!("edge {style} {name}"),
                batch(&keys, 1, walk, 11 + i as u64),
            ));
        }
    }
    all
}

fn sizes(workloads: &[(String, SampleBatch)]) {
    for (name, b) in workloads {
        let n = b.samples.len() as f64;
        let whole = encoded_len(std::slice::from_ref(b));
        let split = encoded_len(&by_partition(b));
        println!(
            "wire size: {name:>34}: {:6.2} bytes/sample in one message, {:6.2} in {PARTITIONS} \
             (one per partition)",
            whole as f64 / n,
            split as f64 / n
        );
    }
}

/// Samples a second of CPU time for `f` run over and over on `samples` samples, for 2 s.
fn cpu_rate(samples: usize, mut f: impl FnMut()) -> f64 {
    let start = thread_cpu_secs();
    let mut runs = 0u64;
    while thread_cpu_secs() - start < 2.0 {
        f();
        runs += 1;
    }
    (runs as f64 * samples as f64) / (thread_cpu_secs() - start)
}

fn speed(c: &mut Criterion) {
    let workloads = workloads();
    sizes(&workloads);
    let measured = workloads
        .iter()
        .filter(|(name, _)| name.contains("graphite") && !name.contains("constant"));
    for (name, b) in measured.clone() {
        let n = b.samples.len();
        let mut out = Vec::new();
        let enc = cpu_rate(n, || {
            out.clear();
            encode(black_box(b), &mut out).unwrap();
        });
        let dec = cpu_rate(n, || {
            black_box(decode(black_box(&out)).unwrap());
        });
        println!(
            "wire speed: {name:>34}: encode {:6.1} M samples/s, decode {:6.1} M samples/s \
             (CPU time)",
            enc / 1e6,
            dec / 1e6
        );
    }
    let mut group = c.benchmark_group("wire");
    for (name, b) in measured {
        group.throughput(Throughput::Elements(b.samples.len() as u64));
        let mut out = Vec::new();
        encode(b, &mut out).unwrap();
        group.bench_function(format!("encode {name}"), |bench| {
            let mut buf = Vec::new();
            bench.iter(|| {
                buf.clear();
                encode(black_box(b), &mut buf).unwrap();
            })
        });
        group.bench_function(format!("decode {name}"), |bench| {
            bench.iter(|| black_box(decode(black_box(&out)).unwrap()))
        });
    }
    group.finish();
}

criterion_group!(benches, speed);
criterion_main!(benches);
