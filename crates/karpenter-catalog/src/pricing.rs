//! Prices: real on-demand prices (AWS Price List, us-east-1) and a deterministic spot model.
//!
//! There is no public static spot price data, so spot prices are **modelled**:
//! `spot = on-demand × (0.30 + 0.25 × u)`, where `u = mix64(FNV-1a-64("<type>/<zone>")) / 2^64`
//! (`mix64` is the SplitMix64 finaliser, so neighbouring zones get unrelated prices), rounded to 5
//! decimals. That is a 45–70% discount, varying per type and zone but identical on every run
//! and machine. Everything that shows a spot price says it is modelled.

/// Lowest modelled spot price as a fraction of on-demand.
pub const SPOT_MODEL_MIN_FRACTION: f64 = 0.30;
/// Spread of the modelled spot price as a fraction of on-demand.
pub const SPOT_MODEL_SPREAD: f64 = 0.25;
/// One line describing the spot model, for tables and docs.
pub const SPOT_MODEL_NOTE: &str = "spot prices are modelled (deterministic): on-demand × (0.30 + 0.25 × u), u = mix64(FNV-1a-64(\"<type>/<zone>\")) / 2^64";

/// 64-bit FNV-1a: tiny, stable across platforms and releases (unlike `DefaultHasher`).
pub fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |hash, b| (hash ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// SplitMix64's finaliser: spreads FNV's small differences over all 64 bits.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The modelled spot price of `instance_type` in `zone`, given its on-demand price.
pub fn modelled_spot_price(instance_type: &str, zone: &str, on_demand: f64) -> f64 {
    let u = mix64(fnv1a_64(format!("{instance_type}/{zone}").as_bytes())) as f64
        / 18_446_744_073_709_551_616.0;
    round5(on_demand * (SPOT_MODEL_MIN_FRACTION + SPOT_MODEL_SPREAD * u))
}

fn round5(price: f64) -> f64 {
    (price * 100_000.0).round() / 100_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_vectors() {
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn spot_model_is_deterministic_and_discounted() {
        let a = modelled_spot_price("m5.large", "us-east-1a", 0.096);
        assert_eq!(a, modelled_spot_price("m5.large", "us-east-1a", 0.096));
        assert!(
            (0.096 * 0.30 - 1e-9..=0.096 * 0.55 + 1e-9).contains(&a),
            "{a}"
        );
        assert_ne!(
            a,
            modelled_spot_price("m5.large", "us-east-1b", 0.096),
            "varies by zone"
        );
    }
}
