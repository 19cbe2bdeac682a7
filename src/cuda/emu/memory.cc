/* Device memory, page-locked host memory, copies and memsets.
 *
 * The device is one host arena, mapped once (HCNN_EMU_DEVICE_MB MiB,
 * default 4096, MAP_NORESERVE: only what is used costs memory).  Blocks are
 * handed out first fit from a free list, in multiples of 256 bytes (CUDA's
 * alignment), filled with NaN on cudaMalloc and again on cudaFree, so that
 * reading what no kernel wrote, or what was freed, shows.  A copy's kind is
 * checked against where its pointers are, which finds swapped copies.
 *
 * Out-of-bounds accesses, what compute-sanitizer's memcheck finds on a GPU:
 * each block ends against a page of its own that nothing may touch
 * (PROT_NONE), so that a kernel reading or writing past the 256-byte
 * rounding of its block faults there, and the fault is reported as such
 * (the block, the offset from its start) before the handler there was
 * before takes it (by default: the process ends with SIGSEGV).  A guard
 * page splits the arena's mapping: Linux's vm.max_map_count (65530 by
 * default) bounds the live blocks to about 32000 (a run has tens).
 * What lies between the block and its pages' edges (below the block,
 * and past its size within the rounding) stays NaN, checked at cudaFree:
 * a write there (an index -1, or one past the end) ends the process with
 * the block and the offset named. */
#include "emu_internal.h"
#include "hcnn/env.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sys/mman.h>
#include <unistd.h>

namespace hcnn_emu {

namespace {

constexpr size_t align = 256;
constexpr uint32_t nan_bits = 0x7fc00000u;

/* A live block: its pages in the arena (from span_off, span bytes, the
 * last its guard page), and the size asked for, which bounds the copies (a
 * copy past it is a bug even inside the rounding).  Keyed by its start. */
struct block {
    size_t span_off, span, size;
};

/* State: the arena and its blocks (offsets from base). */
struct arena {
    char *base;
    size_t size;
    size_t free_bytes;
    std::map<size_t, size_t> free_list; /* offset -> length, never adjacent */
    std::map<size_t, block> live;       /* offset -> block */
};

/* State: page-locked host blocks (cudaMallocHost), start -> length. */
std::map<const char *, size_t> &host_blocks() {
    static auto *m = new std::map<const char *, size_t>;
    return *m;
}

size_t arena_mib() {
    const char *env = getenv(HCNN_ENV_EMU_DEVICE_MB);
    if (!env || !*env)
        return 4096;
    char *end;
    errno = 0;
    unsigned long long mib = strtoull(env, &end, 10);
    if (errno || *end || mib == 0 || mib > (1ull << 24))
        die("cudaMalloc", "HCNN_EMU_DEVICE_MB=%s is not a size in MiB between 1 and 16777216", env);
    return static_cast<size_t>(mib);
}

/* the arena, for the fault handler (on_fault, below), and the SIGSEGV
 * action it replaced */
const arena *arena_for_faults = nullptr;
struct sigaction fault_before;
void on_fault(int sig, siginfo_t *si, void *);

arena &the_arena() {
    static arena *a = [] {
        auto *r = new arena{};
        r->size = arena_mib() << 20;
        void *p = mmap(nullptr, r->size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            die("cudaMalloc", "cannot map the %zu MiB device arena (HCNN_EMU_DEVICE_MB): %s",
                r->size >> 20, strerror(errno));
        r->base = static_cast<char *>(p);
        r->free_bytes = r->size;
        r->free_list[0] = r->size;
        arena_for_faults = r;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &fault_before);
        return r;
    }();
    return *a;
}

void fill_nan(void *p, size_t bytes) {
    std::fill_n(static_cast<uint32_t *>(p), bytes / sizeof(uint32_t), nan_bits);
}

/* First fit; returns the offset, or SIZE_MAX when nothing fits. */
size_t arena_take(arena &a, size_t len) {
    for (auto it = a.free_list.begin(); it != a.free_list.end(); ++it) {
        if (it->second < len)
            continue;
        size_t off = it->first, rest = it->second - len;
        a.free_list.erase(it);
        if (rest)
            a.free_list[off + len] = rest;
        a.free_bytes -= len;
        return off;
    }
    return SIZE_MAX;
}

size_t page_bytes() {
    static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return p;
}

/* A block's guard page: untouchable (on: cudaMalloc) or back to read-write
 * (off: cudaFree) */
void guard(arena &a, const block &b, bool on) {
    char *g = a.base + b.span_off + b.span - page_bytes();
    if (mprotect(g, page_bytes(), on ? PROT_NONE : PROT_READ | PROT_WRITE) != 0)
        die(on ? "cudaMalloc" : "cudaFree", "cannot %s the guard page at %p: %s",
            on ? "protect" : "release", static_cast<void *>(g), strerror(errno));
}

/* The byte of the NaN fill at arena offset off (fills start 4-aligned) */
unsigned char nan_byte(size_t off) {
    const uint32_t v = nan_bits;
    unsigned char b[4];
    memcpy(b, &v, 4);
    return b[off % 4];
}

/* At cudaFree: the bytes around the block, below it and past its size up to
 * its guard page, still the NaN they were filled with */
void check_margins(const arena &a, size_t start, const block &b) {
    const size_t end = b.span_off + b.span - page_bytes();
    for (size_t o = b.span_off; o < end; o++) {
        if (o == start)
            o = start + b.size; /* the block itself: anything */
        if (o < end && static_cast<unsigned char>(a.base[o]) != nan_byte(o))
            die("cudaFree",
                "device memory written out of bounds: the 4 bytes at %+lld from the start of a "
                "block of %zu bytes at %p (%s) were changed (a kernel or copy wrote outside the "
                "block)",
                static_cast<long long>(o - o % 4) - static_cast<long long>(start), b.size,
                static_cast<void *>(a.base + start), o < start ? "below its start" : "past its end");
    }
}

/* A fault in a guard page: the block it ends and the offset from its start
 * said; then the handler there was before (SIG_DFL: the process ends) */
void on_fault(int sig, siginfo_t *si, void *) {
    const arena *a = arena_for_faults;
    const char *at = static_cast<const char *>(si->si_addr);
    if (a && at >= a->base && at < a->base + a->size) {
        const size_t off = static_cast<size_t>(at - a->base);
        auto it = a->live.upper_bound(off);
        if (it != a->live.begin()) {
            --it;
            char msg[300];
            const int n = snprintf(msg, sizeof msg,
                                   "hcnn: cuda emulation: device memory accessed out of bounds "
                                   "at %p: %zu bytes past the start of a block of %zu bytes at "
                                   "%p (its guard page; compute-sanitizer's memcheck on a GPU)\n",
                                   si->si_addr, off - it->first, it->second.size,
                                   static_cast<void *>(a->base + it->first));
            if (n > 0) {
                const ssize_t w = write(2, msg, std::min(static_cast<size_t>(n), sizeof msg - 1));
                (void)w;
            }
        }
    }
    /* the access faults again, under the handler there was before (ASan's,
     * a test framework's, or none) */
    sigaction(sig, &fault_before, nullptr);
}

/* Returns a block to the free list, merged with its free neighbours. */
void arena_give(arena &a, size_t off, size_t len) {
    a.free_bytes += len;
    auto next = a.free_list.lower_bound(off);
    if (next != a.free_list.end() && next->first == off + len) {
        len += next->second;
        next = a.free_list.erase(next);
    }
    if (next != a.free_list.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second == off) {
            prev->second += len;
            return;
        }
    }
    a.free_list[off] = len;
}

bool pinned(const void *p) {
    auto &m = host_blocks();
    auto it = m.upper_bound(static_cast<const char *>(p));
    if (it == m.begin())
        return false;
    --it;
    return static_cast<const char *>(p) < it->first + it->second;
}

/* The kind against where the pointers are; the device side inside what a
 * block was asked for. */
cudaError_t check_copy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
    bool dst_dev = in_arena(dst), src_dev = in_arena(src);
    bool want_dst, want_src;
    switch (kind) {
    case cudaMemcpyHostToHost: want_dst = false, want_src = false; break;
    case cudaMemcpyHostToDevice: want_dst = true, want_src = false; break;
    case cudaMemcpyDeviceToHost: want_dst = false, want_src = true; break;
    case cudaMemcpyDeviceToDevice: want_dst = true, want_src = true; break;
    case cudaMemcpyDefault: want_dst = dst_dev, want_src = src_dev; break;
    default: return cudaErrorInvalidMemcpyDirection;
    }
    if (!dst || !src || dst_dev != want_dst || src_dev != want_src)
        return cudaErrorInvalidValue;
    if ((dst_dev && !device_range(dst, count)) || (src_dev && !device_range(src, count)))
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

/* What every synchronous call on the legacy stream checks first. */
cudaError_t check_sync_call() {
    cudaError_t e = check_unsafe_during_capture();
    return e != cudaSuccess ? e : check_legacy_during_capture();
}

bool capturing(cudaStream_t handle) {
    stream_ptr s = find_stream(handle);
    return s && s->cap;
}

} // namespace

size_t arena_total() { return the_arena().size; }

bool in_arena(const void *p) {
    const arena &a = the_arena();
    auto c = static_cast<const char *>(p);
    return c >= a.base && c < a.base + a.size;
}

bool device_range(const void *p, size_t n) {
    const arena &a = the_arena();
    if (!in_arena(p))
        return false;
    size_t off = static_cast<size_t>(static_cast<const char *>(p) - a.base);
    auto it = a.live.upper_bound(off);
    if (it == a.live.begin())
        return false;
    --it;
    size_t into = off - it->first, size = it->second.size;
    return into < size && n <= size - into;
}

} // namespace hcnn_emu

using namespace hcnn_emu;

extern "C" {

cudaError_t cudaMalloc(void **devPtr, size_t size) {
    if (!devPtr)
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    cudaError_t e = check_unsafe_during_capture();
    if (e != cudaSuccess)
        return record(e);
    *devPtr = nullptr;
    if (size == 0)
        return cudaSuccess;
    arena &a = the_arena();
    if (size > a.size)
        return record(cudaErrorMemoryAllocation);
    /* whole pages, the last the guard; the block at their end, 256-aligned */
    const size_t len = (size + align - 1) / align * align, page = page_bytes();
    const block b{0, (len + page - 1) / page * page + page, size};
    if (b.span > a.size)
        return record(cudaErrorMemoryAllocation);
    const size_t off = arena_take(a, b.span);
    if (off == SIZE_MAX)
        return record(cudaErrorMemoryAllocation);
    const size_t start = off + b.span - page - len;
    a.live[start] = block{off, b.span, size};
    fill_nan(a.base + off, b.span - page);
    guard(a, a.live[start], true);
    *devPtr = a.base + start;
    return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
    if (!devPtr)
        return cudaSuccess;
    api_lock lock(api_mutex());
    cudaError_t e = check_unsafe_during_capture();
    if (e != cudaSuccess)
        return record(e);
    drain_all(); /* cudaFree synchronises the device */
    arena &a = the_arena();
    if (!in_arena(devPtr))
        return record(cudaErrorInvalidValue);
    auto it = a.live.find(static_cast<size_t>(static_cast<char *>(devPtr) - a.base));
    if (it == a.live.end())
        return record(cudaErrorInvalidValue);
    const size_t start = it->first;
    const block b = it->second;
    a.live.erase(it);
    check_margins(a, start, b);
    guard(a, b, false);
    fill_nan(a.base + b.span_off, b.span);
    arena_give(a, b.span_off, b.span);
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
    if (!free || !total)
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    *free = the_arena().free_bytes;
    *total = the_arena().size;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
    if (!ptr)
        return record(cudaErrorInvalidValue);
    api_lock lock(api_mutex());
    cudaError_t e = check_unsafe_during_capture();
    if (e != cudaSuccess)
        return record(e);
    *ptr = nullptr;
    if (size == 0)
        return cudaSuccess;
    size_t len = (size + align - 1) / align * align;
    void *p = nullptr;
    if (posix_memalign(&p, align, len) != 0)
        return record(cudaErrorMemoryAllocation);
    fill_nan(p, len); /* a download read before it ran shows too */
    host_blocks()[static_cast<const char *>(p)] = len;
    *ptr = p;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
    if (!ptr)
        return cudaSuccess;
    api_lock lock(api_mutex());
    cudaError_t e = check_unsafe_during_capture();
    if (e != cudaSuccess)
        return record(e);
    drain_all(); /* a queued copy may still read or write it */
    auto it = host_blocks().find(static_cast<const char *>(ptr));
    if (it == host_blocks().end())
        return record(cudaErrorInvalidValue);
    host_blocks().erase(it);
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    if (count == 0)
        return cudaSuccess;
    api_lock lock(api_mutex());
    cudaError_t e = check_copy(dst, src, count, kind);
    if (e == cudaSuccess)
        e = check_sync_call();
    if (e != cudaSuccess)
        return record(e);
    drain_legacy();
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    if (count == 0)
        return cudaSuccess;
    api_lock lock(api_mutex());
    cudaError_t e = check_copy(dst, src, count, kind);
    if (e != cudaSuccess)
        return record(e);
    if (!in_arena(src) && !pinned(src) && !capturing(stream)) {
        /* From pageable memory CUDA stages the source before returning, so
         * the caller may reuse it at once: take the copy now. */
        auto staged = std::make_shared<std::vector<char>>(static_cast<const char *>(src),
                                                          static_cast<const char *>(src) + count);
        return record(
            enqueue(stream, [dst, staged, count] { memcpy(dst, staged->data(), count); }));
    }
    return record(enqueue(stream, [dst, src, count] { memmove(dst, src, count); }));
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    if (count == 0)
        return cudaSuccess;
    api_lock lock(api_mutex());
    if (!device_range(devPtr, count))
        return record(cudaErrorInvalidValue);
    cudaError_t e = check_sync_call();
    if (e != cudaSuccess)
        return record(e);
    drain_legacy();
    memset(devPtr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    if (count == 0)
        return cudaSuccess;
    api_lock lock(api_mutex());
    if (!device_range(devPtr, count))
        return record(cudaErrorInvalidValue);
    return record(enqueue(stream, [devPtr, value, count] { memset(devPtr, value, count); }));
}

} /* extern "C" */
