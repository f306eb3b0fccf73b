//! Little-endian field access on fixed offsets. Callers check lengths first.

#[inline]
pub(crate) fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
#[inline]
pub(crate) fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}
#[inline]
pub(crate) fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
#[inline]
pub(crate) fn put_u16(b: &mut [u8], o: usize, v: u16) {
    b[o..o + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put_u32(b: &mut [u8], o: usize, v: u32) {
    b[o..o + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
pub(crate) fn put_u64(b: &mut [u8], o: usize, v: u64) {
    b[o..o + 8].copy_from_slice(&v.to_le_bytes());
}

/// Reads a NUL-padded ASCII string field (NQN, serial, model).
pub(crate) fn str_at(b: &[u8], o: usize, len: usize) -> String {
    let f = &b[o..o + len];
    let end = f.iter().position(|&c| c == 0).unwrap_or(len);
    String::from_utf8_lossy(&f[..end]).into_owned()
}

/// Writes `s` into a NUL-padded field of `len` bytes (truncating, always leaving
/// at least one NUL when `nul` is set).
pub(crate) fn put_str(b: &mut [u8], o: usize, len: usize, s: &str, nul: bool) {
    let f = &mut b[o..o + len];
    f.fill(0);
    let max = if nul { len - 1 } else { len };
    let n = s.len().min(max);
    f[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// Writes `s` into a space-padded field (Identify SN/MN/FR).
pub(crate) fn put_str_space(b: &mut [u8], o: usize, len: usize, s: &str) {
    let f = &mut b[o..o + len];
    f.fill(b' ');
    let n = s.len().min(len);
    f[..n].copy_from_slice(&s.as_bytes()[..n]);
}
