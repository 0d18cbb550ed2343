//! Numbers read the way tritonserver reads its trace settings (C++'s `std::stoi` and
//! `std::stoul`): leading whitespace skipped, an optional sign, decimal digits up to the first
//! other character (`"12abc"` is 12). Matching them keeps what tritonserver accepts, and its error
//! messages, the same.

/// Why a number was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumberError {
    /// No digits (`std::invalid_argument`).
    Invalid,
    /// Too large for the type (`std::out_of_range`).
    OutOfRange,
}

/// The sign and the digits' value (`None` when it overflows 64 bits).
fn prefix(s: &str) -> Result<(bool, Option<u64>), NumberError> {
    let s = s.trim_start_matches([' ', '\t', '\n', '\u{b}', '\u{c}', '\r']);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let digits: &str = &digits[..digits.bytes().take_while(u8::is_ascii_digit).count()];
    if digits.is_empty() {
        return Err(NumberError::Invalid);
    }
    let value = digits.bytes().try_fold(0u64, |v, d| v.checked_mul(10)?.checked_add(u64::from(d - b'0')));
    Ok((negative, value))
}

/// `std::stoi`: an `int`.
pub fn stoi(s: &str) -> Result<i32, NumberError> {
    let (negative, value) = prefix(s)?;
    let value = value.ok_or(NumberError::OutOfRange)?;
    let signed = if negative { -(i128::from(value)) } else { i128::from(value) };
    i32::try_from(signed).map_err(|_| NumberError::OutOfRange)
}

/// `std::stoul`: an `unsigned long` (64 bits); a minus sign negates in unsigned arithmetic, as
/// `strtoul` does.
pub fn stoul(s: &str) -> Result<u64, NumberError> {
    let (negative, value) = prefix(s)?;
    let value = value.ok_or(NumberError::OutOfRange)?;
    Ok(if negative { value.wrapping_neg() } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_as_cplusplus_reads_them() {
        assert_eq!(stoi("42"), Ok(42));
        assert_eq!(stoi("  -7xyz"), Ok(-7));
        assert_eq!(stoi("+3"), Ok(3));
        assert_eq!(stoi("1.9"), Ok(1));
        assert_eq!(stoi("2147483647"), Ok(i32::MAX));
        assert_eq!(stoi("-2147483648"), Ok(i32::MIN));
        assert_eq!(stoi("10000000000"), Err(NumberError::OutOfRange));
        assert_eq!(stoi("99999999999999999999999"), Err(NumberError::OutOfRange));
        for bad in ["", "abc", "-", " x1", "--1"] {
            assert_eq!(stoi(bad), Err(NumberError::Invalid), "{bad:?}");
        }
        assert_eq!(stoul("2048"), Ok(2048));
        assert_eq!(stoul("-1"), Ok(u64::MAX));
        assert_eq!(stoul("18446744073709551616"), Err(NumberError::OutOfRange));
    }
}
