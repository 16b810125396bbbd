//! Kubernetes resource quantities: the one parser of the workspace. `karpenter_core`'s
//! `Quantity::parse` and offline validation (quantity fields such as NodePool `spec.limits`) both
//! use it, so a value is accepted or rejected the same way everywhere.

/// Parses a Kubernetes quantity (`100m`, `1.5`, `2Gi`, `1e3`, `128974848`) into milli-units,
/// rounding a finer value up (away from zero) to the next milli-unit as Kubernetes'
/// `MilliValue()` does. Extreme exponents and digit counts (`1e999999999`,
/// `99999999999999999999999Ei`) are errors, never an overflow.
pub fn parse_millis(input: &str) -> Result<i64, &'static str> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty");
    }
    let (negative, body) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let number_end = body
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(body.len());
    let (number, suffix) = body.split_at(number_end);
    if number.is_empty() || number == "." || number.matches('.').count() > 1 {
        return Err("missing or malformed number");
    }
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    // Value = digits / 10^frac_len × 2^bin_exp × 10^dec_exp, in units; we want milli-units.
    let (bin_exp, dec_exp): (u32, i64) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        exp if exp.starts_with(['e', 'E']) => {
            // Any i64 exponent is read (`1e999999999`); the range check below turns an
            // extreme one into an error instead of an overflow.
            let e: i64 = exp[1..].parse().map_err(|_| "malformed exponent")?;
            (0, e)
        }
        _ => return Err("unknown suffix"),
    };
    let digits = [int_part, frac_part].concat();
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    // More significant digits than an i128 holds can only be too large or, after the
    // scale below, a sub-milli value: both decided exactly without the digits that follow.
    let mantissa: i128 = digits.parse().map_err(|_| "number too large")?;
    // milli-units: × 10^3, ÷ 10^frac_len, × 10^dec_exp, × 2^bin_exp.
    let frac_len = i64::try_from(frac_part.len()).map_err(|_| "too precise")?;
    let scale = 3i64.saturating_add(dec_exp).saturating_sub(frac_len);
    let mut value = mantissa.checked_mul(1i128 << bin_exp).ok_or("too large")?;
    if scale >= 0 {
        let pow = u32::try_from(scale)
            .ok()
            .and_then(|s| 10i128.checked_pow(s))
            .ok_or("too large")?;
        value = value.checked_mul(pow).ok_or("too large")?;
    } else {
        // Round up to the next milli-unit, as Kubernetes does. A divisor beyond i128 means
        // the value is a positive amount below one milli-unit: exactly 1m after rounding.
        value = match u32::try_from(scale.unsigned_abs())
            .ok()
            .and_then(|s| 10i128.checked_pow(s))
        {
            Some(pow) => value / pow + i128::from(value % pow != 0),
            None => 1,
        };
    }
    let value = i64::try_from(value).map_err(|_| "too large")?;
    Ok(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_bounds() {
        assert_eq!(parse_millis("1.5Gi"), Ok(1536 * 1024 * 1024 * 1000));
        assert_eq!(parse_millis("100m"), Ok(100));
        assert!(parse_millis("1e999999999").is_err());
        assert!(parse_millis("99999999999999999999999Ei").is_err());
        assert_eq!(parse_millis("-0.000000000000000000001m"), Ok(-1));
    }
}
