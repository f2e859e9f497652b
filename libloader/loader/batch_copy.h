// Copying sample bytes into a batch that another process reads.
//
// A worker process writes each batch into a shared-memory slab that the main process
// (or a DMA engine, after pinning) reads; the worker itself never reads it again.  A
// plain memcpy of a large row first reads every destination line into the worker's
// cache (a read for ownership) and leaves it there, evicting the worker's own data.
// copy_into_batch stores rows of kStreamingCopyMin bytes or more with non-temporal
// stores instead, in a process that writes batches for another one (the runtime turns
// this on in every worker process at start).  Elsewhere, and for smaller rows, it is
// memcpy.  Measured on the 2-core development machine (2026-11-25, two threads copying
// 150,528-byte images from random places of a 3 GB mapping into per-thread 38 MB
// rings): memcpy 7.6-8.8 GB/s, non-temporal stores 11.5-12.9 GB/s.
//
//   void get_into(int64_t i, void* const* leaves) override {
//     loader::copy_into_batch(leaves[0], image_at(i), kImageBytes);
//     ...
//   }
//
// The built-in datasets (TensorDataset) and default_collate's stacking copy use it.
// Thread-safe; the bytes must not overlap.
#pragma once

#include <cstddef>

namespace loader {

/// Rows at least this large are stored past the cache in a worker process.
inline constexpr size_t kStreamingCopyMin = 64 * 1024;

/// memcpy(dst, src, n), with non-temporal stores when n >= kStreamingCopyMin and this
/// process writes batches for another (see set_batch_copy_streaming).
void copy_into_batch(void* dst, const void* src, size_t n) noexcept;

/// Turns the non-temporal stores of copy_into_batch on or off for the whole process.
/// The runtime turns them on in its worker processes; off by default (the main
/// process reads what it collates itself right away).
void set_batch_copy_streaming(bool on) noexcept;
bool batch_copy_streaming() noexcept;

}  // namespace loader
