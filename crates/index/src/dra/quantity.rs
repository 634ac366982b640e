//! Kubernetes quantities (`80Gi`, `40G`, `1.5Ti`, `85899345920`, `8e9`) as
//! whole numbers, for the capacities and counters DRA drivers publish.

/// A quantity's value, rounded up to a whole number (as Kubernetes rounds
/// when it asks for an integer); `None` when the text is not a quantity or
/// the value is negative or beyond `u128`.
pub(crate) fn parse(text: &str) -> Option<u128> {
    parse_scaled(text, 0)
}

/// A quantity's value × 10^`scale`, rounded up to a whole number (scale 3:
/// in thousandths, as CEL's quantities compare).
pub(crate) fn parse_scaled(text: &str, scale: i32) -> Option<u128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let whole = whole.strip_prefix('+').unwrap_or(whole);
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // value = digits × 10^(exponent − fraction digits) × 2^binary
    let digits: u128 = format!("{whole}{fraction}")
        .trim_start_matches('0')
        .parse()
        .unwrap_or(0);
    let (mut exponent, binary): (i32, u32) = match suffix {
        "" => (0, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        other => {
            let e = other.strip_prefix(['e', 'E'])?;
            (e.parse().ok()?, 0)
        }
    };
    exponent -= i32::try_from(fraction.len()).ok()?;
    exponent += scale;
    let scaled = digits.checked_mul(1u128.checked_shl(binary)?)?;
    if exponent >= 0 {
        scaled.checked_mul(10u128.checked_pow(exponent.unsigned_abs())?)
    } else {
        let divisor = 10u128.checked_pow(exponent.unsigned_abs())?;
        Some(scaled.div_ceil(divisor))
    }
}

/// A byte quantity in MiB, rounded down (a GPU's memory is never
/// overstated).
pub(crate) fn mib(text: &str) -> Option<u64> {
    parse(text).and_then(|bytes| u64::try_from(bytes >> 20).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decimal_exponent_and_fractional_forms() {
        assert_eq!(parse("80Gi"), Some(80 << 30));
        assert_eq!(parse("40G"), Some(40_000_000_000));
        assert_eq!(parse("1.5Ti"), Some(3 << 39));
        assert_eq!(parse("85899345920"), Some(85_899_345_920));
        assert_eq!(parse("8e9"), Some(8_000_000_000));
        assert_eq!(parse("1500m"), Some(2), "rounded up");
        assert_eq!(parse("0"), Some(0));
        assert_eq!(parse("+4"), Some(4));
        assert_eq!(mib("81559Mi"), Some(81_559));
        assert_eq!(mib("40Gi"), Some(40_960));
        assert_eq!(mib("1048575"), Some(0), "rounded down");
    }

    #[test]
    fn what_is_not_a_quantity() {
        for bad in ["", "Gi", "-4", "4 Gi", "4Xi", "1.2.3", "4e", "1e999"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
