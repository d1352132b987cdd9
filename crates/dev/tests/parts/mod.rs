//! How the vectored-send tests cut a frame into parts.
#![allow(dead_code)] // each test crate uses its own part of it

/// `f` as three parts with an empty one in the middle (after the first
/// 14 bytes, or all of `f` if shorter).
pub fn three_parts(f: &[u8]) -> [&[u8]; 3] {
    let cut = f.len().min(14);
    [&f[..cut], &[], &f[cut..]]
}

/// The ways a frame is cut into parts: three parts with an empty one in
/// the middle, a single part, one part per byte, and more parts than
/// `writev` / `sendmsg` take (gathered).
pub fn cuts(f: &[u8]) -> Vec<Vec<&[u8]>> {
    let mut out = vec![three_parts(f).to_vec(), vec![f]];
    out.push(f.chunks(1).collect());
    let mut many: Vec<&[u8]> = f.chunks(1).collect();
    while many.len() <= ustack_dev::IOV_MAX {
        many.push(&[]);
    }
    out.push(many);
    out
}
