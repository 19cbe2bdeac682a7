/* Kernel launches: CUDA's checks, the grid run (blocks split over OpenMP
 * threads when the grid is big enough), and the fibres that let the
 * threads of a block meet at __syncthreads().
 *
 * A barrier launch runs each block's threads as fibres on one OS thread, in
 * rounds: thread 0 runs until it reaches __syncthreads() or returns, then
 * thread 1, and so on; when the last one has reached the barrier, the next
 * round starts with thread 0 again.  A fibre switches straight to the next
 * one (one switch per thread and barrier).  A thread that returns while
 * others wait is a barrier not reached by the whole block (undefined in
 * CUDA): the program stops.  On x86-64 a switch saves the callee-saved
 * registers and the stack pointer (the floating-point control state is the
 * OS thread's, which kernels do not change); elsewhere, and with
 * -DHCNN_EMU_UCONTEXT or AddressSanitizer, it is swapcontext, about a
 * hundred times slower (it also sets the signal mask, a system call). */
#include "emu_internal.h"

#include <algorithm>
#include <cstdlib>
#include <sys/mman.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__x86_64__) && !defined(HCNN_EMU_UCONTEXT) && !defined(__SANITIZE_ADDRESS__)
#define HCNN_EMU_ASM_SWITCH 1
#else
#define HCNN_EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

namespace hcnn_emu {

namespace {

constexpr size_t stack_size = 256 * 1024; /* per fibre, plus a guard page */
constexpr size_t guard_size = 4096;
/* The top of fibre i's stack is (i * colour_step) % 4096 bytes lower than
 * the mapping's top: stack tops at one offset modulo the page size would
 * all fall into the same few L1 cache sets. */
constexpr size_t colour_step = 5 * 64;

/* ---- Context switch ----------------------------------------------------- */

#if HCNN_EMU_ASM_SWITCH

struct context {
    void *sp;
};

} // namespace
} // namespace hcnn_emu

/* Saves the callee-saved registers on the current stack, stores the stack
 * pointer in *save, and resumes the context whose stack pointer is `load`. */
extern "C" void hcnn_emu_switch(void **save, void *load);
asm(R"(
    .pushsection .text
    .p2align 4
    .globl hcnn_emu_switch
    .hidden hcnn_emu_switch
    .type hcnn_emu_switch, @function
hcnn_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size hcnn_emu_switch, .-hcnn_emu_switch
    .popsection
)");

namespace hcnn_emu {
namespace {

/* A new context "returns" into entry() with the stack aligned as after a
 * call (rsp = 8 mod 16); entry never returns. */
void context_init(context *c, char *stack, size_t size, void (*entry)()) {
    auto top = reinterpret_cast<uintptr_t>(stack + size) & ~static_cast<uintptr_t>(15);
    auto *sp = reinterpret_cast<uint64_t *>(top);
    sp[-1] = 0;                                 /* entry's return address: none */
    sp[-2] = reinterpret_cast<uint64_t>(entry); /* popped by ret */
    for (int i = 3; i <= 8; ++i)
        sp[-i] = 0; /* rbp, rbx, r12-r15 */
    c->sp = sp - 8;
}

void context_switch(context *from, context *to) { hcnn_emu_switch(&from->sp, to->sp); }

#else

struct context {
    ucontext_t uc;
};

void context_init(context *c, char *stack, size_t size, void (*entry)()) {
    if (getcontext(&c->uc) != 0)
        die("HCNN_LAUNCH_BARRIER", "getcontext failed");
    c->uc.uc_stack.ss_sp = stack;
    c->uc.uc_stack.ss_size = size;
    c->uc.uc_link = nullptr;
    makecontext(&c->uc, entry, 0);
}

void context_switch(context *from, context *to) {
    if (swapcontext(&from->uc, &to->uc) != 0)
        die("HCNN_LAUNCH_BARRIER", "swapcontext failed");
}

#endif

/* ---- Fibres ------------------------------------------------------------- */

struct fibre {
    context ctx;
    uint3 idx;
};

/* One OS thread's fibres and their stacks, kept from block to block, and
 * the round being run. */
struct fibre_set {
    std::vector<fibre> fibres;
    std::vector<char *> stacks; /* each above its guard page */
    context main;               /* the launcher's, resumed when the block is over */
    unsigned int n;             /* threads in the block */
    unsigned int cur;           /* the fibre running */
    unsigned int waiting;       /* at the barrier, this round */
    int returned;               /* the first fibre that returned this round, or -1 */
    const void *call;
    thread_fn fn;

    ~fibre_set() {
        for (char *s : stacks)
            munmap(s - guard_size, stack_size + guard_size);
    }
};

/* State (per OS thread): the kernel being run, for messages, and the
 * fibres of the barrier block being run (null outside one). */
thread_local const char *running_kernel = nullptr;
thread_local fibre_set *active = nullptr;

fibre_set &thread_fibres() {
    static thread_local fibre_set set;
    return set;
}

void reserve(fibre_set &p, unsigned int n) {
    if (p.fibres.size() < n)
        p.fibres.resize(n);
    while (p.stacks.size() < n) {
        void *m = mmap(nullptr, stack_size + guard_size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED || mprotect(m, guard_size, PROT_NONE) != 0)
            die(running_kernel, "cannot map the stack of a barrier thread");
        p.stacks.push_back(static_cast<char *>(m) + guard_size);
    }
}

/* The fibre to run after the current one: the next of this round, else
 * (the round is over) fibre 0 of the next round, or -1 when every thread
 * has returned.  Stops the program on a barrier that some threads skip. */
int next_fibre(fibre_set &p) {
    if (p.cur + 1 < p.n)
        return static_cast<int>(p.cur + 1);
    if (p.waiting == 0)
        return -1;
    if (p.returned >= 0) {
        const uint3 &t = p.fibres[static_cast<unsigned int>(p.returned)].idx;
        die(running_kernel,
            "thread (%u,%u,%u) of block (%u,%u,%u) returned while %u threads of its block wait "
            "at __syncthreads() (a barrier that not every thread reaches)",
            t.x, t.y, t.z, block_idx.x, block_idx.y, block_idx.z, p.waiting);
    }
    p.waiting = 0;
    return 0;
}

/* Leaves the current fibre for the next one (or the launcher). */
void switch_on(fibre_set &p) {
    fibre &from = p.fibres[p.cur];
    int next = next_fibre(p);
    if (next < 0) {
        context_switch(&from.ctx, &p.main);
        return;
    }
    p.cur = static_cast<unsigned int>(next);
    thread_idx = p.fibres[p.cur].idx;
    if (&p.fibres[p.cur] != &from) /* a one-thread block goes on by itself */
        context_switch(&from.ctx, &p.fibres[p.cur].ctx);
}

[[noreturn]] void fibre_main() {
    fibre_set *p = active;
    p->fn(p->call);
    if (p->returned < 0)
        p->returned = static_cast<int>(p->cur);
    switch_on(*p);
    abort(); /* a returned fibre is never resumed */
}

void run_fibres(const void *call, thread_fn one, dim3 block) {
    fibre_set &p = thread_fibres();
    unsigned int n = block.x * block.y * block.z, i = 0;
    reserve(p, n);
    for (unsigned int z = 0; z < block.z; ++z)
        for (unsigned int y = 0; y < block.y; ++y)
            for (unsigned int x = 0; x < block.x; ++x, ++i) {
                p.fibres[i].idx = uint3{x, y, z};
                context_init(&p.fibres[i].ctx, p.stacks[i],
                             stack_size - i * colour_step % guard_size, fibre_main);
            }
    p.n = n;
    p.cur = 0;
    p.waiting = 0;
    p.returned = -1;
    p.call = call;
    p.fn = one;
    active = &p;
    thread_idx = p.fibres[0].idx;
    context_switch(&p.main, &p.fibres[0].ctx);
    active = nullptr;
}

/* ---- Grid --------------------------------------------------------------- */

/* Blocks first..last-1 (x fastest) on this OS thread. */
void run_blocks(const kernel_launch &k, const void *call, block_fn plain, thread_fn one,
                uint64_t first, uint64_t last) {
    if (first >= last)
        return;
    grid_dim = k.grid;
    block_dim = k.block;
    running_kernel = k.name;
    uint64_t gx = k.grid.x, gy = k.grid.y;
    uint3 b{static_cast<unsigned int>(first % gx), static_cast<unsigned int>(first / gx % gy),
            static_cast<unsigned int>(first / (gx * gy))};
    for (uint64_t i = first; i < last; ++i) {
        block_idx = b;
        if (k.barrier)
            run_fibres(call, one, k.block);
        else
            plain(call, k.block);
        if (++b.x == k.grid.x) {
            b.x = 0;
            if (++b.y == k.grid.y) {
                b.y = 0;
                ++b.z;
            }
        }
    }
    running_kernel = nullptr;
}

cudaError_t check_config(const kernel_launch &k) {
    const dim3 &g = k.grid, &b = k.block;
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z)
        return cudaErrorInvalidConfiguration;
    if (b.x > 1024 || b.y > 1024 || b.z > 64 ||
        static_cast<uint64_t>(b.x) * b.y * b.z > 1024)
        return cudaErrorInvalidConfiguration;
    if (g.x > 2147483647u || g.y > 65535 || g.z > 65535)
        return cudaErrorInvalidConfiguration;
    if (k.shmem > 48 * 1024) /* beyond the default limit without an opt-in */
        return cudaErrorInvalidValue;
    return cudaSuccess;
}

} // namespace

namespace {
std::vector<const char *> *launch_names; /* record_launches: behind the API's mutex */
}

void record_launches(std::vector<const char *> *names) {
    api_lock lock(api_mutex());
    launch_names = names;
}

void launch_enqueue(const kernel_launch &k, cudaStream_t stream, std::function<void()> run) {
    api_lock lock(api_mutex());
    cudaError_t e = check_config(k);
    if (e == cudaSuccess)
        e = enqueue(stream, std::move(run));
    if (e == cudaSuccess && launch_names)
        launch_names->push_back(k.name);
    record(e);
}

void run_grid(const kernel_launch &k, const void *call, block_fn plain, thread_fn one) {
    uint64_t blocks = static_cast<uint64_t>(k.grid.x) * k.grid.y * k.grid.z;
#ifdef _OPENMP
    /* split over OpenMP threads from this many thread calls on (a barrier
     * thread counts 8: its switches cost more than a call) */
    const uint64_t parallel_work = 1u << 15;
    uint64_t work = blocks * k.block.x * k.block.y * k.block.z * (k.barrier ? 8 : 1);
    if (blocks > 1 && work >= parallel_work && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
        {
            uint64_t nt = static_cast<uint64_t>(omp_get_num_threads());
            uint64_t t = static_cast<uint64_t>(omp_get_thread_num());
            uint64_t chunk = (blocks + nt - 1) / nt;
            run_blocks(k, call, plain, one, std::min(blocks, t * chunk),
                       std::min(blocks, (t + 1) * chunk));
        }
        return;
    }
#endif
    run_blocks(k, call, plain, one, 0, blocks);
}

} // namespace hcnn_emu

using namespace hcnn_emu;

void __syncthreads(void) {
    fibre_set *p = active;
    if (!p) {
        if (running_kernel)
            die(running_kernel, "__syncthreads() in a kernel launched with HCNN_LAUNCH: "
                                "launch it with HCNN_LAUNCH_BARRIER");
        die("__syncthreads", "__syncthreads() called outside a kernel");
    }
    ++p->waiting;
    switch_on(*p);
}
