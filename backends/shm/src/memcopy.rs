//! The copy kernel: how a copy thread moves bytes between two regions of this process.
//!
//! A block transfer writes memory the copying CPU will not read again soon (the peer's region),
//! over working sets far larger than the caches. Plain stores first read every destination line
//! into the cache (a read-for-ownership) and later write it back: three memory accesses per
//! line copied. Non-temporal (streaming) stores write whole lines straight to memory through
//! write-combining buffers: two accesses per line. glibc's `memcpy` switches to them only for
//! single copies of several MiB, so block-by-block copies of 256 KiB chunks never get them
//! from it; this kernel streams every piece of at least [`STREAM_MIN_BYTES`].
//!
//! Measured on the development machine (2-core AMD EPYC, AVX2 and AVX-512, 2 threads copying
//! batches of 16 blocks through 256 KiB chunks over 256 MiB, 30 interleaved rounds of 50 ms,
//! median GB/s, while other jobs shared the machine): 64 KiB blocks plain 9.9, `rep movsb`
//! 11.6, streaming SSE2 14.2, AVX2 15.1; 256 KiB blocks 15.9, 15.8, 20.0, 21.3; 1 MiB 13.0,
//! 12.2, 13.8, 14.2; 4 MiB 8.1, 8.7, 9.9, 10.6. Streaming with AVX2 was best or level
//! everywhere (AVX-512 was not better, and its intrinsics need a newer Rust than this
//! workspace's minimum), so it is the default on x86_64 with AVX2, SSE2 streaming on x86_64
//! without, and a plain `memmove` on other targets.
//!
//! Through the backend (two transports in one process, WRITE, depth 4, batches of 16, regions
//! of 256 MiB written first, `copy_kernel=plain` and `auto` and a two-thread whole-buffer
//! streaming copy alternated in 40 ms slices for 8 s, two runs, machine shared): `auto` moved
//! 0.89-1.18 (256 KiB blocks), 1.01-1.06 (1 MiB) and 0.87-0.93 (4 MiB) of the whole-buffer
//! copy, `plain` 0.80-1.05, 0.86-0.87 and 0.76-0.81.
//!
//! ## Memory ordering
//!
//! Streaming stores are weakly ordered: x86 may make them visible to other CPUs after stores
//! that follow them in program order, including the release store that publishes a transfer's
//! completion and the unlock of a peer region's pin. So every chunk of streaming stores ends
//! with an `sfence` ([`ChunkCopy`]'s drop), which makes them globally visible before any later
//! store. The copy thread drops the chunk's [`ChunkCopy`] before it unpins the peer's region
//! and before it publishes anything; hence a close, which waits for pins to be released, sees
//! every byte of a chunk in flight landed before it returns (nothing lands afterwards), and a
//! poller that reads the completion with acquire ordering then sees every byte of the
//! transfer.

use blockwire_core::{BackendError, BackendErrorKind};

/// Pieces shorter than this are copied with plain stores: they are as likely to be read again
/// soon as not, and a streaming copy's alignment head and tail weigh more on them.
pub(crate) const STREAM_MIN_BYTES: usize = 16 * 1024;

/// How the copy threads move bytes in this process (the `copy_kernel` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyKernel {
    /// `ptr::copy` (the C library's `memmove`) for every piece.
    Plain,
    /// Streaming stores of 16 bytes (SSE2, every x86_64 CPU).
    #[cfg(target_arch = "x86_64")]
    StreamSse2,
    /// Streaming stores of 32 bytes (AVX2, detected at run time).
    #[cfg(target_arch = "x86_64")]
    StreamAvx2,
}

impl CopyKernel {
    /// The kernel an option value names: `auto` (or none: the fastest this CPU has),
    /// `plain`, or `stream` (streaming stores; x86_64 only).
    pub(crate) fn from_option(value: Option<&str>) -> Result<Self, BackendError> {
        match value.unwrap_or("auto") {
            "plain" => Ok(CopyKernel::Plain),
            "auto" => Ok(Self::streaming().unwrap_or(CopyKernel::Plain)),
            "stream" => Self::streaming().ok_or_else(|| {
                BackendError::new(
                    BackendErrorKind::InvalidOption,
                    "copy_kernel=stream: no streaming stores on this target (x86_64 only)",
                )
            }),
            other => Err(BackendError::new(
                BackendErrorKind::InvalidOption,
                format!("copy_kernel={other:?}: expected auto, plain or stream"),
            )),
        }
    }

    /// The streaming kernel of this CPU, if it has one.
    fn streaming() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                Some(CopyKernel::StreamAvx2)
            } else {
                Some(CopyKernel::StreamSse2)
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            None
        }
    }

    /// Its name, for logs.
    pub(crate) fn name(self) -> &'static str {
        match self {
            CopyKernel::Plain => "plain",
            #[cfg(target_arch = "x86_64")]
            CopyKernel::StreamSse2 => "stream-sse2",
            #[cfg(target_arch = "x86_64")]
            CopyKernel::StreamAvx2 => "stream-avx2",
        }
    }

    /// Starts copying one chunk; its stores are all visible once the returned value is dropped.
    pub(crate) fn chunk(self) -> ChunkCopy {
        ChunkCopy {
            kernel: self,
            streamed: false,
        }
    }
}

/// Copies `src` into `dst` (equal lengths) with the kernel the copy threads use by default
/// (`copy_kernel=auto`: streaming stores where the CPU has them, from 16 KiB), fenced before it
/// returns. For measuring what the machine's copy does, e.g. a memory ceiling.
///
/// ```
/// let src = vec![7u8; 1 << 20];
/// let mut dst = vec![0u8; 1 << 20];
/// blockwire_shm::copy_fast(&mut dst, &src);
/// assert_eq!(dst, src);
/// ```
///
/// # Panics
///
/// If the lengths differ (a caller's bug, like `copy_from_slice`).
pub fn copy_fast(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_fast: lengths differ");
    let kernel = CopyKernel::streaming().unwrap_or(CopyKernel::Plain);
    let mut chunk = kernel.chunk();
    // SAFETY: a shared and an exclusive borrow of `len` bytes each: valid for reads and writes
    // of `len` bytes, disjoint, and nothing else aliases them while the borrows last. The
    // fence runs when `chunk` drops, before this returns.
    unsafe { chunk.copy(src.as_ptr(), dst.as_mut_ptr(), src.len()) };
}

/// The copies of one chunk. Dropping it fences streaming stores (see the module docs): drop it
/// before releasing the peer region's pin and before publishing anything about the chunk.
pub(crate) struct ChunkCopy {
    kernel: CopyKernel,
    /// Whether a streaming store was issued since the last fence.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    streamed: bool,
}

impl ChunkCopy {
    /// Copies `len` bytes from `src` to `dst`; the ranges may overlap (a transport may be its
    /// own peer).
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads and `dst` for writes of `len` bytes, and no reference may
    /// alias either range while the copy runs.
    pub(crate) unsafe fn copy(&mut self, src: *const u8, dst: *mut u8, len: usize) {
        let disjoint = (src as usize).abs_diff(dst as usize) >= len;
        if self.kernel == CopyKernel::Plain || len < STREAM_MIN_BYTES || !disjoint {
            // SAFETY: valid ranges per this function's contract; `ptr::copy` allows overlap
            // and creates no references.
            unsafe { std::ptr::copy(src, dst, len) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            self.streamed = true;
            // SAFETY: valid, disjoint ranges (checked above) per this function's contract;
            // the kernel variant exists only when its CPU feature was detected (`streaming`).
            unsafe { x86::stream(self.kernel, src, dst, len) };
        }
    }
}

impl Drop for ChunkCopy {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if self.streamed {
            // SAFETY: `sfence` has no memory operands and no preconditions (SSE, part of
            // x86_64's baseline).
            unsafe { std::arch::x86_64::_mm_sfence() };
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm_loadu_si128, _mm_stream_si128, _mm256_loadu_si256,
        _mm256_stream_si256,
    };

    use super::CopyKernel;

    /// Cache line: the streamed body starts on one, so write-combining fills whole lines.
    const LINE: usize = 64;

    /// Copies `len` bytes from `src` to `dst` with streaming stores for the line-aligned body
    /// and plain copies for the unaligned head and the tail. Not fenced: see `ChunkCopy`.
    ///
    /// # Safety
    ///
    /// `src` valid for reads and `dst` for writes of `len` bytes, the ranges disjoint, no
    /// reference aliasing either; `kernel` a streaming variant whose feature this CPU has.
    pub(super) unsafe fn stream(kernel: CopyKernel, src: *const u8, dst: *mut u8, len: usize) {
        let head = ((LINE - dst as usize % LINE) % LINE).min(len);
        let body = (len - head) / LINE * LINE;
        let tail = len - head - body;
        // SAFETY: `head + body + tail == len`, so each sub-range lies inside the caller's
        // valid, disjoint ranges; `dst + head` is line-aligned (or `body` is 0).
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let (s, d) = (src.add(head), dst.add(head));
            match kernel {
                CopyKernel::StreamAvx2 => body_avx2(s, d, body),
                CopyKernel::StreamSse2 => body_sse2(s, d, body),
                CopyKernel::Plain => std::ptr::copy_nonoverlapping(s, d, body),
            }
            std::ptr::copy_nonoverlapping(src.add(head + body), dst.add(head + body), tail);
        }
    }

    /// Bytes each of the [`STRIPES`] streams of the interleaved body covers per round.
    const STRIPE: usize = 4096;

    /// Address streams the body interleaves: the copy takes [`STEP`] bytes from each of
    /// `STRIPES` places [`STRIPE`] bytes apart in turn, so the memory serves several streams
    /// at once (more DRAM rows open, more misses in flight), as glibc's `memcpy` does for its
    /// largest copies. Measured on a 2-core Intel Xeon VM (2 threads copying 64 KiB to 4 MiB
    /// blocks through 256 KiB chunks): 17.1 to 18.8 GB/s, where one stream moved 14.7 to 15.9.
    const STRIPES: usize = 4;

    /// Bytes copied from one stripe before the next: two lines.
    const STEP: usize = 2 * LINE;

    /// The body's loop over `line` (a kernel's line copy): rounds of [`STRIPES`] ×
    /// [`STRIPE`] bytes interleaved by [`STEP`], then the rest line by line. A macro, so that
    /// each kernel's `line` is inlined under its own target feature.
    macro_rules! interleaved {
        ($line:ident, $src:ident, $dst:ident, $len:ident) => {{
            let rounds = $len / (STRIPES * STRIPE);
            for round in 0..rounds {
                let base = round * STRIPES * STRIPE;
                for offset in (0..STRIPE).step_by(STEP) {
                    for stripe in 0..STRIPES {
                        let at = base + stripe * STRIPE + offset;
                        // SAFETY: `at + STEP <= (round + 1) * STRIPES * STRIPE <= len` (STEP
                        // divides STRIPE), and `dst + at` is line-aligned: `at` is a
                        // multiple of LINE.
                        unsafe {
                            $line($src, $dst, at);
                            $line($src, $dst, at + LINE);
                        }
                    }
                }
            }
            let mut at = rounds * STRIPES * STRIPE;
            while at < $len {
                // SAFETY: `at + 64 <= len` (`len` and `at` are multiples of 64), `dst + at`
                // line-aligned.
                unsafe { $line($src, $dst, at) };
                at += LINE;
            }
        }};
    }

    /// Streams `len` bytes (a multiple of [`LINE`]) from `src` to line-aligned `dst`: rounds
    /// of [`STRIPES`] × [`STRIPE`] bytes interleaved, then the rest line by line.
    ///
    /// # Safety
    ///
    /// As [`stream`], with `dst` 64-byte aligned, `len` a multiple of 64, and AVX2 present.
    #[target_feature(enable = "avx2")]
    unsafe fn body_avx2(src: *const u8, dst: *mut u8, len: usize) {
        /// Streams the line at `at`.
        ///
        /// # Safety
        ///
        /// `at + 64 <= len` of `body_avx2`'s ranges, with `dst + at` 32-byte aligned.
        #[target_feature(enable = "avx2")]
        #[inline]
        unsafe fn line(src: *const u8, dst: *mut u8, at: usize) {
            // SAFETY: per this function's contract: both 32-byte halves of the line lie in
            // the ranges; loads are unaligned, stores land on 32-byte boundaries.
            unsafe {
                let a = _mm256_loadu_si256(src.add(at).cast::<__m256i>());
                let b = _mm256_loadu_si256(src.add(at + 32).cast::<__m256i>());
                _mm256_stream_si256(dst.add(at).cast::<__m256i>(), a);
                _mm256_stream_si256(dst.add(at + 32).cast::<__m256i>(), b);
            }
        }
        interleaved!(line, src, dst, len);
    }

    /// Streams `len` bytes (a multiple of [`LINE`]) from `src` to line-aligned `dst`, as
    /// [`body_avx2`] does with 16-byte stores.
    ///
    /// # Safety
    ///
    /// As [`stream`], with `dst` 64-byte aligned and `len` a multiple of 64.
    #[target_feature(enable = "sse2")]
    unsafe fn body_sse2(src: *const u8, dst: *mut u8, len: usize) {
        /// Streams the line at `at`.
        ///
        /// # Safety
        ///
        /// `at + 64 <= len` of `body_sse2`'s ranges, with `dst + at` 16-byte aligned.
        #[target_feature(enable = "sse2")]
        #[inline]
        unsafe fn line(src: *const u8, dst: *mut u8, at: usize) {
            // SAFETY: per this function's contract: all four 16-byte quarters of the line
            // lie in the ranges; loads are unaligned, stores land on 16-byte boundaries.
            unsafe {
                let a = _mm_loadu_si128(src.add(at).cast::<__m128i>());
                let b = _mm_loadu_si128(src.add(at + 16).cast::<__m128i>());
                let c = _mm_loadu_si128(src.add(at + 32).cast::<__m128i>());
                let d = _mm_loadu_si128(src.add(at + 48).cast::<__m128i>());
                _mm_stream_si128(dst.add(at).cast::<__m128i>(), a);
                _mm_stream_si128(dst.add(at + 16).cast::<__m128i>(), b);
                _mm_stream_si128(dst.add(at + 32).cast::<__m128i>(), c);
                _mm_stream_si128(dst.add(at + 48).cast::<__m128i>(), d);
            }
        }
        interleaved!(line, src, dst, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    fn kernels() -> Vec<CopyKernel> {
        let mut k = vec![CopyKernel::Plain];
        #[cfg(target_arch = "x86_64")]
        {
            k.push(CopyKernel::StreamSse2);
            if std::is_x86_feature_detected!("avx2") {
                k.push(CopyKernel::StreamAvx2);
            }
        }
        k
    }

    #[test]
    fn every_kernel_copies_exactly_the_range_at_any_alignment_and_length() {
        let total = 6 * STREAM_MIN_BYTES + 512;
        for kernel in kernels() {
            for (src_off, dst_off) in [(0, 0), (1, 0), (0, 7), (13, 61), (64, 3)] {
                for len in [
                    0,
                    1,
                    STREAM_MIN_BYTES - 1,
                    STREAM_MIN_BYTES,
                    2 * STREAM_MIN_BYTES + 67,
                    // Rounds of interleaved stripes, then lines, then a tail.
                    5 * STREAM_MIN_BYTES + 4096 + 67,
                ] {
                    let src = pattern(total, 1);
                    let mut dst = pattern(total, 9);
                    let before = dst.clone();
                    let mut chunk = kernel.chunk();
                    // SAFETY: both ranges lie inside their vectors (offsets + len < total);
                    // no reference to `dst` is live during the copy.
                    unsafe {
                        chunk.copy(
                            src.as_ptr().add(src_off),
                            dst.as_mut_ptr().add(dst_off),
                            len,
                        )
                    };
                    drop(chunk);
                    let what = format!("{} src+{src_off} dst+{dst_off} len {len}", kernel.name());
                    assert_eq!(
                        &dst[dst_off..dst_off + len],
                        &src[src_off..src_off + len],
                        "{what}"
                    );
                    assert_eq!(&dst[..dst_off], &before[..dst_off], "{what}: before");
                    assert_eq!(
                        &dst[dst_off + len..],
                        &before[dst_off + len..],
                        "{what}: after"
                    );
                }
            }
        }
    }

    #[test]
    fn overlapping_ranges_copy_as_memmove() {
        for kernel in kernels() {
            for shift in [1usize, 100, STREAM_MIN_BYTES] {
                let len = 2 * STREAM_MIN_BYTES;
                let mut buf = pattern(len + shift, 3);
                let expected = buf[..len].to_vec();
                let p = buf.as_mut_ptr();
                let mut chunk = kernel.chunk();
                // SAFETY: both ranges lie inside `buf` (`len + shift` bytes); raw pointers
                // only, no reference is live during the copy.
                unsafe { chunk.copy(p, p.add(shift), len) };
                drop(chunk);
                assert_eq!(
                    &buf[shift..],
                    &expected[..],
                    "{} shift {shift}",
                    kernel.name()
                );
            }
        }
    }

    #[test]
    fn the_option_names_a_kernel_or_is_refused() {
        assert_eq!(
            CopyKernel::from_option(Some("plain")).expect("plain"),
            CopyKernel::Plain
        );
        let auto = CopyKernel::from_option(None).expect("auto");
        assert_eq!(CopyKernel::from_option(Some("auto")).expect("auto"), auto);
        #[cfg(target_arch = "x86_64")]
        {
            assert_ne!(auto, CopyKernel::Plain);
            assert_eq!(
                CopyKernel::from_option(Some("stream")).expect("stream"),
                auto
            );
        }
        let err = CopyKernel::from_option(Some("fast")).expect_err("unknown");
        assert_eq!(err.kind(), BackendErrorKind::InvalidOption);
    }
}
