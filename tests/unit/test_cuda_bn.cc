/* The CUDA backend's batch-norm (src/cuda/bn.cu) on the emulation: the
 * launches each call takes (issue 42: a forward in at most 3 launches and
 * 2 passes over x, the backward likewise; what nsys would list on a GPU,
 * counted here by the emulation's record_launches), the statistics a
 * convolution gathers giving the bits of the batch-norm's own, and a batch
 * too large for the reduction scratch, run in pieces, giving the results
 * of one piece (the backward's bits; the forward's merged statistics
 * within 1e-6).  The values themselves are the conformance suite's
 * (tests/conformance: bn_fwd_train, bn_bwd against a double reference).
 * Output in cmocka's format, as tests/lib.sh prints it. */
#include "../../src/cuda/cuda.h" /* private: the backend's state and its bn.cu calls */
#include "cc_cases.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

/* the shape of the cases: 7x7 planes (a tail of 1 after 3 lanes' blocks),
 * 8 images, 6 channels */
enum { N = 8, C = 6, NP = 49 };
static const size_t TOTAL = (size_t)N * C * NP;

struct bn_io {
    std::vector<float> x, dy, add, gamma, beta;
};

static bn_io make_inputs() {
    bn_io io;
    uint64_t s = 12345;
    auto rnd = [&s]() { /* [-1, 1) */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    };
    io.x.resize(TOTAL), io.dy.resize(TOTAL), io.add.resize(TOTAL);
    for (size_t i = 0; i < TOTAL; i++) /* channel means of their own */
        io.x[i] = 3.0f * (float)(i / NP % C) + rnd(), io.dy[i] = rnd(), io.add[i] = rnd();
    for (int ch = 0; ch < C; ch++)
        io.gamma.push_back(1.0f + 0.1f * rnd()), io.beta.push_back(0.1f * rnd());
    return io;
}

/* device copies of the inputs and the outputs of one forward and backward */
struct bn_dev {
    const hcnn_backend *be;
    float *x, *dy, *add, *gamma, *beta, *y, *dx, *mean, *invstd, *rmean, *rvar, *dgamma, *dbeta,
        *db;
};

static float *dev_copy(const hcnn_backend *be, const std::vector<float> &h) {
    float *d = (float *)be->alloc(be, h.size() * sizeof(float), "test input");
    be->upload(be, d, h.data(), h.size() * sizeof(float));
    return d;
}

static std::vector<float> host(const hcnn_backend *be, const float *d, size_t n) {
    std::vector<float> h(n);
    be->download(be, h.data(), d, n * sizeof(float));
    return h;
}

static bn_dev dev_setup(const hcnn_backend *be, const bn_io &io) {
    const std::vector<float> zero(TOTAL, 0.0f), zc(C, 0.0f), one(C, 1.0f);
    return {be,
            dev_copy(be, io.x),
            dev_copy(be, io.dy),
            dev_copy(be, io.add),
            dev_copy(be, io.gamma),
            dev_copy(be, io.beta),
            dev_copy(be, zero),
            dev_copy(be, zero),
            dev_copy(be, zc),
            dev_copy(be, zc),
            dev_copy(be, zc),
            dev_copy(be, one),
            dev_copy(be, zc),
            dev_copy(be, zc),
            dev_copy(be, zc)};
}

static void dev_free(const bn_dev &d) {
    for (float *p : {d.x, d.dy, d.add, d.gamma, d.beta, d.y, d.dx, d.mean, d.invstd, d.rmean,
                     d.rvar, d.dgamma, d.dbeta, d.db})
        d.be->free(d.be, p);
}

/* the results a comparison looks at, downloaded */
static std::vector<std::vector<float>> results(const bn_dev &d) {
    const hcnn_backend *be = d.be;
    return {host(be, d.y, TOTAL),      host(be, d.dx, TOTAL),     host(be, d.mean, C),
            host(be, d.invstd, C),     host(be, d.rmean, C),      host(be, d.rvar, C),
            host(be, d.dgamma, C),     host(be, d.dbeta, C),      host(be, d.db, C)};
}
static const char *const result_names[] = {"y",           "dx",          "save_mean",
                                           "save_invstd", "running_mean", "running_var",
                                           "dgamma",      "dbeta",       "channel sum"};

/* the kernels one call launches */
template <class F> static std::vector<std::string> launches_of(const hcnn_backend *be, F call) {
    std::vector<const char *> names;
    hcnn_emu::record_launches(&names);
    call();
    hcnn_emu::record_launches(nullptr);
    be->sync(be);
    return std::vector<std::string>(names.begin(), names.end());
}

static std::string joined(const std::vector<std::string> &v) {
    std::string s;
    for (const std::string &n : v)
        s += (s.empty() ? "" : " ") + n;
    return s;
}

#define CHECK_LAUNCHES(got, want)                                                                 \
    do {                                                                                          \
        const std::string g_ = joined(got);                                                       \
        if (g_ != (want)) {                                                                       \
            printf("# %s:%d: launches: %s, expected %s\n", __FILE__, __LINE__, g_.c_str(),      \
                   (want));                                                                       \
            ++case_failures;                                                                      \
        }                                                                                         \
    } while (0)

static const hcnn_backend *the_backend;

static void forward(const bn_dev &d, const hcnn_bn_stats *stats) {
    d.be->bn_fwd_train(d.be, d.x, N, C, NP, d.gamma, d.beta, 1e-5f, 0.1f, d.rmean, d.rvar, d.mean,
                       d.invstd, d.add, 1, stats, d.y);
}
static void backward(const bn_dev &d) {
    d.be->bn_bwd(d.be, d.x, d.dy, N, C, NP, d.gamma, d.beta, d.mean, d.invstd, 1, d.dx, d.dgamma,
                 d.dbeta);
}

/* forward: plane_stats, bn_channel_stats, bn_apply; backward: bwd_plane,
 * bwd_channel, bwd_dx; the bias gradient's channel sum: plane_stats,
 * channel_total */
static void test_launches_per_call() {
    const hcnn_backend *be = the_backend;
    const bn_dev d = dev_setup(be, make_inputs());
    CHECK_LAUNCHES(launches_of(be, [&] { forward(d, nullptr); }),
                   "plane_stats_kernel bn_channel_stats_kernel bn_apply_kernel");
    CHECK_LAUNCHES(launches_of(be, [&] { backward(d); }),
                   "bwd_plane_kernel bwd_channel_kernel bwd_dx_kernel");
    CHECK_LAUNCHES(launches_of(be, [&] { hcnn_cuda_channel_sum_acc(be, d.dy, N, C, NP, d.db); }),
                   "plane_stats_kernel channel_total_kernel");
    dev_free(d);
}

/* the statistics gathered after a convolution (one launch), then the
 * forward from them (two): the bits of the forward gathering its own */
static void test_gathered_statistics() {
    const hcnn_backend *be = the_backend;
    const bn_io io = make_inputs();
    const bn_dev own = dev_setup(be, io), gathered = dev_setup(be, io);
    forward(own, nullptr);
    hcnn_bn_stats stats = {};
    stats.cap = TOTAL; /* floats: more than N * C * 2 */
    stats.part = (float *)be->alloc(be, stats.cap * sizeof(float), "statistics table");
    CHECK_LAUNCHES(launches_of(be, [&] { hcnn_cuda_bn_gather(be, gathered.x, N, C, NP, &stats); }),
                   "plane_stats_kernel");
    CHECK(stats.bands == 1 && stats.band_px == NP);
    CHECK_LAUNCHES(launches_of(be, [&] { forward(gathered, &stats); }),
                   "bn_channel_stats_kernel bn_apply_kernel");
    const auto a = results(own), b = results(gathered);
    for (size_t k = 0; k < a.size(); k++)
        if (memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) != 0) {
            printf("# %s: the gathered statistics give other bits\n", result_names[k]);
            ++case_failures;
        }
    be->free(be, stats.part);
    dev_free(own), dev_free(gathered);
}

/* the scratch doubles of a call keeping `per` doubles a channel and
 * `floats` a plane, for 3 images */
static size_t three_images(int per, int floats) {
    return (size_t)per * C + 3 * (((size_t)C * floats + 1) / 2);
}

/* A scratch holding 3 images' tables: 3 pieces of 3, 3 and 2 images, each a
 * plane and a channel launch; the backward's and the channel sum's bits
 * are those of one piece (the same double sums carried over), the
 * forward's within 1e-6 (the pieces' statistics merged) */
static void test_pieces() {
    const hcnn_backend *be = the_backend;
    const bn_io io = make_inputs();
    const bn_dev whole = dev_setup(be, io), pieces = dev_setup(be, io);
    forward(whole, nullptr), backward(whole);
    hcnn_cuda_channel_sum_acc(be, whole.dy, N, C, NP, whole.db);
    hcnn_cuda *cu = cuda_of(be);
    const size_t keep = cu->scratch_doubles;
    cu->scratch_doubles = three_images(2, 2); /* the forward's: mean and m2 a channel */
    CHECK_LAUNCHES(launches_of(be, [&] { forward(pieces, nullptr); }),
                   "plane_stats_kernel bn_channel_stats_kernel plane_stats_kernel "
                   "bn_channel_stats_kernel plane_stats_kernel bn_channel_stats_kernel "
                   "bn_apply_kernel");
    cu->scratch_doubles = three_images(3, 2); /* two sums and two means a channel */
    CHECK_LAUNCHES(launches_of(be, [&] { backward(pieces); }),
                   "bwd_plane_kernel bwd_channel_kernel bwd_plane_kernel bwd_channel_kernel "
                   "bwd_plane_kernel bwd_channel_kernel bwd_dx_kernel");
    cu->scratch_doubles = three_images(1, 1);
    CHECK_LAUNCHES(
        launches_of(be, [&] { hcnn_cuda_channel_sum_acc(be, pieces.dy, N, C, NP, pieces.db); }),
        "plane_stats_kernel channel_total_kernel plane_stats_kernel channel_total_kernel "
        "plane_stats_kernel channel_total_kernel");
    cu->scratch_doubles = keep;
    const auto a = results(whole), b = results(pieces);
    for (size_t k = 0; k < a.size(); k++) {
        double worst = 0.0;
        for (size_t i = 0; i < a[k].size(); i++) {
            const double e = fabs((double)a[k][i] - b[k][i]) / fmax(1.0, fabs((double)a[k][i]));
            worst = e > worst ? e : worst;
        }
        const bool exact = memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(float)) == 0;
        if (!exact)
            printf("# %s: in pieces, other bits (at most %.2e relative)\n", result_names[k], worst);
        /* the forward's results (y and the four statistics) may differ in
         * the last bits, not more; the backward's depend on the forward's
         * statistics, so they are compared from the same ones below */
        CHECK(worst <= 1e-6);
        if (k == 8)
            CHECK(exact);
    }
    /* the backward in pieces from the whole forward's statistics: its bits */
    cu->scratch_doubles = three_images(3, 2);
    be->upload(be, pieces.mean, a[2].data(), C * sizeof(float));
    be->upload(be, pieces.invstd, a[3].data(), C * sizeof(float));
    const std::vector<float> zc(C, 0.0f);
    be->upload(be, pieces.dgamma, zc.data(), C * sizeof(float));
    be->upload(be, pieces.dbeta, zc.data(), C * sizeof(float));
    backward(pieces);
    cu->scratch_doubles = keep;
    const auto c = results(pieces);
    for (size_t k : {1, 6, 7}) /* dx, dgamma, dbeta */
        if (memcmp(a[k].data(), c[k].data(), a[k].size() * sizeof(float)) != 0) {
            printf("# %s: the backward in pieces gives other bits\n", result_names[k]);
            ++case_failures;
        }
    dev_free(whole), dev_free(pieces);
}

static const test_case cases[] = {
    {"launches_per_call", test_launches_per_call},
    {"gathered_statistics", test_gathered_statistics},
    {"pieces", test_pieces},
};

int main() {
    setenv("HCNN_EMU_DEVICE_MB", "256", 1); /* before the first call maps the arena */
    hcnn_backend *be = nullptr;
    if (hcnn_backend_create("cuda", 0, &be) != HCNN_OK) {
        printf("# the cuda backend does not start (its message above)\n");
        return 1;
    }
    the_backend = be;
    const int rc = run_cases(cases, sizeof cases / sizeof *cases);
    hcnn_backend_destroy(be);
    return rc;
}
