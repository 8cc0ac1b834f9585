//! One series' samples in a batch message: its timestamp column and its value column, each
//! in the smallest of a few exact encodings chosen per series.
//!
//! Timestamps: the first as a signed delta from the previous series' first (often 0, then
//! dropped altogether), then either one stride (a regular cadence costs nothing per sample)
//! or signed deltas of deltas. Values: either f64 bits, the first raw and each next one
//! XORed with the one before (bytes of leading and trailing zeros dropped, Gorilla's idea
//! at byte granularity), or, when every value is a decimal `m / 10^d` exactly, the integers
//! `m` as signed deltas or deltas of deltas. A series whose values are all the same bits
//! stores the first only. All integer arithmetic wraps, so any i64 and any f64 bit pattern
//! comes back unchanged.

use super::varint::{put_signed, varint_len, zigzag, Reader};
use super::WireError;
use crate::engine::BatchSample;

/// Most decimal places a value column may scale by.
pub(super) const MAX_DECIMALS: u8 = 18;

/// 10^0 ..= 10^MAX_DECIMALS, each exactly representable (10^22 is the last that is).
const POW10: [f64; MAX_DECIMALS as usize + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18,
];

/// Largest scaled integer magnitude: every integer up to 2^53 is an exact f64, so the
/// decoder's `m as f64` is exact too.
const MAX_SCALED: f64 = 9_007_199_254_740_992.0;

/// Tag bit: the first timestamp equals the previous series' first; no delta follows.
pub(super) const TS_SAME_START: u8 = 1 << 2;
/// Tag bit: two or more samples a constant stride apart; one stride follows.
pub(super) const TS_REGULAR: u8 = 1 << 3;
/// Tag bit: every value has the same bits; only the first is stored.
pub(super) const VALUES_EQUAL: u8 = 1 << 4;
/// Position of the value mode's two bits in the tag.
pub(super) const VALUE_MODE_SHIFT: u8 = 5;
/// Value mode: raw f64 bits, then XOR with the previous value.
const MODE_XOR: u8 = 0;
/// Value mode: decimal, `m` as deltas.
const MODE_DECIMAL_DELTA: u8 = 1;
/// Value mode: decimal, `m` as deltas of deltas.
const MODE_DECIMAL_DOD: u8 = 2;

/// `v` as `m / 10^d` with the given `d`, if that division gives back exactly `v`'s bits.
fn scaled_at(v: f64, d: u8) -> Option<i64> {
    let p = POW10[d as usize];
    let m = (v * p).round();
    // NaN, infinite, or too large for an exact integer.
    if !m.is_finite() || m.abs() > MAX_SCALED {
        return None;
    }
    let m = m as i64;
    ((m as f64 / p).to_bits() == v.to_bits()).then_some(m)
}

/// The fewest decimal places, at least `from`, at which `v` is an exact decimal.
fn decimals_of(v: f64, from: u8) -> Option<u8> {
    (from..=MAX_DECIMALS).find(|&d| scaled_at(v, d).is_some())
}

/// How one series' timestamps are written.
pub(super) struct TsPlan {
    /// The tag bits ([`TS_SAME_START`], [`TS_REGULAR`]).
    pub(super) tag: u8,
}

impl TsPlan {
    /// Chooses the encoding for `ts` (not empty), whose series follows one whose first
    /// timestamp was `prev_start`.
    pub(super) fn new(ts: &[i64], prev_start: i64) -> Self {
        let mut tag = 0;
        if ts[0] == prev_start {
            tag |= TS_SAME_START;
        }
        if ts.len() >= 2 {
            let stride = ts[1].wrapping_sub(ts[0]);
            if ts.windows(2).all(|w| w[1].wrapping_sub(w[0]) == stride) {
                tag |= TS_REGULAR;
            }
        }
        TsPlan { tag }
    }

    pub(super) fn write(&self, out: &mut Vec<u8>, ts: &[i64], prev_start: i64) {
        if self.tag & TS_SAME_START == 0 {
            put_signed(out, ts[0].wrapping_sub(prev_start));
        }
        if ts.len() < 2 {
            return;
        }
        let first_delta = ts[1].wrapping_sub(ts[0]);
        put_signed(out, first_delta);
        if self.tag & TS_REGULAR == 0 {
            put_deltas_of_deltas(out, ts.iter().copied(), first_delta);
        }
    }
}

/// Appends, for each value from the third on, its delta minus the previous delta.
fn put_deltas_of_deltas(out: &mut Vec<u8>, values: impl Iterator<Item = i64>, first_delta: i64) {
    let mut prev_delta = first_delta;
    let mut values = values.skip(1);
    let Some(mut prev) = values.next() else {
        return;
    };
    for v in values {
        let delta = v.wrapping_sub(prev);
        put_signed(out, delta.wrapping_sub(prev_delta));
        prev_delta = delta;
        prev = v;
    }
}

/// How one series' values are written.
pub(super) struct ValuePlan {
    /// The tag bits ([`VALUES_EQUAL`] and the mode).
    pub(super) tag: u8,
    mode: u8,
    decimals: u8,
}

impl ValuePlan {
    /// Chooses the smallest encoding for `values` (not empty), filling `scaled` with the
    /// decimal integers when a decimal mode is chosen.
    pub(super) fn new(values: &[f64], scaled: &mut Vec<i64>) -> Self {
        let first = values[0].to_bits();
        let equal = values.iter().all(|v| v.to_bits() == first);
        let decimals = decimal_places(values);
        scaled.clear();
        if let Some(d) = decimals {
            // decimal_places checked every value at its own places; at the common (largest)
            // places each is exact too, and scaled_at checks it again.
            for &v in values {
                match scaled_at(v, d) {
                    Some(m) => scaled.push(m),
                    None => {
                        scaled.clear();
                        break;
                    }
                }
            }
        }
        let decimal = !scaled.is_empty();
        let mode = if equal {
            // One value either way: 8 raw bytes, or the places and one varint.
            let raw = 8;
            let dec = if decimal {
                1 + varint_len(zigzag(scaled[0]))
            } else {
                usize::MAX
            };
            if dec < raw {
                MODE_DECIMAL_DELTA
            } else {
                MODE_XOR
            }
        } else {
            let xor = 8 + xor_cost(values);
            let (delta, dod) = if decimal {
                let head = 1 + varint_len(zigzag(scaled[0]));
                (head + delta_cost(scaled), head + dod_cost(scaled))
            } else {
                (usize::MAX, usize::MAX)
            };
            if xor <= delta && xor <= dod {
                MODE_XOR
            } else if delta <= dod {
                MODE_DECIMAL_DELTA
            } else {
                MODE_DECIMAL_DOD
            }
        };
        let mut tag = mode << VALUE_MODE_SHIFT;
        if equal {
            tag |= VALUES_EQUAL;
        }
        ValuePlan {
            tag,
            mode,
            decimals: decimals.unwrap_or(0),
        }
    }

    pub(super) fn write(&self, out: &mut Vec<u8>, values: &[f64], scaled: &[i64]) {
        let equal = self.tag & VALUES_EQUAL != 0;
        if self.mode == MODE_XOR {
            let mut prev = values[0].to_bits();
            out.extend_from_slice(&prev.to_le_bytes());
            if !equal {
                for v in &values[1..] {
                    let bits = v.to_bits();
                    put_xor(out, bits ^ prev);
                    prev = bits;
                }
            }
            return;
        }
        out.push(self.decimals);
        put_signed(out, scaled[0]);
        if equal || scaled.len() < 2 {
            return;
        }
        let first_delta = scaled[1].wrapping_sub(scaled[0]);
        if self.mode == MODE_DECIMAL_DELTA {
            for w in scaled.windows(2) {
                put_signed(out, w[1].wrapping_sub(w[0]));
            }
        } else {
            put_signed(out, first_delta);
            put_deltas_of_deltas(out, scaled.iter().copied(), first_delta);
        }
    }
}

/// The decimal places at which every value is exact, if there are such places.
fn decimal_places(values: &[f64]) -> Option<u8> {
    let mut d = 0;
    for &v in values {
        // Exact at d places means exact at more (the same real number, rounded once), so
        // the places only grow, and the search resumes where it stopped.
        d = decimals_of(v, d)?;
    }
    Some(d)
}

/// Bytes of the XOR encoding of all values after the first.
fn xor_cost(values: &[f64]) -> usize {
    values
        .windows(2)
        .map(|w| 1 + xor_middle(w[0].to_bits() ^ w[1].to_bits()).1)
        .sum()
}

fn delta_cost(m: &[i64]) -> usize {
    m.windows(2)
        .map(|w| varint_len(zigzag(w[1].wrapping_sub(w[0]))))
        .sum()
}

fn dod_cost(m: &[i64]) -> usize {
    if m.len() < 2 {
        return 0;
    }
    let first = varint_len(zigzag(m[1].wrapping_sub(m[0])));
    first
        + m.windows(3)
            .map(|w| {
                let d1 = w[1].wrapping_sub(w[0]);
                let d2 = w[2].wrapping_sub(w[1]);
                varint_len(zigzag(d2.wrapping_sub(d1)))
            })
            .sum::<usize>()
}

/// Bytes of trailing zeros and bytes kept of a nonzero XOR (0 and 0 for zero).
fn xor_middle(x: u64) -> (usize, usize) {
    if x == 0 {
        return (0, 0);
    }
    let lead = x.leading_zeros() as usize / 8;
    let trail = x.trailing_zeros() as usize / 8;
    (trail, 8 - lead - trail)
}

/// Appends one XOR: a control byte (bytes of leading zeros in the high nibble, of trailing
/// zeros in the low one; 0x80 for zero), then the bytes between, low first.
fn put_xor(out: &mut Vec<u8>, x: u64) {
    if x == 0 {
        out.push(0x80);
        return;
    }
    let (trail, keep) = xor_middle(x);
    let lead = 8 - trail - keep;
    out.push(((lead as u8) << 4) | trail as u8);
    out.extend_from_slice(&(x >> (8 * trail)).to_le_bytes()[..keep]);
}

/// Reads an XOR written by [`put_xor`].
fn read_xor(r: &mut Reader<'_>) -> Result<u64, WireError> {
    let offset = r.offset();
    let control = r.u8("a value's XOR control byte")?;
    let lead = u64::from(control >> 4);
    let trail = u64::from(control & 0x0f);
    if lead + trail > 8 {
        return Err(WireError::OutOfRange {
            what: "bytes of zeros around a value's XOR",
            value: lead + trail,
            max: 8,
            offset,
        });
    }
    let keep = (8 - lead - trail) as usize;
    if keep == 0 {
        return Ok(0);
    }
    let mut b = [0u8; 8];
    b[..keep].copy_from_slice(r.take(keep, "a value's XOR bytes")?);
    Ok(u64::from_le_bytes(b) << (8 * trail))
}

/// Reads one series' timestamps into `samples` (whose values are then filled by
/// [`read_values`]), returning its first timestamp.
pub(super) fn read_timestamps(
    r: &mut Reader<'_>,
    tag: u8,
    samples: &mut [BatchSample],
    prev_start: i64,
) -> Result<i64, WireError> {
    let first = if tag & TS_SAME_START != 0 {
        prev_start
    } else {
        prev_start.wrapping_add(r.signed("a series' first timestamp")?)
    };
    samples[0].ts = first;
    if samples.len() < 2 {
        return Ok(first);
    }
    let mut delta = r.signed("a series' first timestamp delta")?;
    let mut ts = first;
    if tag & TS_REGULAR != 0 {
        for s in &mut samples[1..] {
            ts = ts.wrapping_add(delta);
            s.ts = ts;
        }
    } else {
        ts = ts.wrapping_add(delta);
        samples[1].ts = ts;
        for s in &mut samples[2..] {
            delta = delta.wrapping_add(r.signed("a timestamp's delta of delta")?);
            ts = ts.wrapping_add(delta);
            s.ts = ts;
        }
    }
    Ok(first)
}

/// Reads one series' values into `samples`.
pub(super) fn read_values(
    r: &mut Reader<'_>,
    tag: u8,
    samples: &mut [BatchSample],
) -> Result<(), WireError> {
    let mode = (tag >> VALUE_MODE_SHIFT) & 0b11;
    let equal = tag & VALUES_EQUAL != 0;
    if mode == MODE_XOR {
        let mut bits = r.f64_bits("a series' first value")?;
        samples[0].value = f64::from_bits(bits);
        for s in &mut samples[1..] {
            if !equal {
                bits ^= read_xor(r)?;
            }
            s.value = f64::from_bits(bits);
        }
        return Ok(());
    }
    if mode != MODE_DECIMAL_DELTA && mode != MODE_DECIMAL_DOD {
        return Err(WireError::OutOfRange {
            what: "value mode",
            value: mode.into(),
            max: MODE_DECIMAL_DOD.into(),
            offset: r.offset(),
        });
    }
    let offset = r.offset();
    let d = r.u8("a series' decimal places")?;
    if d > MAX_DECIMALS {
        return Err(WireError::OutOfRange {
            what: "decimal places",
            value: d.into(),
            max: MAX_DECIMALS.into(),
            offset,
        });
    }
    let p = POW10[d as usize];
    let mut m = r.signed("a series' first scaled value")?;
    samples[0].value = m as f64 / p;
    if equal {
        let v = samples[0].value;
        for s in &mut samples[1..] {
            s.value = v;
        }
        return Ok(());
    }
    if samples.len() < 2 {
        return Ok(());
    }
    if mode == MODE_DECIMAL_DELTA {
        for s in &mut samples[1..] {
            m = m.wrapping_add(r.signed("a scaled value's delta")?);
            s.value = m as f64 / p;
        }
    } else {
        let mut delta = r.signed("a scaled value's first delta")?;
        m = m.wrapping_add(delta);
        samples[1].value = m as f64 / p;
        for s in &mut samples[2..] {
            delta = delta.wrapping_add(r.signed("a scaled value's delta of delta")?);
            m = m.wrapping_add(delta);
            s.value = m as f64 / p;
        }
    }
    Ok(())
}
