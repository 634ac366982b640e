//! The memory allocator of a policy compiled to `wasm32` (the SDK's default
//! `allocator` feature): power-of-two size classes over memory that is never
//! handed back.
//!
//! A policy instance lives for one call (the host instantiates a fresh one per
//! round), so giving memory back buys nothing, while a general-purpose
//! allocator's bookkeeping costs on every one of the ~40,000 strings and lists
//! the host lowers into the guest per round at 1,000 nodes, and again when the
//! snapshot is dropped. Here an allocation pops the free list of its size
//! class or takes the next block of the class's current run; a free pushes the
//! block back. Freed blocks are reused by their class, so a policy that
//! allocates and drops in a loop stays bounded; the price is rounding each
//! block up to a power of two.
//!
//! The first blocks come from an arena in the module's zeroed static data
//! ([`ARENA_BYTES`]), so inside the memory the instance starts with: a
//! round that fits in it never grows the memory. That matters to the next
//! round's instance more than to this one: memory a guest grows into is
//! made inaccessible again (an `mprotect` of every page grown into) before
//! the next instance of the same policy starts, while the initial memory is
//! only reset (the pages it wrote zeroed). Untouched pages of the arena cost
//! nothing: they are never faulted in.
//!
//! Disable the `allocator` feature to keep the standard library's allocator
//! (or to install another one).

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;

/// Wasm page size.
const PAGE: usize = 64 << 10;
/// Memory is grown by at least this many pages at a time.
const GROW_PAGES: usize = 16;
/// Smallest class: 2^3 = 8 bytes, room for the free-list link.
const MIN_CLASS: u32 = 3;
/// Classes below this size are carved out of runs of `RUN` bytes.
const RUN: usize = 16 << 10;
/// Classes up to 2^31 bytes (all of a 32-bit address space).
const CLASSES: usize = 32;

/// Bytes of the arena served before the memory grows: a round at 1,000
/// nodes × 8 GPUs and 1,000 pending pods peaks near 4 MiB.
pub const ARENA_BYTES: usize = 8 << 20;

struct State {
    /// Head of each class's free list (a link is stored in the free block).
    free: [*mut u8; CLASSES],
    /// The current run of each small class: next block, end of the run.
    run: [(usize, usize); CLASSES],
    /// Unused memory: `bump..end`.
    bump: usize,
    end: usize,
}

/// The allocator; see the module docs.
pub struct RoundAllocator(UnsafeCell<State>);

// SAFETY: `wasm32` without the `atomics` target feature has exactly one
// thread, so the state is never touched concurrently (see the `cfg` on the
// `global_allocator` in lib.rs).
unsafe impl Sync for RoundAllocator {}

impl RoundAllocator {
    /// An allocator that has not taken any memory yet.
    pub const fn new() -> Self {
        RoundAllocator(UnsafeCell::new(State {
            free: [ptr::null_mut(); CLASSES],
            run: [(0, 0); CLASSES],
            bump: 0,
            end: 0,
        }))
    }
}

impl Default for RoundAllocator {
    fn default() -> Self {
        Self::new()
    }
}

/// The class of blocks that can hold `layout`: its size and alignment
/// rounded up to a power of two, at least 8 bytes.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout
        .size()
        .max(layout.align())
        .max(1 << MIN_CLASS)
        .checked_next_power_of_two()?;
    let class = size.trailing_zeros() as usize;
    (class < CLASSES).then_some(class)
}

fn align_up(at: usize, align: usize) -> Option<usize> {
    Some(at.checked_add(align - 1)? & !(align - 1))
}

impl State {
    /// `size` bytes aligned to `align` from the unused memory, growing the
    /// memory when needed. `None` when it cannot grow.
    fn take(&mut self, size: usize, align: usize) -> Option<usize> {
        if self.end == 0 {
            (self.bump, self.end) = arena();
        }
        let mut start = align_up(self.bump, align)?;
        if start.checked_add(size)? > self.end {
            let pages = (size.checked_add(align)?).div_ceil(PAGE).max(GROW_PAGES);
            let old = grow(pages)?;
            let base = old.checked_mul(PAGE)?;
            if base != self.end {
                // Somebody else grew the memory in between: start afresh.
                self.bump = base;
            }
            self.end = base.checked_add(pages * PAGE)?;
            start = align_up(self.bump, align)?;
        }
        self.bump = start + size;
        Some(start)
    }

    fn alloc(&mut self, layout: Layout) -> Option<*mut u8> {
        let class = class_of(layout)?;
        let head = self.free[class];
        if !head.is_null() && (head as usize) & (layout.align() - 1) == 0 {
            // SAFETY: a block on the free list is at least 8 bytes, aligned
            // to 8 and unused; its first word is the next link.
            self.free[class] = unsafe { *(head as *mut *mut u8) };
            return Some(head);
        }
        let size = 1usize << class;
        if size < RUN {
            // Blocks of a run are aligned to their size, so to `layout`.
            let (next, end) = self.run[class];
            if next < end {
                self.run[class].0 = next + size;
                return Some(next as *mut u8);
            }
            let start = self.take(RUN, size)?;
            self.run[class] = (start + size, start + RUN);
            return Some(start as *mut u8);
        }
        Some(self.take(size, layout.align().max(16))? as *mut u8)
    }

    fn dealloc(&mut self, block: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            return;
        };
        // SAFETY: `block` came from `alloc` for this class (or a larger one,
        // after an in-place shrink), so it holds at least 8 bytes aligned to
        // 8; it is no longer in use.
        unsafe { *(block as *mut *mut u8) = self.free[class] };
        self.free[class] = block;
    }
}

/// The arena: zero pages in `.bss`, which the linker places before the
/// heap, inside the module's initial memory; no other allocator uses it.
#[cfg(target_arch = "wasm32")]
fn arena() -> (usize, usize) {
    #[repr(C, align(16))]
    struct Arena(UnsafeCell<[u8; ARENA_BYTES]>);
    // SAFETY: only `take` hands out its bytes, once each; see `RoundAllocator`.
    unsafe impl Sync for Arena {}
    static ARENA: Arena = Arena(UnsafeCell::new([0; ARENA_BYTES]));
    let start = ARENA.0.get() as usize;
    (start, start + ARENA_BYTES)
}

#[cfg(not(target_arch = "wasm32"))]
fn arena() -> (usize, usize) {
    (0, 0)
}

#[cfg(target_arch = "wasm32")]
fn grow(pages: usize) -> Option<usize> {
    let old = core::arch::wasm32::memory_grow(0, pages);
    (old != usize::MAX).then_some(old)
}

#[cfg(not(target_arch = "wasm32"))]
fn grow(_pages: usize) -> Option<usize> {
    None
}

// SAFETY: blocks handed out never overlap (runs and large blocks come from
// disjoint parts of `bump..end`, a freed block is handed out again only after
// `dealloc`), are at least `layout.size()` bytes and aligned to
// `layout.align()`; failure returns null.
unsafe impl GlobalAlloc for RoundAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: single-threaded, and no reference to the state outlives
        // this call.
        let state = unsafe { &mut *self.0.get() };
        state.alloc(layout).unwrap_or(ptr::null_mut())
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: as in `alloc`.
        let state = unsafe { &mut *self.0.get() };
        state.dealloc(block, layout);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a valid size for `layout.align()`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(layout), class_of(new_layout)) {
            // Still fits its block (growing within the class, or shrinking).
            (Some(old), Some(new)) if new <= old => block,
            _ => {
                // SAFETY: as in `alloc`.
                let grown = unsafe { self.alloc(new_layout) };
                if !grown.is_null() {
                    // SAFETY: both blocks are valid for the bytes copied and
                    // do not overlap; the old one is then freed.
                    unsafe {
                        ptr::copy_nonoverlapping(block, grown, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                grown
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_to_powers_of_two() {
        let class = |size, align| class_of(Layout::from_size_align(size, align).unwrap());
        assert_eq!(class(0, 1), Some(3));
        assert_eq!(class(8, 8), Some(3));
        assert_eq!(class(9, 1), Some(4));
        assert_eq!(class(3, 64), Some(6));
        assert_eq!(class(100_000, 8), Some(17));
        assert_eq!(class(1 << 31, 8), Some(31));
    }

    #[test]
    fn freed_blocks_are_reused_by_their_class() {
        // A fake address space: blocks are handed out from a real buffer.
        let mut memory = vec![0u64; (3 * RUN - 8) / 8];
        let base = memory.as_mut_ptr() as usize;
        let mut state = State {
            free: [ptr::null_mut(); CLASSES],
            run: [(0, 0); CLASSES],
            bump: base,
            end: base + memory.len() * 8,
        };
        let small = Layout::from_size_align(24, 8).unwrap();
        let a = state.alloc(small).unwrap();
        let b = state.alloc(small).unwrap();
        assert_eq!(b as usize - a as usize, 32, "one run, 32-byte blocks");
        assert!((a as usize).is_multiple_of(32));
        state.dealloc(a, small);
        assert_eq!(state.alloc(small), Some(a), "the freed block comes back");
        let big = Layout::from_size_align(RUN, 8).unwrap();
        let c = state.alloc(big).unwrap();
        assert!(c as usize >= b as usize + 32 && (c as usize).is_multiple_of(16));
        assert_eq!(state.alloc(big), None, "out of memory: no growing here");
        state.dealloc(c, big);
        assert_eq!(state.alloc(big), Some(c));
    }
}
