use proptest::prelude::*;

use super::varint::{put_signed, put_varint};
use super::*;
use crate::counter::SeriesKind;
use crate::engine::{BatchObserved, BatchSample, BatchSeries, KeyIndex, SampleBatch};
use crate::registry::SeriesKey;

/// A batch as comparable bits: NaN payloads and -0.0 compare as what they are.
type Bits = (
    Vec<BatchSeries>,
    Vec<(u32, i64, u64)>,
    Vec<(u32, i64, String)>,
);

/// A batch as bits: series, samples, and observations (their debug form: floats print
/// exactly).
fn bits(b: &SampleBatch) -> Bits {
    let samples = b
        .samples
        .iter()
        .map(|s| (s.series, s.ts, s.value.to_bits()))
        .collect();
    let observed = (b.observed.iter())
        .map(|o| (o.series, o.ts, format!("{:?}", o.observed)))
        .collect();
    (b.series.clone(), samples, observed)
}

/// What `decode` documents it returns for `b`, built independently of the encoder: series
/// stably sorted by key, samples stably sorted by their series' key, indexes remapped.
fn regrouped(b: &SampleBatch) -> SampleBatch {
    let mut order: Vec<usize> = (0..b.series.len()).collect();
    order.sort_by(|&x, &y| b.series[x].key.cmp(&b.series[y].key));
    let mut new_index = vec![0u32; b.series.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new as u32;
    }
    let mut samples: Vec<BatchSample> = b
        .samples
        .iter()
        .map(|s| BatchSample {
            series: new_index[s.series as usize],
            ..*s
        })
        .collect();
    let series: Vec<BatchSeries> = order.iter().map(|&i| b.series[i].clone()).collect();
    samples.sort_by(|x, y| {
        series[x.series as usize]
            .key
            .cmp(&series[y.series as usize].key)
    });
    let observed = (b.observed.iter())
        .map(|o| BatchObserved {
            series: new_index[o.series as usize],
            ..o.clone()
        })
        .collect();
    SampleBatch {
        series,
        samples,
        observed,
    }
}

fn round_trip(b: &SampleBatch) -> SampleBatch {
    let bytes = encode_to_vec(b).expect("encodable");
    decode(&bytes).expect("decodes")
}

/// A small batch touching every column encoding: decimals, raw floats, a constant, an
/// irregular and a regular cadence, a key with two kinds.
fn sample_batch() -> SampleBatch {
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    for i in 0..6 {
        let t = 1_700_000_000 + i * 10;
        b.push(
            &mut index,
            "servers.host0001.cpu.user",
            None,
            t,
            12.25 + i as f64,
        );
        b.push(
            &mut index,
            "servers.host0001.cpu.idle",
            Some(SeriesKind::Gauge),
            t + i * i,
            0.1 * i as f64,
        );
        b.push(&mut index, "servers.host0002.load", None, t, 7.0);
        b.push(
            &mut index,
            "cpu_usage{core=3,host=h0042}",
            Some(SeriesKind::Counter),
            t,
            (i * 1000) as f64,
        );
    }
    // The same key declared as a counter after undeclared samples: a second entry.
    b.push(
        &mut index,
        "servers.host0002.load",
        Some(SeriesKind::Counter),
        1_700_000_100,
        8.5,
    );
    b
}

#[test]
fn a_batch_comes_back_grouped_by_key_with_every_bit() {
    let b = sample_batch();
    assert_eq!(bits(&round_trip(&b)), bits(&regrouped(&b)));
}

/// A delta counter's and a distribution's kinds do not fit the tag's two bits: alone, a
/// key lists its one entry; beside another kind, as any two.
#[test]
fn a_delta_counter_and_a_distribution_come_back_alone_or_beside_another_kind() {
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    for i in 0..3 {
        let t = 1_700_000_000 + i * 10;
        b.push(
            &mut index,
            "page.views",
            Some(SeriesKind::DeltaCounter),
            t,
            2.0,
        );
        b.push(
            &mut index,
            "req.time",
            Some(SeriesKind::Distribution),
            t,
            12.5,
        );
        b.push(
            &mut index,
            "temp",
            Some(SeriesKind::Distribution),
            t + 2,
            3.0,
        );
        b.push(&mut index, "temp", Some(SeriesKind::Gauge), t, 20.5);
        b.push(
            &mut index,
            "temp",
            Some(SeriesKind::DeltaCounter),
            t + 1,
            1.0,
        );
    }
    let bytes = encode_to_vec(&b).unwrap();
    assert_eq!(bits(&decode(&bytes).unwrap()), bits(&regrouped(&b)));
}

#[test]
fn awkward_values_and_timestamps_come_back_bit_for_bit() {
    let awkward = [
        -0.0,
        0.0,
        f64::from_bits(1),                     // smallest subnormal
        f64::from_bits(0x000f_ffff_ffff_ffff), // largest subnormal
        f64::from_bits(0x7ff8_0000_0000_0001), // quiet NaN with a payload
        f64::from_bits(0xfff4_0000_dead_beef), // negative signalling NaN with a payload
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
        9_007_199_254_740_993.0, // 2^53 + 1 rounds to 2^53: an integer past exactness
        0.1 + 0.2,
        -12.34,
        1e-18,
    ];
    let times = [i64::MIN, i64::MAX, 0, -1, 1, i64::MIN + 1, i64::MAX - 1];
    let mut b = SampleBatch {
        series: vec![
            BatchSeries {
                key: "a".into(),
                kind: None,
            },
            BatchSeries {
                key: "b".into(),
                kind: Some(SeriesKind::Gauge),
            },
        ],
        samples: Vec::new(),
        observed: Vec::new(),
    };
    for (i, &value) in awkward.iter().enumerate() {
        for (j, &ts) in times.iter().enumerate() {
            b.samples.push(BatchSample {
                series: ((i + j) % 2) as u32,
                ts,
                value,
            });
        }
    }
    // Each value alone in a series too, so the single-value encodings are taken.
    for (i, &value) in awkward.iter().enumerate() {
        b.series.push(BatchSeries {
            key: format!("single{i:02}"),
            kind: None,
        });
        let series = b.series.len() as u32 - 1;
        b.samples.push(BatchSample {
            series,
            ts: times[i % times.len()],
            value,
        });
    }
    assert_eq!(bits(&round_trip(&b)), bits(&regrouped(&b)));
}

#[test]
fn samples_of_one_key_under_two_kinds_keep_their_interleaving() {
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    let kinds = [
        None,
        Some(SeriesKind::Counter),
        None,
        None,
        Some(SeriesKind::Gauge),
        None,
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        // `push` adds an entry whenever the kind differs from the indexed one.
        b.push(&mut index, "k", kind, 100 + i as i64, i as f64);
        b.push(&mut index, "j", None, 100 + i as i64, -(i as f64));
    }
    let decoded = round_trip(&b);
    assert_eq!(bits(&decoded), bits(&regrouped(&b)));
    let of_k: Vec<(Option<SeriesKind>, f64)> = decoded
        .samples
        .iter()
        .filter(|s| decoded.series[s.series as usize].key == "k")
        .map(|s| (decoded.series[s.series as usize].kind, s.value))
        .collect();
    let expected: Vec<_> = kinds.into_iter().zip((0..6).map(|i| i as f64)).collect();
    assert_eq!(of_k, expected);
}

#[test]
fn series_without_samples_are_kept() {
    let b = SampleBatch {
        series: vec![
            BatchSeries {
                key: "z".into(),
                kind: Some(SeriesKind::Counter),
            },
            BatchSeries {
                key: "a".into(),
                kind: None,
            },
            BatchSeries {
                key: "a".into(),
                kind: Some(SeriesKind::Gauge),
            },
        ],
        samples: vec![BatchSample {
            series: 0,
            ts: 5,
            value: 1.5,
        }],
        observed: Vec::new(),
    };
    assert_eq!(bits(&round_trip(&b)), bits(&regrouped(&b)));
}

#[test]
fn an_empty_batch_is_a_bare_header() {
    let bytes = encode_to_vec(&SampleBatch::default()).unwrap();
    assert_eq!(bytes.len(), HEADER_LEN);
    assert_eq!(&bytes[..4], b"TDBW");
    assert_eq!(decode(&bytes).unwrap(), SampleBatch::default());
}

#[test]
fn encode_appends_after_what_the_buffer_holds() {
    let b = sample_batch();
    let mut out = b"prefix".to_vec();
    encode(&b, &mut out).unwrap();
    assert_eq!(&out[..6], b"prefix");
    assert_eq!(out[6..], encode_to_vec(&b).unwrap());
}

#[test]
fn regular_backfill_fits_the_size_target() {
    // 60 samples at a 10 s cadence: a constant costs nothing per sample, an integer
    // random walk about one byte, a 2-decimal gauge about two.
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    let mut walk = 500.0;
    let mut gauge = 5000i64;
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..60 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        walk += (x % 21) as f64 - 10.0;
        gauge += (x >> 8) as i64 % 201 - 100;
        let t = 1_800_000_000 + 10 * i;
        b.push(&mut index, "servers.host0042.cpu.user", None, t, 42.0);
        b.push(&mut index, "servers.host0042.cpu.system", None, t, walk);
        b.push(
            &mut index,
            "cpu_usage{core=3,host=h0042}",
            None,
            t,
            gauge as f64 / 100.0,
        );
    }
    let bytes = encode_to_vec(&b).unwrap();
    // 180 samples: keys ~70 bytes, the walk <= 60, the gauge <= 120, headers.
    assert!(bytes.len() <= 8 * 180 / 2, "{} bytes", bytes.len());
    assert_eq!(bits(&decode(&bytes).unwrap()), bits(&regrouped(&b)));
}

// --- Damage ---------------------------------------------------------------------------

/// Recomputes the CRC after a test edited a message, so the edit reaches the body checks.
fn reseal(bytes: &mut [u8]) {
    let crc = checksum(bytes);
    bytes[CRC_OFFSET..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
}

/// A message with the given header counts and body, correctly sealed.
fn message(keys: u32, series: u32, samples: u32, body: &[u8]) -> Vec<u8> {
    let mut m = vec![0u8; HEADER_LEN];
    m[..4].copy_from_slice(&MAGIC);
    m[VERSION_OFFSET] = FORMAT_VERSION;
    m[KEYS_OFFSET..SERIES_OFFSET].copy_from_slice(&keys.to_le_bytes());
    m[SERIES_OFFSET..SAMPLES_OFFSET].copy_from_slice(&series.to_le_bytes());
    m[SAMPLES_OFFSET..BODY_LEN_OFFSET].copy_from_slice(&samples.to_le_bytes());
    m[BODY_LEN_OFFSET..CRC_OFFSET].copy_from_slice(&(body.len() as u32).to_le_bytes());
    m.extend_from_slice(body);
    reseal(&mut m);
    m
}

#[test]
fn the_hand_built_message_helper_matches_the_encoder() {
    // One key "k", no kind, one sample at ts 3 with value 2.0 as decimal 2 / 10^0.
    let mut body = vec![0, 1, b'k'];
    body.push(1 << 5); // tag: kind none, mode decimal deltas, nothing else
    put_varint(&mut body, 1);
    put_signed(&mut body, 3);
    body.push(0);
    put_signed(&mut body, 2);
    let b = SampleBatch {
        series: vec![BatchSeries {
            key: "k".into(),
            kind: None,
        }],
        samples: vec![BatchSample {
            series: 0,
            ts: 3,
            value: 2.0,
        }],
        observed: Vec::new(),
    };
    // The encoder sets VALUES_EQUAL for a single value; the decoder reads both.
    let mut ours = message(1, 1, 1, &body);
    assert_eq!(bits(&decode(&ours).unwrap()), bits(&b));
    ours[HEADER_LEN + 3] |= columns::VALUES_EQUAL;
    reseal(&mut ours);
    assert_eq!(ours, encode_to_vec(&b).unwrap());
}

/// 40 series of a fleet, one sample each: a key section that is stored deflated.
fn fleet_batch() -> SampleBatch {
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    for host in 0..10 {
        for metric in ["cpu.user", "cpu.system", "memory.used", "load.shortterm"] {
            let key = format!("collectd.web-{host:02}_fra1.{metric}");
            b.push(&mut index, &key, None, 1_800_000_000, host as f64 * 1.25);
        }
    }
    b
}

#[test]
fn a_fleets_keys_are_deflated_when_that_is_smaller() {
    let b = fleet_batch();
    let bytes = encode_to_vec(&b).unwrap();
    assert_eq!(bytes[FLAGS_OFFSET], KEYS_DEFLATED);
    let text: usize = b.series.iter().map(|s| s.key.len()).sum();
    assert!(
        bytes.len() < text / 2,
        "{} bytes for {text} bytes of keys",
        bytes.len()
    );
    assert_eq!(bits(&decode(&bytes).unwrap()), bits(&regrouped(&b)));
    // One short key is not worth deflating.
    let one = encode_to_vec(&SampleBatch {
        series: vec![BatchSeries {
            key: "k".into(),
            kind: None,
        }],
        samples: Vec::new(),
        observed: Vec::new(),
    })
    .unwrap();
    assert_eq!(one[FLAGS_OFFSET], 0);
}

/// A sealed message with a deflated key section: `raw_len`, the DEFLATE bytes, then `rest`.
fn deflated_message(
    keys: u32,
    samples: u32,
    raw_len: usize,
    deflated: &[u8],
    rest: &[u8],
) -> Vec<u8> {
    let mut body = Vec::new();
    put_varint(&mut body, raw_len as u64);
    put_varint(&mut body, deflated.len() as u64);
    body.extend_from_slice(deflated);
    body.extend_from_slice(rest);
    let mut m = message(keys, keys, samples, &body);
    m[FLAGS_OFFSET] = KEYS_DEFLATED;
    reseal(&mut m);
    m
}

#[test]
fn a_damaged_or_oversized_deflated_key_section_is_an_error() {
    let section = [0, 1, b'k'];
    let good = miniz_oxide::deflate::compress_to_vec(&section, 6);
    let group = [0, 0]; // kind none, no samples
    let m = deflated_message(1, 0, section.len(), &good, &group);
    assert_eq!(decode(&m).unwrap().series[0].key, "k");
    // Inflates past its declared length: refused at the limit, not inflated whole.
    let bomb = miniz_oxide::deflate::compress_to_vec(&vec![0u8; 1 << 20], 6);
    let err = decode(&deflated_message(1, 0, 3, &bomb, &group)).unwrap_err();
    assert_eq!(err, WireError::BadDeflate { raw_len: 3 });
    // Shorter than declared.
    let err = decode(&deflated_message(1, 0, 4, &good, &group)).unwrap_err();
    assert_eq!(err, WireError::BadDeflate { raw_len: 4 });
    // Not DEFLATE at all.
    let err = decode(&deflated_message(1, 0, 3, &[0xff; 8], &group)).unwrap_err();
    assert_eq!(err, WireError::BadDeflate { raw_len: 3 });
    // A declared length past any key section.
    let err = decode(&deflated_message(1, 0, MAX_KEY_SECTION + 1, &good, &group)).unwrap_err();
    assert!(matches!(err, WireError::OutOfRange { .. }), "{err}");
    // Bytes left over in the inflated section.
    let longer = miniz_oxide::deflate::compress_to_vec(&[0, 1, b'k', 0], 6);
    let err = decode(&deflated_message(1, 0, 4, &longer, &group)).unwrap_err();
    assert!(
        matches!(err, WireError::CountMismatch { what: "keys", .. }),
        "{err}"
    );
}

#[test]
fn every_flipped_bit_is_caught() {
    for b in [sample_batch(), fleet_batch()] {
        every_flipped_bit_is_caught_in(&encode_to_vec(&b).unwrap());
    }
}

fn every_flipped_bit_is_caught_in(bytes: &[u8]) {
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut damaged = bytes.to_vec();
            damaged[i] ^= 1 << bit;
            let err = decode(&damaged).expect_err("damage must not decode");
            match i {
                0..4 => assert!(matches!(err, WireError::BadMagic { .. }), "{i}: {err}"),
                4 => assert!(
                    matches!(err, WireError::UnknownVersion { .. }),
                    "{i}: {err}"
                ),
                BODY_LEN_OFFSET..CRC_OFFSET => assert!(
                    matches!(
                        err,
                        WireError::Truncated { .. } | WireError::TrailingBytes { .. }
                    ),
                    "{i}: {err}"
                ),
                _ => assert!(
                    matches!(err, WireError::ChecksumMismatch { .. }),
                    "{i}: {err}"
                ),
            }
        }
    }
}

#[test]
fn every_truncation_is_caught() {
    for b in [sample_batch(), fleet_batch()] {
        let bytes = encode_to_vec(&b).unwrap();
        for len in 0..bytes.len() {
            let err = decode(&bytes[..len]).expect_err("a prefix must not decode");
            assert!(
                matches!(err, WireError::Truncated { got, .. } if got == len),
                "{len}: {err}"
            );
        }
    }
    let bytes = encode_to_vec(&sample_batch()).unwrap();
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(decode(&longer), Err(WireError::TrailingBytes { extra: 1 }));
}

#[test]
fn a_foreign_payload_is_not_a_batch() {
    let cases: [&[u8]; 4] = [
        b"TIERDBPF\x01\x00\x00\x00",
        b"{\"series\":[],\"samples\":[]}",
        b"servers.host1.cpu 1.5 1700000000\n",
        b"\x28\xb5\x2f\xfd", // a zstd frame
    ];
    for c in cases {
        assert!(
            matches!(decode(c), Err(WireError::BadMagic { .. })),
            "{c:?}"
        );
    }
    assert!(matches!(
        decode(b""),
        Err(WireError::Truncated {
            expected: HEADER_LEN,
            got: 0
        })
    ));
}

#[test]
fn each_header_field_is_checked() {
    let good = encode_to_vec(&sample_batch()).unwrap();
    let with = |offset: usize, value: &[u8], seal: bool| {
        let mut m = good.clone();
        m[offset..offset + value.len()].copy_from_slice(value);
        if seal {
            reseal(&mut m);
        }
        decode(&m)
    };
    assert_eq!(
        with(0, b"TDBX", true),
        Err(WireError::BadMagic { found: *b"TDBX" })
    );
    assert_eq!(
        with(VERSION_OFFSET, &[2], true),
        Err(WireError::UnknownVersion { found: 2 })
    );
    let flags = good[FLAGS_OFFSET] | 4;
    assert!(matches!(
        with(FLAGS_OFFSET, &[flags], false),
        Err(WireError::ChecksumMismatch { .. })
    ));
    assert_eq!(
        with(FLAGS_OFFSET, &[flags], true),
        Err(WireError::UnknownFlags { flags })
    );
    assert!(matches!(
        with(CRC_OFFSET, &[0; 4], false),
        Err(WireError::ChecksumMismatch { .. })
    ));
    // Counts: covered by the checksum, and checked against the body when resealed. The
    // batch has 4 keys, 5 series (one key has two kinds) and 25 samples.
    for (offset, value) in [
        (KEYS_OFFSET, 3u32),
        (SERIES_OFFSET, 4),
        (SAMPLES_OFFSET, 23),
    ] {
        let v = value.to_le_bytes();
        assert!(matches!(
            with(offset, &v, false),
            Err(WireError::ChecksumMismatch { .. })
        ));
        let err = with(offset, &v, true).expect_err("a wrong count must not decode");
        assert!(
            !matches!(err, WireError::ChecksumMismatch { .. }),
            "{offset}: {err}"
        );
    }
    // Fewer series or samples than the body holds: caught where the body passes them.
    let err = with(SERIES_OFFSET, &4u32.to_le_bytes(), true).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::OutOfRange {
                value: 2,
                max: 1,
                ..
            }
        ),
        "{err}"
    );
    let err = with(SAMPLES_OFFSET, &23u32.to_le_bytes(), true).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::OutOfRange {
                value: 7,
                max: 5,
                ..
            }
        ),
        "{err}"
    );
    // More than it holds: caught at the end.
    for (offset, value) in [(SERIES_OFFSET, 6u32), (SAMPLES_OFFSET, 26)] {
        let err = with(offset, &value.to_le_bytes(), true).unwrap_err();
        assert!(
            matches!(err, WireError::CountMismatch { .. }),
            "{offset}: {err}"
        );
    }
    let claimed_body = (good.len() - HEADER_LEN + 1) as u32;
    assert!(matches!(
        with(BODY_LEN_OFFSET, &claimed_body.to_le_bytes(), true),
        Err(WireError::Truncated { .. })
    ));
}

#[test]
fn huge_claims_in_a_tiny_message_fail_without_allocating_them() {
    // u32::MAX samples would be ~100 GB of BatchSample: refused from the header alone.
    let err = decode(&message(0, 0, u32::MAX, &[])).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::TooMany {
                what: "samples",
                ..
            }
        ),
        "{err}"
    );
    let err = decode(&message(u32::MAX, u32::MAX, 0, &[])).unwrap_err();
    assert!(
        matches!(err, WireError::TooMany { what: "series", .. }),
        "{err}"
    );
    // Within the limits but more keys than 10 bytes can hold.
    let err = decode(&message(MAX_SERIES as u32, MAX_SERIES as u32, 0, &[0; 10])).unwrap_err();
    assert!(matches!(err, WireError::CountMismatch { .. }), "{err}");
    // One key claiming a million irregular samples in a few bytes.
    let mut body = vec![0, 1, b'k', 0];
    put_varint(&mut body, MAX_SAMPLES as u64);
    body.extend_from_slice(&[0, 0, 0]);
    let err = decode(&message(1, 1, MAX_SAMPLES as u32, &body)).unwrap_err();
    assert!(matches!(err, WireError::BodyEndsEarly { .. }), "{err}");
    // A key's count past the header's.
    let mut body = vec![0, 1, b'k', 0];
    put_varint(&mut body, 5);
    let err = decode(&message(1, 1, 4, &body)).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::OutOfRange {
                value: 5,
                max: 4,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn prefix_sharing_cannot_blow_up_key_text() {
    // A longest key, then keys repeating all but its last byte: 5 bytes each on the
    // wire, 8 KiB each decoded. The total is refused once past MAX_KEY_BYTES.
    let keys = MAX_KEY_BYTES / SeriesKey::MAX_LEN + 2;
    let mut body = vec![0];
    put_varint(&mut body, SeriesKey::MAX_LEN as u64);
    body.extend(std::iter::repeat_n(b'a', SeriesKey::MAX_LEN - 1));
    body.push(0);
    for i in 1..keys {
        put_varint(&mut body, SeriesKey::MAX_LEN as u64 - 3);
        body.push(3);
        body.extend_from_slice(&[b'b', 0x40 + (i >> 6) as u8, 0x40 + (i & 0x3f) as u8]);
    }
    body.extend(std::iter::repeat_n(0, keys * 2)); // empty groups
    let err = decode(&message(keys as u32, keys as u32, 0, &body)).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::TooMany {
                what: "key bytes",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_damaged_body_behind_a_valid_checksum_is_an_error() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Eleven continuation bytes.
        (vec![0xff; 11], "BadVarint"),
        // Ten bytes with more than bit 63 in the last.
        ([&[0xff; 9][..], &[0x02]].concat(), "BadVarint"),
        // Shared prefix longer than the previous key (there is none).
        (vec![1, 1, b'k', 0, 0], "OutOfRange"),
        // Suffix running past the body.
        (vec![0, 9, b'k', 0], "BodyEndsEarly"),
        // Not UTF-8.
        (vec![0, 1, 0xff, 0, 0], "KeyNotUtf8"),
        // Reserved tag bit.
        (vec![0, 1, b'k', 0x80, 0], "OutOfRange"),
        // Kind 3 with one entry the tag could hold, or none.
        (vec![0, 1, b'k', 3, 1, 0, 0], "Malformed"),
        (vec![0, 1, b'k', 3, 0, 0], "Malformed"),
        // Unknown kind byte of an entry.
        (vec![0, 1, b'k', 3, 2, 0, 5, 0], "OutOfRange"),
        // Value mode 3.
        (vec![0, 1, b'k', 3 << 5, 1, 0, 0], "OutOfRange"),
        // Decimal places past 18.
        (vec![0, 1, b'k', 1 << 5, 1, 0, 19, 0], "OutOfRange"),
        // Left-over body bytes.
        (vec![0, 1, b'k', 0, 0, 0], "CountMismatch"),
    ];
    for (body, expected) in cases {
        let err = decode(&message(
            1,
            1 + u32::from(body.get(3) == Some(&3)),
            1,
            &body,
        ))
        .expect_err("damaged body must not decode");
        assert!(
            format!("{err:?}").starts_with(expected),
            "{body:?}: {err:?}"
        );
    }
    // Two keys out of order.
    let body = [0, 1, b'b', 0, 1, b'a', 0, 0, 0, 0];
    assert_eq!(
        decode(&message(2, 2, 0, &body)),
        Err(WireError::KeysOutOfOrder { index: 1 })
    );
    // A run naming a third entry of two.
    let body = [
        0, 1, b'k', 3, 2, 0, 1, 1, 1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let err = decode(&message(1, 2, 1, &body)).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::OutOfRange {
                value: 2,
                max: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn encode_refuses_what_it_cannot_write() {
    let mut b = sample_batch();
    b.samples.push(BatchSample {
        series: 99,
        ts: 0,
        value: 0.0,
    });
    let err = encode_to_vec(&b).unwrap_err();
    assert!(
        matches!(err, WireError::SeriesIndexOutOfRange { series: 99, .. }),
        "{err}"
    );
    let b = SampleBatch {
        series: vec![BatchSeries {
            key: "x".repeat(SeriesKey::MAX_LEN + 1),
            kind: None,
        }],
        samples: Vec::new(),
        observed: Vec::new(),
    };
    assert!(matches!(encode_to_vec(&b), Err(WireError::TooMany { .. })));
    let mut out = vec![7];
    assert!(encode(&b, &mut out).is_err());
    assert_eq!(out, [7], "a refused batch leaves the buffer as it was");
}

#[test]
fn errors_read_as_sentences() {
    let err = decode(b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "not a tierdb batch message: it starts with [47, 45, 54, 20], not \"TDBW\""
    );
    let mut m = encode_to_vec(&sample_batch()).unwrap();
    m[HEADER_LEN] ^= 1;
    assert!(err_text(&m).starts_with("batch message checksum mismatch: stored 0x"));
}

fn err_text(m: &[u8]) -> String {
    decode(m).unwrap_err().to_string()
}

// --- Random batches --------------------------------------------------------------------

fn value() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        (-100_000i64..100_000, 0u32..4).prop_map(|(m, d)| m as f64 / 10f64.powi(d as i32)),
        (-5i64..5).prop_map(|i| i as f64),
        Just(-0.0),
        Just(f64::from_bits(0x7ff8_0000_0000_0001)),
        (1u64..1 << 52).prop_map(f64::from_bits),
    ]
}

fn timestamp() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        (0i64..6).prop_map(|k| 1_700_000_000 + 10 * k),
        Just(i64::MIN),
        Just(i64::MAX),
    ]
}

fn batch() -> impl Strategy<Value = SampleBatch> {
    let series = prop::collection::vec(("[ab]{0,3}", 0u8..5), 0..8);
    series.prop_flat_map(|series| {
        let series: Vec<BatchSeries> = series
            .into_iter()
            .map(|(key, kind)| BatchSeries {
                key,
                kind: [
                    None,
                    Some(SeriesKind::Gauge),
                    Some(SeriesKind::Counter),
                    Some(SeriesKind::DeltaCounter),
                    Some(SeriesKind::Distribution),
                ][kind as usize],
            })
            .collect();
        let n = series.len() as u32;
        let samples = if n == 0 {
            Just(Vec::new()).boxed()
        } else {
            prop::collection::vec((0..n, timestamp(), value()), 0..60)
                .prop_map(|v| {
                    v.into_iter()
                        .map(|(series, ts, value)| BatchSample { series, ts, value })
                        .collect()
                })
                .boxed()
        };
        let observed = if n == 0 {
            Just(Vec::new()).boxed()
        } else {
            prop::collection::vec(
                (
                    0..n,
                    timestamp(),
                    prop::collection::vec(-1e6f64..1e6, 0..12),
                    any::<bool>(),
                ),
                0..6,
            )
            .prop_map(|v| {
                v.into_iter()
                    .map(|(series, ts, values, extremes)| observed(series, ts, &values, extremes))
                    .collect()
            })
            .boxed()
        };
        (Just(series), samples, observed).prop_map(|(series, samples, observed)| SampleBatch {
            series,
            samples,
            observed,
        })
    })
}

/// Batches shaped like real traffic: a few series, each at a cadence, with runs of equal
/// or decimal values, so the regular, equal and decimal encodings are taken too.
fn cadenced_batch() -> impl Strategy<Value = SampleBatch> {
    prop::collection::vec(
        (
            0u32..4,
            1i64..30,
            prop::collection::vec((0i64..3, value()), 1..20),
        ),
        1..12,
    )
    .prop_map(|series| {
        let mut b = SampleBatch::default();
        for (i, (kind, stride, points)) in series.into_iter().enumerate() {
            b.series.push(BatchSeries {
                key: format!(
                    "collectd.web-{:02}_fra1.{}",
                    i / 3,
                    ["cpu.user", "cpu.idle", "load"][i % 3]
                ),
                kind: (kind == 1).then_some(SeriesKind::Counter),
            });
            let mut ts = 1_700_000_000;
            let mut last = points[0].1;
            for (jitter, v) in points {
                ts += stride + if kind == 3 { jitter } else { 0 };
                if kind != 2 {
                    last = v; // kind 2 keeps one value: equal values
                }
                b.samples.push(BatchSample {
                    series: i as u32,
                    ts,
                    value: last,
                });
            }
        }
        b
    })
}

proptest! {
    #[test]
    fn random_batches_come_back_grouped_by_key(b in batch()) {
        let bytes = encode_to_vec(&b).unwrap();
        let decoded = decode(&bytes).unwrap();
        prop_assert_eq!(bits(&decoded), bits(&regrouped(&b)));
        // The decoded form is canonical: it encodes to the same bytes.
        prop_assert_eq!(encode_to_vec(&decoded).unwrap(), bytes);
    }

    #[test]
    fn cadenced_batches_come_back_grouped_by_key(b in cadenced_batch()) {
        prop_assert_eq!(bits(&round_trip(&b)), bits(&regrouped(&b)));
    }

    #[test]
    fn arbitrary_bytes_never_panic(mut tail in prop::collection::vec(any::<u8>(), 0..200), keys in 0u32..4, series in 0u32..6, samples in 0u32..50, flags in 0u8..2) {
        // Behind a valid header and checksum, so the body parser itself is exercised.
        let mut m = message(keys, series, samples, &tail);
        m[FLAGS_OFFSET] = flags;
        reseal(&mut m);
        let _ = decode(&m);
        tail.truncate(tail.len() / 2);
        let _ = decode(&tail);
    }
}

/// The mode of the first group's values, read from the tag of a message whose key section
/// is `key_section_len` bytes and not deflated.
fn first_value_mode(bytes: &[u8], key_section_len: usize) -> u8 {
    assert_eq!(bytes[FLAGS_OFFSET], 0);
    (bytes[HEADER_LEN + key_section_len] >> columns::VALUE_MODE_SHIFT) & 0b11
}

#[test]
fn each_value_mode_round_trips_when_chosen() {
    // (values, the mode the encoder should pick: 0 XOR, 1 decimal deltas, 2 decimal deltas
    // of deltas). A counter rising by about 10.00 a step, give or take a cent: its deltas
    // take two bytes, their differences one.
    let counter: Vec<f64> = (0..40)
        .map(|i| (1000 * i + (i * 7) % 3) as f64 / 100.0)
        .collect();
    let walk: Vec<f64> = (0..40).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
    let floats: Vec<f64> = (0..40).map(|i| (i as f64 + 0.5).sqrt()).collect();
    for (values, mode) in [(counter, 2), (walk, 1), (floats, 0)] {
        let b = SampleBatch {
            series: vec![BatchSeries {
                key: "c".into(),
                kind: Some(SeriesKind::Counter),
            }],
            samples: values
                .iter()
                .enumerate()
                .map(|(i, &value)| BatchSample {
                    series: 0,
                    ts: 60 * i as i64 + i as i64 % 2,
                    value,
                })
                .collect(),
            observed: Vec::new(),
        };
        let bytes = encode_to_vec(&b).unwrap();
        assert_eq!(first_value_mode(&bytes, 3), mode, "{values:?}");
        assert_eq!(bits(&decode(&bytes).unwrap()), bits(&b));
    }
}

/// A bucketed observation of `values` for series `series` at `ts`, with the extremes sent or
/// not.
fn observed(series: u32, ts: i64, values: &[f64], extremes: bool) -> BatchObserved {
    let mut histogram = crate::histogram::Histogram::default();
    values.iter().for_each(|&v| histogram.record(v));
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    BatchObserved {
        series,
        ts,
        observed: crate::histogram::Observed {
            histogram,
            sum: values.iter().sum(),
            extremes: (extremes && !values.is_empty()).then_some((lo, hi)),
        },
    }
}

/// Bucketed observations come back whole, each naming its series where the decoded batch
/// has it (key order).
#[test]
fn observations_come_back_naming_their_series_in_key_order() {
    let mut b = SampleBatch::default();
    let mut index = KeyIndex::default();
    b.push(&mut index, "zeta", None, 1_700_000_000, 1.0);
    let o = observed(0, 1_700_000_010, &[0.5, 3.0, 3.0, 1e4, -2.0], true);
    b.push_observed(&mut index, "req.latency{job=api}", o.ts, o.observed.clone());
    b.push_observed(&mut index, "alpha", o.ts - 5, o.observed.clone());
    let back = round_trip(&b);
    assert_eq!(back.observed.len(), 2);
    for (sent, got) in b.observed.iter().zip(&back.observed) {
        assert_eq!(
            b.series[sent.series as usize],
            back.series[got.series as usize]
        );
        assert_eq!((sent.ts, &sent.observed), (got.ts, &got.observed));
    }
    assert_eq!(back.samples.len(), 1);
}
