//! Hex of bytes, as the launcher's variables and the srun rendezvous lines carry them.

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses exactly `N` bytes of hex (either case).
pub fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    unhex_any(s)?.try_into().ok()
}

/// Parses hex (either case) of any even length.
pub fn unhex_any(s: &str) -> Option<Vec<u8>> {
    // Digits are checked first: `from_str_radix` alone would accept a sign.
    if s.len() & 1 == 1 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}
