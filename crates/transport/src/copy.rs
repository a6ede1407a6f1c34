//! Copies of message bytes: between a user's buffer, a shared-memory ring or box, and
//! a frame.
//!
//! Small copies (a header, an 8 B payload) are a few loads and stores of fixed width,
//! inline: on the latency-critical path a call to `memcpy` costs more than the copy.
//!
//! Larger ones go to `memcpy` only when source and destination lie alike within a cache
//! line. From a few KiB on glibc's `memcpy` uses `rep movsb`, which on this project's
//! AMD Zen 4 host copied 3.4 GB/s instead of 50 when the destination lay 1 to 15 bytes
//! past the source modulo 4 KiB, and about half speed at most other offsets that are
//! not a multiple of 64 (`bench/c/copy_offsets.c`). A ring's frames and a user's
//! buffers lie as they happen to: a 64 KiB bibw between two ranks ran at 2.8 GB/s in
//! the runs whose buffers met the bad offsets, 19 GB/s in the others. A loop of vector
//! loads and stores copies at full speed at every offset.

/// Copies `src` to `dst`: small copies inline with fixed-width loads and stores, larger
/// ones by [`copy_large`].
///
/// # Safety
/// `dst` is valid for `src.len()` bytes of writes that nothing reads meanwhile, and
/// does not overlap `src`.
#[inline(always)]
pub(crate) unsafe fn copy_to(src: &[u8], dst: *mut u8) {
    use std::ptr::{read_unaligned as get, write_unaligned as put};
    let (n, s) = (src.len(), src.as_ptr());
    // SAFETY: every access lies within the first `n` bytes of `src` and `dst` (the
    // caller's contract); the last one of each width overlaps the one before it
    // instead of going past the end.
    unsafe {
        if n > 64 {
            copy_large(s, dst, n);
        } else if n >= 16 {
            let mut i = 0;
            while i + 16 < n {
                put(dst.add(i).cast::<u128>(), get(s.add(i).cast::<u128>()));
                i += 16;
            }
            put(dst.add(n - 16).cast::<u128>(), get(s.add(n - 16).cast::<u128>()));
        } else if n >= 8 {
            put(dst.cast::<u64>(), get(s.cast::<u64>()));
            put(dst.add(n - 8).cast::<u64>(), get(s.add(n - 8).cast::<u64>()));
        } else if n >= 4 {
            put(dst.cast::<u32>(), get(s.cast::<u32>()));
            put(dst.add(n - 4).cast::<u32>(), get(s.add(n - 4).cast::<u32>()));
        } else {
            for i in 0..n {
                *dst.add(i) = *s.add(i);
            }
        }
    }
}

/// `dst[..src.len()]` = `src`, as [`copy_to`] does it.
///
/// # Panics
/// When `dst` is shorter than `src`.
#[inline(always)]
pub fn copy_into(dst: &mut [u8], src: &[u8]) {
    assert!(
        dst.len() >= src.len(),
        "a destination shorter than the bytes copied"
    );
    // SAFETY: `dst` holds at least `src.len()` bytes (checked above), is borrowed
    // mutably (nothing else reads it) and so cannot overlap `src`.
    unsafe { copy_to(src, dst.as_mut_ptr()) }
}

/// Copies `n` (more than 64) bytes: by `memcpy` where source and destination lie alike
/// within a cache line, else by vector loads and stores (see the module's comment).
///
/// # Safety
/// As [`copy_to`], for `n` bytes at `src`.
#[inline(never)]
unsafe fn copy_large(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        if (dst as usize).wrapping_sub(src as usize).is_multiple_of(64) {
            std::ptr::copy_nonoverlapping(src, dst, n);
        } else {
            copy_vectors(src, dst, n);
        }
    }
}

/// Copies `n` (at least 64) bytes with vector loads and stores.
///
/// # Safety
/// As [`copy_large`].
#[cfg(target_arch = "x86_64")]
unsafe fn copy_vectors(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract; AVX2 is used only where the CPU has it.
    unsafe {
        if std::arch::is_x86_feature_detected!("avx2") {
            copy_avx2(src, dst, n);
        } else {
            copy_sse2(src, dst, n);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_vectors(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: the caller's contract.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, n) }
}

/// Four 32-byte vectors at a time, the rest by 32 bytes, the last 32 bytes overlapping
/// what came before them.
///
/// # Safety
/// As [`copy_large`], `n` at least 32, on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_avx2(src: *const u8, dst: *mut u8, n: usize) {
    use std::arch::x86_64::{__m256i, _mm256_loadu_si256 as load, _mm256_storeu_si256 as store};
    // SAFETY: every load lies within `src[..n]` and every store within `dst[..n]`
    // (unaligned forms; `n` >= 32), which the caller vouches for.
    unsafe {
        let (s, d) = (src.cast::<__m256i>(), dst.cast::<__m256i>());
        let mut i = 0;
        while i + 128 <= n {
            let (a, b) = (load(s.byte_add(i)), load(s.byte_add(i + 32)));
            let (c, e) = (load(s.byte_add(i + 64)), load(s.byte_add(i + 96)));
            store(d.byte_add(i), a);
            store(d.byte_add(i + 32), b);
            store(d.byte_add(i + 64), c);
            store(d.byte_add(i + 96), e);
            i += 128;
        }
        while i + 32 <= n {
            store(d.byte_add(i), load(s.byte_add(i)));
            i += 32;
        }
        if i < n {
            store(d.byte_add(n - 32), load(s.byte_add(n - 32)));
        }
    }
}

/// As [`copy_avx2`] with 16-byte vectors (every x86-64 CPU has SSE2).
///
/// # Safety
/// As [`copy_large`], `n` at least 16.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_sse2(src: *const u8, dst: *mut u8, n: usize) {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128 as load, _mm_storeu_si128 as store};
    // SAFETY: as in `copy_avx2`, with 16-byte accesses (`n` >= 16).
    unsafe {
        let (s, d) = (src.cast::<__m128i>(), dst.cast::<__m128i>());
        let mut i = 0;
        while i + 64 <= n {
            let (a, b) = (load(s.byte_add(i)), load(s.byte_add(i + 16)));
            let (c, e) = (load(s.byte_add(i + 32)), load(s.byte_add(i + 48)));
            store(d.byte_add(i), a);
            store(d.byte_add(i + 16), b);
            store(d.byte_add(i + 32), c);
            store(d.byte_add(i + 48), e);
            i += 64;
        }
        while i + 16 <= n {
            store(d.byte_add(i), load(s.byte_add(i)));
            i += 16;
        }
        if i < n {
            store(d.byte_add(n - 16), load(s.byte_add(n - 16)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length, at every offset of the destination against the source within a
    /// cache line and beyond (the vector loops run where the offset is not a multiple
    /// of 64), and nothing written past the end.
    #[test]
    fn a_copy_copies_every_length_at_every_offset_exactly() {
        let lens = (0..=300).chain([1000, 4095, 4096, 4097, 65536 + 7]);
        for n in lens {
            let src: Vec<u8> = (0..n).map(|i| (i * 31 + 7) as u8).collect();
            for shift in [0usize, 1, 7, 15, 16, 33, 63, 64, 65] {
                let mut dst = vec![0xeeu8; n + shift + 16];
                copy_into(&mut dst[shift..], &src);
                assert_eq!(&dst[shift..shift + n], &src[..], "{n} bytes at +{shift}");
                assert!(
                    dst[..shift].iter().all(|&b| b == 0xee),
                    "{n} bytes at +{shift}: wrote before"
                );
                assert!(
                    dst[shift + n..].iter().all(|&b| b == 0xee),
                    "{n} bytes at +{shift}: wrote past the end"
                );
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn both_vector_loops_copy_every_length_from_their_minimum() {
        for n in 16..=600 {
            let src: Vec<u8> = (0..n).map(|i| (i * 13 + 1) as u8).collect();
            let mut dst = vec![0u8; n + 8];
            // SAFETY: `dst` holds `n` + 8 bytes, `src` `n`; distinct vectors.
            unsafe { copy_sse2(src.as_ptr(), dst.as_mut_ptr().add(3), n) };
            assert_eq!(&dst[3..3 + n], &src[..], "sse2, {n} bytes");
            if n >= 32 && std::arch::is_x86_feature_detected!("avx2") {
                let mut dst = vec![0u8; n + 8];
                // SAFETY: as above; the CPU has AVX2.
                unsafe { copy_avx2(src.as_ptr(), dst.as_mut_ptr().add(5), n) };
                assert_eq!(&dst[5..5 + n], &src[..], "avx2, {n} bytes");
            }
        }
    }
}
