//! Byte sizes as people write them, for the configuration file and the
//! command lines of the target and the initiator: [`parse`] reads `4096`,
//! `512M`, `2GiB` (binary multiples, whatever the spelling), [`format`]
//! prints `512 B`, `1.50 GiB`.

/// Parses a size such as `1G`, `512M`, `4096`, `2GiB` (K, M, G, T are
/// powers of 1024, with or without `B`/`iB`; case does not matter).
pub fn parse(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (expected e.g. 1G, 512M, 1048576)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("'{s}' has an unknown unit (use K, M, G or T)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// `512 B`, `4.00 KiB`, `1.50 GiB`.
pub fn format(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_people_write() {
        assert_eq!(parse("4096"), Ok(4096));
        assert_eq!(parse("512M"), Ok(512 << 20));
        assert_eq!(parse(" 2GiB "), Ok(2 << 30));
        assert_eq!(parse("1 t"), Ok(1 << 40));
        assert_eq!(parse("3kb"), Ok(3 << 10));
        assert!(parse("").is_err());
        assert!(parse("M").is_err());
        assert!(parse("1X").is_err());
        assert!(parse("-1").is_err());
        assert!(parse("99999999999T").unwrap_err().contains("too large"));
    }

    #[test]
    fn formats_with_binary_units() {
        assert_eq!(format(0), "0 B");
        assert_eq!(format(1023), "1023 B");
        assert_eq!(format(1024), "1.00 KiB");
        assert_eq!(format(3 << 29), "1.50 GiB");
        assert_eq!(format(u64::MAX), "16384.00 PiB");
    }
}
